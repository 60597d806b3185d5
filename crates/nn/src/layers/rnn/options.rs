//! [`RnnOptions`] and [`Nonlinearity`]: how a recurrent layer is built beyond its sizes,
//! and the kind of recurrence ([`Mode`]) the shared driver runs.

use ember_tensor::{DType, Error, Result};

/// The activation of a plain [`RNN`](super::RNN) or [`RNNCell`](super::RNNCell):
/// PyTorch's `nonlinearity='tanh'` (the default) or `'relu'`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Nonlinearity {
    /// `h' = tanh(W_ih x + b_ih + W_hh h + b_hh)`.
    #[default]
    Tanh,
    /// `h' = relu(W_ih x + b_ih + W_hh h + b_hh)`.
    Relu,
}

/// How to build an [`RNN`](super::RNN), [`LSTM`](super::LSTM) or [`GRU`](super::GRU)
/// beyond its input and hidden sizes: PyTorch's keyword arguments with their defaults
/// (one layer, biases, `[T, B, features]` inputs, no dropout, one direction, no
/// projection, tanh) and the parameters' dtype (`f32`).
///
/// ```
/// use ember_nn::RnnOptions;
/// let o = RnnOptions::default().num_layers(2).bidirectional(true).batch_first(true).dropout(0.1);
/// assert_eq!((o.num_layers, o.bidirectional, o.batch_first, o.dropout), (2, true, true, 0.1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RnnOptions {
    /// The number of stacked layers; layer `k > 0` reads layer `k - 1`'s output.
    pub num_layers: usize,
    /// Whether the layers have the biases `b_ih` and `b_hh`.
    pub bias: bool,
    /// Inputs and outputs are `[B, T, features]` instead of `[T, B, features]` (the states
    /// `h_0`, `h_n` stay `[layers * directions, B, hidden]`, as in PyTorch).
    pub batch_first: bool,
    /// The probability of dropout on every layer's output except the last, in training.
    pub dropout: f64,
    /// Whether each layer also runs over the sequence backwards, its output joined to the
    /// forward direction's along the feature dimension.
    pub bidirectional: bool,
    /// LSTM only: with `proj_size > 0`, the hidden state is projected to `proj_size`
    /// features by `weight_hr` (PyTorch's LSTM with projections).
    pub proj_size: usize,
    /// RNN only: the activation.
    pub nonlinearity: Nonlinearity,
    /// The parameters' dtype; inputs and states must have it too.
    pub dtype: DType,
}

impl Default for RnnOptions {
    fn default() -> Self {
        RnnOptions {
            num_layers: 1,
            bias: true,
            batch_first: false,
            dropout: 0.0,
            bidirectional: false,
            proj_size: 0,
            nonlinearity: Nonlinearity::Tanh,
            dtype: DType::F32,
        }
    }
}

impl RnnOptions {
    /// With `num_layers` stacked layers.
    pub fn num_layers(mut self, num_layers: usize) -> Self {
        self.num_layers = num_layers;
        self
    }

    /// With or without biases.
    pub fn bias(mut self, bias: bool) -> Self {
        self.bias = bias;
        self
    }

    /// With `[B, T, features]` inputs and outputs.
    pub fn batch_first(mut self, batch_first: bool) -> Self {
        self.batch_first = batch_first;
        self
    }

    /// With dropout of probability `p` between layers, in training.
    pub fn dropout(mut self, p: f64) -> Self {
        self.dropout = p;
        self
    }

    /// With a backward direction.
    pub fn bidirectional(mut self, bidirectional: bool) -> Self {
        self.bidirectional = bidirectional;
        self
    }

    /// LSTM only: with the hidden state projected to `proj_size` features.
    pub fn proj_size(mut self, proj_size: usize) -> Self {
        self.proj_size = proj_size;
        self
    }

    /// RNN only: with the activation `nonlinearity`.
    pub fn nonlinearity(mut self, nonlinearity: Nonlinearity) -> Self {
        self.nonlinearity = nonlinearity;
        self
    }

    /// With parameters of `dtype`.
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    /// The number of directions, 1 or 2.
    pub fn directions(&self) -> usize {
        if self.bidirectional { 2 } else { 1 }
    }

    /// The options themselves: what a layer's core is built with.
    pub(super) fn layer_options(self) -> RnnOptions {
        self
    }
}

/// The recurrence a layer or cell runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `RNN` with tanh.
    Tanh,
    /// `RNN` with relu.
    Relu,
    /// `LSTM`: gates i, f, g, o.
    Lstm,
    /// `GRU`: gates r, z, n.
    Gru,
}

impl From<Nonlinearity> for Mode {
    /// The plain recurrence with this nonlinearity.
    fn from(n: Nonlinearity) -> Mode {
        match n {
            Nonlinearity::Tanh => Mode::Tanh,
            Nonlinearity::Relu => Mode::Relu,
        }
    }
}

impl Mode {
    /// How many blocks of `hidden_size` rows the weights stack.
    pub(crate) fn gates(self) -> usize {
        match self {
            Mode::Tanh | Mode::Relu => 1,
            Mode::Lstm => 4,
            Mode::Gru => 3,
        }
    }

    /// The layer's name, for errors and the repr.
    pub(crate) fn layer_name(self) -> &'static str {
        match self {
            Mode::Tanh | Mode::Relu => "RNN",
            Mode::Lstm => "LSTM",
            Mode::Gru => "GRU",
        }
    }

    /// The name of parameter `param` (`weight_ih_l0`, `bias_hh`, ...) of the layer (or, with
    /// `cell`, the cell) for errors: the layer and the parameter's kind (`LSTM.weight_ih`),
    /// without the layer index and direction.
    pub(crate) fn param_op(self, cell: bool, param: &str) -> &'static str {
        const KINDS: [&str; 5] = ["weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"];
        const OPS: [[[&str; 5]; 3]; 2] = [
            [
                ["RNN.weight_ih", "RNN.weight_hh", "RNN.bias_ih", "RNN.bias_hh", "RNN.weight_hr"],
                ["LSTM.weight_ih", "LSTM.weight_hh", "LSTM.bias_ih", "LSTM.bias_hh", "LSTM.weight_hr"],
                ["GRU.weight_ih", "GRU.weight_hh", "GRU.bias_ih", "GRU.bias_hh", "GRU.weight_hr"],
            ],
            [
                ["RNNCell.weight_ih", "RNNCell.weight_hh", "RNNCell.bias_ih", "RNNCell.bias_hh", "RNNCell"],
                ["LSTMCell.weight_ih", "LSTMCell.weight_hh", "LSTMCell.bias_ih", "LSTMCell.bias_hh", "LSTMCell"],
                ["GRUCell.weight_ih", "GRUCell.weight_hh", "GRUCell.bias_ih", "GRUCell.bias_hh", "GRUCell"],
            ],
        ];
        let kind = KINDS.iter().position(|k| param.starts_with(k)).unwrap_or(0);
        let mode = match self {
            Mode::Tanh | Mode::Relu => 0,
            Mode::Lstm => 1,
            Mode::Gru => 2,
        };
        OPS[usize::from(cell)][mode][kind]
    }

    /// The cell's name, for errors and the repr.
    pub(crate) fn cell_name(self) -> &'static str {
        match self {
            Mode::Tanh | Mode::Relu => "RNNCell",
            Mode::Lstm => "LSTMCell",
            Mode::Gru => "GRUCell",
        }
    }
}

/// The checks PyTorch makes when a recurrent layer is built.
pub(crate) fn check_options(name: &'static str, mode: Mode, hidden_size: usize, o: &RnnOptions) -> Result<()> {
    if hidden_size == 0 {
        return Err(Error::invalid(name, "hidden_size must be greater than zero"));
    }
    // The weights stack `gates` blocks of `hidden_size` rows, and later layers of a
    // bidirectional stack read both directions' outputs: both products must be countable.
    if hidden_size.checked_mul(mode.gates().max(2)).is_none() {
        return Err(Error::shape(
            name,
            format!("hidden_size {hidden_size} is too large: the weights would have more rows than fit in usize"),
        ));
    }
    if o.num_layers == 0 {
        return Err(Error::invalid(name, "num_layers must be greater than zero"));
    }
    if !(0.0..=1.0).contains(&o.dropout) {
        return Err(Error::invalid(name, format!("dropout must be a probability in [0, 1], got {}", o.dropout)));
    }
    if o.proj_size > 0 && mode != Mode::Lstm {
        return Err(Error::invalid(name, "proj_size is only supported for LSTM, not RNN or GRU"));
    }
    if o.proj_size >= hidden_size && o.proj_size > 0 {
        return Err(Error::invalid(
            name,
            format!("proj_size ({}) has to be smaller than hidden_size ({hidden_size})", o.proj_size),
        ));
    }
    if o.nonlinearity != Nonlinearity::Tanh && !matches!(mode, Mode::Tanh | Mode::Relu) {
        return Err(Error::invalid(name, "nonlinearity is only an argument of RNN, not LSTM or GRU"));
    }
    if !o.dtype.is_float() {
        return Err(Error::dtype(name, format!("parameters must be float, got {}", o.dtype)));
    }
    Ok(())
}

/// How to build an [`RNNCell`](super::RNNCell), [`LSTMCell`](super::LSTMCell) or
/// [`GRUCell`](super::GRUCell) beyond its sizes: PyTorch's `bias` (default `true`) and
/// `nonlinearity` (RNN cell only, default tanh), and the parameters' dtype (`f32`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CellOptions {
    /// Whether the cell has the biases `b_ih` and `b_hh`.
    pub bias: bool,
    /// RNN cell only: the activation.
    pub nonlinearity: Nonlinearity,
    /// The parameters' dtype; inputs and states must have it too.
    pub dtype: DType,
}

impl Default for CellOptions {
    fn default() -> Self {
        CellOptions { bias: true, nonlinearity: Nonlinearity::Tanh, dtype: DType::F32 }
    }
}

impl CellOptions {
    /// With or without biases.
    pub fn bias(mut self, bias: bool) -> Self {
        self.bias = bias;
        self
    }

    /// RNN cell only: with the activation `nonlinearity`.
    pub fn nonlinearity(mut self, nonlinearity: Nonlinearity) -> Self {
        self.nonlinearity = nonlinearity;
        self
    }

    /// With parameters of `dtype`.
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    /// The options of the one-layer, one-direction layer a cell is a step of: what its core
    /// is built with.
    pub(super) fn layer_options(self) -> RnnOptions {
        RnnOptions::default().bias(self.bias).nonlinearity(self.nonlinearity).dtype(self.dtype)
    }
}

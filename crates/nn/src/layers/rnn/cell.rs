//! The single-step cells [`RNNCell`], [`LSTMCell`] and [`GRUCell`]: one time step of the
//! corresponding layer, with PyTorch's parameters (`weight_ih`, `weight_hh`, `bias_ih`,
//! `bias_hh`), initialisation and unbatched inputs.

use super::options::{CellOptions, Mode, RnnOptions, check_options};
use super::step::{State, StepWeights, input_bias, step, step_bias};
use crate::init;
use crate::layers::param_alloc::named;
use crate::module::{Module, TrainingFlag};
use ember_autograd::Var;
use ember_tensor::{Error, Result, Tensor};
use std::fmt;

/// An LSTM cell's state: PyTorch's `(h, c)`.
#[derive(Clone)]
pub struct LstmState {
    /// The hidden state, `[B, hidden]` (`[hidden]` unbatched).
    pub h: Var,
    /// The cell state, `[B, hidden]` (`[hidden]` unbatched).
    pub c: Var,
}

/// The checks PyTorch makes when a cell is built.
fn check_cell_options(mode: Mode, hidden_size: usize, options: &CellOptions) -> Result<()> {
    let layer_options = RnnOptions::default().nonlinearity(options.nonlinearity).dtype(options.dtype);
    check_options(mode.cell_name(), mode, hidden_size, &layer_options)
}

/// The names and shapes of a cell's parameters, in state-dict order.
fn cell_param_specs(mode: Mode, input_size: usize, hidden_size: usize, bias: bool) -> Vec<(String, Vec<usize>)> {
    let gates = mode.gates() * hidden_size;
    let mut out =
        vec![("weight_ih".to_string(), vec![gates, input_size]), ("weight_hh".to_string(), vec![gates, hidden_size])];
    if bias {
        out.push(("bias_ih".to_string(), vec![gates]));
        out.push(("bias_hh".to_string(), vec![gates]));
    }
    out
}

/// The shared implementation of the three cells.
struct CellCore {
    mode: Mode,
    input_size: usize,
    hidden_size: usize,
    w_ih: Var,
    w_hh: Var,
    b_ih: Option<Var>,
    b_hh: Option<Var>,
    training: TrainingFlag,
}

impl CellCore {
    fn new(mode: Mode, input_size: usize, hidden_size: usize, options: CellOptions) -> Result<CellCore> {
        check_cell_options(mode, hidden_size, &options)?;
        let bound = 1.0 / (hidden_size as f64).sqrt();
        let mut params = Vec::new();
        for (name, shape) in cell_param_specs(mode, input_size, hidden_size, options.bias) {
            let param = init::uniform(&shape, bound, options.dtype).map_err(named(mode.param_op(true, &name)))?;
            params.push((name, Var::param(param)));
        }
        Self::from_params(mode, input_size, hidden_size, options, params)
    }

    /// A cell over the given parameters, named as in its state dict.
    fn from_params(
        mode: Mode,
        input_size: usize,
        hidden_size: usize,
        options: CellOptions,
        params: Vec<(String, Var)>,
    ) -> Result<CellCore> {
        let name = mode.cell_name();
        check_cell_options(mode, hidden_size, &options)?;
        let specs = cell_param_specs(mode, input_size, hidden_size, options.bias);
        if let Some((extra, _)) = params.iter().find(|(n, _)| !specs.iter().any(|(s, _)| s == n)) {
            return Err(Error::invalid(name, format!("unexpected parameter {extra:?}")));
        }
        let mut vars = Vec::with_capacity(specs.len());
        for (spec, shape) in &specs {
            let Some((_, v)) = params.iter().find(|(n, _)| n == spec) else {
                return Err(Error::invalid(name, format!("missing parameter {spec:?}")));
            };
            if v.shape().dims() != shape.as_slice() {
                return Err(Error::shape(name, format!("{spec} must have shape {shape:?}, got {:?}", v.shape())));
            }
            if v.dtype() != options.dtype {
                return Err(Error::dtype(
                    name,
                    format!("{spec} is {} but the options say {}", v.dtype(), options.dtype),
                ));
            }
            vars.push(v.clone());
        }
        let mut it = vars.into_iter();
        let (Some(w_ih), Some(w_hh)) = (it.next(), it.next()) else {
            return Err(Error::invalid(name, "the weights are missing"));
        };
        let (b_ih, b_hh) = (it.next(), it.next());
        Ok(CellCore { mode, input_size, hidden_size, w_ih, w_hh, b_ih, b_hh, training: TrainingFlag::new() })
    }

    /// Checks `x` (`[B, in]` or `[in]`) and returns whether it is batched and its batch.
    fn check_input(&self, x: &Var) -> Result<(bool, usize)> {
        let name = self.mode.cell_name();
        let fits = matches!(x.rank(), 1 | 2) && x.shape()[x.rank() - 1] == self.input_size;
        if !fits {
            return Err(Error::shape(
                name,
                format!("expected an input of shape [B, {0}] or [{0}], got {1:?}", self.input_size, x.shape()),
            ));
        }
        if x.dtype() != self.w_ih.dtype() {
            return Err(Error::dtype(
                name,
                format!("the input is {} but the parameters are {}", x.dtype(), self.w_ih.dtype()),
            ));
        }
        Ok((x.rank() == 2, if x.rank() == 2 { x.shape()[0] } else { 1 }))
    }

    /// Checks a state against the input's batch and gives it the batch dimension.
    fn check_state(&self, what: &str, s: &Var, batched: bool, batch: usize) -> Result<Var> {
        let name = self.mode.cell_name();
        let expected = if batched { vec![batch, self.hidden_size] } else { vec![self.hidden_size] };
        if s.shape().dims() != expected.as_slice() {
            return Err(Error::shape(
                name,
                format!("expected {what} of shape {expected:?} for an input of batch {batch}, got {:?}", s.shape()),
            ));
        }
        if s.dtype() != self.w_ih.dtype() {
            return Err(Error::dtype(
                name,
                format!("{what} is {} but the parameters are {}", s.dtype(), self.w_ih.dtype()),
            ));
        }
        if batched { Ok(s.clone()) } else { s.unsqueeze(0) }
    }

    /// One step from `h` (and `c`), zeros where not given.
    fn run(&self, x: &Var, h: Option<&Var>, c: Option<&Var>) -> Result<State> {
        let (batched, batch) = self.check_input(x)?;
        let zeros = || -> Result<Var> {
            Ok(Var::new(Tensor::full_on([batch, self.hidden_size], 0, self.w_ih.dtype(), x.device())?))
        };
        let h = match h {
            Some(h) => self.check_state("hx", h, batched, batch)?,
            None => zeros()?,
        };
        let c = match (self.mode, c) {
            (Mode::Lstm, Some(c)) => Some(self.check_state("cx", c, batched, batch)?),
            (Mode::Lstm, None) => Some(zeros()?),
            _ => None,
        };
        let x = if batched { x.clone() } else { x.unsqueeze(0)? };
        let bias = input_bias(self.mode, self.b_ih.as_ref(), self.b_hh.as_ref())?;
        let gi = x.linear(&self.w_ih, bias.as_ref())?;
        let weights = StepWeights { w_hh: &self.w_hh, b_hh: step_bias(self.mode, self.b_hh.as_ref()), w_hr: None };
        let s = step(self.mode, &gi, &State { h, c }, &weights)?;
        if batched { Ok(s) } else { Ok(State { h: s.h.squeeze(0)?, c: s.c.map(|c| c.squeeze(0)).transpose()? }) }
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        let mut out = vec![("weight_ih".to_string(), self.w_ih.clone()), ("weight_hh".to_string(), self.w_hh.clone())];
        if let (Some(bi), Some(bh)) = (&self.b_ih, &self.b_hh) {
            out.push(("bias_ih".to_string(), bi.clone()));
            out.push(("bias_hh".to_string(), bh.clone()));
        }
        out
    }
}

macro_rules! cell_common {
    ($Cell:ident, |$s:ident, $x:ident| $forward:expr) => {
        impl $Cell {
            /// The size of each input's features.
            pub fn input_size(&self) -> usize {
                self.core.input_size
            }

            /// The size of the hidden state.
            pub fn hidden_size(&self) -> usize {
                self.core.hidden_size
            }

            /// `weight_ih`, `[gates * hidden, input_size]`.
            pub fn weight_ih(&self) -> &Var {
                &self.core.w_ih
            }

            /// `weight_hh`, `[gates * hidden, hidden]`.
            pub fn weight_hh(&self) -> &Var {
                &self.core.w_hh
            }
        }

        impl Module for $Cell {
            /// The new hidden state from a zero state.
            fn forward(&self, x: &Var) -> Result<Var> {
                let $s = self;
                let $x = x;
                $forward
            }

            fn named_parameters(&self) -> Vec<(String, Var)> {
                self.core.named_parameters()
            }

            fn set_training(&self, on: bool) {
                self.core.training.set(on);
            }

            fn is_training(&self) -> bool {
                self.core.training.get()
            }
        }

        impl fmt::Debug for $Cell {
            /// PyTorch's repr: `LSTMCell(10, 20)`.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({}, {}", self.core.mode.cell_name(), self.core.input_size, self.core.hidden_size)?;
                if self.core.b_ih.is_none() {
                    write!(f, ", bias=False")?;
                }
                if self.core.mode == Mode::Relu {
                    write!(f, ", nonlinearity='relu'")?;
                }
                write!(f, ")")
            }
        }
    };
}

/// One step of an Elman RNN, PyTorch's `nn.RNNCell`: `h' = tanh(W_ih x + b_ih + W_hh h +
/// b_hh)` (or relu). `x` is `[B, input_size]` or unbatched `[input_size]`, `h` likewise
/// with `hidden_size`.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::RNNCell;
/// use ember_tensor::Tensor;
/// let cell = RNNCell::new(3, 5)?;
/// let mut h = Var::new(Tensor::zeros([2, 5], ember_tensor::DType::F32)?);
/// for _ in 0..4 {
///     h = cell.run(&Var::new(Tensor::randn([2, 3])?), Some(&h))?;
/// }
/// assert_eq!(h.shape().dims(), &[2, 5]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct RNNCell {
    core: CellCore,
}

impl RNNCell {
    /// A tanh cell with biases, in `f32`.
    pub fn new(input_size: usize, hidden_size: usize) -> Result<RNNCell> {
        Self::with_options(input_size, hidden_size, CellOptions::default())
    }

    /// A cell with the given options.
    pub fn with_options(input_size: usize, hidden_size: usize, options: CellOptions) -> Result<RNNCell> {
        Ok(RNNCell { core: CellCore::new(options.nonlinearity.into(), input_size, hidden_size, options)? })
    }

    /// A cell over existing parameter `Var`s (shared with their other holders), named as
    /// in its state dict (`weight_ih`, `weight_hh`, `bias_ih`, `bias_hh`), with their
    /// shapes and the options' dtype.
    pub fn from_params(
        input_size: usize,
        hidden_size: usize,
        options: CellOptions,
        params: Vec<(String, Var)>,
    ) -> Result<RNNCell> {
        Ok(RNNCell {
            core: CellCore::from_params(options.nonlinearity.into(), input_size, hidden_size, options, params)?,
        })
    }

    /// The next hidden state from input `x` and hidden state `h` (zeros if `None`).
    pub fn run(&self, x: &Var, h: Option<&Var>) -> Result<Var> {
        Ok(self.core.run(x, h, None)?.h)
    }
}

/// One step of an LSTM, PyTorch's `nn.LSTMCell`, with the gates and parameters of
/// [`LSTM`](super::LSTM)'s layers (no projection).
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::LSTMCell;
/// use ember_tensor::Tensor;
/// let cell = LSTMCell::new(3, 5)?;
/// let s = cell.run(&Var::new(Tensor::randn([2, 3])?), None)?;
/// let s = cell.run(&Var::new(Tensor::randn([2, 3])?), Some(&s))?;
/// assert_eq!((s.h.shape().dims(), s.c.shape().dims()), (&[2, 5][..], &[2, 5][..]));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct LSTMCell {
    core: CellCore,
}

impl LSTMCell {
    /// A cell with biases, in `f32`.
    pub fn new(input_size: usize, hidden_size: usize) -> Result<LSTMCell> {
        Self::with_options(input_size, hidden_size, CellOptions::default())
    }

    /// A cell with the given options (the nonlinearity must be tanh).
    pub fn with_options(input_size: usize, hidden_size: usize, options: CellOptions) -> Result<LSTMCell> {
        Ok(LSTMCell { core: CellCore::new(Mode::Lstm, input_size, hidden_size, options)? })
    }

    /// A cell over existing parameter `Var`s (shared with their other holders), named as
    /// in its state dict (`weight_ih`, `weight_hh`, `bias_ih`, `bias_hh`), with their
    /// shapes and the options' dtype.
    pub fn from_params(
        input_size: usize,
        hidden_size: usize,
        options: CellOptions,
        params: Vec<(String, Var)>,
    ) -> Result<LSTMCell> {
        Ok(LSTMCell { core: CellCore::from_params(Mode::Lstm, input_size, hidden_size, options, params)? })
    }

    /// The next state from input `x` and `state` (zeros if `None`).
    pub fn run(&self, x: &Var, state: Option<&LstmState>) -> Result<LstmState> {
        let s = self.core.run(x, state.map(|s| &s.h), state.map(|s| &s.c))?;
        let c = s.c.ok_or_else(|| Error::autograd("LSTMCell: the step returned no cell state"))?;
        Ok(LstmState { h: s.h, c })
    }
}

/// One step of a GRU, PyTorch's `nn.GRUCell`, with the gates and parameters of
/// [`GRU`](super::GRU)'s layers.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::GRUCell;
/// use ember_tensor::Tensor;
/// let cell = GRUCell::new(3, 5)?;
/// let h = cell.run(&Var::new(Tensor::randn([3])?), None)?; // unbatched
/// assert_eq!(h.shape().dims(), &[5]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct GRUCell {
    core: CellCore,
}

impl GRUCell {
    /// A cell with biases, in `f32`.
    pub fn new(input_size: usize, hidden_size: usize) -> Result<GRUCell> {
        Self::with_options(input_size, hidden_size, CellOptions::default())
    }

    /// A cell with the given options (the nonlinearity must be tanh).
    pub fn with_options(input_size: usize, hidden_size: usize, options: CellOptions) -> Result<GRUCell> {
        Ok(GRUCell { core: CellCore::new(Mode::Gru, input_size, hidden_size, options)? })
    }

    /// A cell over existing parameter `Var`s (shared with their other holders), named as
    /// in its state dict (`weight_ih`, `weight_hh`, `bias_ih`, `bias_hh`), with their
    /// shapes and the options' dtype.
    pub fn from_params(
        input_size: usize,
        hidden_size: usize,
        options: CellOptions,
        params: Vec<(String, Var)>,
    ) -> Result<GRUCell> {
        Ok(GRUCell { core: CellCore::from_params(Mode::Gru, input_size, hidden_size, options, params)? })
    }

    /// The next hidden state from input `x` and hidden state `h` (zeros if `None`).
    pub fn run(&self, x: &Var, h: Option<&Var>) -> Result<Var> {
        Ok(self.core.run(x, h, None)?.h)
    }
}

cell_common!(RNNCell, |s, x| s.run(x, None));
cell_common!(LSTMCell, |s, x| Ok(s.run(x, None)?.h));
cell_common!(GRUCell, |s, x| s.run(x, None));

//! The single-step cells [`RNNCell`], [`LSTMCell`] and [`GRUCell`]: one time step of the
//! corresponding layer, with PyTorch's parameters (`weight_ih`, `weight_hh`, `bias_ih`,
//! `bias_hh`), initialisation and unbatched inputs.

use super::build::{self, Core};
use super::options::{CellOptions, Mode, RnnOptions};
use super::recurrent_module::recurrent_module;
use super::step::{State, StepWeights, input_bias, step, step_bias};
use crate::module::{Module, TrainingFlag};
use crate::parts::Parts;
use ember_autograd::Var;
use ember_autograd::autocast::{self, policy};
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

impl Core for CellCore {
    const CELL: bool = true;

    fn specs(mode: Mode, input_size: usize, hidden_size: usize, options: &RnnOptions) -> Vec<(String, Vec<usize>)> {
        let gates = mode.gates() * hidden_size;
        let mut out = vec![
            ("weight_ih".to_string(), vec![gates, input_size]),
            ("weight_hh".to_string(), vec![gates, hidden_size]),
        ];
        if options.bias {
            out.push(("bias_ih".to_string(), vec![gates]));
            out.push(("bias_hh".to_string(), vec![gates]));
        }
        out
    }

    fn assemble(mode: Mode, input_size: usize, hidden_size: usize, _: RnnOptions, vars: Vec<Var>) -> Result<CellCore> {
        let mut it = vars.into_iter();
        let (Some(w_ih), Some(w_hh)) = (it.next(), it.next()) else {
            return Err(Error::invalid(mode.cell_name(), "the weights are missing"));
        };
        let (b_ih, b_hh) = (it.next(), it.next());
        Ok(CellCore { mode, input_size, hidden_size, w_ih, w_hh, b_ih, b_hh, training: TrainingFlag::new() })
    }
}

impl CellCore {
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

    /// One step from `h` (and `c`), zeros where not given. Inside an autocast region, on the
    /// input, states and parameters as the cell's policy casts them.
    fn run(&self, x: &Var, h: Option<&Var>, c: Option<&Var>) -> Result<State> {
        let policy = if matches!(self.mode, Mode::Lstm | Mode::Gru) { &policy::GATED_CELL } else { &policy::RNN_CELL };
        let inputs = [Some(x), h, c, Some(&self.w_ih), Some(&self.w_hh), self.b_ih.as_ref(), self.b_hh.as_ref()];
        if let Some(ran) = autocast::run_cast(policy, inputs, |cast| {
            let training = TrainingFlag::new();
            training.set(self.training.get());
            let core = CellCore {
                w_ih: cast.or(3, &self.w_ih).clone(),
                w_hh: cast.or(4, &self.w_hh).clone(),
                b_ih: cast.get(5).cloned(),
                b_hh: cast.get(6).cloned(),
                training,
                ..*self
            };
            core.run_as_given(cast.or(0, x), cast.get(1), cast.get(2))
        }) {
            return ran;
        }
        self.run_as_given(x, h, c)
    }

    /// [`run`](CellCore::run) on the inputs and parameters as they are.
    fn run_as_given(&self, x: &Var, h: Option<&Var>, c: Option<&Var>) -> Result<State> {
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

    /// PyTorch's parameters (`weight_ih`, `weight_hh`, `bias_ih`, `bias_hh`) and the flag.
    fn parts(&self) -> Parts<'_> {
        let parts = Parts::new().training(&self.training);
        let parts = parts.parameter("weight_ih", &self.w_ih).parameter("weight_hh", &self.w_hh);
        match (&self.b_ih, &self.b_hh) {
            (Some(bi), Some(bh)) => parts.parameter("bias_ih", bi).parameter("bias_hh", bh),
            _ => parts,
        }
    }

    /// PyTorch's repr: `LSTMCell(10, 20)`.
    fn repr(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({}, {}", self.mode.cell_name(), self.input_size, self.hidden_size)?;
        if self.b_ih.is_none() {
            write!(f, ", bias=False")?;
        }
        if self.mode == Mode::Relu {
            write!(f, ", nonlinearity='relu'")?;
        }
        write!(f, ")")
    }
}

/// The cells' weights, besides what [`recurrent_module!`] writes.
macro_rules! cell_weights {
    ($($Cell:ident),*) => {$(
        impl $Cell {
            /// `weight_ih`, `[gates * hidden, input_size]`.
            pub fn weight_ih(&self) -> &Var {
                &self.core.w_ih
            }

            /// `weight_hh`, `[gates * hidden, hidden]`.
            pub fn weight_hh(&self) -> &Var {
                &self.core.w_hh
            }
        }
    )*};
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
    /// The next hidden state from input `x` and hidden state `h` (zeros if `None`).
    pub fn run(&self, x: &Var, h: Option<&Var>) -> Result<Var> {
        Ok(self.core.run(x, h, None)?.h)
    }
}

cell_weights!(RNNCell, LSTMCell, GRUCell);

recurrent_module!(RNNCell: CellCore, CellOptions, mode |o| o.nonlinearity.into(), forward |s, x| s.run(x, None));
recurrent_module!(LSTMCell: CellCore, CellOptions, mode |_o| Mode::Lstm, forward |s, x| Ok(s.run(x, None)?.h));
recurrent_module!(GRUCell: CellCore, CellOptions, mode |_o| Mode::Gru, forward |s, x| s.run(x, None));

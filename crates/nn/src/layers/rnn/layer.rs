//! The multi-layer driver behind [`RNN`], [`LSTM`] and [`GRU`]: parameters with PyTorch's
//! names and initialisation, input and state checks, the loop over layers, directions and
//! time steps, and the public layers with their return types.

use super::build::{self, Core};
use super::fused::lstm_sequence;
use super::lengths::StepMasks;
use super::options::{Mode, RnnOptions};
use super::recurrent_module::recurrent_module;
use super::step::{State, StepWeights, input_bias, step, step_bias};
use crate::layers::dropout::dropout;
use crate::layers::param_alloc::reserve_total;
use crate::module::{Module, TrainingFlag};
use crate::parts::Parts;
use ember_autograd::Var;
use ember_autograd::autocast::{self, policy};
use ember_tensor::{Error, Result, Tensor};
use std::fmt;

/// The parameters of one direction of one layer.
struct DirParams {
    w_ih: Var,
    w_hh: Var,
    b_ih: Option<Var>,
    b_hh: Option<Var>,
    w_hr: Option<Var>,
}

impl DirParams {
    /// The parameters in state-dict order.
    fn vars(&self) -> impl Iterator<Item = &Var> {
        [&self.w_ih, &self.w_hh].into_iter().chain(&self.b_ih).chain(&self.b_hh).chain(&self.w_hr)
    }

    /// Parameters of the same layout as `self` taken from `it`, in [`DirParams::vars`]'s
    /// order (`None` if it runs out).
    fn like(&self, it: &mut impl Iterator<Item = Var>) -> Option<DirParams> {
        let (w_ih, w_hh) = (it.next()?, it.next()?);
        let mut next_if = |present: bool| if present { it.next() } else { None };
        let (b_ih, b_hh, w_hr) =
            (next_if(self.b_ih.is_some()), next_if(self.b_hh.is_some()), next_if(self.w_hr.is_some()));
        Some(DirParams { w_ih, w_hh, b_ih, b_hh, w_hr })
    }
}

/// The names and shapes of a layer's parameters, in PyTorch's state-dict order: per layer
/// and direction `weight_ih`, `weight_hh`, `bias_ih`, `bias_hh`, `weight_hr`, suffixed
/// `_l{k}` and `_reverse`.
fn param_specs(mode: Mode, input_size: usize, hidden_size: usize, o: &RnnOptions) -> Vec<(String, Vec<usize>)> {
    let gates = mode.gates() * hidden_size;
    let h = if o.proj_size > 0 { o.proj_size } else { hidden_size };
    let dirs = o.directions();
    let mut out = Vec::new();
    for layer in 0..o.num_layers {
        let layer_in = if layer == 0 { input_size } else { h * dirs };
        for dir in 0..dirs {
            let suffix = format!("_l{layer}{}", if dir == 1 { "_reverse" } else { "" });
            out.push((format!("weight_ih{suffix}"), vec![gates, layer_in]));
            out.push((format!("weight_hh{suffix}"), vec![gates, h]));
            if o.bias {
                out.push((format!("bias_ih{suffix}"), vec![gates]));
                out.push((format!("bias_hh{suffix}"), vec![gates]));
            }
            if o.proj_size > 0 {
                out.push((format!("weight_hr{suffix}"), vec![o.proj_size, hidden_size]));
            }
        }
    }
    out
}

/// The number of parameter elements [`param_specs`] lists, without listing them (`None` if
/// it overflows).
fn total_elements(mode: Mode, input_size: usize, hidden_size: usize, o: &RnnOptions) -> Option<usize> {
    let gates = mode.gates().checked_mul(hidden_size)?;
    let h = if o.proj_size > 0 { o.proj_size } else { hidden_size };
    let dirs = o.directions();
    let biases = if o.bias { gates.checked_mul(2)? } else { 0 };
    let projection = if o.proj_size > 0 { o.proj_size.checked_mul(hidden_size)? } else { 0 };
    let layer = |input: usize| -> Option<usize> {
        gates.checked_mul(input.checked_add(h)?)?.checked_add(biases)?.checked_add(projection)
    };
    let first = layer(input_size)?;
    let later = layer(h.checked_mul(dirs)?)?.checked_mul(o.num_layers - 1)?;
    first.checked_add(later)?.checked_mul(dirs)
}

/// What the driver returns: the last layer's output and the final states.
struct Run {
    output: Var,
    h_n: Var,
    c_n: Option<Var>,
}

/// The shared implementation of the three layers.
struct RnnCore {
    mode: Mode,
    input_size: usize,
    hidden_size: usize,
    options: RnnOptions,
    /// `num_layers * directions` entries, layer-major (`l0`, `l0_reverse`, `l1`, ...).
    params: Vec<DirParams>,
    training: TrainingFlag,
}

impl Core for RnnCore {
    const CELL: bool = false;

    fn specs(mode: Mode, input_size: usize, hidden_size: usize, options: &RnnOptions) -> Vec<(String, Vec<usize>)> {
        param_specs(mode, input_size, hidden_size, options)
    }

    fn reserve(mode: Mode, input_size: usize, hidden_size: usize, options: &RnnOptions) -> Result<()> {
        reserve_total(mode.layer_name(), total_elements(mode, input_size, hidden_size, options), options.dtype)
    }

    fn assemble(
        mode: Mode,
        input_size: usize,
        hidden_size: usize,
        options: RnnOptions,
        vars: Vec<Var>,
    ) -> Result<RnnCore> {
        let mut it = vars.into_iter();
        let mut params = Vec::with_capacity(options.num_layers * options.directions());
        for _ in 0..options.num_layers * options.directions() {
            let mut next = || it.next();
            let (w_ih, w_hh) = (next(), next());
            let (b_ih, b_hh) = if options.bias { (next(), next()) } else { (None, None) };
            let w_hr = if options.proj_size > 0 { next() } else { None };
            if let (Some(w_ih), Some(w_hh)) = (w_ih, w_hh) {
                params.push(DirParams { w_ih, w_hh, b_ih, b_hh, w_hr });
            }
        }
        Ok(RnnCore { mode, input_size, hidden_size, options, params, training: TrainingFlag::new() })
    }
}

impl RnnCore {
    /// The size of `h`: `proj_size` if there is a projection, else `hidden_size`.
    fn out_hidden(&self) -> usize {
        if self.options.proj_size > 0 { self.options.proj_size } else { self.hidden_size }
    }

    /// PyTorch's parameters, named as [`param_specs`] names them, and the flag.
    fn parts(&self) -> Parts<'_> {
        let vars = self.params.iter().flat_map(|p| {
            let biases = p.b_ih.iter().chain(&p.b_hh);
            [&p.w_ih, &p.w_hh].into_iter().chain(biases).chain(&p.w_hr)
        });
        let names =
            param_specs(self.mode, self.input_size, self.hidden_size, &self.options).into_iter().map(|(n, _)| n);
        names.zip(vars).fold(Parts::new().training(&self.training), |parts, (n, v)| parts.parameter(n, v))
    }

    /// Checks a state's shape against `[layers * directions, (B,) size]`.
    fn check_state(&self, what: &str, s: &Var, batch: Option<usize>, size: usize) -> Result<()> {
        let name = self.mode.layer_name();
        let ld = self.options.num_layers * self.options.directions();
        let expected: Vec<usize> = match batch {
            Some(b) => vec![ld, b, size],
            None => vec![ld, size],
        };
        if s.shape().dims() != expected.as_slice() {
            return Err(Error::shape(name, format!("expected {what} of shape {expected:?}, got {:?}", s.shape())));
        }
        if s.dtype() != self.options.dtype {
            return Err(Error::dtype(
                name,
                format!("{what} is {} but the parameters are {}", s.dtype(), self.options.dtype),
            ));
        }
        Ok(())
    }

    /// Runs the layers over `x`, from the initial states `h0` (and `c0`) or zeros, with the
    /// sequences' `lengths` if they differ. Inside an autocast region, on the input, the
    /// states and the parameters as the layer's policy casts them.
    fn run(&self, x: &Var, lengths: Option<&[usize]>, h0: Option<&Var>, c0: Option<&Var>) -> Result<Run> {
        if autocast::is_autocast_enabled(x.device()) {
            let policy = if self.mode == Mode::Gru { &policy::GRU } else { &policy::RNN };
            let inputs: Vec<&Var> =
                [x].into_iter().chain(h0).chain(c0).chain(self.params.iter().flat_map(DirParams::vars)).collect();
            let ran = autocast::run_cast_list(policy, &inputs, |cast| {
                let mut it = cast.iter().cloned();
                let x = it.next().unwrap_or_else(|| x.clone());
                let (h0, c0) = (h0.and_then(|_| it.next()), c0.and_then(|_| it.next()));
                self.with_params(&mut it)?.run_as_given(&x, lengths, h0.as_ref(), c0.as_ref())
            });
            if let Some(ran) = ran {
                return ran;
            }
        }
        self.run_as_given(x, lengths, h0, c0)
    }

    /// A core like this one over the parameters `it` yields (cast copies, in
    /// [`DirParams::vars`]'s order), whose dtype it takes.
    fn with_params(&self, it: &mut impl Iterator<Item = Var>) -> Result<RnnCore> {
        let params = self
            .params
            .iter()
            .map(|p| p.like(it))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::autograd(format!("{}: autocast lost a parameter", self.mode.layer_name())))?;
        let dtype = params.first().map_or(self.options.dtype, |p| p.w_ih.dtype());
        let training = TrainingFlag::new();
        training.set(self.training.get());
        Ok(RnnCore { params, options: RnnOptions { dtype, ..self.options }, training, ..*self })
    }

    /// [`run`](RnnCore::run) on the inputs and parameters as they are.
    fn run_as_given(&self, x: &Var, lengths: Option<&[usize]>, h0: Option<&Var>, c0: Option<&Var>) -> Result<Run> {
        let name = self.mode.layer_name();
        let o = &self.options;
        let batched = match x.rank() {
            3 => true,
            2 => false,
            _ => {
                return Err(Error::shape(
                    name,
                    format!(
                        "expected an input of shape [{}, {}] (or [T, {}] unbatched), got {:?}",
                        if o.batch_first { "B, T" } else { "T, B" },
                        self.input_size,
                        self.input_size,
                        x.shape()
                    ),
                ));
            }
        };
        if x.shape()[x.rank() - 1] != self.input_size {
            return Err(Error::shape(
                name,
                format!(
                    "input.size(-1) must be equal to input_size {}, got input of shape {:?}",
                    self.input_size,
                    x.shape()
                ),
            ));
        }
        if x.dtype() != o.dtype {
            return Err(Error::dtype(name, format!("the input is {} but the parameters are {}", x.dtype(), o.dtype)));
        }
        // Time-major `[T, B, in]` from here on.
        let x = if !batched {
            x.unsqueeze(1)?
        } else if o.batch_first {
            x.transpose(0, 1)?
        } else {
            x.clone()
        };
        let (steps, batch) = (x.shape()[0], x.shape()[1]);
        if steps == 0 {
            return Err(Error::shape(name, format!("Expected sequence length to be larger than 0 in {name}")));
        }
        let state_batch = batched.then_some(batch);
        let out_hidden = self.out_hidden();
        if let Some(h) = h0 {
            self.check_state("h0", h, state_batch, out_hidden)?;
        }
        if let Some(c) = c0 {
            self.check_state("c0", c, state_batch, self.hidden_size)?;
        }
        // Unbatched states gain the batch dimension too.
        let h0 = h0.map(|h| if batched { Ok(h.clone()) } else { h.unsqueeze(1) }).transpose()?;
        let c0 = c0.map(|c| if batched { Ok(c.clone()) } else { c.unsqueeze(1) }).transpose()?;
        let masks = match lengths {
            Some(l) => StepMasks::new(name, l, steps, batch, x.device())?,
            None => None,
        };

        let dirs = o.directions();
        let mut layer_input = x;
        let (mut h_n, mut c_n) = (Vec::new(), Vec::new());
        for layer in 0..o.num_layers {
            let mut outs = Vec::with_capacity(dirs);
            for dir in 0..dirs {
                let k = layer * dirs + dir;
                let init = State {
                    h: match &h0 {
                        Some(h) => h.select(0, k)?,
                        None => Var::new(Tensor::full_on([batch, out_hidden], 0, o.dtype, layer_input.device())?),
                    },
                    c: match (self.mode, &c0) {
                        (Mode::Lstm, Some(c)) => Some(c.select(0, k)?),
                        (Mode::Lstm, None) => Some(Var::new(Tensor::full_on(
                            [batch, self.hidden_size],
                            0,
                            o.dtype,
                            layer_input.device(),
                        )?)),
                        _ => None,
                    },
                };
                let (out, last) = self.run_direction(&self.params[k], &layer_input, init, dir == 1, masks.as_ref())?;
                outs.push(out);
                h_n.push(last.h);
                c_n.extend(last.c);
            }
            let out = if dirs == 2 { Var::cat(&[&outs[0], &outs[1]], 2)? } else { outs.remove(0) };
            layer_input = if layer + 1 < o.num_layers { dropout(&out, o.dropout, self.training.get())? } else { out };
        }
        let stack = |v: &[Var]| Var::stack(&v.iter().collect::<Vec<_>>(), 0);
        let (h_n, c_n) = (stack(&h_n)?, if c_n.is_empty() { None } else { Some(stack(&c_n)?) });
        let output = layer_input;
        Ok(if !batched {
            Run { output: output.squeeze(1)?, h_n: h_n.squeeze(1)?, c_n: c_n.map(|c| c.squeeze(1)).transpose()? }
        } else if o.batch_first {
            Run { output: output.transpose(0, 1)?, h_n, c_n }
        } else {
            Run { output, h_n, c_n }
        })
    }

    /// [`run`](RnnCore::run) without a cell state: what [`RNN`] and [`GRU`] return.
    fn run_hidden(&self, x: &Var, lengths: Option<&[usize]>, h0: Option<&Var>) -> Result<RnnOutput> {
        let r = self.run(x, lengths, h0, None)?;
        Ok(RnnOutput { output: r.output, h_n: r.h_n })
    }

    /// The last layer's output from zero states: the layers' `Module::forward`.
    fn output(&self, x: &Var) -> Result<Var> {
        Ok(self.run(x, None, None, None)?.output)
    }

    /// One direction of one layer over the time-major `x`: its output `[T, B, h]` and final
    /// state.
    fn run_direction(
        &self,
        p: &DirParams,
        x: &Var,
        init: State,
        reverse: bool,
        masks: Option<&StepMasks>,
    ) -> Result<(Var, State)> {
        let (steps, batch, features) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        // The input's contribution for every step at once: one matrix product.
        let bias = input_bias(self.mode, p.b_ih.as_ref(), p.b_hh.as_ref())?;
        // The gate width from the weight, not inferred: with no rows (batch 0) there is
        // nothing to infer it from.
        let gates = p.w_ih.shape()[0];
        let gi =
            x.reshape([steps * batch, features])?.linear(&p.w_ih, bias.as_ref())?.reshape([steps, batch, gates])?;
        if self.mode == Mode::Lstm && p.w_hr.is_none() {
            let (h0, c0) = (&init.h, init.c.as_ref().unwrap_or(&init.h));
            let lengths = masks.map(StepMasks::lengths);
            let (out, h, c) = lstm_sequence(&gi, &p.w_hh, h0, c0, reverse, lengths)?;
            return Ok((out, State { h, c: Some(c) }));
        }
        let weights = StepWeights { w_hh: &p.w_hh, b_hh: step_bias(self.mode, p.b_hh.as_ref()), w_hr: p.w_hr.as_ref() };
        let mut state = init;
        let mut ys: Vec<Option<Var>> = vec![None; steps];
        for i in 0..steps {
            let t = if reverse { steps - 1 - i } else { i };
            let new = step(self.mode, &gi.select(0, t)?, &state, &weights)?;
            let mask = masks.and_then(|m| m.at(t));
            let y = match mask {
                Some(m) => m.zero_padding(&new.h)?,
                None => new.h.clone(),
            };
            state = match mask {
                Some(m) => m.keep(new, &state)?,
                None => new,
            };
            ys[t] = Some(y);
        }
        let ys: Vec<Var> = ys.into_iter().flatten().collect();
        let out = Var::stack(&ys.iter().collect::<Vec<_>>(), 0)?;
        Ok((out, state))
    }

    fn repr(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        write!(f, "{}({}, {}", self.mode.layer_name(), self.input_size, self.hidden_size)?;
        if o.proj_size > 0 {
            write!(f, ", proj_size={}", o.proj_size)?;
        }
        if o.num_layers != 1 {
            write!(f, ", num_layers={}", o.num_layers)?;
        }
        if self.mode == Mode::Relu {
            write!(f, ", nonlinearity='relu'")?;
        }
        if !o.bias {
            write!(f, ", bias=False")?;
        }
        if o.batch_first {
            write!(f, ", batch_first=True")?;
        }
        if o.dropout != 0.0 {
            write!(f, ", dropout={}", o.dropout)?;
        }
        if o.bidirectional {
            write!(f, ", bidirectional=True")?;
        }
        write!(f, ")")
    }
}

/// What [`RNN`] and [`GRU`] return: PyTorch's `(output, h_n)`.
#[derive(Clone)]
pub struct RnnOutput {
    /// The last layer's `h` at every step: `[T, B, directions * hidden]` (`[B, T, ..]`
    /// with `batch_first`, `[T, ..]` unbatched), the directions joined along the features.
    pub output: Var,
    /// Every layer's and direction's final `h`: `[layers * directions, B, hidden]`
    /// (`[layers * directions, hidden]` unbatched), ordered `l0`, `l0_reverse`, `l1`, ...
    pub h_n: Var,
}

/// What [`LSTM`] returns: PyTorch's `(output, (h_n, c_n))`.
#[derive(Clone)]
pub struct LstmOutput {
    /// The last layer's `h` at every step, as in [`RnnOutput::output`] (`proj_size`
    /// features per direction with a projection).
    pub output: Var,
    /// Every layer's and direction's final `h`: `[layers * directions, B, h]`, where `h` is
    /// `proj_size` with a projection and `hidden_size` otherwise.
    pub h_n: Var,
    /// Every layer's and direction's final cell state: `[layers * directions, B, hidden]`.
    pub c_n: Var,
}

/// The layers' options, besides what [`recurrent_module!`] writes.
macro_rules! layer_accessors {
    ($($Layer:ident),*) => {$(
        impl $Layer {
            /// The options the layer was built with.
            pub fn options(&self) -> &RnnOptions {
                &self.core.options
            }
        }
    )*};
}

/// A multi-layer Elman RNN, PyTorch's `nn.RNN`: `h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} +
/// b_hh)` (or relu, with [`RnnOptions::nonlinearity`]).
///
/// Inputs are `[T, B, input_size]` (`[B, T, input_size]` with `batch_first`, `[T,
/// input_size]` unbatched); [`run`](RNN::run) returns the output and the final states,
/// [`run_with_lengths`](RNN::run_with_lengths) the same for a padded batch of sequences of
/// different lengths. Parameters are named and initialised as in PyTorch: `weight_ih_l{k}`
/// `[hidden, in]`, `weight_hh_l{k}` `[hidden, hidden]`, `bias_ih_l{k}`, `bias_hh_l{k}`
/// (`..._reverse` for the backward direction), all `U(-1/sqrt(hidden), 1/sqrt(hidden))`.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{Nonlinearity, RNN, RnnOptions};
/// use ember_tensor::Tensor;
/// let rnn = RNN::with_options(4, 8, RnnOptions::default().num_layers(2).nonlinearity(Nonlinearity::Relu))?;
/// let out = rnn.run(&Var::new(Tensor::randn([5, 3, 4])?), None)?;
/// assert_eq!(out.output.shape().dims(), &[5, 3, 8]);
/// assert_eq!(out.h_n.shape().dims(), &[2, 3, 8]);
/// assert_eq!(format!("{rnn:?}"), "RNN(4, 8, num_layers=2, nonlinearity='relu')");
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct RNN {
    core: RnnCore,
}

impl RNN {
    /// The output and final hidden states of the sequences `x`, from `h0` (`[layers *
    /// directions, B, hidden]`, or `[layers * directions, hidden]` unbatched) or zeros.
    pub fn run(&self, x: &Var, h0: Option<&Var>) -> Result<RnnOutput> {
        self.core.run_hidden(x, None, h0)
    }

    /// [`run`](RNN::run) on a padded batch whose sequence `b` has `lengths[b]` real steps
    /// (each in `1..=T`): see [`LSTM::run_with_lengths`].
    pub fn run_with_lengths(&self, x: &Var, lengths: &[usize], h0: Option<&Var>) -> Result<RnnOutput> {
        self.core.run_hidden(x, Some(lengths), h0)
    }
}

/// A multi-layer long short-term memory, PyTorch's `nn.LSTM`, with PyTorch's gate order
/// (input, forget, cell, output):
///
/// ```text
/// i, f, g, o = split(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)
/// c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)
/// h_t = sigmoid(o) * tanh(c_t)            (then W_hr h_t with proj_size > 0)
/// ```
///
/// Parameters: `weight_ih_l{k}` `[4 hidden, in]`, `weight_hh_l{k}` `[4 hidden, h]`,
/// `bias_ih_l{k}`, `bias_hh_l{k}` `[4 hidden]`, `weight_hr_l{k}` `[proj_size, hidden]`
/// with a projection, `..._reverse` for the backward direction; all drawn from
/// `U(-1/sqrt(hidden), 1/sqrt(hidden))` in that order, as in PyTorch, so a PyTorch
/// `state_dict` loads as it is.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{LSTM, Module, RnnOptions};
/// use ember_tensor::Tensor;
/// let lstm = LSTM::with_options(4, 8, RnnOptions::default().num_layers(2).bidirectional(true).batch_first(true))?;
/// let x = Var::new(Tensor::randn([3, 5, 4])?); // [B, T, features]
/// let out = lstm.run(&x, None)?;
/// assert_eq!(out.output.shape().dims(), &[3, 5, 16]);
/// assert_eq!(out.h_n.shape().dims(), &[4, 3, 8]);
/// assert_eq!(out.c_n.shape().dims(), &[4, 3, 8]);
/// assert_eq!(lstm.state_dict().keys().nth(4), Some("weight_ih_l0_reverse"));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct LSTM {
    core: RnnCore,
}

impl LSTM {
    /// The output and final states of the sequences `x`, from `state = (h0, c0)`
    /// (`[layers * directions, B, h]` and `[layers * directions, B, hidden]`, without the
    /// `B` unbatched) or zeros.
    pub fn run(&self, x: &Var, state: Option<(&Var, &Var)>) -> Result<LstmOutput> {
        self.finish(self.core.run(x, None, state.map(|s| s.0), state.map(|s| s.1))?)
    }

    /// [`run`](LSTM::run) on a padded batch whose sequence `b` has `lengths[b]` real steps
    /// (each in `1..=T`; any order, no sorting needed): the padded steps change nothing.
    /// Each sequence's `h_n` and `c_n` are its states at its own last step (for the
    /// backward direction, after running from its last real step back to the first), and
    /// the output is zero at padded positions, which is what PyTorch gives for
    /// `pad_packed_sequence(lstm(pack_padded_sequence(x, lengths, enforce_sorted=False)),
    /// total_length=T)`.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_nn::LSTM;
    /// use ember_tensor::Tensor;
    /// let lstm = LSTM::new(2, 3)?;
    /// let x = Tensor::randn([4, 2, 2])?; // T = 4, two sequences
    /// let out = lstm.run_with_lengths(&Var::new(x.clone()), &[4, 2], None)?;
    /// // The second sequence alone, two steps long, gives the same final state.
    /// let alone = lstm.run(&Var::new(x.narrow(0, 0, 2)?.narrow(1, 1, 1)?), None)?;
    /// let (a, b) = (out.h_n.value().narrow(1, 1, 1)?, alone.h_n.value());
    /// assert!(a.sub(&b)?.abs().max_all()?.to_scalar::<f32>()? < 1e-6);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn run_with_lengths(&self, x: &Var, lengths: &[usize], state: Option<(&Var, &Var)>) -> Result<LstmOutput> {
        self.finish(self.core.run(x, Some(lengths), state.map(|s| s.0), state.map(|s| s.1))?)
    }

    fn finish(&self, r: Run) -> Result<LstmOutput> {
        let c_n = r.c_n.ok_or_else(|| Error::autograd("LSTM: the driver returned no cell state"))?;
        Ok(LstmOutput { output: r.output, h_n: r.h_n, c_n })
    }
}

/// A multi-layer gated recurrent unit, PyTorch's `nn.GRU`, with PyTorch's gate order
/// (reset, update, new) and its placement of the reset gate:
///
/// ```text
/// r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
/// z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
/// n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
/// h' = (1 - z) * n + z * h
/// ```
///
/// Parameters as for [`LSTM`] with `3 hidden` rows and no projection.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::GRU;
/// use ember_tensor::Tensor;
/// let gru = GRU::new(4, 6)?;
/// let out = gru.run(&Var::new(Tensor::randn([7, 4])?), None)?; // unbatched
/// assert_eq!(out.output.shape().dims(), &[7, 6]);
/// assert_eq!(out.h_n.shape().dims(), &[1, 6]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct GRU {
    core: RnnCore,
}

impl GRU {
    /// The output and final hidden states of the sequences `x`, from `h0` or zeros; as
    /// [`RNN::run`].
    pub fn run(&self, x: &Var, h0: Option<&Var>) -> Result<RnnOutput> {
        self.core.run_hidden(x, None, h0)
    }

    /// [`run`](GRU::run) on a padded batch of sequences of `lengths`: see
    /// [`LSTM::run_with_lengths`].
    pub fn run_with_lengths(&self, x: &Var, lengths: &[usize], h0: Option<&Var>) -> Result<RnnOutput> {
        self.core.run_hidden(x, Some(lengths), h0)
    }
}

layer_accessors!(RNN, LSTM, GRU);

recurrent_module!(RNN: RnnCore, RnnOptions, mode |o| o.nonlinearity.into(), forward |s, x| s.core.output(x));
recurrent_module!(LSTM: RnnCore, RnnOptions, mode |_o| Mode::Lstm, forward |s, x| s.core.output(x));
recurrent_module!(GRU: RnnCore, RnnOptions, mode |_o| Mode::Gru, forward |s, x| s.core.output(x));

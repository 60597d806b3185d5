//! [`OptimizerState`]: an optimizer's hyperparameters and per-parameter state as plain maps, and
//! the checked reading that `load_state_dict` does.

use ember_autograd::Var;
use ember_tensor::{Error, Result, Tensor};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The safetensors metadata key naming the optimizer kind.
const KIND_KEY: &str = "ember.optimizer";
/// The prefix of the metadata keys holding the scalars.
const SCALAR_PREFIX: &str = "ember.scalar.";

/// What an optimizer needs to continue exactly where it stopped, as two maps that any
/// checkpoint format can store (tensors by name, numbers by name), like PyTorch's
/// `optimizer.state_dict()`.
///
/// - `scalars` holds the hyperparameters under their config names (`"lr"`, `"beta1"`,
///   `"momentum"`, booleans as `0`/`1`), `"num_params"`, and per-parameter counters as
///   `"state.{i}.step"`.
/// - `tensors` holds the per-parameter buffers as `"state.{i}.{buffer}"`, e.g.
///   `"state.0.exp_avg"`; a parameter that has never been updated has no entries.
///
/// `i` is the parameter's position in the optimizer's list, so a state dict loads into an
/// optimizer built over the same parameters in the same order. The tensors are copies: later
/// steps do not change a state dict already taken.
///
/// ```
/// use ember_autograd::Var;
/// use ember_optim::{Adam, AdamConfig, Optimizer};
/// use ember_tensor::Tensor;
/// let w = Var::param(Tensor::from_vec(vec![1.0f32, -1.0], [2])?);
/// let mut opt = Adam::new(vec![w.clone()], AdamConfig::default())?;
/// w.set_grad(Some(Tensor::from_vec(vec![0.5f32, 0.5], [2])?))?;
/// opt.step()?;
/// let state = opt.state_dict();
/// assert_eq!(state.optimizer, "Adam");
/// assert_eq!(state.scalars["state.0.step"], 1.0);
/// assert_eq!(state.tensors["state.0.exp_avg"].shape(), &[2]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct OptimizerState {
    /// The optimizer that wrote it (`"Sgd"`, `"Adam"`, `"AdamW"`, `"RmsProp"`); loading into
    /// another kind is an error.
    pub optimizer: String,
    /// Hyperparameters, the parameter count and per-parameter counters.
    pub scalars: BTreeMap<String, f64>,
    /// Per-parameter state tensors.
    pub tensors: BTreeMap<String, Tensor>,
}

impl OptimizerState {
    /// Writes the state dict to `path` as a safetensors file: the tensors as tensors, the
    /// optimizer kind and the scalars as the header's string metadata (each number written
    /// so that it reads back exactly). Together with the model's own file this is a
    /// training checkpoint.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_optim::{Adam, AdamConfig, Optimizer, OptimizerState};
    /// use ember_tensor::Tensor;
    /// let path = std::env::temp_dir().join(format!("ember-optim-doc-{}.safetensors", std::process::id()));
    /// let w = Var::param(Tensor::from_vec(vec![1.0f32, -1.0], [2])?);
    /// let mut opt = Adam::new(vec![w.clone()], AdamConfig::default())?;
    /// w.set_grad(Some(Tensor::from_vec(vec![0.5f32, 0.5], [2])?))?;
    /// opt.step()?;
    /// opt.state_dict().save(&path)?;
    ///
    /// let mut resumed = Adam::new(vec![w.clone()], AdamConfig::default())?;
    /// resumed.load_state_dict(&OptimizerState::load(&path)?)?;
    /// assert_eq!(resumed.state_dict().scalars["state.0.step"], 1.0);
    /// # std::fs::remove_file(&path).ok();
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let tensors: ember_io::StateDict = self.tensors.iter().map(|(k, t)| (k.clone(), t.clone())).collect();
        let mut metadata = BTreeMap::from([(KIND_KEY.to_string(), self.optimizer.clone())]);
        // `Display` of an f64 is the shortest text that parses back to the same number.
        metadata.extend(self.scalars.iter().map(|(k, v)| (format!("{SCALAR_PREFIX}{k}"), v.to_string())));
        ember_io::save_safetensors_with_metadata(path, &tensors, &metadata)
    }

    /// Reads a state dict written by [`save`](OptimizerState::save). A safetensors file without
    /// an optimizer kind (a model's weights, say) or with an unreadable number is an error
    /// naming the file.
    pub fn load(path: impl AsRef<Path>) -> Result<OptimizerState> {
        let path = path.as_ref();
        let (tensors, metadata) = ember_io::load_safetensors_with_metadata(path)?;
        let Some(kind) = metadata.get(KIND_KEY) else {
            return Err(Error::format(
                path,
                format!("not an optimizer state file: its metadata has no {KIND_KEY:?} entry"),
            ));
        };
        let mut dict = OptimizerState { optimizer: kind.clone(), ..OptimizerState::default() };
        for (key, text) in &metadata {
            if let Some(name) = key.strip_prefix(SCALAR_PREFIX) {
                let v = text
                    .parse::<f64>()
                    .map_err(|_| Error::format(path, format!("optimizer scalar {name:?} is {text:?}, not a number")))?;
                dict.scalars.insert(name.to_string(), v);
            }
        }
        dict.tensors = tensors.iter().map(|(k, t)| (k.to_string(), t.clone())).collect();
        Ok(dict)
    }

    /// An empty state dict for the named optimizer kind.
    pub(crate) fn new(optimizer: &str, num_params: usize) -> OptimizerState {
        let mut d = OptimizerState { optimizer: optimizer.to_string(), ..OptimizerState::default() };
        d.scalars.insert("num_params".into(), num_params as f64);
        d
    }

    /// Records a hyperparameter or counter.
    pub(crate) fn set(&mut self, key: impl Into<String>, value: f64) {
        self.scalars.insert(key.into(), value);
    }

    /// Records a boolean hyperparameter as 0 or 1.
    pub(crate) fn set_flag(&mut self, key: &str, value: bool) {
        self.set(key, if value { 1.0 } else { 0.0 });
    }

    /// Records a copy of a state tensor of parameter `i`.
    pub(crate) fn set_state(&mut self, i: usize, name: &str, t: &Tensor) {
        self.tensors.insert(state_key(i, name), t.copy());
    }
}

/// The key of parameter `i`'s entry `name`.
pub(crate) fn state_key(i: usize, name: &str) -> String {
    format!("state.{i}.{name}")
}

const OP: &str = "load_state_dict";

/// Reads a [`OptimizerState`] for one optimizer kind, checking every entry and remembering which
/// were used so that [`Reader::finish`] can refuse leftovers (a state dict of another
/// configuration, e.g. with `amsgrad` buffers an optimizer without it would ignore).
pub(crate) struct Reader<'a> {
    dict: &'a OptimizerState,
    used_scalars: BTreeSet<&'a str>,
    used_tensors: BTreeSet<&'a str>,
}

impl<'a> Reader<'a> {
    /// A reader for `dict`, which must come from an optimizer of `kind` over `num_params`
    /// parameters.
    pub fn new(dict: &'a OptimizerState, kind: &str, num_params: usize) -> Result<Reader<'a>> {
        if dict.optimizer != kind {
            return Err(Error::invalid(
                OP,
                format!("the state dict is for {:?}, this optimizer is {kind}", dict.optimizer),
            ));
        }
        let mut r = Reader { dict, used_scalars: BTreeSet::new(), used_tensors: BTreeSet::new() };
        let n = r.scalar("num_params")?;
        if n != num_params as f64 {
            return Err(Error::invalid(
                OP,
                format!("the state dict is for {n} parameters, this optimizer has {num_params}"),
            ));
        }
        Ok(r)
    }

    /// A required number.
    pub fn scalar(&mut self, key: &str) -> Result<f64> {
        match self.dict.scalars.get_key_value(key) {
            Some((k, &v)) => {
                self.used_scalars.insert(k.as_str());
                Ok(v)
            }
            None => Err(Error::invalid(OP, format!("the state dict has no scalar {key:?}"))),
        }
    }

    /// A required boolean, stored as 0 or 1.
    pub fn flag(&mut self, key: &str) -> Result<bool> {
        let v = self.scalar(key)?;
        if v == 0.0 {
            Ok(false)
        } else if v == 1.0 {
            Ok(true)
        } else {
            Err(Error::invalid(OP, format!("the state dict's {key:?} is {v}, expected 0 or 1")))
        }
    }

    /// A required step counter of parameter `i`: a non-negative whole number.
    pub fn step(&mut self, i: usize) -> Result<u64> {
        let key = state_key(i, "step");
        let v = self.scalar(&key)?;
        // 2^53: beyond it f64 no longer holds every whole number.
        if !(v >= 0.0 && v.fract() == 0.0 && v <= 9_007_199_254_740_992.0) {
            return Err(Error::invalid(OP, format!("the state dict's {key:?} is {v}, expected a step count")));
        }
        Ok(v as u64)
    }

    /// Whether the state dict holds any entry of parameter `i`.
    pub fn has_state(&self, i: usize) -> bool {
        let prefix = format!("state.{i}.");
        let starts = |k: &String| k.starts_with(&prefix);
        self.dict.scalars.keys().any(starts) || self.dict.tensors.keys().any(starts)
    }

    /// The state of every parameter that has one in the dict, read by `read(reader, i,
    /// value)`; `None` for parameters the dict holds nothing of (never stepped).
    pub fn per_param<S>(
        &mut self,
        params: &[Var],
        mut read: impl FnMut(&mut Self, usize, &Tensor) -> Result<S>,
    ) -> Result<Vec<Option<S>>> {
        let mut states = Vec::with_capacity(params.len());
        for (i, p) in params.iter().enumerate() {
            let state = if self.has_state(i) { Some(read(self, i, &p.value())?) } else { None };
            states.push(state);
        }
        Ok(states)
    }

    /// [`Reader::tensor`] where the configuration keeps that buffer (`present`), else `None`.
    pub fn tensor_if(&mut self, present: bool, i: usize, name: &str, like: &Tensor) -> Result<Option<Tensor>> {
        if present { self.tensor(i, name, like).map(Some) } else { Ok(None) }
    }

    /// A required state tensor of parameter `i`, checked against the parameter's value and
    /// returned as a fresh contiguous tensor of the value's dtype and device (a float state
    /// of another precision is converted, as PyTorch does).
    pub fn tensor(&mut self, i: usize, name: &str, like: &Tensor) -> Result<Tensor> {
        let key = state_key(i, name);
        let Some((k, t)) = self.dict.tensors.get_key_value(&key) else {
            return Err(Error::invalid(OP, format!("the state dict has no tensor {key:?}")));
        };
        if t.shape() != like.shape() {
            return Err(Error::shape(
                OP,
                format!(
                    "the state dict's {key:?} has shape {:?}, parameter {i} has shape {:?}",
                    t.shape(),
                    like.shape()
                ),
            ));
        }
        if !t.dtype().is_float() {
            return Err(Error::dtype(
                OP,
                format!("the state dict's {key:?} is {}, expected a float tensor", t.dtype()),
            ));
        }
        self.used_tensors.insert(k.as_str());
        // `copy` after the conversion, which returns `t` itself when the dtype already fits;
        // the state lives on its parameter's device, as PyTorch's optimizer `load_state_dict`
        // casts it.
        t.to_dtype(like.dtype()).copy().to_device(like.device())
    }

    /// Refuses entries that nothing read.
    pub fn finish(self) -> Result<()> {
        let extra: Vec<&str> = (self.dict.scalars.keys().map(String::as_str))
            .filter(|k| !self.used_scalars.contains(k))
            .chain(self.dict.tensors.keys().map(String::as_str).filter(|k| !self.used_tensors.contains(k)))
            .collect();
        if extra.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid(
                OP,
                format!("the state dict has entries this {} optimizer does not use: {extra:?}", self.dict.optimizer),
            ))
        }
    }
}

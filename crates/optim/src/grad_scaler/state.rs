//! [`GradScalerState`]: what a [`GradScaler`](super::GradScaler) needs to resume, in
//! PyTorch's `GradScaler.state_dict()` layout, and where it is stored: a `torch.save` file of
//! its own (or an entry of any `torch.save` checkpoint, through [`GradScalerState::to_pt`]),
//! or entries of ember's optimizer-state file beside the optimizer's.

use super::config;
use crate::OptimizerState;
use ember_io::pt::{PtValue, load_pt_value, save_pt_value};
use ember_tensor::{Error, Result};
use std::path::Path;

/// The prefix of the scaler's entries among an [`OptimizerState`]'s scalars.
const PREFIX: &str = "grad_scaler.";

/// PyTorch's keys, in the order `GradScaler.state_dict()` writes them.
const KEYS: [&str; 5] = ["scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"];

/// The state of an enabled [`GradScaler`](super::GradScaler), with the five entries of
/// PyTorch's `GradScaler.state_dict()`: `scale`, `growth_factor`, `backoff_factor`,
/// `growth_interval` and `_growth_tracker` (the number of clean steps in a row since the
/// scale last changed). A disabled scaler has none, as PyTorch's returns an empty dict.
///
/// Take it after [`GradScaler::update`](super::GradScaler::update), as PyTorch advises: the
/// scaler's per-iteration progress (which optimizers were unscaled or stepped) is not part
/// of it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradScalerState {
    /// The current scale (an `f32` value).
    pub scale: f64,
    /// The growth factor.
    pub growth_factor: f64,
    /// The backoff factor.
    pub backoff_factor: f64,
    /// The growth interval.
    pub growth_interval: u64,
    /// Clean steps in a row since the scale last changed (PyTorch's `_growth_tracker`).
    pub growth_tracker: u64,
}

impl GradScalerState {
    /// An error unless every entry is one an enabled scaler can hold (see
    /// [`GradScalerConfig`](super::GradScalerConfig)); the scale, rounded to `f32`.
    pub(super) fn checked_scale(&self, op: &'static str) -> Result<f32> {
        let scale = config::scale_value(op, "scale", self.scale)?;
        config::growth_factor(op, self.growth_factor)?;
        config::backoff_factor(op, self.backoff_factor)?;
        config::growth_interval(op, self.growth_interval)?;
        Ok(scale)
    }

    /// The state as PyTorch's `GradScaler.state_dict()` returns it: a dict of two floats, a
    /// float and two ints under PyTorch's keys, which `GradScaler.load_state_dict` takes.
    pub fn to_pt(&self) -> PtValue {
        let entry = |k: &str, v: PtValue| (PtValue::from(k), v);
        PtValue::Dict(vec![
            entry("scale", PtValue::Float(self.scale)),
            entry("growth_factor", PtValue::Float(self.growth_factor)),
            entry("backoff_factor", PtValue::Float(self.backoff_factor)),
            entry("growth_interval", PtValue::Int(whole_to_i64(self.growth_interval))),
            entry("_growth_tracker", PtValue::Int(whole_to_i64(self.growth_tracker))),
        ])
    }

    /// The state from PyTorch's layout (`GradScaler.state_dict()`). An empty dict, what a
    /// disabled PyTorch scaler returns, is an error, as PyTorch's `load_state_dict` makes
    /// it; so are a missing entry and a count that is not a whole number.
    pub fn from_pt(value: &PtValue) -> Result<GradScalerState> {
        const OP: &str = "GradScalerState::from_pt";
        let dict = value
            .as_dict()
            .ok_or_else(|| Error::invalid(OP, format!("a GradScaler state is a dict, got a {}", value.type_name())))?;
        if dict.is_empty() {
            return Err(Error::invalid(
                OP,
                "the state dict is empty, possibly because it was saved from a disabled GradScaler",
            ));
        }
        let number = |k: &str| {
            value
                .get(k)
                .and_then(PtValue::as_f64)
                .ok_or_else(|| Error::invalid(OP, format!("no number `{k}` in the state")))
        };
        Ok(GradScalerState {
            scale: number("scale")?,
            growth_factor: number("growth_factor")?,
            backoff_factor: number("backoff_factor")?,
            growth_interval: count(OP, "growth_interval", number("growth_interval")?)?,
            growth_tracker: count(OP, "_growth_tracker", number("_growth_tracker")?)?,
        })
    }

    /// Writes the state as `torch.save(scaler.state_dict(), path)` would.
    pub fn save_pt(&self, path: impl AsRef<Path>) -> Result<()> {
        save_pt_value(path, &self.to_pt())
    }

    /// Reads a state saved by `torch.save(scaler.state_dict(), path)`; errors name the file.
    pub fn load_pt(path: impl AsRef<Path>) -> Result<GradScalerState> {
        let path = path.as_ref();
        GradScalerState::from_pt(&load_pt_value(path)?).map_err(|e| Error::format(path, e.to_string()))
    }

    /// Adds the state to an optimizer's state dict as the scalars `grad_scaler.scale`,
    /// `grad_scaler.growth_factor`, ... (PyTorch's keys under the prefix `grad_scaler.`), so
    /// that [`OptimizerState::save`] keeps it in the same file. Take it out with
    /// [`GradScalerState::take_from`] before the optimizer's `load_state_dict`, which refuses
    /// entries it does not use.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_optim::{GradScaler, GradScalerState, Optimizer, OptimizerState, Sgd};
    /// use ember_tensor::Tensor;
    /// let w = Var::param(Tensor::from_vec(vec![1.0f32], [1])?);
    /// let mut opt = Sgd::with_params(vec![w.clone()]).lr(0.1).build()?;
    /// let scaler = GradScaler::builder().init_scale(1024.0).build()?;
    ///
    /// let mut state = opt.state_dict();
    /// if let Some(s) = scaler.state_dict() {
    ///     s.write_into(&mut state);
    /// }
    /// let path = std::env::temp_dir().join(format!("ember-scaler-doc-{}.safetensors", std::process::id()));
    /// state.save(&path)?;
    ///
    /// let mut loaded = OptimizerState::load(&path)?;
    /// let mut resumed = GradScaler::new();
    /// if let Some(s) = GradScalerState::take_from(&mut loaded)? {
    ///     resumed.load_state_dict(&s)?;
    /// }
    /// opt.load_state_dict(&loaded)?;
    /// assert_eq!(resumed.get_scale(), 1024.0);
    /// # std::fs::remove_file(&path).ok();
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn write_into(&self, state: &mut OptimizerState) {
        let values = [
            self.scale,
            self.growth_factor,
            self.backoff_factor,
            self.growth_interval as f64,
            self.growth_tracker as f64,
        ];
        for (k, v) in KEYS.iter().zip(values) {
            state.scalars.insert(format!("{PREFIX}{k}"), v);
        }
    }

    /// Removes the entries [`GradScalerState::write_into`] added and returns the state they
    /// hold, or `None` when the state dict has none of them. Some of them without the others,
    /// or a count that is not a whole number, is an error naming the entry.
    pub fn take_from(state: &mut OptimizerState) -> Result<Option<GradScalerState>> {
        const OP: &str = "GradScalerState::take_from";
        let keys = KEYS.map(|k| format!("{PREFIX}{k}"));
        if !keys.iter().any(|k| state.scalars.contains_key(k)) {
            return Ok(None);
        }
        let mut values = [0.0; 5];
        for (v, k) in values.iter_mut().zip(&keys) {
            *v = *state.scalars.get(k).ok_or_else(|| {
                Error::invalid(OP, format!("the state dict has other grad_scaler entries but no {k:?}"))
            })?;
        }
        let [scale, growth_factor, backoff_factor, interval, tracker] = values;
        let taken = GradScalerState {
            scale,
            growth_factor,
            backoff_factor,
            growth_interval: count(OP, &keys[3], interval)?,
            growth_tracker: count(OP, &keys[4], tracker)?,
        };
        for k in &keys {
            state.scalars.remove(k);
        }
        Ok(Some(taken))
    }
}

/// A count kept as a number: a whole number from 0 to 2^53 (beyond, `f64` no longer holds
/// every whole number).
fn count(op: &'static str, key: &str, v: f64) -> Result<u64> {
    if v >= 0.0 && v.fract() == 0.0 && v <= 9_007_199_254_740_992.0 {
        Ok(v as u64)
    } else {
        Err(Error::invalid(op, format!("the state's {key:?} is {v}, expected a whole number >= 0")))
    }
}

/// A count as Python's `int`, saturating where `i64` ends.
fn whole_to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

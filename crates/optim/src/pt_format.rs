//! Optimizer state in PyTorch's layout (`optimizer.state_dict()`), read from and written to
//! `torch.save` checkpoints.
//!
//! PyTorch keeps `{"state": {i: {...}}, "param_groups": [{hyperparameters, "params": [...]}]}`;
//! ember's [`OptimizerState`] keeps the same information as flat maps. The translation is
//! per optimizer kind: Adam's `betas` tuple is ember's `beta1` and `beta2`, `step` is a
//! 0-d float tensor in PyTorch and a counter in ember, and the entries that only PyTorch
//! has (`foreach`, `fused`, ...) are written with PyTorch's defaults and checked on reading
//! where they change the arithmetic (`maximize`). ember's optimizers hold one parameter
//! group, so a checkpoint with several is an error.

use crate::optimizer_state::{OptimizerState, state_key};
use ember_io::pt::{PtValue, load_pt_value, save_pt_value};
use ember_tensor::{Error, Result, Tensor};
use std::path::Path;

/// One hyperparameter of a PyTorch param group.
enum Entry {
    /// A number under the same name in both.
    Number(&'static str),
    /// A boolean, 0 or 1 in ember.
    Flag(&'static str),
    /// PyTorch's `betas` tuple, ember's `beta1` and `beta2`.
    Betas,
    /// Only PyTorch has it: written as this value, ignored on reading.
    Fixed(&'static str, Fixed),
}

#[derive(Clone, Copy)]
enum Fixed {
    False,
    None,
}

/// The param-group entries of an optimizer kind in PyTorch's order, and whether its
/// per-parameter state has a `step`.
fn layout(kind: &str) -> Option<(&'static [Entry], bool)> {
    use Entry::*;
    // Adam and AdamW differ only in `decoupled_weight_decay`, which [`OptimizerState::to_pt`]
    // appends.
    const ADAM: &[Entry] = &[
        Number("lr"),
        Betas,
        Number("eps"),
        Number("weight_decay"),
        Flag("amsgrad"),
        Fixed("maximize", self::Fixed::False),
        Fixed("foreach", self::Fixed::None),
        Fixed("capturable", self::Fixed::False),
        Fixed("differentiable", self::Fixed::False),
        Fixed("fused", self::Fixed::None),
    ];
    const SGD: &[Entry] = &[
        Number("lr"),
        Number("momentum"),
        Number("dampening"),
        Number("weight_decay"),
        Flag("nesterov"),
        Fixed("maximize", self::Fixed::False),
        Fixed("foreach", self::Fixed::None),
        Fixed("differentiable", self::Fixed::False),
        Fixed("fused", self::Fixed::None),
    ];
    const RMSPROP: &[Entry] = &[
        Number("lr"),
        Number("momentum"),
        Number("alpha"),
        Number("eps"),
        Flag("centered"),
        Number("weight_decay"),
        Fixed("capturable", self::Fixed::False),
        Fixed("foreach", self::Fixed::None),
        Fixed("maximize", self::Fixed::False),
        Fixed("differentiable", self::Fixed::False),
    ];
    Some(match kind {
        "Adam" | "AdamW" => (ADAM, true),
        "Sgd" => (SGD, false),
        "RmsProp" => (RMSPROP, true),
        _ => return None,
    })
}

fn unknown_kind(op: &'static str, kind: &str) -> Error {
    Error::invalid(op, format!("optimizer kind {kind:?}: ember writes and reads Sgd, Adam, AdamW and RmsProp state"))
}

fn s(text: &str) -> PtValue {
    PtValue::from(text)
}

impl OptimizerState {
    /// This state in PyTorch's layout, as `optimizer.state_dict()` returns it.
    pub fn to_pt(&self) -> Result<PtValue> {
        let (entries, _) = layout(&self.optimizer).ok_or_else(|| unknown_kind("to_pt", &self.optimizer))?;
        let scalar = |k: &str| {
            self.scalars.get(k).copied().ok_or_else(|| Error::invalid("to_pt", format!("no hyperparameter {k:?}")))
        };
        let mut group = Vec::new();
        for e in entries {
            let (name, value) = match e {
                Entry::Number(k) => (*k, PtValue::Float(scalar(k)?)),
                Entry::Flag(k) => (*k, PtValue::Bool(scalar(k)? != 0.0)),
                Entry::Betas => {
                    ("betas", PtValue::Tuple(vec![PtValue::Float(scalar("beta1")?), PtValue::Float(scalar("beta2")?)]))
                }
                Entry::Fixed(k, Fixed::False) => (*k, PtValue::Bool(false)),
                Entry::Fixed(k, Fixed::None) => (*k, PtValue::None),
            };
            group.push((s(name), value));
        }
        if self.optimizer.starts_with("Adam") {
            group.push((s("decoupled_weight_decay"), PtValue::Bool(self.optimizer == "AdamW")));
        }
        let n = scalar("num_params")? as usize;
        group.push((s("params"), PtValue::List((0..n as i64).map(PtValue::Int).collect())));

        let mut state = Vec::new();
        for i in 0..n {
            let prefix = format!("state.{i}.");
            let mut entries = Vec::new();
            if let Some(step) = self.scalars.get(&state_key(i, "step")) {
                // PyTorch keeps the count as a 0-d float32 tensor (off the GPU graph-capture path).
                entries.push((s("step"), PtValue::Tensor(Tensor::from_vec(vec![*step as f32], Vec::<usize>::new())?)));
            }
            for (k, t) in self.tensors.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)) {
                entries.push((s(&k[prefix.len()..]), PtValue::Tensor(t.clone())));
            }
            if !entries.is_empty() {
                state.push((PtValue::Int(i as i64), PtValue::Dict(entries)));
            }
        }
        Ok(PtValue::Dict(vec![
            (s("state"), PtValue::Dict(state)),
            (s("param_groups"), PtValue::List(vec![PtValue::Dict(group)])),
        ]))
    }

    /// The state of an `optimizer` (`"Sgd"`, `"Adam"`, `"AdamW"` or `"RmsProp"`; PyTorch's
    /// files do not say which) from PyTorch's layout. Errors say what does not fit: several
    /// param groups, a missing hyperparameter, `maximize=True`.
    pub fn from_pt(value: &PtValue, optimizer: &str) -> Result<OptimizerState> {
        const OP: &str = "OptimizerState::from_pt";
        let (entries, _) = layout(optimizer).ok_or_else(|| unknown_kind(OP, optimizer))?;
        let bad = |msg: String| Error::invalid(OP, msg);
        let groups = value
            .get("param_groups")
            .and_then(PtValue::as_items)
            .ok_or_else(|| bad("no `param_groups` list: not an optimizer's state_dict()".into()))?;
        let [group] = groups else {
            return Err(bad(format!("{} param groups; ember's optimizers hold one", groups.len())));
        };
        let params = group
            .get("params")
            .and_then(PtValue::as_items)
            .ok_or_else(|| bad("a param group without `params`".into()))?;
        let mut d = OptimizerState::new(optimizer, params.len());
        let number = |k: &str| {
            group.get(k).and_then(PtValue::as_f64).ok_or_else(|| bad(format!("no number `{k}` in the param group")))
        };
        for e in entries {
            match e {
                Entry::Number(k) => d.set(*k, number(k)?),
                Entry::Flag(k) => {
                    let v = group
                        .get(k)
                        .and_then(PtValue::as_bool)
                        .ok_or_else(|| bad(format!("no bool `{k}` in the param group")))?;
                    d.set_flag(k, v);
                }
                Entry::Betas => {
                    let betas: Vec<f64> = group
                        .get("betas")
                        .and_then(PtValue::as_items)
                        .unwrap_or(&[])
                        .iter()
                        .filter_map(PtValue::as_f64)
                        .collect();
                    let [b1, b2] = betas[..] else {
                        return Err(bad("`betas` is not a pair of numbers".into()));
                    };
                    d.set("beta1", b1);
                    d.set("beta2", b2);
                }
                Entry::Fixed(k, _) => {
                    if *k == "maximize" && group.get(k).and_then(PtValue::as_bool) == Some(true) {
                        return Err(bad("maximize=True: ember's optimizers minimise".into()));
                    }
                }
            }
        }
        let state = value.get("state").and_then(PtValue::as_dict).ok_or_else(|| bad("no `state` dict".into()))?;
        for (key, entries) in state {
            let i = match key {
                PtValue::Int(i) if (0..params.len() as i64).contains(i) => *i as usize,
                other => {
                    return Err(bad(format!(
                        "state for parameter {other:?}, but the group has {} parameters",
                        params.len()
                    )));
                }
            };
            let entries = entries.as_dict().ok_or_else(|| bad(format!("the state of parameter {i} is not a dict")))?;
            for (name, v) in entries {
                let name = name.as_str().ok_or_else(|| bad(format!("a state key of parameter {i} is not a str")))?;
                match (name, v) {
                    ("step", v) => {
                        let step =
                            v.as_f64().ok_or_else(|| bad(format!("parameter {i}'s `step` is a {}", v.type_name())))?;
                        d.set(state_key(i, "step"), step);
                    }
                    (_, PtValue::Tensor(t)) => d.set_state(i, name, t),
                    // PyTorch's SGD without momentum keeps `momentum_buffer: None`.
                    (_, PtValue::None) => {}
                    (_, other) => return Err(bad(format!("parameter {i}'s `{name}` is a {}", other.type_name()))),
                }
            }
        }
        Ok(d)
    }

    /// Writes this state as `torch.save(optimizer.state_dict(), path)` would, for PyTorch's
    /// `optimizer.load_state_dict(torch.load(path))`.
    pub fn save_pt(&self, path: impl AsRef<Path>) -> Result<()> {
        save_pt_value(path, &self.to_pt()?)
    }

    /// Reads an optimizer state saved by `torch.save(optimizer.state_dict(), path)` for an
    /// optimizer of kind `optimizer` (see [`OptimizerState::from_pt`]); errors name the file.
    pub fn load_pt(path: impl AsRef<Path>, optimizer: &str) -> Result<OptimizerState> {
        let path = path.as_ref();
        OptimizerState::from_pt(&load_pt_value(path)?, optimizer).map_err(|e| Error::format(path, e.to_string()))
    }
}

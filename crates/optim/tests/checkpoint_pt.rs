//! Optimizer state in PyTorch's `torch.save` layout, against fixtures written by
//! `tools/parity/checkpoint.py`: PyTorch's Adam and SGD state after three steps loads into
//! ember's optimizers, which then take the fourth step as PyTorch did; ember's Adam state
//! written back is byte for byte `ember_adam.pt`, which the script checked PyTorch's Adam
//! loads with the same tensors. `EMBER_WRITE_PT_FIXTURES=1` writes that file instead.

use ember_autograd::Var;
use ember_io::StateDict;
use ember_io::pt::{load_pt_value, state_dict_from_pt};
use ember_optim::{Adam, AdamConfig, Optimizer, OptimizerState, Sgd, SgdConfig};
use ember_tensor::Result;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/parity/fixtures/checkpoint")).join(name)
}

/// PyTorch's `nn.Linear(4, 3)` of the script as its two parameters, in `nn.Linear`'s
/// parameter order; `forward` is the op `nn::Linear` runs.
struct Linear {
    weight: Var,
    bias: Var,
}

impl Linear {
    /// Fresh parameters holding copies of the state dict's `weight` and `bias`.
    fn from_state(state: &StateDict) -> Linear {
        let param = |k: &str| Var::param(state.get(k).unwrap().copy());
        Linear { weight: param("weight"), bias: param("bias") }
    }

    fn parameters(&self) -> Vec<Var> {
        vec![self.weight.clone(), self.bias.clone()]
    }

    fn forward(&self, x: &Var) -> Result<Var> {
        x.linear(&self.weight, Some(&self.bias))
    }

    /// The parameters' values under their `state_dict()` names.
    fn state(&self) -> [(&'static str, ember_tensor::Tensor); 2] {
        [("weight", self.weight.value()), ("bias", self.bias.value())]
    }
}

/// The linear layer at the parameters PyTorch had before its fourth step, the input, and
/// the parameters PyTorch had after it.
fn before_fourth_step(name: &str) -> Result<(Linear, Var, StateDict)> {
    let step = load_pt_value(fixture(&format!("{name}_step.pt")))?;
    let part = |k: &str| state_dict_from_pt(step.get(k).unwrap()).unwrap();
    let layer = Linear::from_state(&part("before"));
    let x = Var::new(step.get("x").unwrap().as_tensor().unwrap().clone());
    Ok((layer, x, part("after")))
}

/// One step on `(layer(x) ** 2).sum()`, then the parameters must be PyTorch's after its
/// fourth step.
fn fourth_step_matches(layer: &Linear, x: &Var, opt: &mut dyn Optimizer, after: &StateDict) -> Result<()> {
    opt.zero_grad();
    let y = layer.forward(x)?;
    y.mul(&y)?.sum_all().backward()?;
    opt.step()?;
    for (k, t) in layer.state() {
        let ours = t.to_vec::<f32>()?;
        let theirs = after.get(k).unwrap().to_vec::<f32>()?;
        for (a, b) in ours.iter().zip(&theirs) {
            assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{k}: {ours:?} vs PyTorch's {theirs:?}");
        }
    }
    Ok(())
}

fn adam_config() -> AdamConfig {
    AdamConfig { lr: 0.01, betas: (0.8, 0.99), eps: 1e-7, weight_decay: 0.1, amsgrad: false }
}

#[test]
fn pytorch_adam_state_loads_and_takes_pytorchs_next_step() -> Result<()> {
    let (layer, x, after) = before_fourth_step("adam")?;
    let mut opt = Adam::new(layer.parameters(), AdamConfig::default())?;
    opt.load_state_dict(&OptimizerState::load_pt(fixture("adam.pt"), "Adam")?)?;
    let state = opt.state_dict();
    assert_eq!(state.scalars["state.0.step"], 3.0);
    assert_eq!((state.scalars["lr"], state.scalars["beta1"], state.scalars["beta2"]), (0.01, 0.8, 0.99));
    fourth_step_matches(&layer, &x, &mut opt, &after)
}

#[test]
fn pytorch_sgd_state_loads_and_takes_pytorchs_next_step() -> Result<()> {
    let (layer, x, after) = before_fourth_step("sgd")?;
    let mut opt = Sgd::new(layer.parameters(), SgdConfig { lr: 0.5, ..Default::default() })?;
    opt.load_state_dict(&OptimizerState::load_pt(fixture("sgd.pt"), "Sgd")?)?;
    assert_eq!(opt.state_dict().scalars["momentum"], 0.9);
    fourth_step_matches(&layer, &x, &mut opt, &after)
}

#[test]
fn ember_adam_state_is_the_file_pytorch_was_checked_to_load() -> Result<()> {
    let (layer, _, _) = before_fourth_step("adam")?;
    let mut opt = Adam::new(layer.parameters(), adam_config())?;
    opt.load_state_dict(&OptimizerState::load_pt(fixture("adam.pt"), "Adam")?)?;
    let state = opt.state_dict();
    if std::env::var_os("EMBER_WRITE_PT_FIXTURES").is_some() {
        return state.save_pt(fixture("ember_adam.pt"));
    }
    let path = std::env::temp_dir().join(format!("ember-optim-pt-{}.pt", std::process::id()));
    state.save_pt(&path)?;
    let written = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert!(
        written == std::fs::read(fixture("ember_adam.pt")).unwrap(),
        "OptimizerState::save_pt no longer writes the bytes PyTorch was checked to load; rerun tools/parity/checkpoint.py"
    );
    // And it reads back to the same state.
    let back = OptimizerState::from_pt(&state.to_pt()?, "Adam")?;
    assert_eq!(back.scalars, state.scalars);
    assert_eq!(back.tensors.keys().collect::<Vec<_>>(), state.tensors.keys().collect::<Vec<_>>());
    Ok(())
}

#[test]
fn what_does_not_fit_is_an_error() -> Result<()> {
    let adam = load_pt_value(fixture("adam.pt"))?;
    // The hyperparameters of another optimizer are missing.
    let err = OptimizerState::from_pt(&adam, "Sgd").unwrap_err().to_string();
    assert!(err.contains("momentum"), "{err}");
    let err = OptimizerState::from_pt(&adam, "Lion").unwrap_err().to_string();
    assert!(err.contains("Lion"), "{err}");
    let err = OptimizerState::load_pt(fixture("layers.pt"), "Adam").unwrap_err().to_string();
    assert!(err.contains("layers.pt") && err.contains("param_groups"), "{err}");
    // A state for a different number of parameters does not load.
    let w = Var::param(ember_tensor::Tensor::zeros([3], ember_tensor::DType::F32)?);
    let mut opt = Adam::new(vec![w], AdamConfig::default())?;
    assert!(opt.load_state_dict(&OptimizerState::from_pt(&adam, "Adam")?).is_err());
    Ok(())
}

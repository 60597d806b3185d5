//! PyTorch parity: PyTorch's saved weights loaded into the same ember architectures give
//! PyTorch's outputs, losses and gradients, and every loss matches `torch.nn.functional`
//! (values and input gradients) for every reduction and option.
//!
//! The expected numbers are committed in `tools/parity/fixtures/nn.json` and the weights in
//! `tools/parity/fixtures/nn_*.safetensors`, all written by `tools/parity/nn.py`
//! (regenerate with `python tools/parity/nn.py` from the repository root, in an environment
//! with torch and safetensors), so this test needs no Python. Values are compared within
//! `1e-5 + 1e-5 * |expected|`; every case of the fixture must be recognised and checked.

mod common;

use ember_autograd::Var;
use ember_nn::{
    CrossEntropyOptions, Dropout, Embedding, EmbeddingOptions, Flatten, GELU, HuberOptions, Identity, LayerNorm,
    LayerNormOptions, LeakyReLU, Linear, LinearOptions, LogSoftmax, Module, ModuleExt, NllOptions, ReLU, Reduction,
    Sequential, SiLU, Sigmoid, Softmax, Tanh, binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy,
    huber_loss, l1_loss, mse_loss, nll_loss,
};
use ember_tensor::{Result, Tensor};
use ember_testing::{FixtureTensor, Tolerance, parse_fixture, tensor_mismatch};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

const FIXTURE: &str = include_str!("../../../tools/parity/fixtures/nn.json");
const TOL: Tolerance = Tolerance::new(1e-5, 1e-5);

#[derive(Deserialize)]
struct Fixture {
    models: Vec<ModelCase>,
    losses: Vec<LossCase>,
}

#[derive(Deserialize)]
struct ModelCase {
    name: String,
    file: String,
    state_dict_keys: Vec<String>,
    input: FixtureTensor,
    output: FixtureTensor,
    loss: ModelLoss,
    grads: BTreeMap<String, FixtureTensor>,
}

#[derive(Deserialize)]
struct ModelLoss {
    #[serde(rename = "fn")]
    function: String,
    options: Options,
    target: FixtureTensor,
    value: FixtureTensor,
}

#[derive(Deserialize)]
struct LossCase {
    name: String,
    #[serde(rename = "fn")]
    function: String,
    options: Options,
    input: FixtureTensor,
    target: FixtureTensor,
    value: FixtureTensor,
    input_grad: Option<FixtureTensor>,
}

#[derive(Deserialize)]
struct Options {
    reduction: String,
    label_smoothing: Option<f64>,
    ignore_index: Option<i64>,
    delta: Option<f64>,
}

fn fixture() -> Fixture {
    parse_fixture("tools/parity/fixtures/nn.json", FIXTURE)
}

fn fixture_path(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/parity/fixtures").join(file)
}

/// Records a mismatch between `actual` and `expected` (dtype, shape and values) under `what`.
fn compare(failures: &mut Vec<String>, what: &str, actual: &Var, expected: &FixtureTensor) {
    if let Some(mismatch) = tensor_mismatch(&actual.value(), expected, TOL) {
        failures.push(format!("{what}: {mismatch}"));
    }
}

/// A fixture tensor the test cannot go on without.
fn tensor(t: &FixtureTensor) -> Tensor {
    t.to_tensor().unwrap_or_else(|e| panic!("a fixture tensor does not make a tensor: {e}"))
}

fn reduction(name: &str) -> Reduction {
    match name {
        "mean" => Reduction::Mean,
        "sum" => Reduction::Sum,
        "none" => Reduction::None,
        other => panic!("unknown reduction {other:?}"),
    }
}

/// The loss `function` with `options`, as ember spells it.
fn loss(function: &str, options: &Options, input: &Var, target: &Tensor) -> Result<Var> {
    let r = reduction(&options.reduction);
    match function {
        "cross_entropy" => {
            let label_smoothing = options.label_smoothing.unwrap_or(0.0);
            cross_entropy(
                input,
                target,
                CrossEntropyOptions { reduction: r, label_smoothing, ignore_index: options.ignore_index },
            )
        }
        "nll_loss" => nll_loss(input, target, NllOptions { reduction: r, ignore_index: options.ignore_index }),
        "mse_loss" => mse_loss(input, target, r),
        "l1_loss" => l1_loss(input, target, r),
        "huber_loss" => huber_loss(input, target, HuberOptions { reduction: r, delta: options.delta.unwrap_or(1.0) }),
        "binary_cross_entropy" => binary_cross_entropy(input, target, r),
        "binary_cross_entropy_with_logits" => binary_cross_entropy_with_logits(input, target, r),
        other => panic!("the fixture has a loss ember's parity test does not know: {other}"),
    }
}

/// The ember twin of each PyTorch model in tools/parity/nn.py.
fn build(name: &str) -> Sequential {
    let linear = |i, o| Linear::new(i, o).unwrap();
    match name {
        "mlp" => Sequential::new().add(linear(8, 16)).add(ReLU).add(linear(16, 4)),
        "mlp_act" => Sequential::new()
            .add(Flatten::new())
            .add(linear(8, 16))
            .add(GELU::new())
            .add(linear(16, 16))
            .add(SiLU)
            .add(linear(16, 12))
            .add(Tanh)
            .add(Dropout::new(0.2).unwrap())
            .add(linear(12, 8))
            .add(GELU::tanh())
            .add(Linear::with_options(8, 8, LinearOptions { bias: false, ..Default::default() }).unwrap())
            .add(LeakyReLU::new(0.1))
            .add(Identity)
            .add(linear(8, 6))
            .add(Sigmoid)
            .add(linear(6, 4))
            .add(LogSoftmax::new(1))
            .add(Softmax::new(-1)),
        "embed_ln" => {
            let padded = EmbeddingOptions { padding_idx: Some(0), ..Default::default() };
            let wide = LayerNormOptions { eps: 1e-3, ..Default::default() };
            let plain = LayerNormOptions { elementwise_affine: false, ..Default::default() };
            Sequential::new()
                .add(Embedding::with_options(10, 8, padded).unwrap())
                .add(LayerNorm::new(&[8]).unwrap())
                .add(LayerNorm::with_options(&[3, 8], wide).unwrap())
                .add(Flatten::new())
                .add(linear(24, 6))
                .add(Tanh)
                .add(LayerNorm::with_options(&[6], plain).unwrap())
                .add(linear(6, 4))
        }
        other => panic!("the fixture has a model ember's parity test does not know: {other}"),
    }
}

#[test]
fn pytorch_models_load_and_match() {
    let fixture = fixture();
    assert_eq!(fixture.models.len(), 3);
    let mut failures = Vec::new();
    for case in &fixture.models {
        let model = build(&case.name);
        let keys: Vec<String> = model.state_dict().keys().map(String::from).collect();
        assert_eq!(keys, case.state_dict_keys, "{}: state_dict keys differ from PyTorch's", case.name);
        model.load(fixture_path(&case.file)).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        model.eval();

        let out = model.forward(&Var::new(tensor(&case.input))).unwrap();
        compare(&mut failures, &format!("{}: output", case.name), &out, &case.output);
        let value = loss(&case.loss.function, &case.loss.options, &out, &tensor(&case.loss.target)).unwrap();
        compare(&mut failures, &format!("{}: loss", case.name), &value, &case.loss.value);

        model.zero_grad();
        value.backward().unwrap();
        let params = model.named_parameters();
        assert_eq!(params.len(), case.grads.len(), "{}: parameter count", case.name);
        for (name, p) in params {
            let expected = case.grads.get(&name).unwrap_or_else(|| panic!("{}: no gradient for {name}", case.name));
            let g = Var::new(p.grad().unwrap_or_else(|| panic!("{}: {name} got no gradient", case.name)));
            compare(&mut failures, &format!("{}: grad of {name}", case.name), &g, expected);
        }
    }
    assert!(failures.is_empty(), "parity failures:\n{}", failures.join("\n"));
}

#[test]
fn losses_match_pytorch() {
    let fixture = fixture();
    // Update when tools/parity/nn.py gains cases; a smaller fixture means cases were lost.
    assert_eq!(fixture.losses.len(), 85, "the number of loss cases in the fixture changed");
    let mut failures = Vec::new();
    let mut with_grads = 0;
    for case in &fixture.losses {
        let input = Var::param(tensor(&case.input));
        let value = match loss(&case.function, &case.options, &input, &tensor(&case.target)) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("{}: {e}", case.name));
                continue;
            }
        };
        compare(&mut failures, &case.name, &value, &case.value);
        if let Some(expected) = &case.input_grad {
            value.sum_all().backward().unwrap();
            let g = Var::new(input.grad().unwrap_or_else(|| input.value().zeros_like()));
            compare(&mut failures, &format!("{}: input grad", case.name), &g, expected);
            with_grads += 1;
        }
    }
    assert!(failures.is_empty(), "parity failures:\n{}", failures.join("\n"));
    // Only the saturated binary cross-entropy cases (one per reduction) skip gradients.
    assert_eq!(with_grads + 3, fixture.losses.len(), "cases without gradients");
}

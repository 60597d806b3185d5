//! Gradients of every loss and of Linear, the convolution layers, LayerNorm and Embedding against central
//! differences (f64), with each reduction and option that changes the backward path.

mod common;

use common::{assert_close, idx, t64, values};
use ember_autograd::{Var, enable_grad, grad, gradcheck};
use ember_nn::{
    Conv1d, Conv2d, ConvTranspose2d, CrossEntropyOptions, HuberOptions, Linear, Module, NllOptions, Reduction,
    binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, embedding, huber_loss, l1_loss, layer_norm,
    mse_loss, nll_loss,
};
use ember_tensor::{ConvArgs, ConvTransposeArgs, DType, Padding, Result, Tensor};

const ALL: [Reduction; 3] = [Reduction::Mean, Reduction::Sum, Reduction::None];

fn check(f: impl Fn(&[Var]) -> Result<Var>, inputs: &[Tensor]) {
    gradcheck(f, inputs, 1e-6, 1e-7, 1e-5).unwrap();
}

/// The gradient of `sum(f(x) * w)` with respect to `x`, computed with `create_graph` so that
/// it can be differentiated again.
fn first_derivative(x: &Var, w: &Var, f: &impl Fn(&[Var]) -> Result<Var>) -> Result<Var> {
    enable_grad(|| {
        // In gradcheck's numerical pass the inputs are constants (under no_grad): make `x` a
        // parameter so that there is a graph to differentiate once.
        let x = if x.requires_grad() { x.clone() } else { Var::param(x.value()) };
        let y = f(std::slice::from_ref(&x))?;
        let g = grad(&[&y], &[&x], &[w], false, true)?.remove(0);
        Ok(g.unwrap_or_else(|| Var::new(x.value().zeros_like())))
    })
}

/// Gradcheck of the first derivative of `f` at `x` (second derivatives with respect to `x`,
/// and linearity in the incoming gradient), for a random incoming gradient.
#[track_caller]
fn check_second_order(what: &str, f: impl Fn(&[Var]) -> Result<Var>, x: &Tensor) {
    let w = randn(f(&[Var::new(x.clone())]).unwrap().shape().dims());
    gradcheck(|v| first_derivative(&v[0], &v[1], &f), &[x.clone(), w], 1e-6, 1e-7, 1e-5)
        .unwrap_or_else(|e| panic!("second order of {what}: {e}"));
}

fn randn(shape: &[usize]) -> Tensor {
    Tensor::normal(shape, 0.0, 1.0, DType::F64).unwrap()
}

/// The class-index cases of cross-entropy: logits, targets (some ignored where
/// `ignore_index` is set) and options, over every reduction, with and without smoothing and
/// ignored targets, on `[N, C]` (also transposed, so not contiguous), `[N, C, d]`,
/// `[N, C, d1, d2]` and a single sample `[C]`.
fn cross_entropy_cases() -> Vec<(Tensor, Tensor, CrossEntropyOptions)> {
    let inputs = [
        (randn(&[4, 5]), idx(&[0, 4, -100, 2], &[4]), idx(&[0, 4, 1, 2], &[4])),
        (randn(&[5, 4]).t().unwrap(), idx(&[3, -100, 4, 0], &[4]), idx(&[3, 1, 4, 0], &[4])),
        (randn(&[2, 3, 3]), idx(&[0, 2, -100, 1, 2, 0], &[2, 3]), idx(&[0, 2, 1, 1, 2, 0], &[2, 3])),
        (
            randn(&[2, 3, 2, 2]),
            idx(&[0, 2, -100, 1, 2, 0, -100, 1], &[2, 2, 2]),
            idx(&[0, 2, 1, 1, 2, 0, 0, 1], &[2, 2, 2]),
        ),
        (randn(&[5]), idx(&[3], &[]), idx(&[3], &[])),
    ];
    let mut cases = Vec::new();
    for (logits, ignoring, plain) in inputs {
        for reduction in ALL {
            for (label_smoothing, ignore_index) in [(0.0, None), (0.15, None), (0.0, Some(-100)), (0.15, Some(-100))] {
                let t = if ignore_index.is_some() { ignoring.clone() } else { plain.clone() };
                cases.push((logits.clone(), t, CrossEntropyOptions { reduction, label_smoothing, ignore_index }));
            }
        }
    }
    // A single sample whose target is ignored: its mean is NaN, so only Sum and None.
    for reduction in [Reduction::Sum, Reduction::None] {
        let opts = CrossEntropyOptions { reduction, label_smoothing: 0.1, ignore_index: Some(2) };
        cases.push((randn(&[4]), idx(&[2], &[]), opts));
    }
    cases
}

#[test]
fn cross_entropy_gradients() {
    for (logits, t, opts) in cross_entropy_cases() {
        check(|v| cross_entropy(&v[0], &t, opts), std::slice::from_ref(&logits));
    }
    // Class probabilities, whose gradient also flows into the target.
    let logits = randn(&[4, 5]);
    let probs = randn(&[4, 5]).softmax(1).unwrap();
    for reduction in ALL {
        let opts = CrossEntropyOptions { reduction, label_smoothing: 0.2, ignore_index: None };
        check(|v| cross_entropy(&v[0], &v[1], opts), &[logits.clone(), probs.clone()]);
    }
}

#[test]
fn cross_entropy_second_order() {
    for (logits, t, opts) in cross_entropy_cases() {
        let what = format!("cross_entropy {opts:?} of {:?}", logits.shape());
        check_second_order(&what, |v| cross_entropy(&v[0], &t, opts), &logits);
    }
}

/// Without `create_graph` the gradient comes from the fused kernel, with it from `Var`
/// operations: both give the same values.
#[test]
fn cross_entropy_fused_and_differentiable_gradients_agree() {
    for (logits, t, opts) in cross_entropy_cases() {
        let x = Var::param(logits.clone());
        let loss = cross_entropy(&x, &t, opts).unwrap();
        let w = Var::new(randn(loss.shape().dims()));
        let fused = grad(&[&loss], &[&x], &[&w], true, false).unwrap()[0].clone().unwrap();
        let graph = grad(&[&loss], &[&x], &[&w], true, true).unwrap()[0].clone().unwrap();
        assert!(graph.requires_grad(), "{opts:?}: create_graph gives a gradient with a graph");
        assert_close(&values(&fused), &values(&graph), 1e-14);
    }
}

/// The NLL cases: log-probabilities and targets with every reduction, ignoring none or
/// one class, on `[N, C]`, `[N, C, d]` and `[C]`.
fn nll_cases() -> Vec<(Tensor, Tensor, NllOptions)> {
    let inputs = [
        (randn(&[3, 4]), idx(&[1, 0, 2], &[3])),
        (randn(&[2, 3, 2]), idx(&[1, 0, 2, 0], &[2, 2])),
        (randn(&[4]), idx(&[1], &[])),
    ];
    let mut cases = Vec::new();
    for (x, t) in inputs {
        for reduction in ALL {
            for ignore_index in [None, Some(0)] {
                let log_probs = x.log_softmax(usize::from(x.rank() > 1)).unwrap();
                cases.push((log_probs, t.clone(), NllOptions { reduction, ignore_index }));
            }
        }
    }
    cases
}

#[test]
fn nll_gradients() {
    for (x, t, opts) in nll_cases() {
        check(|v| nll_loss(&v[0], &t, opts), std::slice::from_ref(&x));
    }
}

#[test]
fn nll_second_order() {
    for (x, t, opts) in nll_cases() {
        check_second_order(&format!("nll_loss {opts:?} of {:?}", x.shape()), |v| nll_loss(&v[0], &t, opts), &x);
    }
    // Through log_softmax, as cross-entropy is composed by hand.
    let t = idx(&[1, 0, 2], &[3]);
    let opts = NllOptions { reduction: Reduction::Mean, ignore_index: Some(0) };
    check_second_order("nll_loss of log_softmax", |v| nll_loss(&v[0].log_softmax(1)?, &t, opts), &randn(&[3, 4]));
}

#[test]
fn regression_gradients() {
    // Away from the kinks (d = 0 for l1, |d| = delta for huber), where differences are not
    // derivatives.
    let x = t64(&[0.3, -1.2, 2.5, 0.9, -0.4, 1.7], &[2, 3]);
    let y = t64(&[0.0, 0.1, 0.2, -0.3, 0.5, 1.0], &[2, 3]);
    for reduction in ALL {
        check(|v| mse_loss(&v[0], &v[1], reduction), &[x.clone(), y.clone()]);
        check(|v| l1_loss(&v[0], &v[1], reduction), &[x.clone(), y.clone()]);
        let opts = HuberOptions { reduction, delta: 0.8 };
        check(|v| huber_loss(&v[0], &v[1], opts), &[x.clone(), y.clone()]);
    }
}

#[test]
fn binary_cross_entropy_gradients() {
    let p = t64(&[0.1, 0.45, 0.8, 0.97, 0.3, 0.6], &[2, 3]);
    let y = t64(&[0.0, 1.0, 0.3, 1.0, 0.0, 0.5], &[2, 3]);
    let logits = t64(&[-3.0, 0.0, 0.7, 25.0, -0.2, 4.0], &[2, 3]);
    for reduction in ALL {
        check(|v| binary_cross_entropy(&v[0], &v[1], reduction), &[p.clone(), y.clone()]);
        check(|v| binary_cross_entropy_with_logits(&v[0], &v[1], reduction), &[logits.clone(), y.clone()]);
    }
}

#[test]
fn linear_gradients() {
    // Input, weight and bias, on a 2-d and a 3-d input, with and without bias.
    let f = |v: &[Var]| Linear::from_params(v[1].clone(), Some(v[2].clone()))?.forward(&v[0]);
    check(f, &[randn(&[3, 4]), randn(&[2, 4]), randn(&[2])]);
    check(f, &[randn(&[2, 3, 4]), randn(&[5, 4]), randn(&[5])]);
    let no_bias = |v: &[Var]| Linear::from_params(v[1].clone(), None)?.forward(&v[0]);
    check(no_bias, &[randn(&[4]), randn(&[3, 4])]);
}

#[test]
fn layer_norm_gradients() {
    // Input, weight and bias over one and two trailing dimensions; without the affine part;
    // and on a transposed (non-contiguous) input.
    let f = |v: &[Var]| layer_norm(&v[0], &[4], Some(&v[1]), Some(&v[2]), 1e-5);
    check(f, &[randn(&[3, 4]), randn(&[4]), randn(&[4])]);
    let two = |v: &[Var]| layer_norm(&v[0], &[2, 3], Some(&v[1]), Some(&v[2]), 1e-3);
    check(two, &[randn(&[2, 2, 3]), randn(&[2, 3]), randn(&[2, 3])]);
    check(|v| layer_norm(&v[0], &[5], None, None, 0.0), &[randn(&[2, 5])]);
    let transposed = randn(&[4, 3]).t().unwrap();
    check(|v| layer_norm(&v[0], &[4], None, None, 1e-5), &[transposed]);
}

#[test]
fn embedding_gradients() {
    // Into the weight (rows looked up twice accumulate), with and without a padding row.
    let ids = idx(&[2, 0, 3, 2, 1, 0], &[2, 3]);
    check(|v| embedding(&Var::new(ids.clone()), &v[0], None), &[randn(&[4, 3])]);
    // The padding row's value is used but passes no gradient, which differences cannot
    // see: it is a constant here, and the checked rows are the others
    // (norm_embedding.rs checks that the padding row gets none).
    let pad_row = Var::new(randn(&[1, 3]));
    let padded = |v: &[Var]| embedding(&Var::new(ids.clone()), &Var::cat(&[&pad_row, &v[0]], 0)?, Some(0));
    check(padded, &[randn(&[3, 3])]);
}

#[test]
fn conv_layer_gradients() {
    // Input, weight and bias through the layers, with stride, padding, dilation and groups,
    // and on a non-contiguous input. The kernels themselves are checked option by option,
    // to second order, in ember-autograd's gradcheck_conv.rs.
    let args = ConvArgs::default().stride(2).padding(1).dilation([1, 2]).groups(2);
    let conv = move |v: &[Var]| Conv2d::from_params(v[1].clone(), Some(v[2].clone()), args)?.forward(&v[0]);
    let x = randn(&[2, 4, 5, 6]);
    check(conv, &[x.clone(), randn(&[4, 2, 3, 2]), randn(&[4])]);
    check(conv, &[x.transpose(2, 3).unwrap().contiguous().transpose(2, 3).unwrap(), randn(&[4, 2, 3, 2]), randn(&[4])]);
    let same = ConvArgs::default().padding(Padding::Same);
    let conv1 = move |v: &[Var]| Conv1d::from_params(v[1].clone(), None, same)?.forward(&v[0]);
    check(conv1, &[randn(&[2, 3, 6]), randn(&[2, 3, 4])]);
    let targs = ConvTransposeArgs::default().stride(2).padding(1).output_padding(1).groups(2);
    let up = move |v: &[Var]| ConvTranspose2d::from_params(v[1].clone(), Some(v[2].clone()), targs)?.forward(&v[0]);
    check(up, &[randn(&[1, 4, 3, 3]), randn(&[4, 1, 3, 3]), randn(&[2])]);
}

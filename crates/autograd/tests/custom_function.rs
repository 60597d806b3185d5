//! Custom functions: a `LinearFunction` against the built-in operations,
//! gradchecks, several outputs, non-tensor state, the in-place check on saved tensors,
//! gradient validation and the create_graph rules.

use ember_autograd::{Function, FunctionCtx, Var, grad, gradcheck};
use ember_tensor::{DType, Error, Result, Tensor};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `out = input @ weight^T + bias`, computing only the gradients asked for.
struct LinearFunction;

impl Function for LinearFunction {
    fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let (input, weight, bias) = (&inputs[0], &inputs[1], &inputs[2]);
        ctx.save_for_backward(&[input, weight]);
        Ok(vec![input.matmul(&weight.t()?)?.add(bias)?])
    }

    fn backward(&self, ctx: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        let saved = ctx.saved_tensors()?;
        let (input, weight) = (&saved[0], &saved[1]);
        let g = &grads[0];
        let gi = if ctx.needs_input_grad(0) { Some(g.matmul(weight)?) } else { None };
        let gw = if ctx.needs_input_grad(1) { Some(g.t()?.matmul(input)?) } else { None };
        let gb = if ctx.needs_input_grad(2) { Some(g.sum(0, false)?) } else { None };
        Ok(vec![gi, gw, gb])
    }
}

fn randn(shape: &[usize]) -> Tensor {
    Tensor::randn(shape.to_vec()).expect("randn").to_dtype(DType::F64)
}

fn values(v: &Var) -> Vec<f64> {
    v.value().to_vec::<f64>().expect("f64 values")
}

#[test]
fn linear_function_agrees_with_the_built_in_operations() -> Result<()> {
    ember_tensor::manual_seed(1);
    let (x, w, b) = (randn(&[4, 3]), randn(&[5, 3]), randn(&[5]));
    let target = Var::new(randn(&[4, 5]));

    let (x1, w1, b1) = (Var::param(x.clone()), Var::param(w.clone()), Var::param(b.clone()));
    let out1 = LinearFunction.apply(&[&x1, &w1, &b1])?.remove(0);
    assert_eq!(out1.op_name(), "LinearFunction");
    out1.relu().sub(&target)?.square().mean_all().backward()?;

    let (x2, w2, b2) = (Var::param(x), Var::param(w), Var::param(b));
    let out2 = x2.matmul(&w2.t()?)?.add(&b2)?;
    out2.relu().sub(&target)?.square().mean_all().backward()?;

    assert_eq!(values(&out1), values(&out2));
    for (a, b) in [(&x1, &x2), (&w1, &w2), (&b1, &b2)] {
        let (ga, gb) = (a.grad().unwrap().to_vec::<f64>()?, b.grad().unwrap().to_vec::<f64>()?);
        for (p, q) in ga.iter().zip(&gb) {
            assert!((p - q).abs() < 1e-12, "{p} vs {q}");
        }
    }
    Ok(())
}

/// Records which gradients backward was asked for.
struct Probe(Arc<Mutex<Vec<Vec<bool>>>>);

impl Function for Probe {
    fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.0.lock().push((0..inputs.len()).map(|i| ctx.needs_input_grad(i)).collect());
        Ok(vec![inputs[0].add(&inputs[1])?])
    }
    fn backward(&self, ctx: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        self.0.lock().push(vec![ctx.needs_input_grad(0), ctx.needs_input_grad(1)]);
        Ok(vec![Some(grads[0].clone()), Some(grads[0].clone())])
    }
}

#[test]
fn needs_input_grad_reflects_requires_grad_and_the_requested_inputs() -> Result<()> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let a = Var::param(randn(&[2]));
    let c = Var::new(randn(&[2]));
    let y = Probe(log.clone()).apply(&[&a, &c])?.remove(0);
    y.sum_all().backward()?;
    // Only `a` requires grad, in forward and in backward.
    assert_eq!(*log.lock(), vec![vec![true, false], vec![true, false]]);

    // grad() asking for one of two parameters.
    let log = Arc::new(Mutex::new(Vec::new()));
    let b = Var::param(randn(&[2]));
    let y = Probe(log.clone()).apply(&[&a, &b])?.remove(0).sum_all();
    grad(&[&y], &[&b], &[], false, false)?;
    assert_eq!(log.lock()[1], vec![false, true]);
    Ok(())
}

#[test]
fn gradcheck_of_custom_functions() -> Result<()> {
    ember_tensor::manual_seed(2);
    gradcheck(
        |v| Ok(LinearFunction.apply(&[&v[0], &v[1], &v[2]])?.remove(0)),
        &[randn(&[3, 2]), randn(&[4, 2]), randn(&[4])],
        1e-6,
        1e-8,
        1e-6,
    )?;
    // A function with two outputs, both used, through a following operation.
    gradcheck(
        |v| {
            let outs = SinCos.apply(&[&v[0]])?;
            outs[0].mul(&outs[1].square())
        },
        &[randn(&[5])],
        1e-6,
        1e-8,
        1e-6,
    )
}

/// `(sin x, cos x)`: two outputs of one function.
struct SinCos;

static SINCOS_BACKWARDS: AtomicUsize = AtomicUsize::new(0);

impl Function for SinCos {
    fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let (s, c) = (inputs[0].sin(), inputs[0].cos());
        // Save the outputs: backward needs cos and sin.
        ctx.save_for_backward(&[&s, &c]);
        Ok(vec![s, c])
    }
    fn backward(&self, ctx: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        SINCOS_BACKWARDS.fetch_add(1, Ordering::Relaxed);
        let saved = ctx.saved_tensors()?;
        let (s, c) = (&saved[0], &saved[1]);
        // d sin = cos, d cos = -sin.
        Ok(vec![Some(grads[0].mul(c)?.sub(&grads[1].mul(s)?)?)])
    }
    fn differentiable_backward(&self) -> bool {
        true
    }
}

#[test]
fn several_outputs_each_get_a_var_and_backward_runs_once_with_all_their_gradients() -> Result<()> {
    let x = Var::param(Tensor::from_vec(vec![0.3f64, 1.2], [2])?);
    let outs = SinCos.apply(&[&x])?;
    assert_eq!(outs.len(), 2);
    assert!(outs.iter().all(|o| o.requires_grad()));
    let before = SINCOS_BACKWARDS.load(Ordering::Relaxed);
    // loss = 2 sin x + 3 cos x: dloss/dx = 2 cos x - 3 sin x.
    outs[0].mul_scalar(2.0).add(&outs[1].mul_scalar(3.0))?.sum_all().backward()?;
    assert_eq!(SINCOS_BACKWARDS.load(Ordering::Relaxed) - before, 1);
    let g = x.grad().unwrap().to_vec::<f64>()?;
    for (gi, xi) in g.iter().zip([0.3f64, 1.2]) {
        assert!((gi - (2.0 * xi.cos() - 3.0 * xi.sin())).abs() < 1e-12);
    }
    Ok(())
}

/// Reports whether each output received a gradient.
struct Split(Arc<Mutex<Vec<Vec<bool>>>>);

impl Function for Split {
    fn forward(&self, _: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        Ok(vec![inputs[0].mul_scalar(2.0), inputs[0].mul_scalar(3.0), inputs[0].argmax(0, false)?])
    }
    fn backward(&self, ctx: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        self.0.lock().push((0..3).map(|j| ctx.output_has_grad(j)).collect());
        // Outputs without a gradient arrive as zeros of their shape and dtype.
        for (j, g) in grads.iter().enumerate() {
            if !ctx.output_has_grad(j) {
                assert!(g.value().to_vec_f64()?.iter().all(|&v| v == 0.0), "output {j}");
            }
        }
        assert_eq!(grads[2].dtype(), DType::I64);
        Ok(vec![Some(grads[0].mul_scalar(2.0).add(&grads[1].mul_scalar(3.0))?)])
    }
}

#[test]
fn unused_outputs_arrive_as_zeros_and_integer_outputs_do_not_require_grad() -> Result<()> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let x = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    let outs = Split(log.clone()).apply(&[&x])?;
    assert!(!outs[2].requires_grad(), "an integer output");
    outs[0].sum_all().backward()?;
    assert_eq!(*log.lock(), vec![vec![true, false, false]]);
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![2.0, 2.0]);
    // A later backward through the other output alone sees only that one.
    x.zero_grad();
    outs[1].sum_all().backward()?;
    assert_eq!(log.lock()[1], vec![false, true, false]);
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![3.0, 3.0]);
    Ok(())
}

#[test]
fn saved_tensors_modified_in_place_are_an_error() -> Result<()> {
    let x = Var::param(randn(&[2, 3]));
    let w = Var::param(randn(&[4, 3]));
    let b = Var::param(randn(&[4]));
    let out = LinearFunction.apply(&[&x, &w, &b])?.remove(0);
    w.value().mul_scalar_(2.0)?; // an optimizer step before backward, say
    let err = out.sum_all().backward().unwrap_err().to_string();
    assert!(err.contains("modified by an inplace operation"), "{err}");
    assert!(err.contains("saved tensor 1 of LinearFunction") && err.contains("version 1"), "{err}");
    Ok(())
}

/// Keeps a non-tensor value on the context: a scale factor and a label.
struct ScaleBy(f64);

struct Label(&'static str);

impl Function for ScaleBy {
    fn name(&self) -> &str {
        "scale_by"
    }
    fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        ctx.set(self.0 * 2.0);
        ctx.set(Label("doubled"));
        Ok(vec![inputs[0].mul_scalar(self.0)])
    }
    fn backward(&self, ctx: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        let twice = *ctx.get::<f64>().ok_or_else(|| Error::autograd("no factor"))?;
        assert_eq!(ctx.get::<Label>().map(|l| l.0), Some("doubled"));
        assert!(ctx.get::<u32>().is_none());
        Ok(vec![Some(grads[0].mul_scalar(twice / 2.0))])
    }
}

#[test]
fn non_tensor_state_reaches_backward() -> Result<()> {
    let x = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    let y = ScaleBy(3.0).apply(&[&x])?.remove(0);
    assert_eq!(y.op_name(), "scale_by");
    y.sum_all().backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![3.0, 3.0]);
    Ok(())
}

#[test]
fn a_non_differentiable_backward_under_create_graph_is_an_error() -> Result<()> {
    let x = Var::param(randn(&[2, 3]));
    let w = Var::param(randn(&[4, 3]));
    let b = Var::param(randn(&[4]));
    let y = LinearFunction.apply(&[&x, &w, &b])?.remove(0).square().sum_all();
    let err = grad(&[&y], &[&x], &[], false, true).unwrap_err().to_string();
    assert!(err.contains("LinearFunction") && err.contains("create_graph"), "{err}");
    // Without create_graph it works.
    assert!(grad(&[&y], &[&x], &[], false, false)?[0].is_some());
    Ok(())
}

/// `y = x^3` with a differentiable backward (saved input reused under create_graph).
struct Cube;

impl Function for Cube {
    fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        ctx.save_for_backward(&[&inputs[0]]);
        Ok(vec![inputs[0].pow_scalar(3.0)?])
    }
    fn backward(&self, ctx: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        let x = &ctx.saved_tensors()?[0];
        Ok(vec![Some(grads[0].mul(&x.square().mul_scalar(3.0))?)])
    }
    fn differentiable_backward(&self) -> bool {
        true
    }
}

#[test]
fn a_differentiable_backward_gives_higher_order_gradients() -> Result<()> {
    let x = Var::param(Tensor::scalar(2.0f64));
    let y = Cube.apply(&[&x])?.remove(0);
    let d1 = grad(&[&y], &[&x], &[], false, true)?[0].clone().unwrap(); // 3x^2 = 12
    let d2 = grad(&[&d1], &[&x], &[], false, true)?[0].clone().unwrap(); // 6x = 12
    let d3 = grad(&[&d2], &[&x], &[], false, false)?[0].clone().unwrap(); // 6
    assert_eq!((d1.item()?, d2.item()?, d3.item()?), (12.0, 12.0, 6.0));
    // Through two outputs (sin, cos): d2/dx2 (sin x cos x) = -4 sin x cos x.
    let x = Var::param(Tensor::scalar(0.7f64));
    let o = SinCos.apply(&[&x])?;
    let f = o[0].mul(&o[1])?;
    let d1 = grad(&[&f], &[&x], &[], false, true)?[0].clone().unwrap();
    let d2 = grad(&[&d1], &[&x], &[], false, false)?[0].clone().unwrap();
    assert!((d2.item()? + 4.0 * 0.7f64.sin() * 0.7f64.cos()).abs() < 1e-12);
    Ok(())
}

/// Returns a gradient of the wrong shape.
struct BadShape;

impl Function for BadShape {
    fn forward(&self, _: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        Ok(vec![inputs[0].clone()])
    }
    fn backward(&self, _: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        Ok(vec![Some(grads[0].sum_all())])
    }
}

/// Returns too few gradients.
struct TooFew;

impl Function for TooFew {
    fn forward(&self, _: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        Ok(vec![inputs[0].add(&inputs[1])?])
    }
    fn backward(&self, _: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        Ok(vec![Some(grads[0].clone())])
    }
}

#[test]
fn gradients_are_validated() -> Result<()> {
    let x = Var::param(randn(&[3]));
    let err = BadShape.apply(&[&x])?[0].sum_all().backward().unwrap_err().to_string();
    assert!(err.contains("BadShape") && err.contains("input 0"), "{err}");
    let y = Var::param(randn(&[3]));
    let err = TooFew.apply(&[&x, &y])?[0].sum_all().backward().unwrap_err().to_string();
    assert!(err.contains("TooFew") && err.contains("1 gradients for 2 inputs"), "{err}");
    Ok(())
}

#[test]
fn under_no_grad_outputs_are_plain_values() -> Result<()> {
    let x = Var::param(randn(&[2, 3]));
    let w = Var::param(randn(&[4, 3]));
    let b = Var::param(randn(&[4]));
    let out = ember_autograd::no_grad(|| LinearFunction.apply(&[&x, &w, &b]))?.remove(0);
    assert!(out.is_leaf() && !out.requires_grad());
    assert_eq!(out.shape().dims(), &[2, 4]);
    Ok(())
}

#[test]
fn retain_graph_runs_backward_twice_with_the_same_saved_tensors() -> Result<()> {
    let x = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    let y = Cube.apply(&[&x])?.remove(0).sum_all();
    y.backward_with(None, true)?;
    y.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![6.0, 24.0]);
    Ok(())
}

/// `y = exp(x)`, saving a tensor of its own (not an input or output) and reporting a weak
/// reference to its storage, so that the test can see when it is freed.
struct ExpSavingCopy {
    saved: Arc<Mutex<Option<std::sync::Weak<ember_tensor::storage::StorageCell>>>>,
}

impl Function for ExpSavingCopy {
    fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let y = inputs[0].exp();
        let copy = y.copy();
        *self.saved.lock() = Some(Arc::downgrade(copy.storage()));
        ctx.save_for_backward(&[&copy]);
        Ok(vec![y])
    }
    fn backward(&self, ctx: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        let saved = ctx.saved_tensors()?;
        Ok(vec![Some(grads[0].mul(&saved[0])?)])
    }
}

/// Like PyTorch, a backward without retain_graph frees what a custom function saved; a
/// second backward then fails with PyTorch's message, while retain_graph keeps them.
#[test]
fn backward_frees_saved_tensors_unless_the_graph_is_retained() -> Result<()> {
    let x = Var::param(Tensor::from_vec(vec![0.5f64, 1.0], [2])?);
    let saved = Arc::new(Mutex::new(None));
    let y = ExpSavingCopy { saved: saved.clone() }.apply(&[&x])?.remove(0).sum_all();
    let weak = saved.lock().clone().expect("forward saved a tensor");
    y.backward_with(None, true)?;
    assert!(weak.upgrade().is_some(), "retain_graph keeps the saved tensor");
    y.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![2.0 * 0.5f64.exp(), 2.0 * 1.0f64.exp()]);
    assert!(weak.upgrade().is_none(), "the saved tensor outlived a backward without retain_graph");
    let e = y.backward().expect_err("the saved tensors are gone").to_string();
    assert!(e.contains("ExpSavingCopy") && e.contains("backward through the graph a second time"), "{e}");
    // The same with grad().
    let y = ExpSavingCopy { saved: saved.clone() }.apply(&[&x])?.remove(0).sum_all();
    let weak = saved.lock().clone().expect("forward saved a tensor");
    grad(&[&y], &[&x], &[], false, false)?;
    assert!(weak.upgrade().is_none());
    assert!(grad(&[&y], &[&x], &[], false, false).is_err());
    Ok(())
}

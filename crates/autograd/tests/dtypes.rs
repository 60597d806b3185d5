//! Gradients have their input's dtype (PyTorch's `validate_outputs`): in graphs that mix
//! `f32` and `f64` through type promotion, for `grad()`, under `create_graph`, for a root
//! gradient of another dtype, and for custom functions.

use ember_autograd::{Function, FunctionCtx, Var, grad};
use ember_tensor::{DType, Result, Tensor};

fn f32s(v: &[f32]) -> Tensor {
    Tensor::from_slice(v, [v.len()]).expect("a valid tensor")
}

fn f64s(v: &[f64]) -> Tensor {
    Tensor::from_slice(v, [v.len()]).expect("a valid tensor")
}

/// `a (f32) * c (f64)` computes in `f64`; every gradient comes back in its input's dtype,
/// intermediate ones included. The values are exact in both dtypes.
#[test]
fn promoted_operations_give_gradients_in_each_inputs_dtype() -> Result<()> {
    let a = Var::param(f32s(&[1.0, 2.0]));
    let b = Var::param(f64s(&[3.0, 4.0]));
    let c = Var::new(f64s(&[0.5, 0.25]));
    let h = a.mul(&c)?; // f64
    h.retain_grad()?;
    let q = a.add(&b)?.sub(&b.div(&a)?)?.pow(&Var::new(f32s(&[1.0, 1.0])))?; // f64
    let m = b.maximum(&a)?.minimum(&a.mul_scalar(10.0))?;
    let w = Var::new(Tensor::from_vec(vec![1u8, 0], [2])?).where_cond(&a, &b)?;
    let j = Var::cat(&[&a, &b], 0)?.sum_all();
    let loss = h.mul(&b)?.sum_all().add(&q.sum_all())?.add(&m.sum_all())?.add(&w.sum_all())?.add(&j)?;
    assert_eq!(loss.dtype(), DType::F64);
    loss.backward()?;
    assert_eq!(a.grad().expect("a").dtype(), DType::F32);
    assert_eq!(b.grad().expect("b").dtype(), DType::F64);
    assert_eq!(h.grad().expect("h").dtype(), DType::F64);
    // d/da of (a c b + a + b - b/a + max(b, a) ... ): checked against f64 arithmetic.
    let ga = a.grad().expect("a").to_vec::<f32>()?;
    let expected: Vec<f64> = [(1.0f64, 3.0, 0.5, 1.0), (2.0, 4.0, 0.25, 0.0)]
        .iter()
        .map(|&(a, b, c, mask)| c * b + 1.0 + b / (a * a) + mask + 1.0)
        .collect();
    for (g, e) in ga.iter().zip(&expected) {
        assert!((*g as f64 - e).abs() < 1e-5, "{ga:?} vs {expected:?}");
    }
    let found = grad(&[&a.mul(&c)?.sum_all()], &[&a], &[], false, false)?;
    assert_eq!(found[0].as_ref().expect("a gradient").dtype(), DType::F32);
    Ok(())
}

/// Under `create_graph` a leaf's gradient is converted differentiably: it has the leaf's
/// dtype and can still be differentiated.
#[test]
fn create_graph_converts_and_keeps_the_graph() -> Result<()> {
    let a = Var::param(f32s(&[1.5]));
    let c = Var::new(f64s(&[2.0]));
    a.mul(&c)?.square().sum_all().backward_full(None, false, true)?; // (2a)^2: d/da = 8a = 12
    let g = a.grad_var().expect("a gradient");
    assert_eq!(g.dtype(), DType::F32);
    assert!(g.requires_grad(), "the conversion is recorded");
    assert_eq!(g.value().to_vec::<f32>()?, vec![12.0]);
    let d2 = grad(&[&g.sum_all()], &[&a], &[], false, false)?[0].clone().expect("a second derivative");
    assert_eq!((d2.dtype(), d2.value().to_vec::<f32>()?), (DType::F32, vec![8.0]));
    a.zero_grad();
    let g1 = grad(&[&a.mul(&c)?.square().sum_all()], &[&a], &[], false, true)?[0].clone().expect("grad");
    assert_eq!(g1.dtype(), DType::F32);
    Ok(())
}

/// A root gradient of another dtype is converted to the output's, integers included.
#[test]
fn a_grad_output_of_another_dtype_is_converted() -> Result<()> {
    let x = Var::param(f32s(&[1.0, 2.0]));
    x.mul_scalar(2.0).backward_with(Some(&f64s(&[1.0, 0.5])), false)?;
    let g = x.grad().expect("a gradient");
    assert_eq!((g.dtype(), g.to_vec::<f32>()?), (DType::F32, vec![2.0, 1.0]));
    x.zero_grad();
    x.mul_scalar(2.0).backward_with(Some(&Tensor::from_vec(vec![1i64, 3], [2])?), false)?;
    assert_eq!(x.grad().expect("a gradient").to_vec::<f32>()?, vec![2.0, 6.0]);
    let found = grad(&[&x.mul_scalar(2.0)], &[&x], &[&Var::new(f64s(&[1.0, 1.0]))], false, false)?;
    assert_eq!(found[0].as_ref().expect("a gradient").dtype(), DType::F32);
    // The shape still has to match.
    assert!(x.mul_scalar(2.0).backward_with(Some(&f64s(&[1.0])), false).is_err());
    Ok(())
}

/// A custom function whose backward computes in `f64` for an `f32` input: the gradient is
/// converted (PyTorch does the same), while a wrong shape stays an error.
struct Widening {
    wrong_shape: bool,
}

impl Function for Widening {
    fn forward(&self, _: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        Ok(vec![inputs[0].mul_scalar(3.0)])
    }
    fn backward(&self, _: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        let g = grads[0].to_dtype(DType::F64).mul_scalar(3.0);
        Ok(vec![Some(if self.wrong_shape { g.sum_all() } else { g })])
    }
}

#[test]
fn custom_function_gradients_are_converted() -> Result<()> {
    let x = Var::param(f32s(&[1.0, 2.0]));
    Widening { wrong_shape: false }.apply(&[&x])?.remove(0).sum_all().backward()?;
    let g = x.grad().expect("a gradient");
    assert_eq!((g.dtype(), g.to_vec::<f32>()?), (DType::F32, vec![3.0, 3.0]));
    let e = Widening { wrong_shape: true }.apply(&[&x])?.remove(0).sum_all().backward().expect_err("a shape error");
    assert!(e.to_string().contains("for input 0"), "{e}");
    Ok(())
}

/// 16-bit graphs: an `f32` parameter cast to `bf16` for a product gets its gradient in
/// `f32` (the cast is recorded), a `bf16` leaf gets `bf16` gradients, and `bf16 + f16`
/// promotes to `f32` with each gradient cast back to its input's dtype.
#[test]
fn sixteen_bit_graphs_give_gradients_in_each_inputs_dtype() -> Result<()> {
    let w = Var::param(Tensor::from_vec(vec![0.5f32, -1.25, 2.0, 0.75, 1.5, -0.5], [3, 2])?);
    let x = Var::new(Tensor::from_vec(vec![1.0f32, 2.0, -1.0, 0.5, 0.25, 3.0], [2, 3])?.to_dtype(DType::BF16));
    let y = x.matmul(&w.to_dtype(DType::BF16))?;
    assert_eq!(y.dtype(), DType::BF16);
    y.sum_all().backward()?;
    let g = w.grad().expect("w");
    assert_eq!(g.dtype(), DType::F32);
    // d sum(x w) / d w[k][j] = sum_i x[i][k]: exact in bf16 for these values.
    assert_eq!(g.to_vec::<f32>()?, vec![1.5, 1.5, 2.25, 2.25, 2.0, 2.0]);

    let a = Var::param(Tensor::from_vec(vec![1.5f32, -2.0], [2])?.to_dtype(DType::BF16));
    let b = Var::param(Tensor::from_vec(vec![0.5f32, 4.0], [2])?.to_dtype(DType::F16));
    let s = a.mul(&b)?;
    assert_eq!(s.dtype(), DType::F32);
    s.sum_all().backward()?;
    let (ga, gb) = (a.grad().expect("a"), b.grad().expect("b"));
    assert_eq!((ga.dtype(), gb.dtype()), (DType::BF16, DType::F16));
    assert_eq!(ga.to_vec_f64()?, vec![0.5, 4.0]);
    assert_eq!(gb.to_vec_f64()?, vec![1.5, -2.0]);
    Ok(())
}

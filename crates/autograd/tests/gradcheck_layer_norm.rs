//! The fused layer normalisation (`Var::layer_norm`): gradients of the first and second
//! order against finite differences, with and without the affine part, over one and two
//! normalized dimensions and on strided inputs; agreement of its fused backward with the
//! recorded (`create_graph`) one; 16-bit inputs with `f32` parameters.

use ember_autograd::{Var, gradcheck, gradgradcheck};
use ember_tensor::{DType, Result, Tensor, manual_seed};

fn normal(seed: u64, shape: &[usize], dtype: DType) -> Result<Tensor> {
    manual_seed(seed);
    Tensor::normal(shape.to_vec(), 0.0, 1.0, dtype)
}

/// The affine variants: (weight, bias) present or not.
const AFFINE: [(bool, bool); 4] = [(true, true), (true, false), (false, true), (false, false)];

/// `x.layer_norm` with the parameters `v[1..]` the variant has.
fn apply(v: &[Var], shape: &[usize], (w, b): (bool, bool)) -> Result<Var> {
    let weight = w.then(|| &v[1]);
    let bias = b.then(|| &v[1 + usize::from(w)]);
    v[0].layer_norm(shape, weight, bias, 1e-5)
}

fn inputs(seed: u64, x: Tensor, shape: &[usize], (w, b): (bool, bool)) -> Result<Vec<Tensor>> {
    let mut all = vec![x];
    if w {
        all.push(normal(seed + 1, shape, DType::F64)?.add_scalar(1.0));
    }
    if b {
        all.push(normal(seed + 2, shape, DType::F64)?);
    }
    Ok(all)
}

#[test]
fn gradients_of_first_and_second_order_match_finite_differences() -> Result<()> {
    for (i, (x_shape, shape)) in
        [(vec![3usize, 5], vec![5usize]), (vec![2, 3, 2, 4], vec![2, 4]), (vec![6], vec![6])].into_iter().enumerate()
    {
        for affine in AFFINE {
            let seed = 10 * i as u64;
            let x = normal(seed, &x_shape, DType::F64)?.mul_scalar(2.0).add_scalar(3.0);
            let all = inputs(seed, x, &shape, affine)?;
            let f = |v: &[Var]| apply(v, &shape, affine);
            gradcheck(f, &all, 1e-6, 1e-7, 1e-5).map_err(|e| {
                ember_tensor::Error::autograd(format!("{x_shape:?} over {shape:?}, affine {affine:?}: {e}"))
            })?;
            gradgradcheck(f, &all, None, 1e-6, 1e-6, 1e-4).map_err(|e| {
                ember_tensor::Error::autograd(format!("second order, {x_shape:?} over {shape:?}, {affine:?}: {e}"))
            })?;
        }
    }
    Ok(())
}

#[test]
fn a_strided_input_has_the_gradients_of_its_contiguous_copy() -> Result<()> {
    let x = normal(3, &[4, 6], DType::F64)?.transpose(0, 1)?;
    let all = inputs(3, x, &[4], (true, true))?;
    gradcheck(|v| apply(v, &[4], (true, true)), &all, 1e-6, 1e-7, 1e-5)
}

/// The fused backward (grad mode off) and the recorded one (under `create_graph`) give the
/// same first-order gradients.
#[test]
fn fused_and_recorded_backwards_agree() -> Result<()> {
    let all = inputs(5, normal(5, &[7, 3, 9], DType::F64)?, &[9], (true, true))?;
    let g = normal(8, &[7, 3, 9], DType::F64)?;
    let grads = |create_graph: bool| -> Result<Vec<Vec<f64>>> {
        let v: Vec<Var> = all.iter().map(|t| Var::param(t.clone())).collect();
        let y = apply(&v, &[9], (true, true))?;
        let gv = Var::new(g.clone());
        let gs = ember_autograd::grad(&[&y], &v.iter().collect::<Vec<_>>(), &[&gv], false, create_graph)?;
        gs.iter()
            .map(|g| g.as_ref().ok_or_else(|| ember_tensor::Error::autograd("no gradient"))?.value().to_vec::<f64>())
            .collect()
    };
    let (fused, recorded) = (grads(false)?, grads(true)?);
    for (a, b) in fused.iter().zip(&recorded) {
        for (p, q) in a.iter().zip(b) {
            assert!((p - q).abs() <= 1e-10 * (1.0 + q.abs()), "{p} vs {q}");
        }
    }
    Ok(())
}

/// A bf16 input with f32 parameters: the output is bf16, the f32 computation rounded once;
/// the input's gradient is bf16 and the parameters' f32, close to the f32 layer's.
#[test]
fn a_bf16_input_with_f32_parameters_computes_in_f32() -> Result<()> {
    let x32 = normal(11, &[5, 16], DType::F32)?.to_dtype(DType::BF16).to_dtype(DType::F32);
    let (w, b) = (normal(12, &[16], DType::F32)?, normal(13, &[16], DType::F32)?);
    let run = |x: &Tensor| -> Result<(Tensor, Vec<Tensor>)> {
        let v = [Var::param(x.clone()), Var::param(w.clone()), Var::param(b.clone())];
        let y = v[0].layer_norm(&[16], Some(&v[1]), Some(&v[2]), 1e-5)?;
        y.to_dtype(DType::F32).mul(&Var::new(normal(14, &[5, 16], DType::F32)?))?.sum_all().backward()?;
        let grads: Result<Vec<Tensor>> =
            v.iter().map(|p| p.grad().ok_or_else(|| ember_tensor::Error::autograd("no gradient"))).collect();
        Ok((y.value(), grads?))
    };
    let (y16, g16) = run(&x32.to_dtype(DType::BF16))?;
    let (y32, g32) = run(&x32)?;
    assert_eq!(y16.dtype(), DType::BF16);
    assert_eq!(
        y16.to_dtype(DType::F32).to_vec::<f32>()?,
        y32.to_dtype(DType::BF16).to_dtype(DType::F32).to_vec::<f32>()?
    );
    let dtypes: Vec<DType> = g16.iter().map(Tensor::dtype).collect();
    assert_eq!(dtypes, [DType::BF16, DType::F32, DType::F32]);
    for (a, b) in g16.iter().zip(&g32) {
        let (a, b) = (a.to_dtype(DType::F32).to_vec::<f32>()?, b.to_vec::<f32>()?);
        for (p, q) in a.iter().zip(&b) {
            assert!((p - q).abs() <= 2e-2 * (1.0 + q.abs()), "{p} vs {q}");
        }
    }
    Ok(())
}

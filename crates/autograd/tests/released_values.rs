//! A value that no recorded backward reads is released when its last `Var` drops, as
//! PyTorch never keeps one, and is recomputed from its inputs if it is asked for again
//! (docs/design.md, 'Value versions and re-execution'). `recompute_count` tells a released
//! value (restored by recomputing it) from a kept one.

use ember_autograd::Var;
use ember_tensor::{DType, Result, Tensor};

/// A parameter of 32 x 32 `f32`: 4 KiB, the smallest value that is released.
fn param() -> Result<Var> {
    Ok(Var::param(Tensor::arange(0.0f32, 1024.0)?.to_dtype(DType::F32).reshape([32, 32])?.div_scalar(1024.0)))
}

/// The value of input `i` of `v` as a consumer sees it (restored if it was released), and
/// how many times it was recomputed.
fn input(v: &Var, i: usize) -> Result<(Vec<f32>, u64)> {
    let inputs = v.inputs()?;
    Ok((inputs[i].value().to_vec::<f32>()?, inputs[i].recompute_count()))
}

#[test]
fn a_value_no_backward_reads_is_released_when_its_last_handle_drops() -> Result<()> {
    let w = param()?;
    let want = w.value().mul_scalar(3.0).to_vec::<f32>()?;
    // `mul_scalar`'s backward reads nothing, and neither does `add_scalar`'s.
    let a = w.mul_scalar(3.0);
    let b = a.add_scalar(1.0);
    let kept = a.clone();
    drop(a);
    // Another handle still reads it: kept.
    assert_eq!(kept.recompute_count(), 0);
    drop(kept);
    // The last handle went: released, and recomputed (once) when asked for, the same value.
    assert_eq!(input(&b, 0)?, (want, 1));
    b.sum_all().backward()?;
    assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![3.0; 1024]);
    Ok(())
}

#[test]
fn backward_does_without_a_released_value() -> Result<()> {
    let w = param()?;
    let b = w.mul_scalar(2.0).add_scalar(1.0);
    b.sum_all().backward()?;
    assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![2.0; 1024]);
    // Backward did not recompute it: the one recomputation is the request below.
    assert_eq!(input(&b, 0)?.1, 1);
    Ok(())
}

#[test]
fn values_a_backward_reads_stay() -> Result<()> {
    let w = param()?;
    // `mul` reads both of its inputs in backward.
    let a = w.mul_scalar(3.0);
    let b = a.mul(&w)?;
    drop(a);
    assert_eq!(input(&b, 0)?.1, 0);
    // `exp` reads its own output in backward.
    let e = w.exp();
    let c = e.add_scalar(1.0);
    drop(e);
    assert_eq!(input(&c, 0)?.1, 0);
    // A later consumer that reads it keeps it too.
    let a = w.mul_scalar(3.0);
    let d = a.add_scalar(1.0);
    let f = a.square();
    drop(a);
    assert_eq!(input(&d, 0)?.1, 0);
    d.sum_all().add(&f.sum_all())?.backward()?;
    let g: Vec<f32> = w.value().to_vec::<f32>()?.iter().map(|x| 3.0 + 18.0 * x).collect();
    for (a, b) in w.grad().unwrap().to_vec::<f32>()?.iter().zip(&g) {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} against {b}");
    }
    Ok(())
}

#[test]
fn leaves_small_values_and_shared_or_written_storages_stay() -> Result<()> {
    // A leaf is never released.
    let w = param()?;
    let b = w.add_scalar(1.0);
    assert_eq!(input(&b, 0)?.1, 0);
    // Below 4 KiB: kept.
    let small = Var::param(Tensor::ones([8], DType::F32)?);
    let b = small.mul_scalar(2.0).add_scalar(1.0);
    assert_eq!(input(&b, 0)?.1, 0);
    // A tensor handle to the value shares its storage: kept.
    let a = w.mul_scalar(3.0);
    let b = a.add_scalar(1.0);
    let t = a.value();
    drop(a);
    assert_eq!(input(&b, 0)?.1, 0);
    drop(t);
    // A view of it in the graph shares it too.
    let a = w.mul_scalar(3.0);
    let v = a.reshape([1024])?;
    let b = v.add_scalar(1.0);
    drop((a, v));
    assert_eq!(input(&b, 0)?.1, 0);
    // A value written in place since it was computed is kept with the write: recomputing
    // it would lose the write.
    let a = w.mul_scalar(3.0);
    let b = a.add_scalar(1.0);
    a.value().fill_(7.0)?;
    drop(a);
    assert_eq!(input(&b, 0)?, (vec![7.0; 1024], 0));
    Ok(())
}

#[test]
fn a_released_value_is_recomputed_by_forward_from_new_inputs() -> Result<()> {
    let x = Var::param(Tensor::ones([32, 32], DType::F32)?);
    let a = x.mul_scalar(2.0);
    let b = a.add_scalar(1.0);
    drop(a);
    assert_eq!(b.forward()?.to_vec::<f32>()?, vec![3.0; 1024]);
    x.set_value(Tensor::full([32, 32], 5.0, DType::F32)?)?;
    assert_eq!(b.forward()?.to_vec::<f32>()?, vec![11.0; 1024]);
    // Recomputed from a changed input: a new version.
    let inputs = b.inputs()?;
    assert_eq!(inputs[0].value().to_vec::<f32>()?, vec![10.0; 1024]);
    assert_eq!(inputs[0].value_version(), 1);
    // Recomputed from unchanged inputs after a release: the same version.
    let c = b.mul_scalar(1.0);
    let d = c.add_scalar(0.0);
    drop(c);
    let inputs = d.inputs()?;
    assert_eq!((inputs[0].recompute_count(), inputs[0].value_version()), (1, 0));
    Ok(())
}

#[test]
fn a_second_backward_recomputes_through_a_released_value() -> Result<()> {
    let w = param()?;
    // The product's output is released as the chain is built; the sum's is read by
    // `square` and stays until backward frees it.
    let loss = w.mul_scalar(3.0).add_scalar(1.0).square().sum_all();
    loss.backward()?;
    let first = w.grad().unwrap().to_vec::<f32>()?;
    w.zero_grad();
    // The first backward freed what it read: the second recomputes it, through the
    // released product.
    loss.backward()?;
    assert_eq!(w.grad().unwrap().to_vec::<f32>()?, first);
    let want: Vec<f32> = w.value().to_vec::<f32>()?.iter().map(|x| 6.0 * (3.0 * x + 1.0)).collect();
    for (a, b) in first.iter().zip(&want) {
        assert!((a - b).abs() <= 1e-5 * b.abs(), "{a} against {b}");
    }
    Ok(())
}

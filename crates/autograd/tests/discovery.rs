//! Backward's discovery of the graph finds every node exactly once, whether a user handle
//! still holds it or only the edges of its consumers do (discovery indexes only the nodes
//! that more than one reference could lead to).

use ember_autograd::{Var, grad};
use ember_tensor::{Result, Tensor};

fn param(v: &[f64]) -> Var {
    Var::param(Tensor::from_slice(v, [v.len()]).unwrap())
}

/// `z = sum((exp(2x) + sin(2x)) * 2x)` built so that the shared `2x` and every other
/// intermediate are held by edges only: its gradient, `(2 exp(2x) + 2 cos(2x)) * 2x + 2
/// (exp(2x) + sin(2x))`, needs every path through the diamond counted once.
#[test]
fn shared_intermediates_without_handles_get_every_gradient() -> Result<()> {
    let xs = [0.1, -0.4, 0.7];
    let x = param(&xs);
    let z = {
        let y = x.mul_scalar(2.0);
        let both = y.exp().add(&y.sin())?;
        both.mul(&y)?.sum_all()
    };
    z.backward()?;
    let got = x.grad().unwrap().to_vec::<f64>()?;
    for (g, &v) in got.iter().zip(&xs) {
        let y: f64 = 2.0 * v;
        let want = (2.0 * y.exp() + 2.0 * y.cos()) * y + 2.0 * (y.exp() + y.sin());
        assert!((g - want).abs() < 1e-12, "{g} against {want}");
    }
    Ok(())
}

/// One operation taking the same intermediate twice (`y * y`), with a chain of handle-less
/// nodes before and after it.
#[test]
fn an_intermediate_used_twice_by_one_operation() -> Result<()> {
    let x = param(&[1.0, -2.0]);
    let z = {
        let y = x.mul_scalar(3.0).add_scalar(1.0);
        y.mul(&y)?.mul_scalar(0.5).sum_all()
    };
    z.backward()?;
    // d/dx 0.5 (3x + 1)^2 = 3 (3x + 1)
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![12.0, -15.0]);
    Ok(())
}

/// `grad()` on an intermediate that the caller holds, inside a chain whose other nodes
/// only edges hold, and on a leaf reached through two paths.
#[test]
fn gradients_of_held_intermediates_and_twice_reached_leaves() -> Result<()> {
    let x = param(&[0.5, 1.5]);
    let h = x.mul_scalar(2.0).add_scalar(1.0);
    let z = h.square().add(&x)?.mul_scalar(3.0).sum_all();
    let gs = grad(&[&z], &[&h, &x], &[], false, false)?;
    let gh = gs[0].as_ref().unwrap().value().to_vec::<f64>()?;
    let gx = gs[1].as_ref().unwrap().value().to_vec::<f64>()?;
    // dz/dh = 6h (with h = 2x + 1); dz/dx = 6h * 2 + 3.
    assert_eq!(gh, vec![12.0, 24.0]);
    assert_eq!(gx, vec![27.0, 51.0]);
    Ok(())
}

//! Higher-order gradients: the derivatives of `x^4 + 2x^3 + x^2` up to the fourth,
//! then the Hessian of a small MLP's loss with respect to its parameters, built one row per
//! gradient component, and a Hessian-vector product that needs no Hessian.
//!
//! ```text
//! cargo run --example higher_order
//! ```

use ember::autograd::grad;
use ember::{DType, Error, Result, Tensor, Var};

/// `d y / d x`; with `create_graph` the result can be differentiated again.
fn derivative(y: &Var, x: &Var, create_graph: bool) -> Result<Var> {
    grad(&[y], &[x], &[], true, create_graph)?
        .remove(0)
        .ok_or_else(|| Error::autograd("the output does not depend on the input"))
}

/// A 2 -> 3 -> 1 tanh MLP's mean squared error, as a function of all its parameters
/// packed in one vector (so that the Hessian is a matrix).
fn mlp_loss(theta: &Var, x: &Var, y: &Var) -> Result<Var> {
    let w1 = theta.narrow(0, 0, 6)?.reshape([3, 2])?;
    let b1 = theta.narrow(0, 6, 3)?;
    let w2 = theta.narrow(0, 9, 3)?.reshape([1, 3])?;
    let hidden = x.matmul(&w1.t()?)?.add(&b1)?.tanh();
    Ok(hidden.matmul(&w2.t()?)?.sub(y)?.square().mean_all())
}

fn main() -> Result<()> {
    // f(x) = x^4 + 2x^3 + x^2 at x = 2.
    let x = Var::param(Tensor::scalar(2.0f64));
    let f = x.pow_scalar(4.0)?.add(&x.pow_scalar(3.0)?.mul_scalar(2.0))?.add(&x.square())?;
    println!("f(x) = x^4 + 2x^3 + x^2 at x = 2");
    let mut d = f.clone();
    println!("  f     = {}", d.item()?);
    for name in ["f'", "f''", "f'''", "f''''"] {
        d = derivative(&d, &x, true)?;
        println!("  {name:<5} = {}", d.item()?);
    }

    ember::manual_seed(0);
    let n = 12;
    let theta = Var::param(Tensor::randn([n])?.to_dtype(DType::F64));
    let x = Var::new(Tensor::randn([8, 2])?.to_dtype(DType::F64));
    let y = Var::new(Tensor::randn([8, 1])?.to_dtype(DType::F64));
    let loss = mlp_loss(&theta, &x, &y)?;
    // The gradient, with its own graph: each component can be differentiated again.
    let g = derivative(&loss, &theta, true)?;
    let mut hessian = Vec::with_capacity(n);
    for i in 0..n {
        let gi = g.narrow(0, i, 1)?.sum_all();
        hessian.push(derivative(&gi, &theta, false)?.value().to_vec::<f64>()?);
    }
    println!("\nHessian of a 2-3-1 tanh MLP's loss ({n} parameters):");
    for row in &hessian {
        let cells: Vec<String> = row.iter().map(|h| format!("{h:7.3}")).collect();
        println!("  {}", cells.join(" "));
    }
    let asymmetry =
        (0..n).flat_map(|i| (0..n).map(move |j| (i, j))).map(|(i, j)| (hessian[i][j] - hessian[j][i]).abs());
    println!("largest |H - H^T|: {:.2e}", asymmetry.fold(0.0, f64::max));

    // A Hessian-vector product in one extra backward: d (g . v) / d theta.
    let v = Var::new(Tensor::randn([n])?.to_dtype(DType::F64));
    let hv = derivative(&g.mul(&v)?.sum_all(), &theta, false)?.value().to_vec::<f64>()?;
    let vs = v.value().to_vec::<f64>()?;
    let error = hessian
        .iter()
        .zip(&hv)
        .map(|(row, hvi)| (row.iter().zip(&vs).map(|(h, v)| h * v).sum::<f64>() - hvi).abs())
        .fold(0.0, f64::max);
    println!("Hessian-vector product vs H v: largest difference {error:.2e}");
    Ok(())
}

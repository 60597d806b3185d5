//! Higher-order gradients (create_graph): a polynomial's derivatives, a Hessian-vector
//! product checked against the explicit Hessian, and PyTorch parity for gradient penalties
//! (WGAN-GP), a Hessian-vector product of an MLP and an input-gradient penalty.
//!
//! The PyTorch numbers are committed in `tools/parity/fixtures/higher_order.json`, written
//! by `tools/parity/higher_order.py` (regenerate with
//! `/work/.venv-torch/bin/python tools/parity/higher_order.py`); this test needs no Python.
//! Every fixture tensor must be used and matched within `1e-5 + 1e-5 * |expected|`.

use ember_autograd::{Var, grad};
use ember_tensor::{DType, Result, Tensor};
use ember_testing::{Case, LazyFixture, Tolerance};

fn scalar(v: f64) -> Var {
    Var::param(Tensor::scalar(v))
}

fn d(y: &Var, x: &Var, create_graph: bool) -> Result<Var> {
    grad(&[y], &[x], &[], false, create_graph)?[0]
        .clone()
        .ok_or_else(|| ember_tensor::Error::autograd("the output does not depend on the input"))
}

#[test]
fn polynomial_derivatives() -> Result<()> {
    // f(x) = x^4 + 2x^3 + x^2 at x = 2: f = 36, f' = 4x^3 + 6x^2 + 2x = 60,
    // f'' = 12x^2 + 12x + 2 = 74, f''' = 24x + 12 = 60, f'''' = 24.
    let x = scalar(2.0);
    let f = x.pow_scalar(4.0)?.add(&x.pow_scalar(3.0)?.mul_scalar(2.0))?.add(&x.square())?;
    let d1 = d(&f, &x, true)?;
    let d2 = d(&d1, &x, true)?;
    let d3 = d(&d2, &x, true)?;
    let d4 = d(&d3, &x, false)?;
    assert_eq!([f.item()?, d1.item()?, d2.item()?, d3.item()?, d4.item()?], [36.0, 60.0, 74.0, 60.0, 24.0]);
    // The same through backward_full: .grad carries the graph of f'.
    f.backward_full(None, false, true)?;
    let g = x.grad_var().expect("x has a gradient");
    assert!(g.requires_grad());
    x.zero_grad();
    g.backward()?;
    assert_eq!(x.grad().expect("second order").item()?, 74.0);
    Ok(())
}

/// A small MLP loss of a flat parameter vector, so that its Hessian is a matrix.
fn mlp_loss(theta: &Var, x: &Var, y: &Var) -> Result<Var> {
    let w1 = theta.narrow(0, 0, 6)?.reshape([3, 2])?;
    let b1 = theta.narrow(0, 6, 3)?;
    let w2 = theta.narrow(0, 9, 3)?.reshape([1, 3])?;
    let h = x.matmul(&w1.t()?)?.add(&b1)?.tanh();
    let pred = h.matmul(&w2.t()?)?;
    Ok(pred.sub(y)?.square().mean_all())
}

#[test]
fn hessian_vector_product_matches_the_explicit_hessian() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(11);
    let n = 12;
    let theta = Var::param(Tensor::randn([n])?.to_dtype(DType::F64));
    let x = Var::new(Tensor::randn([5, 2])?.to_dtype(DType::F64));
    let y = Var::new(Tensor::randn([5, 1])?.to_dtype(DType::F64));
    let v = Var::new(Tensor::randn([n])?.to_dtype(DType::F64));

    let loss = mlp_loss(&theta, &x, &y)?;
    let g = d(&loss, &theta, true)?;
    // Hv = d (g . v) / d theta, one extra backward.
    let hv = d(&g.mul(&v)?.sum_all(), &theta, false)?.value().to_vec::<f64>()?;

    // The explicit Hessian, one row per gradient component.
    let mut hessian = vec![vec![0.0f64; n]; n];
    for (i, row) in hessian.iter_mut().enumerate() {
        let gi = g.narrow(0, i, 1)?.sum_all();
        *row = grad(&[&gi], &[&theta], &[], true, false)?[0].clone().expect("row").value().to_vec::<f64>()?;
    }
    let vs = v.value().to_vec::<f64>()?;
    for (i, row) in hessian.iter().enumerate() {
        let expected: f64 = row.iter().zip(&vs).map(|(h, v)| h * v).sum();
        assert!((hv[i] - expected).abs() < 1e-10, "Hv[{i}] = {}, H v = {expected}", hv[i]);
        for (j, h) in row.iter().enumerate().take(i) {
            assert!((h - hessian[j][i]).abs() < 1e-10, "the Hessian is symmetric at ({i}, {j})");
        }
    }
    // A curved loss: the Hessian is not zero.
    assert!(hessian.iter().flatten().any(|h| h.abs() > 1e-3));
    Ok(())
}

// ---- PyTorch parity ---------------------------------------------------------------------

static FIXTURE: LazyFixture = ember_testing::parity_fixture!("higher_order.json");
const TOL: Tolerance = Tolerance::new(1e-5, 1e-5);

/// Replays scenario `name` with `build`, panicking with every problem found.
fn replay(name: &str, build: impl FnOnce(&mut Case<'_>) -> Result<()>) {
    FIXTURE.run(name, TOL, build);
}

/// `x @ w^T + b` (nn.Linear).
fn linear(x: &Var, w: &Var, b: Option<&Var>) -> Result<Var> {
    let y = x.matmul(&w.t()?)?;
    match b {
        Some(b) => y.add(b),
        None => Ok(y),
    }
}

fn critic(p: &[Var], x: &Var, act: fn(&Var) -> Var) -> Result<Var> {
    let h = act(&linear(x, &p[0], Some(&p[1]))?);
    let h = act(&linear(&h, &p[2], Some(&p[3]))?);
    linear(&h, &p[4], Some(&p[5]))
}

const CRITIC: [&str; 6] = ["W1", "b1", "W2", "b2", "W3", "b3"];

fn wgan_gp(c: &mut Case<'_>, act: fn(&Var) -> Var) -> Result<()> {
    let params: Vec<Var> = CRITIC.iter().map(|k| c.param(k)).collect();
    let real = c.constant("real");
    let fake = c.constant("fake");
    let eps = c.constant("eps");
    let x_hat = eps.mul(&real)?.add(&eps.rsub_scalar(1.0).mul(&fake)?)?;
    let x_hat = Var::param(x_hat.value());
    let d_hat = critic(&params, &x_hat, act)?;
    let g = grad(&[&d_hat.sum_all()], &[&x_hat], &[], false, true)?[0].clone().expect("dD/dx");
    let norm = g.square().sum(1, false)?.sqrt();
    let gp = norm.sub_scalar(1.0).square().mean_all();
    let loss = critic(&params, &fake, act)?
        .mean_all()
        .sub(&critic(&params, &real, act)?.mean_all())?
        .add(&gp.mul_scalar(10.0))?;
    loss.backward()?;
    c.output("norm", &norm);
    c.output("gp", &gp);
    c.output("loss", &loss);
    for (k, p) in CRITIC.iter().zip(&params) {
        c.grad(k, p);
    }
    Ok(())
}

#[test]
fn wgan_gp_tanh() {
    replay("wgan_gp_tanh", |c| wgan_gp(c, |v| v.tanh()));
}

#[test]
fn wgan_gp_leaky_relu() {
    replay("wgan_gp_leaky_relu", |c| wgan_gp(c, |v| v.leaky_relu(0.2)));
}

#[test]
fn hvp_mlp() {
    replay("hvp_mlp", hvp_mlp_case);
}

fn hvp_mlp_case(c: &mut Case<'_>) -> Result<()> {
    let (w1, b1, w2) = (c.param("W1"), c.param("b1"), c.param("W2"));
    let (x, y) = (c.constant("x"), c.constant("y"));
    let vs = [c.constant("v1"), c.constant("vb"), c.constant("v2")];
    let params = [&w1, &b1, &w2];
    let pred = linear(&linear(&x, &w1, Some(&b1))?.softplus(1.0, 20.0), &w2, None)?;
    let loss = pred.sub(&y)?.square().mean_all();
    let grads = grad(&[&loss], &params, &[], false, true)?;
    let mut dot: Option<Var> = None;
    for (g, v) in grads.iter().zip(&vs) {
        let term = g.as_ref().expect("every parameter has a gradient").mul(v)?.sum_all();
        dot = Some(match dot {
            None => term,
            Some(acc) => acc.add(&term)?,
        });
    }
    let hv = grad(&[&dot.expect("three terms")], &params, &[], false, true)?;
    let mut norm2: Option<Var> = None;
    for (k, h) in ["hv_W1", "hv_b1", "hv_W2"].iter().zip(&hv) {
        let h = h.as_ref().expect("Hv has every block");
        c.output(k, h);
        let term = h.square().sum_all();
        norm2 = Some(match norm2 {
            None => term,
            Some(acc) => acc.add(&term)?,
        });
    }
    norm2.expect("three terms").backward()?;
    for (k, p) in [("W1", &w1), ("b1", &b1), ("W2", &w2)] {
        c.grad(k, p);
    }
    Ok(())
}

#[test]
fn input_gradient_penalty() {
    replay("input_gradient_penalty", input_gradient_penalty_case);
}

fn input_gradient_penalty_case(c: &mut Case<'_>) -> Result<()> {
    let (w1, w2, x) = (c.param("W1"), c.param("W2"), c.param("x"));
    let onehot = c.constant("onehot");
    let logits = linear(&linear(&x, &w1, None)?.tanh(), &w2, None)?;
    let ce = logits.log_softmax(1)?.mul(&onehot)?.sum(1, false)?.mean_all().neg();
    let gx = grad(&[&ce], &[&x], &[], false, true)?[0].clone().expect("dCE/dx");
    let penalty = gx.square().sum_all();
    penalty.backward()?;
    c.output("ce", &ce);
    c.output("gx", &gx);
    c.output("penalty", &penalty);
    for (k, p) in [("W1", &w1), ("W2", &w2), ("x", &x)] {
        c.grad(k, p);
    }
    Ok(())
}

#[test]
fn every_fixture_scenario_has_a_test() {
    let names = FIXTURE.get().names();
    assert_eq!(names, ["wgan_gp_tanh", "wgan_gp_leaky_relu", "hvp_mlp", "input_gradient_penalty"]);
}

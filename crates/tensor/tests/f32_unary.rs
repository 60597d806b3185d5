//! The `f32` unary kernels (vectorised exp, ln and tanh, and everything built on them)
//! against the same functions computed in `f64`, on a grid that covers ordinary values,
//! the overflow and underflow thresholds of `exp`, subnormals, huge magnitudes, infinities
//! and NaN. `reference.rs` checks every kernel in `f64`, which never reaches these paths.
//!
//! A result passes when it is NaN exactly where the reference is, equal to it where either
//! is infinite, and otherwise within `REL` of it plus an absolute allowance: a floor at the
//! bottom of the f32 range (where results flush or become subnormal) and, for GELU, a
//! multiple of `|x|` for the cancellation in `1 + erf(x / sqrt 2)` that PyTorch's f32
//! kernel has too. The tests turn off flushing subnormals to zero, so that the kernels
//! follow IEEE arithmetic into the subnormal range as the reference does.

mod common;

use common::ieee_subnormals;
use ember_tensor::{Tensor, UnaryOp};
use std::f64::consts::{FRAC_1_SQRT_2, PI};

/// About 8 ulp of f32.
const REL: f64 = 1e-6;

/// Inputs: a dense sweep over [-120, 120], a log-spaced sweep over all magnitudes, and the
/// special points. More than 4096 of them, so the kernels split the work across threads.
fn grid() -> Vec<f32> {
    let mut xs: Vec<f32> = (-12_000..=12_000).map(|i| i as f32 * 0.01).collect();
    let mut m = f32::from_bits(1);
    while m < f32::MAX / 1.5 {
        xs.extend([m, -m]);
        m *= 1.5;
    }
    xs.extend([
        0.0,
        -0.0,
        f32::MIN_POSITIVE,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        88.72,
        88.7228,
        88.72283,
        88.73,
        -87.3,
        -87.34,
        -87.4,
        -100.0,
        -103.97,
        -104.0,
        20.0,
        20.0001,
        0.25,
        -0.25,
        1e-8,
        -1e-8,
    ]);
    xs
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

struct Check {
    name: &'static str,
    f32_result: Tensor,
    reference: fn(f64) -> f64,
    /// Absolute allowance as a multiple of `max(|x|, 1)`, besides the floor.
    abs_per_x: f64,
}

fn check_all(xs: &[f32], checks: Vec<Check>) {
    for c in checks {
        let got = c.f32_result.to_vec::<f32>().unwrap();
        assert_eq!(got.len(), xs.len(), "{}", c.name);
        for (&g, &x) in got.iter().zip(xs) {
            let want = (c.reference)(x as f64);
            let g64 = g as f64;
            if want.is_nan() || g.is_nan() {
                assert!(want.is_nan() && g.is_nan(), "{}({x:e}) = {g:e}, want {want:e}", c.name);
                continue;
            }
            let want32 = want as f32;
            if want32.is_infinite() || g.is_infinite() {
                assert_eq!(g, want32, "{}({x:e})", c.name);
                continue;
            }
            let per_x = if c.abs_per_x > 0.0 { c.abs_per_x * (x as f64).abs().max(1.0) } else { 0.0 };
            let tol = REL * want.abs() + 1e-37 + per_x;
            assert!((g64 - want).abs() <= tol, "{}({x:e}) = {g:e}, want {want:e}", c.name);
        }
    }
}

#[test]
fn f32_unary_kernels_match_f64() {
    // The grid reaches subnormal inputs and results, which the reference computes by IEEE.
    ieee_subnormals();
    let xs = grid();
    let n = xs.len();
    // Contiguous, and a strided view of the same values (every other element of a buffer
    // twice as long), which takes the non-contiguous path.
    let contiguous = Tensor::from_vec(xs.clone(), [n]).unwrap();
    let doubled: Vec<f32> = xs.iter().flat_map(|&x| [x, 7.0]).collect();
    let strided = Tensor::from_vec(doubled, [n, 2]).unwrap().select(1, 0).unwrap();
    assert!(!strided.is_contiguous());
    for t in [&contiguous, &strided] {
        let checks = vec![
            Check { name: "exp", f32_result: t.exp(), reference: f64::exp, abs_per_x: 0.0 },
            Check { name: "log", f32_result: t.log(), reference: f64::ln, abs_per_x: 0.0 },
            Check { name: "tanh", f32_result: t.tanh(), reference: f64::tanh, abs_per_x: 0.0 },
            Check { name: "sigmoid", f32_result: t.sigmoid(), reference: sigmoid, abs_per_x: 0.0 },
            Check { name: "silu", f32_result: t.silu(), reference: |x| x * sigmoid(x), abs_per_x: 1e-37 },
            Check {
                name: "softplus",
                f32_result: t.softplus(1.0, 20.0),
                reference: |x| if x > 20.0 { x } else { x.exp().ln_1p() },
                abs_per_x: 0.0,
            },
            Check {
                name: "gelu",
                f32_result: t.gelu(),
                reference: |x| 0.5 * x * (1.0 + libm::erf(x * FRAC_1_SQRT_2)),
                abs_per_x: 2e-7,
            },
            Check {
                name: "gelu_tanh",
                f32_result: t.gelu_tanh(),
                reference: |x| 0.5 * x * (1.0 + ((2.0 / PI).sqrt() * (x + 0.044715 * x * x * x)).tanh()),
                abs_per_x: 5e-7,
            },
            Check {
                name: "elu",
                f32_result: t.elu(1.0),
                reference: |x| if x > 0.0 { x } else { x.exp_m1() },
                abs_per_x: 0.0,
            },
            Check { name: "erf", f32_result: t.erf(), reference: libm::erf, abs_per_x: 0.0 },
            Check { name: "log1p", f32_result: t.log1p(), reference: f64::ln_1p, abs_per_x: 0.0 },
            Check { name: "expm1", f32_result: t.expm1(), reference: f64::exp_m1, abs_per_x: 0.0 },
            Check { name: "sqrt", f32_result: t.sqrt(), reference: f64::sqrt, abs_per_x: 0.0 },
            Check { name: "rsqrt", f32_result: t.rsqrt(), reference: |x| 1.0 / x.sqrt(), abs_per_x: 0.0 },
        ];
        check_all(&xs, checks);
    }
}

#[test]
fn f32_in_place_kernels_match_f64() {
    // As above.
    ieee_subnormals();
    let xs = grid();
    for (op, reference) in [
        (UnaryOp::Exp, f64::exp as fn(f64) -> f64),
        (UnaryOp::Log, f64::ln),
        (UnaryOp::Tanh, f64::tanh),
        (UnaryOp::Sigmoid, sigmoid),
    ] {
        let t = Tensor::from_vec(xs.clone(), [xs.len()]).unwrap();
        t.apply_(op).unwrap();
        check_all(&xs, vec![Check { name: op.name(), f32_result: t, reference, abs_per_x: 0.0 }]);
    }
}

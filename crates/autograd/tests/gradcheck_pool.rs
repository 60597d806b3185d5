//! Gradients of pooling and interpolation against `f64` central differences, to first and
//! second order: strides, padding, dilation, `ceil_mode`, `count_include_pad`,
//! `divisor_override`, adaptive sizes that do not divide the input, nearest and (bi)linear
//! interpolation with both `align_corners`, 1-d, 2-d and unbatched inputs, and
//! non-contiguous inputs.
//!
//! Max pooling is checked at inputs without ties (normal samples), where the maximum of each
//! window is unique and the function is differentiable.

use ember_autograd::{Var, enable_grad, grad};
use ember_tensor::ops::pool::{AvgPoolArgs, InterpolateArgs, InterpolateMode, MaxPoolArgs};
use ember_tensor::{Result, Tensor};
use ember_testing::gradcheck::{check, normal, transposed};

/// The gradient of `sum(op(x) * w)` with respect to `x`, with `create_graph`: its
/// gradcheck (in `x` and `w`) checks `op`'s backward's backward.
fn first_derivative(x: &Var, w: &Var, op: &impl Fn(&Var) -> Result<Var>) -> Result<Var> {
    enable_grad(|| {
        // In gradcheck's numerical pass the inputs are constants: make it a parameter so
        // that there is a graph to differentiate.
        let x = if x.requires_grad() { x.clone() } else { Var::param(x.value()) };
        let y = op(&x)?;
        let g = grad(&[&y], &[&x], &[w], false, true)?;
        Ok(g.into_iter().next().flatten().unwrap_or_else(|| Var::new(x.value().zeros_like())))
    })
}

/// First- and second-order gradcheck of `op` at `x`.
#[track_caller]
fn check_both(name: &str, op: impl Fn(&Var) -> Result<Var>, x: Tensor, seed: u64) {
    check(name, |v| op(&v[0]), std::slice::from_ref(&x));
    let out = op(&Var::new(x.clone())).unwrap().shape();
    let w = normal(seed, out.dims());
    check(&format!("second order: {name}"), |v| first_derivative(&v[0], &v[1], &op), &[x, w]);
}

#[test]
fn max_pool2d_gradients() {
    let cases: Vec<(&str, Vec<usize>, MaxPoolArgs<2>)> = vec![
        ("2x2", vec![2, 3, 6, 6], MaxPoolArgs::new(2)),
        ("3x3 stride 2 padded ceil", vec![1, 2, 7, 7], MaxPoolArgs::new(3).stride(2).padding(1).ceil_mode(true)),
        ("dilated overlapping padded", vec![1, 2, 6, 5], MaxPoolArgs::new(2).stride(1).padding(1).dilation(2)),
        ("rectangular", vec![2, 1, 5, 7], MaxPoolArgs::new([2, 3]).stride([1, 2])),
        ("unbatched", vec![2, 5, 5], MaxPoolArgs::new(2).ceil_mode(true)),
    ];
    for (i, (name, shape, args)) in cases.into_iter().enumerate() {
        let x = normal(10 + i as u64, &shape);
        check_both(name, |v| v.max_pool2d(&args), x.clone(), 100 + i as u64);
        check_both(&format!("{name}, transposed"), |v| v.max_pool2d(&args), transposed(&x), 200 + i as u64);
    }
}

#[test]
fn max_pool1d_and_adaptive_max_gradients() {
    let args = MaxPoolArgs::<1>::new(3).stride(2).padding(1).ceil_mode(true);
    check_both("max_pool1d", |v| v.max_pool1d(&args), normal(1, &[2, 3, 9]), 2);
    check_both("max_pool1d unbatched, transposed", |v| v.max_pool1d(&args), transposed(&normal(3, &[8, 3])), 4);
    check_both("adaptive_max_pool2d", |v| v.adaptive_max_pool2d([3, 2]), normal(5, &[1, 2, 7, 5]), 6);
    check_both("adaptive_max_pool1d", |v| Ok(v.adaptive_max_pool_with_indices([3])?.0), normal(7, &[2, 2, 5]), 8);
}

#[test]
fn avg_pool_gradients() {
    let cases: Vec<(&str, Vec<usize>, AvgPoolArgs<2>)> = vec![
        ("2x2", vec![2, 2, 4, 6], AvgPoolArgs::new(2)),
        ("padded ceil, pad counted", vec![1, 2, 5, 5], AvgPoolArgs::new(3).stride(2).padding(1).ceil_mode(true)),
        (
            "padded ceil, pad not counted",
            vec![1, 2, 5, 6],
            AvgPoolArgs::new(3).stride(2).padding(1).ceil_mode(true).count_include_pad(false),
        ),
        ("divisor override", vec![1, 1, 5, 5], AvgPoolArgs::new([2, 3]).stride(1).divisor_override(5)),
        ("unbatched", vec![3, 4, 4], AvgPoolArgs::new(2).stride(1)),
    ];
    for (i, (name, shape, args)) in cases.into_iter().enumerate() {
        let x = normal(20 + i as u64, &shape);
        check_both(name, |v| v.avg_pool2d(&args), x.clone(), 120 + i as u64);
        check_both(&format!("{name}, transposed"), |v| v.avg_pool2d(&args), transposed(&x), 220 + i as u64);
    }
    let args = AvgPoolArgs::<1>::new(3).stride(2).padding(1).count_include_pad(false);
    check_both("avg_pool1d", |v| v.avg_pool1d(&args), normal(30, &[2, 3, 8]), 31);
}

#[test]
fn adaptive_avg_pool_gradients() {
    check_both("adaptive_avg_pool2d", |v| v.adaptive_avg_pool2d([3, 4]), normal(40, &[1, 2, 7, 5]), 41);
    check_both(
        "adaptive_avg_pool2d, transposed",
        |v| v.adaptive_avg_pool2d([2, 3]),
        transposed(&normal(42, &[2, 1, 5, 7])),
        43,
    );
    check_both("adaptive_avg_pool1d", |v| v.adaptive_avg_pool1d(4), normal(44, &[2, 3, 10]), 45);
    check_both("adaptive_avg_pool2d unbatched", |v| v.adaptive_avg_pool2d([1, 1]), normal(46, &[3, 4, 4]), 47);
}

#[test]
fn interpolate_gradients() {
    let bilinear = |align| InterpolateArgs::size([5, 7]).mode(InterpolateMode::Bilinear).align_corners(align);
    let cases: Vec<(&str, Vec<usize>, InterpolateArgs)> = vec![
        ("nearest x2", vec![1, 2, 3, 4], InterpolateArgs::scale_factor([2.0])),
        ("nearest to size", vec![2, 1, 3, 4], InterpolateArgs::size([5, 7])),
        ("nearest down, scale", vec![1, 2, 5, 6], InterpolateArgs::scale_factor([0.7, 0.5])),
        ("bilinear, align_corners", vec![1, 2, 3, 4], bilinear(true)),
        ("bilinear, half pixels", vec![1, 2, 3, 4], bilinear(false)),
        (
            "bilinear down, scale",
            vec![1, 1, 6, 5],
            InterpolateArgs::scale_factor([0.6]).mode(InterpolateMode::Bilinear),
        ),
        (
            "linear, recomputed scale",
            vec![2, 2, 5],
            InterpolateArgs::scale_factor([1.7]).mode(InterpolateMode::Linear).recompute_scale_factor(true),
        ),
    ];
    for (i, (name, shape, args)) in cases.into_iter().enumerate() {
        let x = normal(50 + i as u64, &shape);
        check_both(name, |v| v.interpolate(&args), x.clone(), 150 + i as u64);
        check_both(&format!("{name}, transposed"), |v| v.interpolate(&args), transposed(&x), 250 + i as u64);
    }
}

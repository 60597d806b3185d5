//! Gradients of the convolutions, transposed convolutions, `unfold` and `fold` against
//! `f64` central differences, to first and second order, with every argument that changes
//! the kernels' paths: stride, padding (`"same"` with an even kernel too), dilation,
//! groups, depthwise, 1x1, bias or not, 1-d and unbatched inputs, and non-contiguous
//! operands.
//!
//! Second order: gradcheck of a function returning the first derivative computed with
//! `create_graph` (for every input, against a random output gradient that is itself an
//! input), which needs each backward formula to be a differentiable, correct composition.

use ember_autograd::{Var, enable_grad, grad};
use ember_tensor::{ConvArgs, ConvTransposeArgs, Padding, Result, UnfoldArgs};
use ember_testing::gradcheck::{check, check_both, normal, transposed};

/// A case: its name, the input and weight shapes, whether there is a bias, the arguments.
type Case<A> = (&'static str, [usize; 4], [usize; 4], bool, A);

#[test]
fn conv2d_gradients() {
    let cases: Vec<Case<ConvArgs<2>>> = vec![
        ("padded, bias", [2, 3, 5, 5], [4, 3, 3, 3], true, ConvArgs::default().padding(1)),
        (
            "strided, dilated, rectangular kernel",
            [1, 2, 6, 7],
            [3, 2, 2, 3],
            false,
            ConvArgs::default().stride([2, 1]).padding([1, 2]).dilation([2, 1]),
        ),
        ("grouped", [2, 4, 5, 4], [6, 2, 3, 3], true, ConvArgs::default().groups(2)),
        ("depthwise", [1, 3, 5, 5], [3, 1, 3, 3], true, ConvArgs::default().padding(1).groups(3)),
        ("same, even kernel", [1, 2, 5, 6], [2, 2, 2, 4], false, ConvArgs::default().padding(Padding::Same)),
        ("1x1", [2, 3, 3, 3], [4, 3, 1, 1], true, ConvArgs::default()),
        ("1x1 strided", [1, 2, 5, 5], [3, 2, 1, 1], false, ConvArgs::default().stride(2)),
    ];
    for (k, (name, xs, ws, bias, args)) in cases.into_iter().enumerate() {
        let seed = 100 + 10 * k as u64;
        let mut inputs = vec![normal(seed, &xs), normal(seed + 1, &ws)];
        if bias {
            inputs.push(normal(seed + 2, &[ws[0]]));
        }
        let f = move |v: &[Var]| v[0].conv2d(&v[1], v.get(2), &args);
        check_both(&format!("conv2d {name}"), f, &inputs, seed + 3);
        // The same on a non-contiguous input and weight.
        inputs[0] = transposed(&inputs[0]);
        inputs[1] = transposed(&inputs[1]);
        check(&format!("conv2d {name}, strided operands"), f, &inputs);
    }
    // An unbatched input.
    let f = |v: &[Var]| v[0].conv2d(&v[1], Some(&v[2]), &ConvArgs::default().stride(2).padding(1));
    check_both("conv2d unbatched", f, &[normal(200, &[2, 5, 4]), normal(201, &[3, 2, 3, 3]), normal(202, &[3])], 203);
}

#[test]
fn conv1d_gradients() {
    let args = ConvArgs::default().stride(2).padding(1).dilation(2).groups(2);
    let f = move |v: &[Var]| v[0].conv1d(&v[1], Some(&v[2]), &args);
    let inputs = [normal(300, &[2, 4, 9]), normal(301, &[4, 2, 3]), normal(302, &[4])];
    check_both("conv1d", f, &inputs, 303);
    check("conv1d, strided input", f, &[transposed(&inputs[0]), inputs[1].clone(), inputs[2].clone()]);
    let same = |v: &[Var]| v[0].conv1d(&v[1], None, &ConvArgs::default().padding(Padding::Same));
    check_both("conv1d same, unbatched", same, &[normal(304, &[3, 6]), normal(305, &[2, 3, 4])], 306);
}

#[test]
fn conv_transpose_gradients() {
    let cases: Vec<Case<ConvTransposeArgs<2>>> = vec![
        ("plain, bias", [2, 3, 3, 4], [3, 2, 3, 3], true, ConvTransposeArgs::default()),
        (
            "strided, padded, output padding",
            [1, 2, 3, 3],
            [2, 3, 3, 2],
            false,
            ConvTransposeArgs::default().stride(2).padding([1, 0]).output_padding([1, 1]),
        ),
        (
            "grouped, dilated",
            [1, 4, 3, 3],
            [4, 2, 2, 3],
            true,
            ConvTransposeArgs::default().groups(2).dilation([2, 1]).stride([1, 2]),
        ),
        ("depthwise", [2, 3, 3, 3], [3, 1, 3, 3], false, ConvTransposeArgs::default().groups(3).padding(1)),
    ];
    for (k, (name, xs, ws, bias, args)) in cases.into_iter().enumerate() {
        let seed = 400 + 10 * k as u64;
        let mut inputs = vec![normal(seed, &xs), normal(seed + 1, &ws)];
        if bias {
            inputs.push(normal(seed + 2, &[ws[1] * args.groups]));
        }
        let f = move |v: &[Var]| v[0].conv_transpose2d(&v[1], v.get(2), &args);
        check_both(&format!("conv_transpose2d {name}"), f, &inputs, seed + 3);
        inputs[0] = transposed(&inputs[0]);
        check(&format!("conv_transpose2d {name}, strided input"), f, &inputs);
    }
    let args = ConvTransposeArgs::default().stride(3).padding(1).output_padding(2);
    let f = move |v: &[Var]| v[0].conv_transpose1d(&v[1], Some(&v[2]), &args);
    check_both("conv_transpose1d", f, &[normal(500, &[2, 2, 4]), normal(501, &[2, 3, 3]), normal(502, &[3])], 503);
}

#[test]
fn unfold_and_fold_gradients() {
    let args = UnfoldArgs::new([2, 3]).stride([2, 1]).padding([1, 1]).dilation([1, 2]);
    let x = normal(600, &[2, 2, 5, 6]);
    let unfold = move |v: &[Var]| v[0].im2col(&args);
    check_both("unfold", unfold, std::slice::from_ref(&x), 601);
    check("unfold, strided input", unfold, &[transposed(&x)]);
    let cols = Var::new(x.clone()).im2col(&args).unwrap().shape();
    let fold = move |v: &[Var]| v[0].col2im([5, 6], &args);
    let c = normal(602, cols.dims());
    check_both("fold", fold, std::slice::from_ref(&c), 603);
    check("fold, strided input", fold, &[transposed(&c)]);
    check_both("unfold unbatched", |v| v[0].im2col(&UnfoldArgs::new(2)), &[normal(604, &[2, 3, 3])], 605);
}

/// A WGAN-GP style penalty through a small convolutional critic: the gradient of the
/// penalty with respect to the critic's weights goes through the critic's backward.
#[test]
fn gradient_penalty_through_a_conv_critic() {
    let critic = |x: &Var, w1: &Var, b1: &Var, w2: &Var| -> Result<Var> {
        let h = x.conv2d(w1, Some(b1), &ConvArgs::default().stride(2).padding(1))?.tanh();
        Ok(h.conv2d(w2, None, &ConvArgs::default())?.sum_all())
    };
    let penalty = move |v: &[Var]| -> Result<Var> {
        enable_grad(|| {
            let x = if v[0].requires_grad() { v[0].clone() } else { Var::param(v[0].value()) };
            let score = critic(&x, &v[1], &v[2], &v[3])?;
            let g = grad(&[&score], &[&x], &[], false, true)?[0].clone().expect("a gradient");
            let norm = g.square().sum_all().sqrt();
            Ok(norm.sub_scalar(1.0).square())
        })
    };
    let inputs =
        [normal(700, &[2, 2, 5, 5]), normal(701, &[3, 2, 3, 3]), normal(702, &[3]), normal(703, &[1, 3, 3, 3])];
    check("gradient penalty", penalty, &inputs);
}

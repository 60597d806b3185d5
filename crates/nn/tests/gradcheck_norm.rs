//! Gradients of the normalization ops (batch norm in training and evaluation, group norm,
//! instance norm, RMS norm) against `f64` central differences, to first and second order,
//! with and without an affine part, over ranks 2 to 4 and on non-contiguous inputs.
//!
//! Second order: gradcheck of a function returning the first derivative computed with
//! `create_graph` (for every input, against a random output gradient that is itself an
//! input), which checks that the backward recorded under `create_graph` is a correct,
//! differentiable composition, and the first-order check covers the fused backward kernel.

use ember_autograd::Var;
use ember_nn::functional as F;
use ember_tensor::Tensor;
use ember_testing::gradcheck::{check_both, normal, transposed};

/// The input, plus weight and bias of `[c]` when `affine`.
fn operands(seed: u64, shape: &[usize], c: usize, affine: bool) -> Vec<Tensor> {
    let mut xs = vec![normal(seed, shape)];
    if affine {
        xs.push(normal(seed + 1, &[c]));
        xs.push(normal(seed + 2, &[c]));
    }
    xs
}

fn affine_of(v: &[Var]) -> (Option<&Var>, Option<&Var>) {
    (v.get(1), v.get(2))
}

#[test]
fn batch_norm_training_gradients() {
    for (i, shape) in [vec![5, 3], vec![3, 2, 4], vec![2, 3, 2, 3]].into_iter().enumerate() {
        for affine in [false, true] {
            let name = format!("batch_norm train {shape:?} affine={affine}");
            let op = |v: &[Var]| {
                let (w, b) = affine_of(v);
                F::batch_norm(&v[0], None, None, w, b, true, 0.1, 1e-5)
            };
            check_both(&name, op, &operands(10 + i as u64, &shape, shape[1], affine), 90 + i as u64);
        }
    }
}

#[test]
fn batch_norm_training_non_contiguous() {
    let mut xs = operands(20, &[3, 2, 3, 4], 2, true);
    xs[0] = transposed(&xs[0]);
    let op = |v: &[Var]| F::batch_norm(&v[0], None, None, v.get(1), v.get(2), true, 0.1, 1e-5);
    check_both("batch_norm train, transposed input", op, &xs, 21);
    // Channels not in dimension 1 of the storage: the input permuted so that C is innermost.
    let x = normal(22, &[2, 3, 4, 3]).permute(&[0, 3, 1, 2]).unwrap();
    let op = |v: &[Var]| F::batch_norm(&v[0], None, None, None, None, true, 0.1, 1e-5);
    check_both("batch_norm train, channels-last storage", op, &[x], 23);
}

#[test]
fn batch_norm_eval_gradients() {
    let mean = normal(30, &[3]);
    let var = normal(31, &[3]).abs().add_scalar(0.5);
    for affine in [false, true] {
        for shape in [vec![4, 3], vec![2, 3, 2, 2]] {
            let name = format!("batch_norm eval {shape:?} affine={affine}");
            let op = |v: &[Var]| {
                let (w, b) = affine_of(v);
                F::batch_norm(&v[0], Some(&mean), Some(&var), w, b, false, 0.1, 1e-5)
            };
            check_both(&name, op, &operands(32, &shape, 3, affine), 33);
        }
    }
}

#[test]
fn group_norm_gradients() {
    for (groups, shape) in [(1, vec![2, 4, 3]), (2, vec![2, 4, 3, 2]), (4, vec![3, 4]), (3, vec![2, 6, 2])] {
        for affine in [false, true] {
            let name = format!("group_norm {groups} groups {shape:?} affine={affine}");
            let op = |v: &[Var]| {
                let (w, b) = affine_of(v);
                F::group_norm(&v[0], groups, w, b, 1e-5)
            };
            check_both(&name, op, &operands(40 + groups as u64, &shape, shape[1], affine), 49);
        }
    }
    let x = transposed(&normal(41, &[2, 4, 3, 3]));
    check_both("group_norm transposed input", |v: &[Var]| F::group_norm(&v[0], 2, None, None, 1e-5), &[x], 42);
}

#[test]
fn instance_norm_gradients() {
    for affine in [false, true] {
        let name = format!("instance_norm affine={affine}");
        let op = |v: &[Var]| {
            let (w, b) = affine_of(v);
            F::instance_norm(&v[0], None, None, w, b, true, 0.1, 1e-5)
        };
        check_both(&name, op, &operands(50, &[2, 3, 2, 3], 3, affine), 51);
    }
    let x = transposed(&normal(52, &[2, 2, 3, 4]));
    let op = |v: &[Var]| F::instance_norm(&v[0], None, None, None, None, true, 0.1, 1e-5);
    check_both("instance_norm transposed input", op, &[x], 53);
}

#[test]
fn rms_norm_gradients() {
    let xs = vec![normal(60, &[3, 4, 2]), normal(61, &[4, 2])];
    check_both("rms_norm (4, 2) weight", |v: &[Var]| F::rms_norm(&v[0], &[4, 2], Some(&v[1]), None), &xs, 62);
    let x = transposed(&normal(63, &[2, 3, 5]));
    check_both("rms_norm transposed", |v: &[Var]| F::rms_norm(&v[0], &[5], None, Some(1e-3)), &[x], 64);
}

//! Gradient checks for every differentiable `Var` operation: each backward formula is
//! compared with `f64` central differences by [`gradcheck`].
//!
//! Every operation is checked on contiguous inputs and on non-contiguous ones (transposed,
//! narrowed, strided, broadcast with stride 0), so that both the strided kernels of the
//! forward and the layouts the backward formulas produce are exercised; operations that
//! broadcast are checked on broadcasting shapes. Inputs are kept away from the points where
//! an operation is not differentiable (kinks, ties, jumps, the edge of its domain), except
//! where the operation defines a value there that central differences reproduce (a two-way
//! tie splits the gradient in half; a product with one zero). The last section checks
//! second derivatives: gradcheck of a function that returns a first derivative computed
//! with `create_graph`, which requires the backward formulas themselves to be
//! differentiable and correct.

use ember_autograd::{Var, enable_grad, grad, gradcheck};
use ember_tensor::{DType, Result, Shape, Tensor, manual_seed};
use ember_testing::elementwise::{BINARY, BinaryInputs};
use ember_testing::elementwise::{Domain, any, between_jumps, far_from_zero, off_zero, positive};
use ember_testing::{Grad, UNARY};
use parking_lot::Mutex;

const EPS: f64 = 1e-6;
const ATOL: f64 = 1e-7;
const RTOL: f64 = 1e-5;

// ---------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------

/// The tests of this file run on several threads but draw from ember's one global
/// generator: holding this lock from `manual_seed` to the last draw makes every input the
/// same on every run, whatever the order the tests run in.
static RNG: Mutex<()> = Mutex::new(());

fn seeded<R>(seed: u64, draw: impl FnOnce() -> Result<R>) -> Result<R> {
    let _guard = RNG.lock();
    manual_seed(seed);
    draw()
}

/// Standard normal `f64` samples, reproducible from `seed`.
fn normal(seed: u64, shape: &[usize]) -> Result<Tensor> {
    seeded(seed, || Tensor::normal(shape, 0.0, 1.0, DType::F64))
}

/// `t` with `f` applied to every element (contiguous).
fn map(t: &Tensor, f: impl Fn(f64) -> f64) -> Result<Tensor> {
    Tensor::from_vec(t.to_vec::<f64>()?.into_iter().map(f).collect::<Vec<_>>(), t.shape().clone())
}

/// Normal samples passed through `domain`.
fn sample(seed: u64, shape: &[usize], domain: Domain) -> Result<Tensor> {
    map(&normal(seed, shape)?, domain)
}

/// Values on a 0.2 grid plus `offset` and a jitter below 0.04: two tensors with offsets 0
/// and 0.1 never come within 0.06 of each other, so maximum/minimum have no ties.
fn grid(seed: u64, shape: &[usize], offset: f64) -> Result<Tensor> {
    let (z, u) = seeded(seed, || {
        Ok((Tensor::normal(shape, 0.0, 1.0, DType::F64)?, Tensor::uniform(shape, 0.0, 0.04, DType::F64)?))
    })?;
    let v: Vec<f64> =
        z.to_vec::<f64>()?.iter().zip(u.to_vec::<f64>()?).map(|(z, u)| 0.2 * (2.5 * z).round() + offset + u).collect();
    Tensor::from_vec(v, shape)
}

/// A shuffled ladder of steps 0.3 with a jitter below 0.1: no two elements within 0.2, so
/// max and min reductions have a single winner and a clear margin over the runner-up.
fn distinct(seed: u64, shape: &[usize]) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let (perm, u) = seeded(seed, || Ok((Tensor::randperm(n)?, Tensor::uniform([n], 0.0, 0.1, DType::F64)?)))?;
    let v: Vec<f64> = perm
        .to_vec::<i64>()?
        .iter()
        .zip(u.to_vec::<f64>()?)
        .map(|(&p, u)| 0.3 * (p as f64 - n as f64 / 2.0) + u)
        .collect();
    Tensor::from_vec(v, shape)
}

/// The values of `t` stored with the last two dimensions swapped and read through a
/// transpose.
fn transposed(t: &Tensor) -> Result<Tensor> {
    let out = t.transpose(-1, -2)?.contiguous().transpose(-1, -2)?;
    assert!(!out.is_contiguous(), "transposed({:?}) is contiguous", t.shape());
    Ok(out)
}

/// The values of `t` interleaved with NaN along a new last dimension, then every other one
/// taken: every stride doubles, and a kernel that misreads the layout picks up NaN.
fn strided(t: &Tensor) -> Result<Tensor> {
    let rank = t.rank();
    let out = Tensor::stack(&[t, &t.full_like(f64::NAN)?], rank)?.select(rank, 0)?;
    assert!(!out.is_contiguous(), "strided({:?}) is contiguous", t.shape());
    Ok(out)
}

/// The values of `t` padded with NaN along the last dimension and narrowed back: a view
/// with an offset and a longer row stride.
fn narrowed(t: &Tensor) -> Result<Tensor> {
    let n = t.shape()[t.rank() - 1];
    let out = t.pad(&[(1, 2)], f64::NAN)?.narrow(-1, 1, n)?;
    assert!(!out.is_contiguous(), "narrowed({:?}) is contiguous", t.shape());
    Ok(out)
}

/// A `[rows, cols]` view with stride 0 along the rows: one row read `rows` times.
/// Gradcheck treats its elements as independent, so the kernels see a stride-0 input
/// while the expected Jacobian stays the elementwise one.
fn expanded_rows(seed: u64, rows: usize, cols: usize, domain: Domain) -> Result<Tensor> {
    sample(seed, &[1, cols], domain)?.expand([rows, cols])
}

/// The usual layouts of a `[rows, cols]` input with values from `domain`: contiguous,
/// transposed, narrowed and strided.
fn layouts(seed: u64, rows: usize, cols: usize, domain: Domain) -> Result<Vec<Tensor>> {
    let base = sample(seed, &[rows, cols], domain)?;
    Ok(vec![base.clone(), transposed(&base)?, narrowed(&base)?, strided(&base)?])
}

fn int_tensor(v: &[i64], shape: &[usize]) -> Result<Tensor> {
    Tensor::from_slice(v, shape)
}

fn mask(v: &[u8], shape: &[usize]) -> Result<Tensor> {
    Tensor::from_slice(v, shape)
}

// ---------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------

/// Gradcheck with the default tolerances; a failure names the case.
#[track_caller]
fn check(case: &str, f: impl Fn(&[Var]) -> Result<Var>, inputs: &[Tensor]) {
    check_with(case, f, inputs, EPS, ATOL, RTOL);
}

#[track_caller]
fn check_with(case: &str, f: impl Fn(&[Var]) -> Result<Var>, inputs: &[Tensor], eps: f64, atol: f64, rtol: f64) {
    let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape().dims()).collect();
    if let Err(e) = gradcheck(f, inputs, eps, atol, rtol) {
        panic!("{case} (inputs {shapes:?}): {e}");
    }
}

/// Checks an elementwise function of one input on every layout, a 3-d input and a 0-d one.
#[track_caller]
fn check_elementwise(name: &str, f: fn(&Var) -> Var, domain: Domain, seed: u64) -> Result<()> {
    for (i, x) in layouts(seed, 3, 4, domain)?.into_iter().enumerate() {
        check(&format!("{name}, layout {i}"), |v| Ok(f(&v[0])), &[x]);
    }
    let x3 = sample(seed + 1, &[2, 3, 2], domain)?.permute(&[2, 0, 1])?;
    check(&format!("{name}, permuted 3-d"), |v| Ok(f(&v[0])), &[x3]);
    check(&format!("{name}, 0-d"), |v| Ok(f(&v[0])), &[sample(seed + 2, &[], domain)?]);
    check(&format!("{name}, stride 0"), |v| Ok(f(&v[0])), &[expanded_rows(seed + 3, 3, 4, domain)?]);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Elementwise functions of one input
// ---------------------------------------------------------------------------------------

/// Every case of the elementwise table with a gradient (functions, parameterised
/// activations, piecewise-constant functions and operations with a Rust number).
#[test]
fn unary_functions() -> Result<()> {
    for (k, case) in UNARY.iter().enumerate() {
        let domain = match case.grad {
            Grad::No => continue,
            Grad::First(d) | Grad::Second(d) | Grad::Zero(d) => d,
        };
        check_elementwise(case.name, case.var, domain, 100 + 10 * k as u64)?;
    }
    Ok(())
}

/// Piecewise-constant functions mixed with a differentiable term: the zero gradient must
/// add nothing.
#[test]
fn piecewise_constant_functions() -> Result<()> {
    let x = transposed(&sample(540, &[3, 4], between_jumps)?)?;
    check("x * 2 + floor(x)", |v| v[0].mul_scalar(2.0).add(&v[0].floor()), &[x]);
    Ok(())
}

/// PyTorch gives a parameter reached only through a piecewise-constant function (or `x^0`)
/// a zero gradient, not none; at 0 too, where `0 * 0^-1` would be NaN for `x^0`.
#[test]
fn piecewise_constant_functions_give_zero_gradients() -> Result<()> {
    for case in UNARY.iter().filter(|c| matches!(c.grad, Grad::Zero(_))) {
        let (name, f) = (case.name, case.var);
        let x = Var::param(Tensor::from_vec(vec![0.0f64, 1.5, -2.5], [3])?);
        f(&x).mul_scalar(3.0).sum_all().backward()?;
        let g = x.grad().unwrap_or_else(|| panic!("{name}: no gradient"));
        assert_eq!(g.to_vec::<f64>()?, vec![0.0; 3], "{name}");
        let found = grad(&[&f(&x).sum_all()], &[&x], &[], false, false)?;
        let g = found[0].as_ref().unwrap_or_else(|| panic!("{name}: grad() found none"));
        assert_eq!(g.value().to_vec::<f64>()?, vec![0.0; 3], "{name}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Elementwise operations of two inputs, with broadcasting
// ---------------------------------------------------------------------------------------

type BinaryFn = fn(&Var, &Var) -> Result<Var>;

/// Shape pairs that broadcast in every way: equal, a trailing vector, both sides expanded,
/// a 0-d operand on either side.
const BROADCAST_SHAPES: &[(&[usize], &[usize])] = &[
    (&[2, 3], &[2, 3]),
    (&[2, 3], &[3]),
    (&[3], &[2, 3]),
    (&[2, 1, 3], &[4, 1]),
    (&[4, 1], &[1, 3]),
    (&[], &[2, 3]),
    (&[2, 3], &[]),
];

/// Checks `f` on every broadcasting shape pair and on non-contiguous and stride-0 operands;
/// `a` and `b` give the operands' values for a seed and a shape.
#[track_caller]
fn check_binary(
    name: &str,
    f: BinaryFn,
    a: impl Fn(u64, &[usize]) -> Result<Tensor>,
    b: impl Fn(u64, &[usize]) -> Result<Tensor>,
    seed: u64,
) -> Result<()> {
    for (i, (sa, sb)) in BROADCAST_SHAPES.iter().enumerate() {
        let s = seed + 2 * i as u64;
        check(&format!("{name} {sa:?} x {sb:?}"), |v| f(&v[0], &v[1]), &[a(s, sa)?, b(s + 1, sb)?]);
    }
    let (a23, b23, b3) = (a(seed + 50, &[2, 3])?, b(seed + 51, &[2, 3])?, b(seed + 52, &[3])?);
    check(
        &format!("{name}, transposed x strided, broadcast"),
        |v| f(&v[0], &v[1]),
        &[transposed(&a23)?, strided(&b3)?],
    );
    check(&format!("{name}, narrowed x transposed"), |v| f(&v[0], &v[1]), &[narrowed(&a23)?, transposed(&b23)?]);
    let a13 = a(seed + 53, &[1, 3])?;
    check(
        &format!("{name}, stride-0 x strided 3-d"),
        |v| f(&v[0], &v[1]),
        &[a13.expand([2, 3])?, strided(&b(seed + 54, &[4, 2, 3])?)?],
    );
    Ok(())
}

fn normal_of(domain: Domain) -> impl Fn(u64, &[usize]) -> Result<Tensor> {
    move |seed, shape| sample(seed, shape, domain)
}

/// Every case of the binary elementwise table.
#[test]
fn binary_functions() -> Result<()> {
    for (k, case) in BINARY.iter().enumerate() {
        let seed = 1000 + 100 * k as u64;
        match case.grad {
            BinaryInputs::Normal(a, b) => check_binary(case.name, case.var, normal_of(a), normal_of(b), seed)?,
            // The operands live on offset grids, so no pair is within 0.06 of a tie.
            BinaryInputs::OffsetGrids => {
                check_binary(case.name, case.var, |s, sh| grid(s, sh, 0.0), |s, sh| grid(s, sh, 0.1), seed)?
            }
        }
    }
    Ok(())
}

#[test]
fn binary_maximum_minimum() -> Result<()> {
    // At an exact two-way tie central differences see half the slope on each side, which is
    // the even split the backward gives.
    let a = Tensor::from_vec(vec![1.0f64, 2.0, -1.0, 0.5], [4])?;
    let b = Tensor::from_vec(vec![1.0f64, 0.5, 3.0, 0.5], [4])?;
    check("maximum with ties", |v| v[0].maximum(&v[1]), &[a.clone(), b.clone()]);
    check("minimum with ties", |v| v[0].minimum(&v[1]), &[a, b]);
    Ok(())
}

/// `pow` at a zero base: the gradient for the exponent is defined as 0 there (the limit
/// for positive exponents), not `0 * ln 0 = NaN`. Only the exponent is an input, since a
/// base perturbed below zero has no real power.
#[test]
fn pow_with_zero_base() -> Result<()> {
    let base = Tensor::from_vec(vec![0.0f64, 1.5, 0.0, 0.7, 2.0, 0.0], [2, 3])?;
    let exp = transposed(&sample(1700, &[2, 3], positive)?)?;
    check("pow, zero base, gradient for the exponent", |v| Var::new(base.clone()).pow(&v[0]), &[exp]);
    Ok(())
}

/// At a zero base PyTorch masks what the plain formulas make NaN: the base's gradient is 0
/// where the exponent is 0 (`0 * 0^-1`), the exponent's is 0 where the base is 0 and the
/// exponent non-negative (`0 * ln 0`), and `0^x` has gradient 0 for `x >= 0`. The values
/// are PyTorch's (torch 2.x, float64).
#[test]
fn pow_at_a_zero_base_matches_pytorch() -> Result<()> {
    let a = Var::param(Tensor::from_vec(vec![0.0f64, 0.0, 2.0, 0.0], [4])?);
    let b = Var::param(Tensor::from_vec(vec![0.0f64, 2.0, 0.0, -1.0], [4])?);
    a.pow(&b)?.sum_all().backward()?;
    let ga = a.grad().expect("a gradient for the base").to_vec::<f64>()?;
    let gb = b.grad().expect("a gradient for the exponent").to_vec::<f64>()?;
    assert_eq!(ga, vec![0.0, 0.0, 0.0, f64::NEG_INFINITY]);
    assert_eq!(gb[..2], [0.0, 0.0]);
    assert!((gb[2] - 2.0f64.ln()).abs() < 1e-15 && gb[3] == f64::NEG_INFINITY, "{gb:?}");

    let x = Var::param(Tensor::from_vec(vec![0.0f64, 1.5, -1.0], [3])?);
    x.rpow_scalar(0.0).sum_all().backward()?;
    assert_eq!(x.grad().expect("a gradient").to_vec::<f64>()?, vec![0.0, 0.0, f64::NEG_INFINITY]);
    // Elsewhere the masks change nothing: gradcheck of the base with zero exponents.
    let exps = Tensor::from_vec(vec![0.0f64, 2.0, 0.0, 1.5, 0.0, 3.0], [2, 3])?;
    let base = transposed(&sample(1710, &[2, 3], positive)?)?;
    check("pow, zero exponents, gradient for the base", |v| v[0].pow(&Var::new(exps.clone())), &[base]);
    Ok(())
}

/// The overloaded operators route to the same operations.
#[test]
fn operators() -> Result<()> {
    let a = transposed(&sample(1800, &[2, 3], any)?)?;
    let b = sample(1801, &[3], far_from_zero)?;
    let c = sample(1802, &[2, 3], any)?;
    let x = sample(1803, &[2, 3], far_from_zero)?;
    check("a + b", |v| &v[0] + &v[1], &[a.clone(), b.clone()]);
    check("a - b", |v| &v[0] - &v[1], &[a.clone(), b.clone()]);
    check("a * b", |v| v[0].clone() * v[1].clone(), &[a.clone(), b.clone()]);
    check("a / b", |v| &v[0] / &v[1], &[a.clone(), b.clone()]);
    check("a + tensor", |v| &v[0] + &c, std::slice::from_ref(&a));
    check("tensor * a", |v| &c * &v[0], std::slice::from_ref(&a));
    check("tensor / x", |v| &c / &v[0], std::slice::from_ref(&x));
    check("-a", |v| Ok(-&v[0]), std::slice::from_ref(&a));
    check("2 - a", |v| Ok(2.0 - &v[0]), std::slice::from_ref(&a));
    check("3 / x", |v| Ok(3.0 / &v[0]), std::slice::from_ref(&x));
    check("a * 2i64 + 1", |v| Ok(&v[0] * 2i64 + 1.0), &[a]);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Dtype casts and sum_to
// ---------------------------------------------------------------------------------------

/// Values `k / 8`: with `eps = 2^-10`, `x ± eps` and the products of two such values are
/// exact in `f32`, so the round trip through `f32` loses nothing and the default
/// tolerances hold (with `eps = 1e-6` the `f32` rounding alone would be ~0.1 of the slope).
fn dyadic(seed: u64, shape: &[usize]) -> Result<Tensor> {
    sample(seed, shape, |v| (8.0 * v).round() / 8.0)
}

#[test]
fn to_dtype_round_trip() -> Result<()> {
    let eps = 1.0 / 1024.0;
    let (a, b) = (dyadic(1900, &[3, 4])?, dyadic(1901, &[4])?);
    for (i, x) in [a.clone(), transposed(&a)?, strided(&a)?].into_iter().enumerate() {
        check_with(
            &format!("f64 -> f32 -> f64, layout {i}"),
            |v| Ok(v[0].to_dtype(DType::F32).to_dtype(DType::F64)),
            &[x],
            eps,
            ATOL,
            RTOL,
        );
    }
    check_with(
        "f32 product of two casts, broadcast",
        |v| Ok(v[0].to_dtype(DType::F32).mul(&v[1].to_dtype(DType::F32))?.to_dtype(DType::F64)),
        &[transposed(&a)?, b],
        eps,
        ATOL,
        RTOL,
    );
    // A cast to the same dtype is the identity.
    check("f64 -> f64", |v| Ok(v[0].to_dtype(DType::F64).mul_scalar(2.0)), &[a]);
    Ok(())
}

#[test]
fn sum_to() -> Result<()> {
    let x = sample(2000, &[2, 3, 4], any)?;
    let targets: &[&[usize]] = &[&[3, 1], &[4], &[1, 1, 4], &[2, 1, 1], &[1, 3, 4], &[2, 3, 4], &[]];
    for (i, input) in [x.clone(), transposed(&x)?, strided(&x)?].into_iter().enumerate() {
        for &t in targets {
            let shape = Shape::from(t);
            check(&format!("sum_to {t:?}, layout {i}"), |v| v[0].sum_to(&shape), std::slice::from_ref(&input));
        }
    }
    Ok(())
}

/// `sum_to` reverses a broadcast; a target that does not broadcast to the value is an error
/// naming both shapes, not a silent reshape.
#[test]
fn sum_to_refuses_shapes_that_do_not_broadcast() -> Result<()> {
    let x = Var::param(Tensor::ones([2, 3], DType::F64)?);
    for bad in [&[3usize, 2][..], &[2], &[4, 3], &[1, 2, 3, 1]] {
        let e = x.sum_to(&Shape::from(bad)).expect_err("refused").to_string();
        assert!(e.contains("sum_to") && e.contains("[2, 3]") && e.contains(&format!("{bad:?}")), "{e}");
    }
    for good in [&[2usize, 3][..], &[3], &[1, 3], &[2, 1], &[1], &[]] {
        assert_eq!(x.sum_to(&Shape::from(good))?.shape().dims(), good);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------------------------

/// `[2, 3, 4]` inputs in three layouts: contiguous, transposed (last two dimensions),
/// strided.
fn layouts3(base: &Tensor) -> Result<Vec<Tensor>> {
    Ok(vec![base.clone(), transposed(base)?, strided(base)?])
}

/// The dimension sets reductions are checked over.
const REDUCE_DIMS: &[&[i64]] = &[&[0], &[1], &[-1], &[0, 2], &[1, 2]];

type ReduceFn = fn(&Var, &[i64], bool) -> Result<Var>;

#[track_caller]
fn check_reduction(name: &str, f: ReduceFn, base: &Tensor) -> Result<()> {
    for (i, x) in layouts3(base)?.into_iter().enumerate() {
        for &dims in REDUCE_DIMS {
            for keepdim in [false, true] {
                check(
                    &format!("{name} over {dims:?}, keepdim {keepdim}, layout {i}"),
                    |v| f(&v[0], dims, keepdim),
                    std::slice::from_ref(&x),
                );
            }
        }
    }
    Ok(())
}

#[test]
fn sum_and_mean() -> Result<()> {
    let x = sample(2100, &[2, 3, 4], any)?;
    check_reduction("sum", |x, d, k| x.sum(d, k), &x)?;
    check_reduction("mean", |x, d, k| x.mean(d, k), &x)?;
    for (i, x) in layouts3(&x)?.into_iter().enumerate() {
        check(&format!("sum_all, layout {i}"), |v| Ok(v[0].sum_all()), std::slice::from_ref(&x));
        check(&format!("mean_all, layout {i}"), |v| Ok(v[0].mean_all()), std::slice::from_ref(&x));
    }
    // A reduction over no element of a 0-d value, and of a 1-d one.
    check("sum_all of 0-d", |v| Ok(v[0].sum_all()), &[sample(2101, &[], any)?]);
    check("sum of 1-d strided", |v| v[0].sum(0, true), &[strided(&sample(2102, &[5], any)?)?]);
    Ok(())
}

#[test]
fn max_and_min() -> Result<()> {
    let x = distinct(2200, &[2, 3, 4])?;
    check_reduction("max", |x, d, k| x.max(d, k), &x)?;
    check_reduction("min", |x, d, k| x.min(d, k), &x)?;
    for (i, x) in layouts3(&x)?.into_iter().enumerate() {
        check(&format!("max_all, layout {i}"), |v| v[0].max_all(), std::slice::from_ref(&x));
        check(&format!("min_all, layout {i}"), |v| v[0].min_all(), std::slice::from_ref(&x));
    }
    // A two-way tie for the maximum of row 0 and the minimum of row 1: central differences
    // see half the slope, the even split the backward gives.
    let tied = Tensor::from_vec(vec![2.0f64, -1.0, 2.0, 0.5, -3.0, 1.0, -3.0, 4.0], [2, 4])?;
    check("max with a tie", |v| v[0].max(1, false), std::slice::from_ref(&tied));
    check("min with a tie", |v| v[0].min(1, true), std::slice::from_ref(&tied));
    Ok(())
}

#[test]
fn prod() -> Result<()> {
    // Magnitudes in [0.5, 1.5] with random signs: no zero, and products of moderate size.
    let x = sample(2300, &[2, 3, 4], |v| v.signum() * (0.5 + (v.abs() / 3.0).min(1.0)))?;
    check_reduction("prod", |x, d, k| x.prod(d, k), &x)?;
    for (i, x) in layouts3(&x)?.into_iter().enumerate() {
        check(&format!("prod_all, layout {i}"), |v| Ok(v[0].prod_all()), std::slice::from_ref(&x));
    }
    Ok(())
}

/// With zeros, `y / x` is undefined and prod takes another path: the only zero of a group
/// gets the product of the others, every other element of that group 0, and a group with
/// two zeros passes no gradient at all. Groups without a zero still take `y / x`.
#[test]
fn prod_with_zeros() -> Result<()> {
    let one_zero = Tensor::from_vec(
        vec![0.8f64, -1.2, 0.6, 1.1, 0.9, 0.7, 0.0, -1.3, 1.4, -0.5, 1.2, 0.9],
        [3, 4], //                    ^ the only zero, at [1, 2]
    )?;
    let two_zeros = Tensor::from_vec(vec![0.8f64, -1.2, 0.6, 1.1, 0.0, 0.7, 0.0, -1.3, 1.4, -0.5, 1.2, 0.9], [3, 4])?;
    for (name, x) in [("one zero", one_zero), ("two zeros in a row", two_zeros)] {
        for (i, x) in [x.clone(), transposed(&x)?, narrowed(&x)?].into_iter().enumerate() {
            for dim in [0, 1] {
                for keepdim in [false, true] {
                    check(
                        &format!("prod over {dim}, keepdim {keepdim}, {name}, layout {i}"),
                        |v| v[0].prod(dim, keepdim),
                        std::slice::from_ref(&x),
                    );
                }
            }
            check(
                &format!("prod over [0, 1], {name}, layout {i}"),
                |v| v[0].prod([0, 1], false),
                std::slice::from_ref(&x),
            );
            check(&format!("prod_all, {name}, layout {i}"), |v| Ok(v[0].prod_all()), std::slice::from_ref(&x));
        }
    }
    Ok(())
}

#[test]
fn var_and_std() -> Result<()> {
    let x = sample(2400, &[2, 3, 4], any)?;
    check_reduction("var unbiased", |x, d, k| x.var(d, true, k), &x)?;
    check_reduction("var biased", |x, d, k| x.var(d, false, k), &x)?;
    check_reduction("std unbiased", |x, d, k| x.std(d, true, k), &x)?;
    check_reduction("std biased", |x, d, k| x.std(d, false, k), &x)?;
    for (i, x) in layouts3(&x)?.into_iter().enumerate() {
        for unbiased in [true, false] {
            let case = format!("unbiased {unbiased}, layout {i}");
            check(&format!("var_all, {case}"), |v| Ok(v[0].var_all(unbiased)), std::slice::from_ref(&x));
            check(&format!("std_all, {case}"), |v| Ok(v[0].std_all(unbiased)), std::slice::from_ref(&x));
        }
    }
    Ok(())
}

/// Where the standard deviation is 0 (constant data) PyTorch's std_backward gives 0, not
/// the NaN of `0 / (2 sqrt(0))`; other groups are unaffected. Values are PyTorch's.
#[test]
fn std_of_constant_data_has_zero_gradient() -> Result<()> {
    let x = Var::param(Tensor::from_vec(vec![1.0f64, 1.0, 1.0, 1.0, 2.0, 4.0], [2, 3])?);
    x.std(1, true, false)?.sum_all().backward()?;
    let g = x.grad().expect("a gradient").to_vec::<f64>()?;
    let torch = [0.0, 0.0, 0.0, -0.43643578047198, -0.10910894511800, 0.54554472558998];
    for (a, b) in g.iter().zip(torch) {
        assert!((a - b).abs() < 1e-12, "{g:?}");
    }
    let c = Var::param(Tensor::full([3], 2.0, DType::F64)?);
    for unbiased in [true, false] {
        c.zero_grad();
        c.std_all(unbiased).backward()?;
        assert_eq!(c.grad().expect("a gradient").to_vec::<f64>()?, vec![0.0; 3]);
    }
    // With create_graph the masked gradient is differentiable again without NaN.
    let d1 = grad(&[&c.std_all(true)], &[&c], &[], false, true)?[0].clone().expect("a first derivative");
    let d2 = grad(&[&d1.sum_all()], &[&c], &[], false, false)?[0].clone();
    if let Some(d2) = d2 {
        assert!(d2.value().to_vec::<f64>()?.iter().all(|v| v.is_finite()));
    }
    Ok(())
}

#[test]
fn logsumexp() -> Result<()> {
    let x = sample(2500, &[2, 3, 4], any)?;
    check_reduction("logsumexp", |x, d, k| x.logsumexp(d, k), &x)?;
    // Values near 60, where exp overflows nothing only thanks to the shift by the maximum.
    let big = sample(2501, &[3, 4], |v| v + 60.0)?;
    check("logsumexp of large values", |v| v[0].logsumexp(1, false), &[transposed(&big)?]);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Softmax
// ---------------------------------------------------------------------------------------

#[test]
fn softmax_and_log_softmax() -> Result<()> {
    let base = sample(2600, &[2, 3, 4], any)?;
    let permuted = sample(2601, &[4, 2, 3], any)?.permute(&[1, 2, 0])?;
    assert!(!permuted.is_contiguous());
    for (i, x) in [base.clone(), transposed(&base)?, strided(&base)?, permuted].into_iter().enumerate() {
        for dim in [0i64, 1, 2, -1] {
            check(&format!("softmax along {dim}, layout {i}"), |v| v[0].softmax(dim), std::slice::from_ref(&x));
            check(&format!("log_softmax along {dim}, layout {i}"), |v| v[0].log_softmax(dim), std::slice::from_ref(&x));
        }
    }
    let v1 = strided(&sample(2602, &[5], any)?)?;
    check("softmax of 1-d", |v| v[0].softmax(0), std::slice::from_ref(&v1));
    check("log_softmax of 1-d", |v| v[0].log_softmax(0), &[v1]);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Matrix products
// ---------------------------------------------------------------------------------------

#[test]
fn matmul() -> Result<()> {
    let n = |seed, shape: &[usize]| sample(seed, shape, any);
    let cases: Vec<(&str, Tensor, Tensor)> = vec![
        ("1-d . 1-d", n(2700, &[4])?, n(2701, &[4])?),
        ("1-d . 2-d", n(2702, &[3])?, n(2703, &[3, 4])?),
        ("2-d . 1-d", n(2704, &[2, 3])?, n(2705, &[3])?),
        ("2-d . 2-d", n(2706, &[2, 3])?, n(2707, &[3, 4])?),
        ("batched", n(2708, &[2, 2, 3])?, n(2709, &[2, 3, 4])?),
        ("batched . 2-d", n(2710, &[2, 2, 3])?, n(2711, &[3, 4])?),
        ("2-d . batched", n(2712, &[2, 3])?, n(2713, &[2, 3, 4])?),
        ("broadcast batch dims", n(2714, &[2, 1, 2, 3])?, n(2715, &[3, 3, 2])?),
        ("1-d . batched", n(2716, &[3])?, n(2717, &[2, 3, 4])?),
        ("batched . 1-d", n(2718, &[2, 2, 3])?, n(2719, &[3])?),
        ("transposed operands", transposed(&n(2720, &[2, 3])?)?, transposed(&n(2721, &[3, 4])?)?),
        ("transposed . contiguous", transposed(&n(2722, &[2, 3])?)?, n(2723, &[3, 4])?),
        ("batched transposed", transposed(&n(2724, &[2, 2, 3])?)?, transposed(&n(2725, &[1, 3, 4])?)?),
        ("narrowed . strided", narrowed(&n(2726, &[2, 3])?)?, strided(&n(2727, &[3, 4])?)?),
        ("strided 1-d . narrowed", strided(&n(2728, &[3])?)?, narrowed(&n(2729, &[3, 4])?)?),
        ("stride-0 batch", n(2730, &[1, 2, 3])?.expand([3, 2, 3])?, n(2731, &[3, 3, 2])?),
    ];
    for (name, a, b) in cases {
        check(&format!("matmul {name}"), |v| v[0].matmul(&v[1]), &[a, b]);
    }
    Ok(())
}

/// The fused `linear` (PyTorch's `F.linear`), whose backward writes the weight's gradient in
/// its own layout: with and without bias, batched, on transposed, narrowed and strided
/// inputs.
#[test]
fn linear() -> Result<()> {
    let n = |seed, shape: &[usize]| sample(seed, shape, any);
    let cases: Vec<(&str, Tensor, Tensor, Tensor)> = vec![
        ("contiguous", n(2750, &[2, 3])?, n(2751, &[4, 3])?, n(2752, &[4])?),
        ("1-d input", n(2753, &[3])?, n(2754, &[4, 3])?, n(2755, &[4])?),
        ("batched", n(2756, &[2, 2, 3])?, n(2757, &[4, 3])?, n(2758, &[4])?),
        (
            "transposed input and weight",
            transposed(&n(2759, &[2, 3])?)?,
            transposed(&n(2760, &[4, 3])?)?,
            n(2761, &[4])?,
        ),
        ("narrowed input, strided bias", narrowed(&n(2762, &[2, 3])?)?, n(2763, &[4, 3])?, strided(&n(2764, &[4])?)?),
        (
            "strided weight, batched transposed",
            transposed(&n(2765, &[2, 2, 3])?)?,
            strided(&n(2766, &[4, 3])?)?,
            n(2767, &[4])?,
        ),
    ];
    for (name, x, w, b) in cases {
        check(&format!("linear with bias, {name}"), |v| v[0].linear(&v[1], Some(&v[2])), &[x.clone(), w.clone(), b]);
        check(&format!("linear without bias, {name}"), |v| v[0].linear(&v[1], None), &[x, w]);
    }
    let (x, w, b) = (transposed(&n(2770, &[2, 3])?)?, narrowed(&n(2771, &[4, 3])?)?, strided(&n(2772, &[4])?)?);
    check_second_order(
        "linear, non-contiguous",
        |v| v[0].linear(&v[1], Some(&v[2])),
        &[x.clone(), w.clone(), b],
        2773,
    )?;
    check_second_order("linear without bias, batched", |v| v[0].linear(&v[1], None), &[n(2774, &[2, 2, 3])?, w], 2775)?;
    Ok(())
}

/// A 1-d operand is reshaped to a matrix: a shape error names the caller's shapes, and any
/// other error (dtypes here) is the product's own, not turned into a shape complaint.
#[test]
fn matmul_errors_name_the_real_problem() -> Result<()> {
    let v = Var::param(Tensor::ones([3], DType::F32)?);
    let e = v.matmul(&Var::new(Tensor::ones([4, 2], DType::F32)?)).expect_err("[3] @ [4, 2]").to_string();
    assert_eq!(e, "matmul: cannot multiply [3] by [4, 2]");
    let e = v.matmul(&Var::new(Tensor::ones([3, 2], DType::F64)?)).expect_err("f32 @ f64").to_string();
    assert!(e.contains("f32") && e.contains("f64") && !e.contains("cannot multiply"), "{e}");
    Ok(())
}

/// PyTorch refuses integers to negative integer powers; a `Var` holding integers returns
/// that error instead of panicking, and integers to non-negative powers stay integers.
#[test]
fn integer_pow_scalar_errors_name_the_op() -> Result<()> {
    let ints = Var::new(Tensor::from_vec(vec![2i64, 3], [2])?);
    let e = ints.pow_scalar(-1).expect_err("i64 ^ -1").to_string();
    assert!(e.contains("pow_scalar") && e.contains("negative integer powers") && e.contains("-1"), "{e}");
    let squared = ints.pow_scalar(2)?;
    assert_eq!(squared.value().dtype(), DType::I64);
    assert_eq!(squared.value().to_vec::<i64>()?, vec![4, 9]);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Views
// ---------------------------------------------------------------------------------------

/// Views on a transposed and a strided `[3, 4]` input, and a contiguous one.
fn view_inputs(seed: u64) -> Result<Vec<Tensor>> {
    let base = sample(seed, &[3, 4], any)?;
    Ok(vec![base.clone(), transposed(&base)?, strided(&base)?])
}

/// `copy` (PyTorch's `clone()`) is the identity for the gradient and gives fresh storage.
#[test]
fn copy() -> Result<()> {
    for (i, x) in view_inputs(2790)?.into_iter().enumerate() {
        check(&format!("copy, layout {i}"), |v| v[0].copy().mul(&v[0]), std::slice::from_ref(&x));
    }
    let x = Var::param(Tensor::ones([2], DType::F64)?);
    let y = x.copy();
    y.value().fill_(5.0)?;
    assert_eq!(x.value().to_vec::<f64>()?, vec![1.0, 1.0], "writing the copy leaves the original alone");
    check_second_order("copy", |v| Ok(v[0].copy().square()), &[transposed(&sample(2791, &[3, 4], any)?)?], 2792)?;
    Ok(())
}

#[test]
fn reshape_and_view() -> Result<()> {
    for (i, x) in view_inputs(2800)?.into_iter().enumerate() {
        let xs = std::slice::from_ref(&x);
        check(&format!("reshape [2, 6], layout {i}"), |v| v[0].reshape([2usize, 6]), xs);
        check(&format!("reshape [-1, 2], layout {i}"), |v| v[0].reshape([-1i64, 2]), xs);
        check(&format!("reshape [12], layout {i}"), |v| v[0].reshape([12usize]), xs);
        check(&format!("reshape [2, 2, 3], layout {i}"), |v| v[0].reshape([2usize, 2, 3]), xs);
        check(&format!("reshape to its own shape, layout {i}"), |v| v[0].reshape([3usize, 4]), xs);
        check(&format!("view [4, -1], layout {i}"), |v| v[0].view([4i64, -1]), xs);
        // A nonlinear function after the reshape, so that its backward meets a
        // non-trivial gradient in the reshaped layout.
        check(&format!("reshape then tanh, layout {i}"), |v| Ok(v[0].reshape([6usize, 2])?.tanh()), xs);
    }
    Ok(())
}

#[test]
fn transpose_t_and_permute() -> Result<()> {
    for (i, x) in view_inputs(2900)?.into_iter().enumerate() {
        let xs = std::slice::from_ref(&x);
        check(&format!("transpose(0, 1), layout {i}"), |v| v[0].transpose(0, 1), xs);
        check(&format!("t, layout {i}"), |v| v[0].t(), xs);
        check(&format!("t then sin, layout {i}"), |v| Ok(v[0].t()?.sin()), xs);
    }
    let x3 = sample(2901, &[2, 3, 4], any)?;
    for (i, x) in layouts3(&x3)?.into_iter().enumerate() {
        let xs = std::slice::from_ref(&x);
        check(&format!("transpose(0, 2), layout {i}"), |v| v[0].transpose(0, 2), xs);
        check(&format!("transpose(-1, -2), layout {i}"), |v| v[0].transpose(-1, -2), xs);
        check(&format!("permute [2, 0, 1], layout {i}"), |v| v[0].permute(&[2usize, 0, 1]), xs);
        check(&format!("permute [-1, 0, 1], layout {i}"), |v| v[0].permute(&[-1i64, 0, 1]), xs);
    }
    // t() of a 1-d value is the identity.
    check("t of 1-d", |v| Ok(v[0].t()?.mul_scalar(3.0)), &[strided(&sample(2902, &[4], any)?)?]);
    Ok(())
}

#[test]
fn narrow_slice_select() -> Result<()> {
    for (i, x) in view_inputs(3000)?.into_iter().enumerate() {
        let xs = std::slice::from_ref(&x);
        check(&format!("narrow(0, 1, 2), layout {i}"), |v| v[0].narrow(0, 1, 2), xs);
        check(&format!("narrow(1, 1, 2), layout {i}"), |v| v[0].narrow(1, 1, 2), xs);
        check(&format!("narrow(-1, 3, 1), layout {i}"), |v| v[0].narrow(-1, 3, 1), xs);
        check(&format!("select(0, 1), layout {i}"), |v| v[0].select(0, 1), xs);
        check(&format!("select(1, 2), layout {i}"), |v| v[0].select(1, 2), xs);
        check(&format!("select(-1, 0), layout {i}"), |v| v[0].select(-1, 0), xs);
    }
    let x = sample(3001, &[5, 4], any)?;
    for (i, x) in [x.clone(), transposed(&x)?, narrowed(&x)?].into_iter().enumerate() {
        let xs = std::slice::from_ref(&x);
        check(&format!("slice(0, 0, 5, 2), layout {i}"), |v| v[0].slice(0, 0, 5, 2), xs);
        check(&format!("slice(1, 1, 4, 2), layout {i}"), |v| v[0].slice(1, 1, 4, 2), xs);
        check(&format!("slice(0, 1, 5, 3), layout {i}"), |v| v[0].slice(0, 1, 5, 3), xs);
        check(&format!("slice(1, 1, 99, 1), clamped end, layout {i}"), |v| v[0].slice(1, 1, 99, 1), xs);
        check(&format!("slice(0, 4, 5, 7), one element, layout {i}"), |v| v[0].slice(0, 4, 5, 7), xs);
        // Two overlapping slices of one input: their gradients must add up.
        check(
            &format!("overlapping slices, layout {i}"),
            |v| v[0].slice(0, 0, 4, 2)?.mul(&v[0].slice(0, 1, 5, 2)?.exp()),
            xs,
        );
    }
    Ok(())
}

#[test]
fn expand_squeeze_unsqueeze_flatten_contiguous() -> Result<()> {
    let col = sample(3100, &[3, 1], any)?;
    for (i, x) in [col.clone(), strided(&col)?].into_iter().enumerate() {
        let xs = std::slice::from_ref(&x);
        check(&format!("expand [2, 3, 4], layout {i}"), |v| v[0].expand([2usize, 3, 4]), xs);
        check(&format!("broadcast_to [3, 5], layout {i}"), |v| v[0].broadcast_to([3usize, 5]), xs);
        check(&format!("expand then mul, layout {i}"), |v| v[0].expand([3usize, 4])?.mul(&v[0].exp()), xs);
    }
    check("expand 1-d [4] to [3, 4]", |v| v[0].expand([3usize, 4]), &[strided(&sample(3101, &[4], any)?)?]);

    let x = sample(3102, &[3, 1, 4], any)?;
    for (i, x) in [x.clone(), strided(&x)?].into_iter().enumerate() {
        let xs = std::slice::from_ref(&x);
        check(&format!("squeeze(1), layout {i}"), |v| v[0].squeeze(1), xs);
        check(&format!("squeeze(0) (no-op), layout {i}"), |v| v[0].squeeze(0), xs);
        check(&format!("squeeze_all, layout {i}"), |v| Ok(v[0].squeeze_all()), xs);
        check(&format!("unsqueeze(0), layout {i}"), |v| v[0].unsqueeze(0), xs);
        check(&format!("unsqueeze(-1), layout {i}"), |v| v[0].unsqueeze(-1), xs);
        check(&format!("unsqueeze(2), layout {i}"), |v| v[0].unsqueeze(2), xs);
    }
    let x3 = sample(3103, &[2, 3, 4], any)?;
    for (i, x) in layouts3(&x3)?.into_iter().enumerate() {
        let xs = std::slice::from_ref(&x);
        check(&format!("flatten(1, 2), layout {i}"), |v| v[0].flatten(1, 2), xs);
        check(&format!("flatten(0, 1), layout {i}"), |v| v[0].flatten(0, 1), xs);
        check(&format!("flatten_all, layout {i}"), |v| Ok(v[0].flatten_all()), xs);
        check(&format!("contiguous, layout {i}"), |v| v[0].contiguous().mul(&v[0]), xs);
    }
    Ok(())
}

/// The pieces of split, split_sizes and chunk, each scaled differently and joined again,
/// so that a piece sent to the wrong place shows.
#[test]
fn split_and_chunk() -> Result<()> {
    fn joined(pieces: Vec<Var>, dim: usize) -> Result<Var> {
        let scaled: Vec<Var> = pieces.iter().enumerate().map(|(k, p)| p.mul_scalar(k as f64 + 1.0)).collect();
        let refs: Vec<&Var> = scaled.iter().collect();
        Var::cat(&refs, dim)
    }
    let x = sample(3200, &[3, 5], any)?;
    for (i, x) in [x.clone(), transposed(&x)?, narrowed(&x)?].into_iter().enumerate() {
        let xs = std::slice::from_ref(&x);
        check(&format!("split(2, 1), layout {i}"), |v| joined(v[0].split(2, 1)?, 1), xs);
        check(&format!("split(1, 0), layout {i}"), |v| joined(v[0].split(1, 0)?, 0), xs);
        check(&format!("split_sizes [1, 3, 1], layout {i}"), |v| joined(v[0].split_sizes(&[1, 3, 1], 1)?, 1), xs);
        check(&format!("chunk(2, 0), layout {i}"), |v| joined(v[0].chunk(2, 0)?, 0), xs);
        check(&format!("chunk(3, -1), layout {i}"), |v| joined(v[0].chunk(3, -1)?, 1), xs);
        // A single piece on its own: the other pieces get no gradient.
        check(&format!("split(2, 1)[1] alone, layout {i}"), |v| Ok(v[0].split(2, 1)?[1].exp()), xs);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Indexing
// ---------------------------------------------------------------------------------------

#[test]
fn index_select() -> Result<()> {
    // Repeated indices: their gradients must accumulate.
    let rows = int_tensor(&[2, 0, 2], &[3])?;
    let cols = int_tensor(&[3, 1, 1, 0, 3], &[5])?;
    for (i, x) in view_inputs(3300)?.into_iter().enumerate() {
        let xs = std::slice::from_ref(&x);
        check(&format!("index_select(0), layout {i}"), |v| v[0].index_select(0, &rows), xs);
        check(&format!("index_select(1), layout {i}"), |v| v[0].index_select(1, &cols), xs);
        check(&format!("index_select(-1) then square, layout {i}"), |v| Ok(v[0].index_select(-1, &cols)?.square()), xs);
    }
    let v1 = strided(&sample(3301, &[4], any)?)?;
    check("index_select of 1-d", |v| v[0].index_select(0, &int_tensor(&[3, 3, 0], &[3])?), &[v1]);
    Ok(())
}

#[test]
fn gather_and_argmax() -> Result<()> {
    let idx1 = int_tensor(&[0, 0, 3, 1, 2, 2], &[3, 2])?;
    let idx0 = int_tensor(&[2, 0, 1, 1, 0, 0, 2, 2], &[2, 4])?;
    // An index smaller than the input in the other dimension too (2 rows of 3).
    let small = int_tensor(&[1, 3, 0, 0], &[2, 2])?;
    for (i, x) in view_inputs(3400)?.into_iter().enumerate() {
        let xs = std::slice::from_ref(&x);
        check(&format!("gather(1), layout {i}"), |v| v[0].gather(1, &idx1), xs);
        check(&format!("gather(0), layout {i}"), |v| v[0].gather(0, &idx0), xs);
        check(&format!("gather(-1), smaller index, layout {i}"), |v| v[0].gather(-1, &small), xs);
    }
    // The index may come from the graph itself: gathering at the argmax is the max.
    let d = distinct(3401, &[3, 4])?;
    check("gather at argmax", |v| v[0].gather(1, v[0].argmax(1, true)?), &[transposed(&d)?]);
    check("gather at argmin", |v| v[0].gather(0, v[0].argmin(0, true)?), &[strided(&d)?]);
    Ok(())
}

#[test]
fn scatter_add() -> Result<()> {
    // Row 0 sends both entries to column 1, so duplicates accumulate.
    let idx = int_tensor(&[1, 1, 0, 3, 2, 2], &[3, 2])?;
    let dst = sample(3500, &[3, 4], any)?;
    let src = sample(3501, &[3, 2], any)?;
    // A source wider than the index: only its first two columns are scattered.
    let wide_src = sample(3502, &[3, 3], any)?;
    for (i, (d, s)) in
        [(dst.clone(), src.clone()), (transposed(&dst)?, transposed(&src)?), (narrowed(&dst)?, strided(&src)?)]
            .into_iter()
            .enumerate()
    {
        check(
            &format!("scatter_add wrt self and src, layout {i}"),
            |v| v[0].scatter_add(1, &idx, &v[1]),
            &[d.clone(), s.clone()],
        );
        check(
            &format!("scatter_add wrt self only, layout {i}"),
            |v| v[0].scatter_add(1, &idx, &Var::new(s.clone())),
            std::slice::from_ref(&d),
        );
        check(
            &format!("scatter_add wrt src only, layout {i}"),
            |v| Var::new(d.clone()).scatter_add(1, &idx, &v[0]),
            std::slice::from_ref(&s),
        );
    }
    check(
        "scatter_add, source wider than the index",
        |v| v[0].scatter_add(1, &idx, &v[1]),
        &[dst.clone(), transposed(&wide_src)?],
    );
    // Along dim 0: index [2, 4] into [3, 4].
    let idx0 = int_tensor(&[2, 0, 1, 1, 0, 0, 2, 2], &[2, 4])?;
    check(
        "scatter_add along 0",
        |v| v[0].scatter_add(0, &idx0, &v[1]),
        &[transposed(&dst)?, sample(3503, &[2, 4], any)?],
    );
    Ok(())
}

#[test]
fn masked_fill() -> Result<()> {
    let m23 = mask(&[1, 0, 0, 1, 1, 0], &[2, 3])?;
    let m3 = mask(&[0, 1, 0], &[3])?;
    let mt = transposed(&mask(&[1, 0, 1, 0, 0, 1], &[2, 3])?)?;
    let x = sample(3600, &[2, 3], any)?;
    for (i, x) in [x.clone(), transposed(&x)?, narrowed(&x)?, strided(&x)?].into_iter().enumerate() {
        let xs = std::slice::from_ref(&x);
        check(&format!("masked_fill, layout {i}"), |v| v[0].masked_fill(&m23, 2.5), xs);
        check(&format!("masked_fill, broadcast mask, layout {i}"), |v| v[0].masked_fill(&m3, -1.0), xs);
        check(&format!("masked_fill, transposed mask, layout {i}"), |v| v[0].masked_fill(&mt, 0.0), xs);
        // A mask computed in the graph: the sign of x itself.
        check(&format!("masked_fill by x < 0, layout {i}"), |v| v[0].masked_fill(v[0].lt_scalar(0.0), 0.0), xs);
    }
    Ok(())
}

#[test]
fn where_cond() -> Result<()> {
    let c23 = Var::new(mask(&[1, 0, 0, 1, 1, 0], &[2, 3])?);
    let c21 = Var::new(mask(&[0, 1], &[2, 1])?);
    let (t3, f21) = (sample(3700, &[3], any)?, sample(3701, &[2, 1], any)?);
    let (t23, f23) = (sample(3702, &[2, 3], any)?, sample(3703, &[2, 3], any)?);
    check("where, both branches broadcast", |v| c23.where_cond(&v[0], &v[1]), &[t3.clone(), f21.clone()]);
    check("where, strided branches broadcast", |v| c23.where_cond(&v[0], &v[1]), &[strided(&t3)?, strided(&f21)?]);
    check("where, condition broadcasts", |v| c21.where_cond(&v[0], &v[1]), &[transposed(&t23)?, narrowed(&f23)?]);
    check("where, 0-d branch", |v| c21.where_cond(&v[0], &v[1]), &[transposed(&t23)?, sample(3704, &[], any)?]);
    check("where, only on_true", |v| c23.where_cond(&v[0], &Var::new(f23.clone())), &[transposed(&t23)?]);
    check("where, only on_false", |v| c23.where_cond(&Var::new(t23.clone()), &v[0]), &[strided(&f21)?]);
    // A condition computed in the graph, selecting between two functions of one input.
    let x = sample(3705, &[3, 4], off_zero)?;
    check("where(x > 0, x, exp(x))", |v| v[0].gt_scalar(0.0).where_cond(&v[0], &v[0].exp()), &[transposed(&x)?]);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Joining and tiling
// ---------------------------------------------------------------------------------------

#[test]
fn cat_and_stack() -> Result<()> {
    let (a, b, c) = (sample(3800, &[2, 3], any)?, sample(3801, &[2, 1], any)?, sample(3802, &[2, 2], any)?);
    check("cat along 1", |v| Var::cat(&[&v[0], &v[1], &v[2]], 1), &[a.clone(), b.clone(), c.clone()]);
    check(
        "cat along -1, non-contiguous",
        |v| Var::cat(&[&v[0], &v[1], &v[2]], -1),
        &[transposed(&a)?, strided(&b)?, narrowed(&c)?],
    );
    let (r1, r2) = (sample(3803, &[1, 3], any)?, sample(3804, &[3, 3], any)?);
    check(
        "cat along 0, non-contiguous",
        |v| Var::cat(&[&v[0], &v[1], &v[0]], 0),
        &[transposed(&a)?.narrow(0, 0, 1)?.contiguous(), transposed(&r2)?],
    );
    check("cat along 0", |v| Var::cat(&[&v[0], &v[1]], 0), &[r1, strided(&r2)?]);
    check("cat of one", |v| Var::cat(&[&v[0]], 0), &[transposed(&a)?]);

    let (p, q) = (sample(3805, &[2, 3], any)?, sample(3806, &[2, 3], any)?);
    for dim in [0i64, 1, 2, -1] {
        check(
            &format!("stack along {dim}"),
            |v| Var::stack(&[&v[0], &v[1], &v[0]], dim),
            &[transposed(&p)?, strided(&q)?],
        );
    }
    Ok(())
}

#[test]
fn pad() -> Result<()> {
    let x = sample(3900, &[2, 3], any)?;
    for (i, x) in [x.clone(), transposed(&x)?, strided(&x)?].into_iter().enumerate() {
        let xs = std::slice::from_ref(&x);
        check(&format!("pad last (1, 2), layout {i}"), |v| v[0].pad(&[(1, 2)], 0.0), xs);
        check(&format!("pad two dims, layout {i}"), |v| v[0].pad(&[(1, 0), (0, 2)], 0.5), xs);
        check(&format!("pad nothing, layout {i}"), |v| v[0].pad(&[(0, 0)], 0.0), xs);
    }
    let x3 = strided(&sample(3901, &[2, 2, 3], any)?)?;
    check("pad 3-d, all dims", |v| v[0].pad(&[(2, 1), (1, 1), (0, 1)], -1.0), &[x3]);
    Ok(())
}

#[test]
fn repeat() -> Result<()> {
    let x = sample(4000, &[2, 3], any)?;
    for (i, x) in [x.clone(), transposed(&x)?, strided(&x)?].into_iter().enumerate() {
        let xs = std::slice::from_ref(&x);
        check(&format!("repeat [2, 1], layout {i}"), |v| v[0].repeat(&[2, 1]), xs);
        check(&format!("repeat [1, 3], layout {i}"), |v| v[0].repeat(&[1, 3]), xs);
        check(&format!("repeat [2, 2, 2], new leading dim, layout {i}"), |v| v[0].repeat(&[2, 2, 2]), xs);
        check(&format!("repeat then exp, layout {i}"), |v| Ok(v[0].repeat(&[2, 2])?.exp()), xs);
    }
    check("repeat 1-d [2, 2]", |v| v[0].repeat(&[2, 2]), &[strided(&sample(4001, &[3], any)?)?]);
    Ok(())
}

#[test]
fn tril_and_triu() -> Result<()> {
    let x = sample(4100, &[3, 4], any)?;
    let b = sample(4101, &[2, 3, 3], any)?;
    for (i, x) in [x.clone(), transposed(&x)?, narrowed(&x)?, transposed(&b)?].into_iter().enumerate() {
        for diag in [0i64, 1, -1, 5] {
            check(&format!("tril({diag}), layout {i}"), |v| v[0].tril(diag), std::slice::from_ref(&x));
            check(&format!("triu({diag}), layout {i}"), |v| v[0].triu(diag), std::slice::from_ref(&x));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Second derivatives
// ---------------------------------------------------------------------------------------

/// The gradient of `sum(op(xs) * w)` with respect to every `xs`, flattened and joined,
/// computed with `create_graph` so that it can be differentiated again: gradcheck of this
/// function checks the backward of `op`'s backward (Hessian-vector products for `xs`, and
/// linearity in the incoming gradient for `w`).
fn first_derivative(xs: &[Var], w: &Var, op: impl Fn(&[Var]) -> Result<Var>) -> Result<Var> {
    enable_grad(|| {
        // In gradcheck's numerical pass the inputs are plain constants (under no_grad):
        // make them parameters so that there is a graph to differentiate once.
        let xs: Vec<Var> =
            xs.iter().map(|x| if x.requires_grad() { x.clone() } else { Var::param(x.value()) }).collect();
        let y = op(&xs)?;
        let refs: Vec<&Var> = xs.iter().collect();
        let grads = grad(&[&y], &refs, &[w], false, true)?;
        let flat: Vec<Var> = grads
            .into_iter()
            .zip(&xs)
            // An input that does not reach the output has a zero gradient.
            .map(|(g, x)| g.unwrap_or_else(|| Var::new(x.value().zeros_like())).flatten_all())
            .collect();
        let refs: Vec<&Var> = flat.iter().collect();
        Var::cat(&refs, 0)
    })
}

/// Gradcheck of the first derivative of `op` at `xs`, for a random incoming gradient of
/// the output's shape.
#[track_caller]
fn check_second_order(name: &str, op: impl Fn(&[Var]) -> Result<Var>, xs: &[Tensor], seed: u64) -> Result<()> {
    let vars: Vec<Var> = xs.iter().map(|t| Var::new(t.clone())).collect();
    let out_shape = op(&vars)?.shape();
    let mut inputs = xs.to_vec();
    inputs.push(sample(seed, out_shape.dims(), any)?);
    let n = xs.len();
    check(&format!("second order: {name}"), |v| first_derivative(&v[..n], &v[n], &op), &inputs);
    Ok(())
}

#[test]
fn second_order_unary() -> Result<()> {
    let cases = UNARY.iter().filter_map(|c| match c.grad {
        Grad::Second(domain) => Some((c.name, c.var, domain)),
        _ => None,
    });
    for (k, (name, f, domain)) in cases.enumerate() {
        let seed = 5000 + 10 * k as u64;
        let x = transposed(&sample(seed, &[3, 4], domain)?)?;
        check_second_order(name, |v| Ok(f(&v[0])), &[x], seed + 1)?;
    }
    Ok(())
}

#[test]
fn second_order_binary_and_matmul() -> Result<()> {
    let a = transposed(&sample(5500, &[2, 3], any)?)?;
    let b = strided(&sample(5501, &[3], far_from_zero)?)?;
    check_second_order("mul, broadcast", |v| v[0].mul(&v[1]), &[a.clone(), b.clone()], 5502)?;
    check_second_order("div, broadcast", |v| v[0].div(&v[1]), &[a.clone(), b.clone()], 5503)?;
    let base = transposed(&sample(5504, &[2, 3], positive)?)?;
    check_second_order("pow, broadcast", |v| v[0].pow(&v[1]), &[base, b.clone()], 5505)?;
    check_second_order("matmul", |v| v[0].matmul(&v[1]), &[a, transposed(&sample(5506, &[3, 4], any)?)?], 5507)?;
    check_second_order(
        "batched matmul",
        |v| v[0].matmul(&v[1]),
        &[sample(5508, &[2, 1, 2, 3], any)?, strided(&sample(5509, &[2, 3, 2], any)?)?],
        5510,
    )?;
    Ok(())
}

#[test]
fn second_order_softmax_and_reductions() -> Result<()> {
    let x = transposed(&sample(5600, &[3, 4], any)?)?;
    let xs = std::slice::from_ref(&x);
    check_second_order("softmax along 1", |v| v[0].softmax(1), xs, 5601)?;
    check_second_order("softmax along 0", |v| v[0].softmax(0), xs, 5602)?;
    check_second_order("log_softmax along 1", |v| v[0].log_softmax(1), xs, 5603)?;
    check_second_order("log_softmax along 0", |v| v[0].log_softmax(0), xs, 5604)?;
    check_second_order("sum", |v| v[0].sum(1, false), xs, 5605)?;
    check_second_order("sum_all", |v| Ok(v[0].sum_all()), xs, 5606)?;
    check_second_order("mean", |v| v[0].mean(0, true), xs, 5607)?;
    check_second_order("var", |v| v[0].var(1, true, false), xs, 5608)?;
    check_second_order("std", |v| v[0].std(0, false, true), xs, 5609)?;
    check_second_order("logsumexp", |v| v[0].logsumexp(1, false), xs, 5610)?;
    let p = transposed(&sample(5611, &[3, 4], |v| v.signum() * (0.5 + (v.abs() / 3.0).min(1.0)))?)?;
    check_second_order("prod", |v| v[0].prod(1, false), &[p], 5612)?;
    check_second_order("max", |v| Ok(v[0].max(1, false)?.square()), &[transposed(&distinct(5613, &[3, 4])?)?], 5614)?;
    Ok(())
}

/// Second derivatives of a product with zeros: the zero-safe backward is itself built from
/// differentiable operations, so `d^2 prod / dx_i dx_j` (the product of the rest) comes out
/// right with one zero and with two zeros in a group.
#[test]
fn second_order_prod_with_zeros() -> Result<()> {
    let one_zero = Tensor::from_vec(vec![0.8f64, -1.2, 0.6, 1.1, 0.9, 0.7, 0.0, -1.3, 1.4, -0.5, 1.2, 0.9], [3, 4])?;
    let two_zeros = Tensor::from_vec(vec![0.8f64, -1.2, 0.6, 1.1, 0.0, 0.7, 0.0, -1.3, 1.4, -0.5, 1.2, 0.9], [3, 4])?;
    for (name, x) in [("one zero", one_zero), ("two zeros in a row", two_zeros)] {
        for (i, x) in [x.clone(), transposed(&x)?].into_iter().enumerate() {
            let xs = std::slice::from_ref(&x);
            check_second_order(&format!("prod over 1, {name}, layout {i}"), |v| v[0].prod(1, false), xs, 5620)?;
            check_second_order(&format!("prod over 0, {name}, layout {i}"), |v| v[0].prod(0, true), xs, 5621)?;
            check_second_order(&format!("prod_all, {name}, layout {i}"), |v| Ok(v[0].prod_all()), xs, 5622)?;
        }
    }
    // The Hessians of prod([0, 3, 5]) and prod([0, 0, 5]), as PyTorch computes them.
    for (x, hessian) in [
        (vec![0.0f64, 3.0, 5.0], [[0.0, 5.0, 3.0], [5.0, 0.0, 0.0], [3.0, 0.0, 0.0]]),
        (vec![0.0f64, 0.0, 5.0], [[0.0, 5.0, 0.0], [5.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),
    ] {
        let x = Var::param(Tensor::from_vec(x, [3])?);
        let g = grad(&[&x.prod_all()], &[&x], &[], false, true)?[0].clone().expect("a first derivative");
        for (i, row) in hessian.iter().enumerate() {
            let gi = g.select(0, i)?;
            let h = grad(&[&gi], &[&x], &[], true, false)?[0].clone();
            let h = match h {
                Some(h) => h.value().to_vec::<f64>()?,
                None => vec![0.0; 3],
            };
            assert_eq!(h, row.to_vec(), "row {i} of the Hessian at {:?}", x.value().to_vec::<f64>()?);
        }
    }
    Ok(())
}

/// Views, indexing and joins are linear, so their second derivative in `x` is zero; the
/// check still differentiates their backward in the incoming gradient, which runs the
/// reverse operations (embed for slices, index_add for index_select, scatter_add for
/// gather, ...) through their own backward.
#[test]
fn second_order_linear_operations() -> Result<()> {
    let x = transposed(&sample(5700, &[3, 4], any)?)?;
    let xs = std::slice::from_ref(&x);
    let idx = int_tensor(&[1, 1, 0, 3, 2, 2], &[3, 2])?;
    let rows = int_tensor(&[2, 0, 2], &[3])?;
    let c = Var::new(mask(&[1, 0, 0, 1, 1, 0, 1, 0, 0, 1, 1, 1], &[3, 4])?);
    check_second_order("slice with step", |v| v[0].slice(1, 0, 4, 2), xs, 5701)?;
    check_second_order("select", |v| v[0].select(0, 1), xs, 5702)?;
    check_second_order("index_select", |v| v[0].index_select(0, &rows), xs, 5703)?;
    check_second_order("gather", |v| v[0].gather(1, &idx), xs, 5704)?;
    check_second_order(
        "scatter_add, source wider than the index",
        |v| v[0].scatter_add(1, &idx, &v[1]),
        &[x.clone(), sample(5705, &[3, 3], any)?],
        5706,
    )?;
    check_second_order("where", |v| c.where_cond(&v[0], &v[1]), &[x.clone(), sample(5707, &[4], any)?], 5708)?;
    check_second_order("pad", |v| v[0].pad(&[(1, 2), (0, 1)], 0.0), xs, 5709)?;
    check_second_order("repeat", |v| v[0].repeat(&[2, 1, 2]), xs, 5710)?;
    check_second_order("expand", |v| v[0].unsqueeze(0)?.expand([2usize, 3, 4]), xs, 5711)?;
    check_second_order("cat", |v| Var::cat(&[&v[0], &v[0].t()?.reshape([3usize, 4])?], 1), xs, 5712)?;
    check_second_order("tril", |v| v[0].tril(0), xs, 5713)?;
    check_second_order("permute and reshape", |v| v[0].t()?.reshape([-1i64]), xs, 5714)?;
    Ok(())
}

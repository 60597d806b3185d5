//! Every kernel family of the CPU backend checked on `f64` data against a straightforward
//! scalar reference written with loops over indices: unary functions (every `UnaryOp`,
//! scalar operations included, out of place and in place), binary functions, comparisons,
//! `where`, reductions, softmax, matmul, the indexing kernels, joins and triangles,
//! in-place updates and dtype casts.
//!
//! Inputs come in several memory layouts with the same logical values (contiguous,
//! transposed, narrowed out of a larger buffer, strided by a slice step), and in sizes above
//! 64K elements so that the kernels' parallel splitting runs too. Results must agree to
//! 1e-12 relative: to the value itself for elementwise results, products and variances, and
//! to the sum of the magnitudes of the terms where terms of both signs are added (sums,
//! means, matrix products, log-sum-exp, log-softmax), which is the scale their rounding
//! error grows with. References sum with compensation so that they add no error of their
//! own. Integer results, extremes, indices and copies must agree exactly.

mod common;

use common::{arg_extreme, ieee_subnormals, indices, max_nan, min_nan, mix, numel, same};
use ember_tensor::{DType, Element, Scalar, Tensor, UnaryOp};
use ember_testing::UNARY;
use ember_testing::elementwise::BINARY;
use ember_testing::elementwise::erf_series;

const REL: f64 = 1e-12;

/// A shape of more than 64K elements, which reaches the parallel paths of every kernel.
const BIG: [usize; 2] = [256, 261];

/// `n` values uniform in `[lo, hi)`.
fn uniform(seed: u64, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n).map(|i| lo + (hi - lo) * ((mix(seed, i as u64) >> 11) as f64 / (1u64 << 53) as f64)).collect()
}

/// `n` integers in `0..bound`.
fn ints(seed: u64, n: usize, bound: u64) -> Vec<i64> {
    (0..n).map(|i| (mix(seed, i as u64) % bound) as i64).collect()
}

/// The row-major position of `idx` in `shape`.
fn flat(shape: &[usize], idx: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |a, (&i, &d)| a * d + i)
}

/// The values of `vals` (of `shape`) with the dimensions reversed.
fn reversed<T: Copy>(vals: &[T], shape: &[usize]) -> (Vec<T>, Vec<usize>) {
    let rshape: Vec<usize> = shape.iter().rev().copied().collect();
    let data = indices(&rshape)
        .iter()
        .map(|r| {
            let idx: Vec<usize> = r.iter().rev().copied().collect();
            vals[flat(shape, &idx)]
        })
        .collect();
    (data, rshape)
}

/// `vals` placed inside a buffer one larger on each side in every dimension (the rest is
/// `junk`) and narrowed back: a view with an offset and gaps between rows.
fn narrowed<T: Element>(vals: &[T], shape: &[usize], junk: T) -> Tensor {
    let big: Vec<usize> = shape.iter().map(|d| d + 2).collect();
    let mut data = vec![junk; numel(&big)];
    for idx in indices(shape) {
        let b: Vec<usize> = idx.iter().map(|i| i + 1).collect();
        data[flat(&big, &b)] = vals[flat(shape, &idx)];
    }
    let mut t = Tensor::from_vec(data, big.as_slice()).unwrap();
    for (d, &e) in shape.iter().enumerate() {
        t = t.narrow(d, 1, e).unwrap();
    }
    t
}

/// `vals` at the odd positions of a last dimension twice as long: a view with a stride of 2.
fn stepped<T: Element>(vals: &[T], shape: &[usize], junk: T) -> Tensor {
    let last = shape.len() - 1;
    let mut big = shape.to_vec();
    big[last] = 2 * shape[last] + 1;
    let mut data = vec![junk; numel(&big)];
    for idx in indices(shape) {
        let mut b = idx.clone();
        b[last] = 2 * idx[last] + 1;
        data[flat(&big, &b)] = vals[flat(shape, &idx)];
    }
    Tensor::from_vec(data, big.as_slice()).unwrap().slice(last, 1, 2 * shape[last] + 1, 2).unwrap()
}

/// A tensor with the name of its layout.
type Named = (&'static str, Tensor);

/// Tensors holding `vals` (row-major, of `shape`) in different memory layouts; the values
/// around the views are `junk`, so that a kernel reading outside its view shows.
fn layouts<T: Element>(vals: &[T], shape: &[usize], junk: T) -> Vec<Named> {
    let mut out = vec![("contiguous", Tensor::from_vec(vals.to_vec(), shape).unwrap())];
    if !shape.is_empty() {
        out.push(("narrowed", narrowed(vals, shape, junk)));
        out.push(("stepped", stepped(vals, shape, junk)));
    }
    if shape.len() >= 2 {
        let (rv, rs) = reversed(vals, shape);
        let back: Vec<usize> = (0..shape.len()).rev().collect();
        out.push(("transposed", Tensor::from_vec(rv.clone(), rs.as_slice()).unwrap().permute(&back).unwrap()));
        out.push(("transposed and narrowed", narrowed(&rv, &rs, junk).permute(&back).unwrap()));
    }
    for (name, t) in &out {
        assert_eq!(t.shape(), shape, "{name}");
    }
    out
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap_or_else(|e| panic!("expected an f64 result: {e}"))
}

/// `got` equals `want` to `REL` of `scale[i]` (NaN matching NaN, infinities exactly).
#[track_caller]
fn check_scaled(what: &str, got: &[f64], want: &[f64], scale: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for i in 0..got.len() {
        let (g, w) = (got[i], want[i]);
        let ok = same(g, w) || (w.is_finite() && (g - w).abs() <= REL * scale[i]);
        assert!(ok, "{what}: element {i} is {g:e}, want {w:e} (scale {:e})", scale[i]);
    }
}

/// `got` equals `want` to `REL` relative.
#[track_caller]
fn check(what: &str, got: &[f64], want: &[f64]) {
    let scale: Vec<f64> = want.iter().map(|w| w.abs()).collect();
    check_scaled(what, got, want, &scale);
}

/// Sums `vals` with Neumaier's compensation, so that the reference adds no error of its own.
fn exact_sum(vals: impl IntoIterator<Item = f64>) -> f64 {
    let (mut s, mut c) = (0.0f64, 0.0f64);
    for v in vals {
        let t = s + v;
        c += if s.abs() >= v.abs() { (s - t) + v } else { (v - t) + s };
        s = t;
    }
    s + c
}

/// Every `UnaryOp` variant has a case in the table.
#[test]
fn every_unary_op_is_listed() {
    let missing: Vec<&str> =
        UnaryOp::NAMES.iter().copied().filter(|name| !UNARY.iter().any(|c| c.op.name() == *name)).collect();
    assert!(missing.is_empty(), "variants {missing:?} have no test case");
}

/// Arguments that cover each function's regimes: signs, zeros of both signs, halves (for
/// rounding), tiny and huge magnitudes, overflow of `exp`, infinities and NaN; the rest
/// uniform in [-8, 8].
fn unary_inputs(n: usize, seed: u64) -> Vec<f64> {
    let special = [
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.5,
        2.5,
        -2.5,
        3.5,
        1.0,
        -1.0,
        2.0,
        1e-300,
        -1e-300,
        1e-10,
        -1e-10,
        1e10,
        -1e10,
        19.9,
        20.1,
        36.0,
        -36.0,
        700.0,
        710.0,
        -745.0,
        -750.0,
        f64::MAX,
        f64::MIN_POSITIVE,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let mut v = uniform(seed, n, -8.0, 8.0);
    for (i, s) in special.iter().enumerate() {
        // Spread the special values over the whole buffer, so every parallel chunk sees some.
        let at = (i * 7919) % n;
        v[at] = *s;
    }
    v
}

#[test]
fn unary_ops_match_the_reference() {
    // exp of the most negative inputs is subnormal in f64.
    ieee_subnormals();
    for shape in [vec![11, 23], BIG.to_vec(), vec![], vec![0, 3]] {
        let n = numel(&shape);
        let x = if n >= 40 { unary_inputs(n, 1) } else { uniform(1, n, -3.0, 3.0) };
        let cases = if shape.len() == 2 && n > 1000 {
            // Three layouts are enough to split strided runs across parallel chunks.
            layouts(&x, &shape, f64::NAN).into_iter().filter(|(l, _)| *l != "narrowed" && *l != "transposed").collect()
        } else {
            layouts(&x, &shape, f64::NAN)
        };
        for case in UNARY {
            let want: Vec<f64> = x.iter().map(|&v| (case.reference)(v)).collect();
            for (layout, t) in &cases {
                let got = (case.tensor)(t);
                assert_eq!(got.dtype(), DType::F64);
                assert_eq!(got.shape(), shape.as_slice());
                check(&format!("{} on {layout} {shape:?}", case.name), &values(&got), &want);
            }
        }
    }
}

/// Every case on a grid from -14.8 to 14.8 and on its magnitudes (for the functions of
/// positive arguments), where the transcendental functions have left their small-argument
/// regimes, to `REL` of `max(|value|, 1)`.
#[test]
fn unary_ops_match_the_reference_on_a_grid() {
    let grid: Vec<f64> = (-40..=40).map(|i| i as f64 * 0.37).collect();
    let magnitudes: Vec<f64> = grid.iter().map(|x| x.abs()).collect();
    for xs in [grid, magnitudes] {
        let t = Tensor::from_vec(xs.clone(), [xs.len()]).unwrap();
        for case in UNARY {
            let want: Vec<f64> = xs.iter().map(|&x| (case.reference)(x)).collect();
            let scale: Vec<f64> = want.iter().map(|w| w.abs().max(1.0)).collect();
            check_scaled(&format!("{} on the grid", case.name), &values(&(case.tensor)(&t)), &want, &scale);
        }
    }
}

#[test]
fn unary_ops_in_place_match_the_reference() {
    // exp of the most negative inputs is subnormal in f64.
    ieee_subnormals();
    for shape in [vec![9, 14], BIG.to_vec()] {
        let n = numel(&shape);
        let x = unary_inputs(n, 2);
        let source = Tensor::from_vec(x.clone(), shape.as_slice()).unwrap();
        for (layout, t) in layouts(&x, &shape, -7.25) {
            if n > 1000 && layout != "transposed and narrowed" && layout != "contiguous" {
                continue;
            }
            let outside = outside_of(&t);
            for case in UNARY {
                // The view writes into a buffer shared with the junk around it; each op
                // starts again from the inputs.
                t.copy_(&source).unwrap();
                let before = t.version();
                let what = format!("{} in place on {layout} {shape:?}", case.name);
                t.apply_(case.op).unwrap();
                assert_eq!(t.version(), before + 1, "{what}");
                let want: Vec<f64> = x.iter().map(|&v| (case.reference)(v)).collect();
                check(&what, &values(&t), &want);
                assert_junk_intact(&t, &outside, -7.25, &what);
            }
        }
    }
}

#[test]
fn erf_series_is_accurate() {
    // Spot values of erf to 16 digits, so that the series the kernels are checked against
    // is itself checked.
    let known =
        [(0.5, 0.5204998778130465), (1.0, 0.8427007929497149), (2.0, 0.9953222650189527), (-3.0, -0.9999779095030014)];
    for (x, want) in known {
        let got = erf_series(x);
        assert!((got - want).abs() <= 1e-15, "erf({x}) = {got}, want {want}");
    }
    assert_eq!(erf_series(0.0), 0.0);
    assert_eq!(erf_series(f64::INFINITY), 1.0);
}

#[test]
fn integer_unary_ops_match_the_reference() {
    use Scalar::{Float, Int};
    use UnaryOp::*;
    let mut x = ints(3, 11 * 23, 2001).iter().map(|v| v - 1000).collect::<Vec<_>>();
    x[..6].copy_from_slice(&[i64::MIN, i64::MAX, 0, -1, 1, i64::MIN + 1]);
    for (layout, t) in layouts(&x, &[11, 23], 99i64) {
        // Every case whose integer form keeps the dtype: wrapping semantics (`abs` and
        // negation wrap at `i64::MIN`, integer scalars take part exactly), `clamp` bounds
        // converted with `as`.
        for case in UNARY {
            let Some(reference) = case.int_reference else { continue };
            let name = case.name;
            let want: Vec<i64> = x.iter().map(|&v| reference(v)).collect();
            let got = (case.tensor)(&t);
            assert_eq!(got.dtype(), DType::I64, "{name} on {layout}");
            assert_eq!(got.to_vec::<i64>().unwrap(), want, "{name} on {layout}");
            let inplace = t.copy();
            inplace.apply_(case.op).unwrap();
            assert_eq!(inplace.to_vec::<i64>().unwrap(), want, "{name} in place on {layout}");
        }
        // PyTorch refuses negative integer powers of integers, in place too.
        assert!(t.pow_scalar(-1).is_err());
        assert!(t.copy().apply_(PowScalar(Int(-2))).is_err());
        // A float scalar makes the result float, which cannot be written in place.
        assert_eq!(t.add_scalar(0.5).dtype(), DType::F32);
        assert!(t.copy().apply_(AddScalar(Float(0.5))).is_err());
    }
    // `u8` wraps modulo 256 and has no negative values.
    let b: Vec<u8> = (0..=255).collect();
    let t = Tensor::from_vec(b.clone(), [16, 16]).unwrap().t().unwrap();
    let bt: Vec<u8> = (0..256).map(|i| b[(i % 16) * 16 + i / 16]).collect();
    type ByteRef = fn(u8) -> u8;
    let cases: [(Tensor, ByteRef); 11] = [
        (t.neg(), u8::wrapping_neg),
        (t.abs(), |v| v),
        (t.square(), |v| v.wrapping_mul(v)),
        (t.add_scalar(200), |v| v.wrapping_add(200)),
        (t.sign(), |v| (v > 0) as u8),
        // Integer scalars convert to u8 with wrapping, as PyTorch converts them: -1 is 255.
        (t.add_scalar(-1), |v| v.wrapping_sub(1)),
        (t.mul_scalar(-1), u8::wrapping_neg),
        (t.sub_scalar(300), |v| v.wrapping_sub(44)),
        (t.pow_scalar(3).unwrap(), |v| v.wrapping_mul(v).wrapping_mul(v)),
        (t.maximum_scalar(300), |_| 255),
        (t.minimum_scalar(-1), |_| 0),
    ];
    for (i, (got, f)) in cases.into_iter().enumerate() {
        assert_eq!(got.to_vec::<u8>().unwrap(), bt.iter().map(|&v| f(v)).collect::<Vec<_>>(), "u8 case {i}");
    }
}

/// The value at `idx` of an array of `shape` broadcast to an index of higher rank.
fn at_broadcast(vals: &[f64], shape: &[usize], idx: &[usize]) -> f64 {
    let extra = idx.len() - shape.len();
    let own: Vec<usize> = shape.iter().enumerate().map(|(d, &e)| if e == 1 { 0 } else { idx[extra + d] }).collect();
    vals[flat(shape, &own)]
}

/// Operand values that include zeros, negatives (for `pow`), ties and NaN.
fn binary_inputs(n: usize, seed: u64) -> Vec<f64> {
    let mut v = uniform(seed, n, -4.0, 4.0);
    for i in (0..n).step_by(13) {
        v[i] = [0.0, -0.0, 2.0, f64::NAN, 1.0, f64::INFINITY, -3.0][(i / 13) % 7];
    }
    v
}

#[test]
fn binary_ops_match_the_reference() {
    // Same shapes, a row broadcast, a column broadcast and a two-sided broadcast, small
    // and above the parallel threshold.
    let pairs: [(&[usize], &[usize]); 8] = [
        (&[11, 23], &[11, 23]),
        (&[11, 23], &[23]),
        (&[11, 23], &[11, 1]),
        (&[4, 1, 23], &[7, 1]),
        (&[], &[5, 3]),
        (&BIG, &BIG),
        (&BIG, &[1, 261]),
        (&[256, 1], &[1, 261]),
    ];
    for (sa, sb) in pairs {
        let (a, b) = (binary_inputs(numel(sa), 4), binary_inputs(numel(sb), 5));
        let out = broadcast(sa, sb);
        let big = numel(&out) > 1000;
        let operands: Vec<(f64, f64)> =
            indices(&out).iter().map(|i| (at_broadcast(&a, sa, i), at_broadcast(&b, sb, i))).collect();
        let (la, lb) = (layouts(&a, sa, f64::NAN), layouts(&b, sb, f64::NAN));
        let mut combos: Vec<(&Named, &Named)> = la.iter().flat_map(|x| lb.iter().map(move |y| (x, y))).collect();
        if big {
            // Every pair of large layouts would be slow: the contiguous fast path, and strided
            // runs on either side split across parallel chunks, are enough.
            let wanted =
                [("contiguous", "contiguous"), ("transposed and narrowed", "contiguous"), ("stepped", "transposed")];
            combos.retain(|((x, _), (y, _))| wanted.contains(&(*x, *y)));
        }
        for case in BINARY {
            let (name, f) = (case.name, case.reference);
            let want: Vec<f64> = operands.iter().map(|&(x, y)| f(x, y)).collect();
            for ((la, ta), (lb, tb)) in &combos {
                let got = (case.tensor)(ta, tb).unwrap();
                assert_eq!(got.shape(), out.as_slice());
                check(&format!("{name} of {la} {sa:?} and {lb} {sb:?}"), &values(&got), &want);
            }
        }
    }
}

fn broadcast(a: &[usize], b: &[usize]) -> Vec<usize> {
    let rank = a.len().max(b.len());
    (0..rank)
        .map(|i| {
            let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
            let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
            if da == 1 { db } else { da }
        })
        .collect()
}

#[test]
fn integer_binary_ops_wrap_like_the_reference() {
    let shape = [13, 17];
    let mut a: Vec<i64> = ints(6, 221, 41).iter().map(|v| v - 20).collect();
    let b: Vec<i64> = ints(7, 221, 9).iter().map(|v| v - 2).collect();
    a[..3].copy_from_slice(&[i64::MAX, i64::MIN, i64::MIN]);
    for (la, ta) in layouts(&a, &shape, 5i64) {
        let tb = stepped(&b, &shape, -9i64);
        for case in BINARY {
            let Some(f) = case.int_reference else { continue };
            let got = (case.tensor)(&ta, &tb).unwrap();
            let want: Vec<i64> = a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect();
            assert_eq!(got.to_vec::<i64>().unwrap(), want, "{} on {la}", case.name);
        }
        // Integer division is true division, in f32.
        let q = ta.div(&tb).unwrap();
        let want: Vec<f32> = a.iter().zip(&b).map(|(&x, &y)| (x as f32) / (y as f32)).collect();
        let got = q.to_vec::<f32>().unwrap();
        assert!(got.iter().zip(&want).all(|(g, w)| g == w || (g.is_nan() && w.is_nan())), "div on {la}");
    }
}

#[test]
fn comparisons_match_the_reference() {
    type Cmp = fn(&Tensor, &Tensor) -> ember_tensor::Result<Tensor>;
    type CmpScalar = fn(&Tensor, f64) -> Tensor;
    type CmpRef = fn(f64, f64) -> bool;
    let ops: [(&str, Cmp, CmpScalar, CmpRef); 6] = [
        ("eq", Tensor::eq, |t, s| t.eq_scalar(s), |a, b| a == b),
        ("ne", Tensor::ne, |t, s| t.ne_scalar(s), |a, b| a != b),
        ("lt", Tensor::lt, |t, s| t.lt_scalar(s), |a, b| a < b),
        ("le", Tensor::le, |t, s| t.le_scalar(s), |a, b| a <= b),
        ("gt", Tensor::gt, |t, s| t.gt_scalar(s), |a, b| a > b),
        ("ge", Tensor::ge, |t, s| t.ge_scalar(s), |a, b| a >= b),
    ];
    for shape in [vec![11, 23], BIG.to_vec()] {
        let n = numel(&shape);
        // Small integers make ties common; NaN and signed zeros test IEEE comparisons.
        let mut a: Vec<f64> = ints(8, n, 5).iter().map(|&v| v as f64 - 2.0).collect();
        let b: Vec<f64> = ints(9, n, 5).iter().map(|&v| v as f64 - 2.0).collect();
        for i in (0..n).step_by(17) {
            a[i] = [f64::NAN, -0.0, f64::INFINITY][(i / 17) % 3];
        }
        for (la, ta) in layouts(&a, &shape, 0.0) {
            if n > 1000 && la != "contiguous" && la != "transposed and narrowed" {
                continue;
            }
            let tb = Tensor::from_vec(b.clone(), shape.as_slice()).unwrap();
            for (name, tensor_op, scalar_op, f) in ops {
                let got = tensor_op(&ta, &tb).unwrap();
                assert_eq!(got.dtype(), DType::U8);
                let want: Vec<u8> = a.iter().zip(&b).map(|(&x, &y)| f(x, y) as u8).collect();
                assert_eq!(got.to_vec::<u8>().unwrap(), want, "{name} on {la}");
                for s in [0.0, -1.0, f64::NAN] {
                    let want: Vec<u8> = a.iter().map(|&x| f(x, s) as u8).collect();
                    assert_eq!(scalar_op(&ta, s).to_vec::<u8>().unwrap(), want, "{name}_scalar({s}) on {la}");
                }
            }
        }
    }
    // Integer tensors compare with a fractional scalar by value, not after truncating it.
    let i = Tensor::from_vec(vec![-2i64, -1, 0, 1, 2], [5]).unwrap();
    assert_eq!(i.lt_scalar(-1.5).to_vec::<u8>().unwrap(), vec![1, 0, 0, 0, 0]);
    assert_eq!(i.ge_scalar(0.5).to_vec::<u8>().unwrap(), vec![0, 0, 0, 1, 1]);
}

#[test]
fn where_matches_the_reference() {
    let cases: [(&[usize], &[usize], &[usize]); 4] = [
        (&[11, 23], &[11, 23], &[11, 23]),
        (&[11, 1], &[23], &[]),
        (&[1, 23], &[11, 1], &[11, 23]),
        (&BIG, &BIG, &[261]),
    ];
    for (sc, sa, sb) in cases {
        let c: Vec<u8> = ints(10, numel(sc), 2).iter().map(|&v| v as u8).collect();
        let (a, b) = (uniform(11, numel(sa), -1.0, 1.0), uniform(12, numel(sb), 5.0, 6.0));
        let out = broadcast(&broadcast(sc, sa), sb);
        let want: Vec<f64> = indices(&out)
            .iter()
            .map(|i| {
                let extra = i.len() - sc.len();
                let own: Vec<usize> =
                    sc.iter().enumerate().map(|(d, &e)| if e == 1 { 0 } else { i[extra + d] }).collect();
                if c[flat(sc, &own)] != 0 { at_broadcast(&a, sa, i) } else { at_broadcast(&b, sb, i) }
            })
            .collect();
        for (lc, tc) in layouts(&c, sc, 7u8) {
            for (la, ta) in layouts(&a, sa, f64::NAN) {
                if numel(&out) > 1000 && (lc == "narrowed" || la == "stepped") {
                    continue;
                }
                let tb = Tensor::from_vec(b.clone(), sb).unwrap();
                let got = tc.where_cond(&ta, &tb).unwrap();
                assert_eq!(got.shape(), out.as_slice());
                assert_eq!(values(&got), want, "where with {lc} {sc:?} and {la} {sa:?}");
            }
        }
    }
}

/// The values of `vals` (of `shape`) grouped by their coordinates outside `dims`: one
/// group per output element of a reduction over `dims`, each in row-major order.
fn groups(vals: &[f64], shape: &[usize], dims: &[usize]) -> Vec<Vec<f64>> {
    let kept: Vec<usize> = shape.iter().enumerate().map(|(d, &e)| if dims.contains(&d) { 1 } else { e }).collect();
    let mut out = vec![Vec::new(); numel(&kept)];
    for (p, i) in indices(shape).iter().enumerate() {
        let o: Vec<usize> = i.iter().enumerate().map(|(d, &x)| if dims.contains(&d) { 0 } else { x }).collect();
        out[flat(&kept, &o)].push(vals[p]);
    }
    out
}

/// Every reduction of `x` (of `shape`) over `dims`, computed once and compared with the
/// tensors of each layout.
struct Reductions {
    sum: Vec<f64>,
    abs_sum: Vec<f64>,
    mean: Vec<f64>,
    mean_scale: Vec<f64>,
    prod: Vec<f64>,
    max: Vec<f64>,
    min: Vec<f64>,
    var: [Vec<f64>; 2],
    lse: Vec<f64>,
    lse_scale: Vec<f64>,
    argmax: Vec<f64>,
    argmin: Vec<f64>,
}

impl Reductions {
    fn new(x: &[f64], shape: &[usize], dims: &[usize]) -> Self {
        let g = groups(x, shape, dims);
        let map = |f: &dyn Fn(&[f64]) -> f64| g.iter().map(|v| f(v)).collect::<Vec<f64>>();
        let n = dims.iter().map(|&d| shape[d]).product::<usize>() as f64;
        let sum = map(&|v| exact_sum(v.iter().copied()));
        let abs_sum = map(&|v| exact_sum(v.iter().map(|x| x.abs())));
        let var = |unbiased: bool| {
            map(&|v| {
                let m = exact_sum(v.iter().copied()) / v.len() as f64;
                exact_sum(v.iter().map(|x| (x - m) * (x - m))) / (v.len() as f64 - unbiased as u8 as f64)
            })
        };
        let lse = map(&|v| {
            let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            m + exact_sum(v.iter().map(|x| (x - m).exp())).ln()
        });
        Reductions {
            mean: sum.iter().map(|s| s / n).collect(),
            mean_scale: abs_sum.iter().map(|s| s / n).collect(),
            sum,
            abs_sum,
            prod: map(&|v| v.iter().product()),
            max: map(&|v| v.iter().copied().fold(f64::NEG_INFINITY, max_nan)),
            min: map(&|v| v.iter().copied().fold(f64::INFINITY, min_nan)),
            var: [var(false), var(true)],
            // log-sum-exp adds the maximum to a logarithm: relative to both terms.
            lse_scale: lse.iter().map(|v| v.abs().max(1.0)).collect(),
            lse,
            argmax: map(&|v| arg_extreme(v, true)),
            argmin: map(&|v| arg_extreme(v, false)),
        }
    }

    /// Checks every reduction of `t` over `dims` (one dimension for argmax and argmin).
    fn check(&self, t: &Tensor, dims: &[usize], what: &str) {
        check_scaled(&format!("sum {what}"), &values(&t.sum(dims, false).unwrap()), &self.sum, &self.abs_sum);
        check_scaled(&format!("mean {what}"), &values(&t.mean(dims, true).unwrap()), &self.mean, &self.mean_scale);
        check(&format!("prod {what}"), &values(&t.prod(dims, false).unwrap()), &self.prod);
        // Extremes are exact: `check` with a zero scale.
        let zero = vec![0.0; self.max.len()];
        check_scaled(&format!("max {what}"), &values(&t.max(dims, false).unwrap()), &self.max, &zero);
        check_scaled(&format!("min {what}"), &values(&t.min(dims, true).unwrap()), &self.min, &zero);
        for (unbiased, var) in [false, true].into_iter().zip(&self.var) {
            check(&format!("var {what}"), &values(&t.var(dims, unbiased, false).unwrap()), var);
            let std: Vec<f64> = var.iter().map(|v| v.sqrt()).collect();
            check(&format!("std {what}"), &values(&t.std(dims, unbiased, true).unwrap()), &std);
        }
        check_scaled(
            &format!("logsumexp {what}"),
            &values(&t.logsumexp(dims, false).unwrap()),
            &self.lse,
            &self.lse_scale,
        );
        if let [d] = dims {
            assert_eq!(t.argmax(*d, false).unwrap().to_vec_f64().unwrap(), self.argmax, "argmax {what}");
            assert_eq!(t.argmin(*d, true).unwrap().to_vec_f64().unwrap(), self.argmin, "argmin {what}");
        }
    }
}

#[test]
fn reductions_match_the_reference() {
    // Every subset of the dimensions of a 3-d tensor, through contiguous rows, leading
    // ("column") reductions and the copying path for the others.
    let shape = [6, 7, 9];
    let x = uniform(13, numel(&shape), -2.0, 3.0);
    for mask in 1..8u32 {
        let dims: Vec<usize> = (0..3).filter(|d| mask & (1 << d) != 0).collect();
        let want = Reductions::new(&x, &shape, &dims);
        for (layout, t) in layouts(&x, &shape, f64::NAN) {
            want.check(&t, &dims, &format!("over {dims:?} of {layout} {shape:?}"));
        }
    }
    // Above the parallel threshold: one long row split across threads, many short rows,
    // a wide leading ("column") reduction, and non-contiguous tensors of each. Values near
    // 1 keep the products of long rows finite.
    for (shape, dims) in [
        (vec![1, 70_000], vec![1]),
        (vec![2, 40_000], vec![1]),
        (vec![9000, 9], vec![1]),
        (vec![3, 40_000], vec![0]),
        (vec![40, 50, 41], vec![0, 2]),
        (vec![40, 50, 41], vec![1]),
        (vec![40, 50, 41], vec![0, 1, 2]),
    ] {
        let x = uniform(14, numel(&shape), 0.999, 1.001);
        let want = Reductions::new(&x, &shape, &dims);
        for (layout, t) in layouts(&x, &shape, f64::NAN) {
            if layout == "narrowed" || layout == "stepped" {
                continue;
            }
            want.check(&t, &dims, &format!("over {dims:?} of {layout} {shape:?}"));
        }
    }
    // NaN propagates through max and min and wins argmax and argmin.
    let mut x = uniform(15, 5 * 6, -1.0, 1.0);
    x[8] = f64::NAN;
    for d in 0..2 {
        let want = Reductions::new(&x, &[5, 6], &[d]);
        for (layout, t) in layouts(&x, &[5, 6], 0.0) {
            want.check(&t, &[d], &format!("over {d} of {layout} [5, 6] with a NaN"));
        }
    }
}

#[test]
fn softmax_matches_the_reference() {
    for (shape, scale) in [(vec![6, 7, 9], 3.0), (vec![300, 257], 30.0), (vec![70_000], 5.0)] {
        let n = numel(&shape);
        let x = uniform(16, n, -scale, scale);
        let idx = indices(&shape);
        for d in 0..shape.len() {
            let kept: Vec<usize> = shape.iter().enumerate().map(|(k, &e)| if k == d { 1 } else { e }).collect();
            let group = |i: &[usize]| {
                let mut o = i.to_vec();
                o[d] = 0;
                flat(&kept, &o)
            };
            let g = groups(&x, &shape, &[d]);
            let maxes: Vec<f64> = g.iter().map(|v| v.iter().copied().fold(f64::NEG_INFINITY, f64::max)).collect();
            let sums: Vec<f64> =
                g.iter().zip(&maxes).map(|(v, m)| exact_sum(v.iter().map(|x| (x - m).exp()))).collect();
            let p: Vec<f64> = idx.iter().zip(&x).map(|(i, v)| (v - maxes[group(i)]).exp() / sums[group(i)]).collect();
            let lp: Vec<f64> = idx.iter().zip(&x).map(|(i, v)| v - (maxes[group(i)] + sums[group(i)].ln())).collect();
            // log-softmax subtracts the log-sum from each entry: relative to both terms.
            let lscale: Vec<f64> = idx.iter().zip(&x).map(|(i, v)| v.abs() + maxes[group(i)].abs() + 1.0).collect();
            for (layout, t) in layouts(&x, &shape, f64::NAN) {
                if n > 1000 && layout != "contiguous" && layout != "transposed and narrowed" {
                    continue;
                }
                let what = format!("softmax({d}) of {layout} {shape:?}");
                check(&what, &values(&t.softmax(d).unwrap()), &p);
                check_scaled(&format!("log_{what}"), &values(&t.log_softmax(d).unwrap()), &lp, &lscale);
            }
        }
    }
    // A fully masked row has no finite maximum; the kernel shifts it by 0 instead and
    // gives 0 / 0 like PyTorch, while a partly masked row is unaffected by its -inf.
    let x = Tensor::from_vec(vec![f64::NEG_INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY, 0.0], [2, 2]).unwrap();
    let p = values(&x.softmax(1).unwrap());
    assert!(p[0].is_nan() && p[1].is_nan() && p[2] == 0.0 && p[3] == 1.0, "{p:?}");
}

/// `a @ b` for row-major `[batch, m, k]` and `[batch, k, n]` arrays, with the scale of its
/// rounding error (the sums of the magnitudes of the products).
fn matmul_ref(a: &[f64], b: &[f64], batch: usize, m: usize, k: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut out = Vec::with_capacity(batch * m * n);
    let mut scale = Vec::with_capacity(batch * m * n);
    for p in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let terms = (0..k).map(|q| a[(p * m + i) * k + q] * b[(p * k + q) * n + j]);
                out.push(exact_sum(terms.clone()));
                scale.push(exact_sum(terms.map(f64::abs)));
            }
        }
    }
    (out, scale)
}

/// The row-major values of `t` broadcast to `shape`.
fn broadcast_values(t: &Tensor, shape: &[usize]) -> Vec<f64> {
    values(&t.expand(shape).unwrap().contiguous())
}

#[test]
fn matmul_matches_the_reference() {
    let (m, k, n) = (7, 13, 5);
    let a = uniform(17, m * k, -1.0, 1.0);
    let b = uniform(18, k * n, -1.0, 1.0);
    let (want, scale) = matmul_ref(&a, &b, 1, m, k, n);
    for (la, ta) in layouts(&a, &[m, k], f64::NAN) {
        for (lb, tb) in layouts(&b, &[k, n], f64::NAN) {
            let got = ta.matmul(&tb).unwrap();
            assert_eq!(got.shape(), &[m, n]);
            check_scaled(&format!("matmul of {la} and {lb}"), &values(&got), &want, &scale);
        }
    }

    // Batches, broadcast batches, a shared right operand (folded into one tall product),
    // vectors on either side, expanded operands, and products large enough to be split into
    // row blocks (130 x 90), column blocks (40 x 130, and a folded 90 x 100) or to run
    // batches in parallel.
    let cases: [(&[usize], &[usize]); 17] = [
        (&[3, 7, 13], &[3, 13, 5]),
        // One row per matrix: the folded product steps over rows by the batch stride.
        (&[4, 1, 13], &[13, 5]),
        (&[2, 3, 1, 13], &[13, 5]),
        (&[2, 1, 1, 13], &[13, 5]),
        (&[2, 1, 7, 13], &[4, 13, 5]),
        (&[4, 7, 13], &[13, 5]),
        (&[2, 3, 7, 13], &[13, 5]),
        (&[13], &[13, 5]),
        (&[7, 13], &[13]),
        (&[3, 7, 13], &[13]),
        (&[13], &[3, 13, 5]),
        (&[13], &[13]),
        (&[130, 70], &[70, 90]),
        (&[40, 70], &[70, 130]),
        (&[3, 30, 50], &[50, 100]),
        (&[16, 20, 20], &[16, 20, 20]),
        (&[7, 0], &[0, 5]),
    ];
    for (sa, sb) in cases {
        let (a, b) = (uniform(19, numel(sa), -1.0, 1.0), uniform(20, numel(sb), -1.0, 1.0));
        let (ta, tb) = (Tensor::from_vec(a.clone(), sa).unwrap(), Tensor::from_vec(b.clone(), sb).unwrap());
        check_matmul(&ta, &tb, &format!("{sa:?} @ {sb:?}"));
        // The same products through transposed, narrowed operands.
        if sa.len() >= 2 && sb.len() >= 2 {
            let (na, nb) = (transposed_copy(&a, sa), transposed_copy(&b, sb));
            check_matmul(&na, &nb, &format!("{sa:?} @ {sb:?}, transposed"));
        }
    }
    // Batch dimensions out of memory order cannot be folded into one tall product.
    let rows = Tensor::from_vec(uniform(25, 2 * 3 * 13, -1.0, 1.0), [2, 3, 1, 13]).unwrap();
    let shared = Tensor::from_vec(uniform(26, 13 * 5, -1.0, 1.0), [13, 5]).unwrap();
    check_matmul(&rows.permute(&[1, 0, 2, 3]).unwrap(), &shared, "permuted batch of rows");
    let mats = Tensor::from_vec(uniform(27, 2 * 3 * 7 * 13, -1.0, 1.0), [2, 3, 7, 13]).unwrap();
    check_matmul(&mats.permute(&[1, 0, 2, 3]).unwrap(), &shared, "permuted batch of matrices");
    // A broadcast row or column inside a matrix (stride 0) and a broadcast batch.
    let row = Tensor::from_vec(uniform(21, 13, -1.0, 1.0), [1, 13]).unwrap().expand([7, 13]).unwrap();
    let col = Tensor::from_vec(uniform(22, 13, -1.0, 1.0), [13, 1]).unwrap().expand([13, 5]).unwrap();
    check_matmul(&row, &col, "expanded matrices");
    let batch = Tensor::from_vec(uniform(23, 7 * 13, -1.0, 1.0), [1, 7, 13]).unwrap().expand([6, 7, 13]).unwrap();
    check_matmul(&batch, &Tensor::from_vec(uniform(24, 6 * 13 * 5, -1.0, 1.0), [6, 13, 5]).unwrap(), "expanded batch");
}

/// A tensor with the values of `vals` (of `shape`) whose last two dimensions are stored
/// transposed, inside a larger buffer.
fn transposed_copy(vals: &[f64], shape: &[usize]) -> Tensor {
    let r = shape.len();
    let mut swapped = shape.to_vec();
    swapped.swap(r - 2, r - 1);
    let data: Vec<f64> = indices(&swapped)
        .iter()
        .map(|i| {
            let mut j = i.clone();
            j.swap(r - 2, r - 1);
            vals[flat(shape, &j)]
        })
        .collect();
    narrowed(&data, &swapped, f64::NAN).transpose(r - 2, r - 1).unwrap()
}

/// `a @ b` against the reference, whatever the operands' ranks (PyTorch's rules).
fn check_matmul(a: &Tensor, b: &Tensor, what: &str) {
    let got = a.matmul(b).unwrap();
    let a2 = if a.rank() == 1 { a.unsqueeze(0).unwrap() } else { a.clone() };
    let b2 = if b.rank() == 1 { b.unsqueeze(1).unwrap() } else { b.clone() };
    let (ra, rb) = (a2.rank(), b2.rank());
    let (m, k, n) = (a2.shape()[ra - 2], a2.shape()[ra - 1], b2.shape()[rb - 1]);
    let batch = broadcast(&a2.shape()[..ra - 2], &b2.shape()[..rb - 2]);
    let full_a: Vec<usize> = batch.iter().copied().chain([m, k]).collect();
    let full_b: Vec<usize> = batch.iter().copied().chain([k, n]).collect();
    let (want, scale) =
        matmul_ref(&broadcast_values(&a2, &full_a), &broadcast_values(&b2, &full_b), numel(&batch), m, k, n);
    let mut shape = batch.clone();
    if a.rank() > 1 {
        shape.push(m);
    }
    if b.rank() > 1 {
        shape.push(n);
    }
    assert_eq!(got.shape(), shape.as_slice(), "{what}");
    check_scaled(what, &values(&got), &want, &scale);
}

#[test]
fn indexing_matches_the_reference() {
    let shape = [5, 6, 7];
    let x = uniform(25, numel(&shape), -1.0, 1.0);
    for (layout, t) in layouts(&x, &shape, f64::NAN) {
        for d in 0..3 {
            // Repeated, reordered indices, read through a strided view of the index.
            let list: Vec<i64> = ints(26 + d as u64, 9, shape[d] as u64);
            let idx = stepped(&list, &[9], -1i64);
            let got = t.index_select(d, &idx).unwrap();
            let mut out_shape = shape.to_vec();
            out_shape[d] = 9;
            let want: Vec<f64> = indices(&out_shape)
                .iter()
                .map(|i| {
                    let mut j = i.clone();
                    j[d] = list[i[d]] as usize;
                    x[flat(&shape, &j)]
                })
                .collect();
            assert_eq!(values(&got), want, "index_select({d}) of {layout}");

            // gather: an index smaller than the input in the other dimensions, transposed.
            let mut gshape = [4, 5, 6];
            gshape[d] = 8;
            let g: Vec<i64> = ints(29 + d as u64, numel(&gshape), shape[d] as u64);
            for (li, gi) in layouts(&g, &gshape, -1i64) {
                let got = t.gather(d, &gi).unwrap();
                assert_eq!(got.shape(), &gshape);
                let want: Vec<f64> = indices(&gshape)
                    .iter()
                    .map(|i| {
                        let mut j = i.clone();
                        j[d] = g[flat(&gshape, i)] as usize;
                        x[flat(&shape, &j)]
                    })
                    .collect();
                assert_eq!(values(&got), want, "gather({d}) of {layout} with a {li} index");
            }

            // scatter_add: duplicates accumulate; the source may be larger than the index.
            let mut srcshape = [5, 6, 7];
            srcshape[d] = 9;
            let src = uniform(32 + d as u64, numel(&srcshape), -1.0, 1.0);
            let tsrc = narrowed(&src, &srcshape, f64::NAN);
            let got = t.scatter_add(d, &Tensor::from_vec(g.clone(), gshape).unwrap(), &tsrc).unwrap();
            let mut want = x.clone();
            let mut scale: Vec<f64> = x.iter().map(|v| v.abs()).collect();
            for i in indices(&gshape) {
                let mut j = i.clone();
                j[d] = g[flat(&gshape, &i)] as usize;
                want[flat(&shape, &j)] += src[flat(&srcshape, &i)];
                scale[flat(&shape, &j)] += src[flat(&srcshape, &i)].abs();
            }
            check_scaled(&format!("scatter_add({d}) of {layout}"), &values(&got), &want, &scale);
            assert_eq!(values(&t), x, "scatter_add must not modify its input");
        }

        // masked_fill with a mask broadcast over the first dimension.
        let mask: Vec<u8> = ints(35, 6 * 7, 2).iter().map(|&v| v as u8).collect();
        for (lm, tm) in layouts(&mask, &[6, 7], 3u8) {
            let got = t.masked_fill(&tm, -9.5).unwrap();
            let want: Vec<f64> = indices(&shape)
                .iter()
                .map(|i| if mask[i[1] * 7 + i[2]] != 0 { -9.5 } else { x[flat(&shape, i)] })
                .collect();
            assert_eq!(values(&got), want, "masked_fill of {layout} with a {lm} mask");
        }
    }
    // masked_fill above the parallel threshold, and on integers.
    let x = uniform(36, numel(&BIG), -1.0, 1.0);
    let m: Vec<u8> = ints(37, numel(&BIG), 3).iter().map(|&v| (v == 0) as u8).collect();
    let t = narrowed(&x, &BIG, f64::NAN);
    let got = t.masked_fill(&Tensor::from_vec(m.clone(), BIG).unwrap(), f64::INFINITY).unwrap();
    let want: Vec<f64> = x.iter().zip(&m).map(|(&v, &k)| if k != 0 { f64::INFINITY } else { v }).collect();
    assert_eq!(values(&got), want, "masked_fill, large");
    let i = Tensor::from_vec(vec![1i64, 2, 3, 4], [4]).unwrap();
    let got = i.masked_fill(&Tensor::from_vec(vec![0u8, 1, 0, 1], [4]).unwrap(), -7).unwrap();
    assert_eq!(got.to_vec::<i64>().unwrap(), vec![1, -7, 3, -7]);
}

#[test]
fn joins_match_the_reference() {
    let (sa, sb) = ([4, 3, 5], [4, 2, 5]);
    let (a, b) = (uniform(38, 60, -1.0, 1.0), uniform(39, 40, -1.0, 1.0));
    for (la, ta) in layouts(&a, &sa, f64::NAN) {
        for (lb, tb) in layouts(&b, &sb, f64::NAN) {
            let got = Tensor::cat(&[&ta, &tb, &ta], 1).unwrap();
            let out = [4, 8, 5];
            let want: Vec<f64> = indices(&out)
                .iter()
                .map(|i| match i[1] {
                    0..3 => a[flat(&sa, i)],
                    3..5 => b[flat(&sb, &[i[0], i[1] - 3, i[2]])],
                    _ => a[flat(&sa, &[i[0], i[1] - 5, i[2]])],
                })
                .collect();
            assert_eq!(values(&got), want, "cat of {la} and {lb}");
        }
        for d in 0..=3 {
            let got = Tensor::stack(&[&ta, &ta.neg()], d).unwrap();
            let mut out = sa.to_vec();
            out.insert(d, 2);
            let want: Vec<f64> = indices(&out)
                .iter()
                .map(|i| {
                    let mut j = i.clone();
                    let which = j.remove(d);
                    if which == 0 { a[flat(&sa, &j)] } else { -a[flat(&sa, &j)] }
                })
                .collect();
            assert_eq!(values(&got), want, "stack({d}) of {la}");
        }
        // Pads from the last dimension backwards, like F.pad.
        let got = ta.pad(&[(2, 1), (0, 3)], 0.5).unwrap();
        let out = [4, 6, 8];
        let want: Vec<f64> = indices(&out)
            .iter()
            .map(|i| if i[1] < 3 && (2..7).contains(&i[2]) { a[flat(&sa, &[i[0], i[1], i[2] - 2])] } else { 0.5 })
            .collect();
        assert_eq!(values(&got), want, "pad of {la}");
        // Repeats with an extra leading dimension.
        let got = ta.repeat(&[2, 1, 3, 2]).unwrap();
        let out = [2, 4, 9, 10];
        let want: Vec<f64> = indices(&out).iter().map(|i| a[flat(&sa, &[i[1], i[2] % 3, i[3] % 5])]).collect();
        assert_eq!(values(&got), want, "repeat of {la}");
        for diagonal in -3..=5 {
            let want_l: Vec<f64> = indices(&sa)
                .iter()
                .map(|i| if i[2] as i64 - i[1] as i64 <= diagonal { a[flat(&sa, i)] } else { 0.0 })
                .collect();
            assert_eq!(values(&ta.tril(diagonal).unwrap()), want_l, "tril({diagonal}) of {la}");
            let want_u: Vec<f64> = indices(&sa)
                .iter()
                .map(|i| if i[2] as i64 - i[1] as i64 >= diagonal { a[flat(&sa, i)] } else { 0.0 })
                .collect();
            assert_eq!(values(&ta.triu(diagonal).unwrap()), want_u, "triu({diagonal}) of {la}");
        }
    }
    // Mixed dtypes promote; large triangles run in parallel.
    let i = Tensor::from_vec(vec![1i64, 2], [2]).unwrap();
    let f = Tensor::from_vec(vec![0.5f64], [1]).unwrap();
    assert_eq!(values(&Tensor::cat(&[&i, &f], 0).unwrap()), vec![1.0, 2.0, 0.5]);
    let x = uniform(40, numel(&BIG), -1.0, 1.0);
    let t = Tensor::from_vec(x.clone(), BIG).unwrap().t().unwrap();
    let want: Vec<f64> =
        indices(&[261, 256]).iter().map(|i| if i[1] <= i[0] + 1 { x[i[1] * 261 + i[0]] } else { 0.0 }).collect();
    assert_eq!(values(&t.tril(1).unwrap()), want, "tril, large");
}

#[test]
fn in_place_ops_match_the_reference() {
    let shape = [9, 14];
    let x = uniform(41, numel(&shape), -2.0, 2.0);
    let row = uniform(42, 14, 0.5, 1.5);
    let trow = Tensor::from_vec(row.clone(), [14]).unwrap();
    type InPlace = fn(&Tensor, &Tensor) -> ember_tensor::Result<()>;
    type BinaryRef = fn(f64, f64) -> f64;
    let ops: [(&str, InPlace, BinaryRef); 4] = [
        ("add_", Tensor::add_, |a, b| a + b),
        ("sub_", Tensor::sub_, |a, b| a - b),
        ("mul_", Tensor::mul_, |a, b| a * b),
        ("div_", Tensor::div_, |a, b| a / b),
    ];
    for (name, op, f) in ops {
        for (layout, _) in layouts(&x, &shape, 0.0) {
            // A fresh target per case: the views write into the junk-filled buffer.
            let t = fresh(&x, &shape, -123.0, layout);
            op(&t, &trow).unwrap();
            let want: Vec<f64> = indices(&shape).iter().map(|i| f(x[flat(&shape, i)], row[i[1]])).collect();
            check(&format!("{name} on {layout}"), &values(&t), &want);
            assert_junk_intact(&t, &outside_of(&t), -123.0, &format!("{name} on {layout}"));
        }
    }
    for (layout, _) in layouts(&x, &shape, 0.0) {
        let what = |op: &str| format!("{op} on {layout}");
        let t = fresh(&x, &shape, 8.0, layout);
        t.add_scaled_(&trow, -2.5).unwrap();
        let want: Vec<f64> = indices(&shape).iter().map(|i| x[flat(&shape, i)] + row[i[1]] * -2.5).collect();
        check(&what("add_scaled_"), &values(&t), &want);
        t.add_scalar_(1.5).unwrap();
        t.mul_scalar_(-2).unwrap();
        t.clamp_(Some(-3.0), Some(4.0)).unwrap();
        let want: Vec<f64> = want.iter().map(|v| ((v + 1.5) * -2.0).clamp(-3.0, 4.0)).collect();
        check(&what("scalar ops"), &values(&t), &want);
        // copy_ converts from integers and broadcasts a column.
        let col: Vec<i64> = (0..9).map(|v| v * 3 - 4).collect();
        t.copy_(&Tensor::from_vec(col.clone(), [9, 1]).unwrap()).unwrap();
        let want: Vec<f64> = indices(&shape).iter().map(|i| col[i[0]] as f64).collect();
        assert_eq!(values(&t), want, "{}", what("copy_"));
        let mask: Vec<u8> = ints(43, 14, 2).iter().map(|&v| v as u8).collect();
        t.masked_fill_(&Tensor::from_vec(mask.clone(), [14]).unwrap(), 0.25).unwrap();
        let want: Vec<f64> = want.iter().enumerate().map(|(p, &v)| if mask[p % 14] != 0 { 0.25 } else { v }).collect();
        assert_eq!(values(&t), want, "{}", what("masked_fill_"));
        t.fill_(-0.5).unwrap();
        assert_eq!(values(&t), vec![-0.5; 126], "{}", what("fill_"));
        t.zero_().unwrap();
        assert_eq!(values(&t), vec![0.0; 126], "{}", what("zero_"));
        assert_junk_intact(&t, &outside_of(&t), 8.0, &what("in-place ops"));
    }
    // A source that aliases the target is read before it is overwritten.
    let sq = Tensor::from_vec(uniform(44, 49, -1.0, 1.0), [7, 7]).unwrap();
    let before = values(&sq);
    sq.add_(&sq.t().unwrap()).unwrap();
    let want: Vec<f64> = indices(&[7, 7]).iter().map(|i| before[i[0] * 7 + i[1]] + before[i[1] * 7 + i[0]]).collect();
    assert_eq!(values(&sq), want, "add_ of its own transpose");
    // Above the parallel threshold, contiguous and strided.
    let x = uniform(45, numel(&BIG), -1.0, 1.0);
    let y = uniform(46, numel(&BIG), -1.0, 1.0);
    for layout in ["contiguous", "transposed and narrowed"] {
        let t = fresh(&x, &BIG, 0.0, layout);
        t.mul_(&Tensor::from_vec(y.clone(), BIG).unwrap()).unwrap();
        let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| a * b).collect();
        assert_eq!(values(&t), want, "mul_ on a large {layout} tensor");
    }
    let p = Tensor::from_vec(x.clone(), BIG).unwrap();
    let (g, v) = (Tensor::from_vec(y.clone(), BIG).unwrap(), Tensor::from_vec(y.clone(), BIG).unwrap());
    p.update_::<f64, 2>([&g, &v], |p, [g, v]| *p = *p * 0.9 - 0.1 * g / (v * v + 1.0)).unwrap();
    let want: Vec<f64> = x.iter().zip(&y).map(|(p, g)| p * 0.9 - 0.1 * g / (g * g + 1.0)).collect();
    assert_eq!(values(&p), want, "update_");
}

/// A fresh tensor with the values `x` in `layout`, over a buffer otherwise filled with
/// `junk`.
fn fresh(x: &[f64], shape: &[usize], junk: f64, layout: &str) -> Tensor {
    layouts(x, shape, junk).into_iter().find(|(l, _)| *l == layout).map(|(_, t)| t).unwrap()
}

/// The positions of `t`'s buffer that its view does not reach.
fn outside_of(t: &Tensor) -> Vec<bool> {
    let mut outside = vec![true; t.storage().read().as_cpu().map_or(0, |c| c.len())];
    for i in indices(t.shape()) {
        outside[t.layout().storage_index(&i)] = false;
    }
    outside
}

/// The elements `outside` the view `t` in its buffer still hold `junk`: an in-place kernel
/// wrote only where the view points.
fn assert_junk_intact(t: &Tensor, outside: &[bool], junk: f64, what: &str) {
    let storage = t.storage().read();
    let all = storage.as_cpu().and_then(|c| c.as_slice::<f64>()).unwrap();
    for (p, &v) in all.iter().enumerate() {
        assert!(!outside[p] || v == junk, "{what}: storage element {p} outside the view changed to {v}");
    }
}

#[test]
fn casts_match_rust_as() {
    // Rust's `as` keeps the subnormals that tiny values round to.
    ieee_subnormals();
    let floats = [
        0.0,
        -0.0,
        0.4,
        -0.6,
        1.5,
        -1.5,
        2.5,
        127.9,
        255.0,
        255.9,
        256.0,
        -1.0,
        -300.0,
        1e10,
        -1e10,
        9.3e18,
        -9.3e18,
        1e300,
        3.4028235e38,
        3.5e38,
        1e-40,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        12345.678,
    ];
    let shape = [5, 5];
    for (layout, t) in layouts(&floats, &shape, 0.0) {
        let u: Vec<u8> = floats.iter().map(|&v| v as u8).collect();
        let i: Vec<i64> = floats.iter().map(|&v| v as i64).collect();
        let f: Vec<f32> = floats.iter().map(|&v| v as f32).collect();
        assert_eq!(t.to_dtype(DType::U8).to_vec::<u8>().unwrap(), u, "f64 -> u8 on {layout}");
        assert_eq!(t.to_dtype(DType::I64).to_vec::<i64>().unwrap(), i, "f64 -> i64 on {layout}");
        let got = t.to_dtype(DType::F32).to_vec::<f32>().unwrap();
        assert!(got.iter().zip(&f).all(|(g, w)| g.to_bits() == w.to_bits()), "f64 -> f32 on {layout}: {got:?}");
        check(&format!("f64 -> f64 on {layout}"), &values(&t.to_dtype(DType::F64)), &floats);
        // And back to f64 from each, through the other dtypes' own kernels.
        let f32t = Tensor::from_vec(f.clone(), shape).unwrap().t().unwrap();
        let back: Vec<f64> = indices(&shape).iter().map(|ix| f[ix[1] * 5 + ix[0]] as f64).collect();
        assert_eq!(
            values(&f32t.to_dtype(DType::F64)).iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            back.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        let i32 = f32t.to_dtype(DType::I64).to_vec::<i64>().unwrap();
        assert_eq!(i32, indices(&shape).iter().map(|ix| f[ix[1] * 5 + ix[0]] as i64).collect::<Vec<_>>(), "f32 -> i64");
    }
    let ints_in = [0i64, 1, -1, 255, 256, -256, 1000, i64::MAX, i64::MIN, 1 << 53, (1 << 53) + 1, 1 << 62];
    for (layout, t) in layouts(&ints_in, &[12], 0i64) {
        assert_eq!(
            t.to_dtype(DType::U8).to_vec::<u8>().unwrap(),
            ints_in.map(|v| v as u8).to_vec(),
            "i64 -> u8 on {layout}"
        );
        assert_eq!(
            t.to_dtype(DType::F64).to_vec::<f64>().unwrap(),
            ints_in.map(|v| v as f64).to_vec(),
            "i64 -> f64 on {layout}"
        );
        assert_eq!(
            t.to_dtype(DType::F32).to_vec::<f32>().unwrap(),
            ints_in.map(|v| v as f32).to_vec(),
            "i64 -> f32 on {layout}"
        );
    }
    let bytes: Vec<u8> = (0..=255).collect();
    for (layout, t) in layouts(&bytes, &[16, 16], 0u8) {
        assert_eq!(
            t.to_dtype(DType::I64).to_vec::<i64>().unwrap(),
            bytes.iter().map(|&v| v as i64).collect::<Vec<_>>(),
            "u8 -> i64 on {layout}"
        );
        assert_eq!(
            t.to_dtype(DType::F64).to_vec::<f64>().unwrap(),
            bytes.iter().map(|&v| v as f64).collect::<Vec<_>>(),
            "u8 -> f64 on {layout}"
        );
    }
    // Above the parallel threshold.
    let x = uniform(47, numel(&BIG), -300.0, 300.0);
    let t = narrowed(&x, &BIG, f64::NAN);
    assert_eq!(t.to_dtype(DType::I64).to_vec::<i64>().unwrap(), x.iter().map(|&v| v as i64).collect::<Vec<_>>());
    assert_eq!(t.to_dtype(DType::U8).to_vec::<u8>().unwrap(), x.iter().map(|&v| v as u8).collect::<Vec<_>>());
}

/// The class loss of one row `lp` (log-probabilities) with target `t`, or 0 when ignored.
fn class_row_loss(lp: &[f64], t: i64, e: f64, ignored: bool) -> f64 {
    if ignored {
        return 0.0;
    }
    let c = lp.len() as f64;
    -((1.0 - e) * lp[t as usize] + e / c * exact_sum(lp.iter().copied()))
}

#[test]
fn class_loss_matches_the_reference() {
    use ember_tensor::{ClassLoss, ClassScores, LossReduction};
    let shapes =
        [(vec![6, 7], 3.0), (vec![300, 257], 30.0), (vec![5000, 10], 5.0), (vec![3, 5, 4, 2], 3.0), (vec![9], 3.0)];
    for (shape, scale) in shapes {
        let n = numel(&shape);
        let x = uniform(17, n, -scale, scale);
        let class_dim = usize::from(shape.len() > 1);
        let classes = shape[class_dim];
        let target_shape: Vec<usize> = (0..shape.len()).filter(|&d| d != class_dim).map(|d| shape[d]).collect();
        let rows = groups(&x, &shape, &[class_dim]);
        let kept: Vec<usize> = shape.iter().enumerate().map(|(d, &e)| if d == class_dim { 1 } else { e }).collect();
        let row_of = |i: &[usize]| {
            let mut o = i.to_vec();
            o[class_dim] = 0;
            flat(&kept, &o)
        };
        let mut with_ignored = ints(18, rows.len(), classes as u64);
        for t in with_ignored.iter_mut().skip(2).step_by(5) {
            *t = -100;
        }
        let g_rows = uniform(19, rows.len(), -2.0, 2.0);
        for scores in [ClassScores::Logits, ClassScores::LogProbs] {
            // Log-probabilities and the magnitude of their rounding error, per row.
            let lps: Vec<(Vec<f64>, f64)> = rows
                .iter()
                .map(|row| match scores {
                    ClassScores::Logits => {
                        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        let lse = m + exact_sum(row.iter().map(|v| (v - m).exp())).ln();
                        (row.iter().map(|v| v - lse).collect(), row.iter().map(|v| v.abs()).sum::<f64>() + lse.abs())
                    }
                    ClassScores::LogProbs => (row.clone(), row.iter().map(|v| v.abs()).sum::<f64>()),
                })
                .collect();
            for (e, ignore_index) in [(0.0, Some(-100)), (0.2, Some(-100)), (0.0, None), (0.3, None)] {
                let targets: Vec<i64> = if ignore_index.is_some() {
                    with_ignored.clone()
                } else {
                    with_ignored.iter().map(|t| t.max(&0) % 3).collect()
                };
                let ignored = |r: usize| Some(targets[r]) == ignore_index;
                let per: Vec<f64> =
                    (0..rows.len()).map(|r| class_row_loss(&lps[r].0, targets[r], e, ignored(r))).collect();
                let per_scale: Vec<f64> =
                    (0..rows.len()).map(|r| if ignored(r) { 0.0 } else { lps[r].1 + 1.0 }).collect();
                let counted = (0..rows.len()).filter(|&r| !ignored(r)).count() as f64;
                let target = Tensor::from_vec(targets.clone(), target_shape.as_slice()).unwrap();
                for reduction in [LossReduction::None, LossReduction::Sum, LossReduction::Mean] {
                    let loss = ClassLoss { scores, label_smoothing: e, ignore_index, reduction };
                    let (want, want_scale) = match reduction {
                        LossReduction::None => (per.clone(), per_scale.clone()),
                        LossReduction::Sum => (vec![exact_sum(per.iter().copied())], vec![per_scale.iter().sum()]),
                        LossReduction::Mean => (
                            vec![exact_sum(per.iter().copied()) / counted],
                            vec![per_scale.iter().sum::<f64>() / counted],
                        ),
                    };
                    // The incoming gradient and each row's weight.
                    let (grad, w): (Tensor, Vec<f64>) = match reduction {
                        LossReduction::None => {
                            (Tensor::from_vec(g_rows.clone(), target_shape.as_slice()).unwrap(), g_rows.clone())
                        }
                        LossReduction::Sum => (Tensor::scalar(0.7f64), vec![0.7; rows.len()]),
                        LossReduction::Mean => (Tensor::scalar(0.7f64), vec![0.7 / counted; rows.len()]),
                    };
                    let (mut want_grad, mut grad_scale) = (vec![0.0; n], vec![0.0; n]);
                    for (p, i) in indices(&shape).iter().enumerate() {
                        let (r, c) = (row_of(i), i[class_dim]);
                        if ignored(r) {
                            continue;
                        }
                        let q = e / classes as f64 + if targets[r] == c as i64 { 1.0 - e } else { 0.0 };
                        want_grad[p] = match scores {
                            ClassScores::Logits => w[r] * (lps[r].0[c].exp() - q),
                            ClassScores::LogProbs => -w[r] * q,
                        };
                        grad_scale[p] = w[r].abs();
                    }
                    for (layout, t) in layouts(&x, &shape, f64::NAN) {
                        if n > 1000 && layout != "contiguous" && layout != "transposed and narrowed" {
                            continue;
                        }
                        let what = format!(
                            "{} (e {e}, ignore {ignore_index:?}, {reduction:?}) of {layout} {shape:?}",
                            loss.name()
                        );
                        let out = t.class_loss(&target, &loss).unwrap();
                        let out_shape: &[usize] = if reduction == LossReduction::None { &target_shape } else { &[] };
                        assert_eq!(out.shape(), out_shape, "{what}");
                        check_scaled(&what, &values(&out), &want, &want_scale);
                        let g = t.class_loss_backward(&target, &grad, &loss).unwrap();
                        assert_eq!(g.shape(), &shape, "{what}");
                        check_scaled(&format!("gradient of {what}"), &values(&g), &want_grad, &grad_scale);
                    }
                }
            }
        }
    }
}

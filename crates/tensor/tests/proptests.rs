//! Property tests of the tensor layer against naive N-d reference implementations:
//!
//! - broadcasting: random compatible shape pairs (rank 0-4, extents 0-4, with 1s) through
//!   `add`, `mul`, `maximum` and `where_cond` equal an index-by-index reference, and
//!   incompatible pairs are errors;
//! - views: random chains of transpose, permute, narrow, slice, expand, unsqueeze and
//!   select give the values of the same chain applied to contiguous copies (and to a
//!   reference), and elementwise, binary and reduction ops on the final, usually
//!   non-contiguous, view equal the ops on its contiguous copy;
//! - reductions: sum, mean, prod, max, min, argmax, argmin, var, std and logsumexp over
//!   random dimension subsets (the empty one meaning every dimension, as in PyTorch), with
//!   and without `keepdim`, against a reference loop.
//!
//! Case counts are kept small so that the file runs in a few seconds in the `dev` profile.

mod common;

use common::{arg_extreme, indices, max_nan, min_nan, mix, same};
use ember_tensor::{DType, Tensor};
use proptest::prelude::*;

/// A row-major array with a shape: the reference every tensor result is compared with.
#[derive(Clone, Debug)]
struct Nd<T> {
    shape: Vec<usize>,
    data: Vec<T>,
}

impl<T: Copy> Nd<T> {
    fn from_fn(shape: Vec<usize>, mut f: impl FnMut(&[usize]) -> T) -> Self {
        let data = indices(&shape).iter().map(|i| f(i)).collect();
        Nd { shape, data }
    }

    fn at(&self, idx: &[usize]) -> T {
        let mut flat = 0;
        for (d, &i) in idx.iter().enumerate() {
            flat = flat * self.shape[d] + i;
        }
        self.data[flat]
    }

    /// The value at `idx` of this array broadcast to a shape of rank `rank`.
    fn at_broadcast(&self, idx: &[usize]) -> T {
        let extra = idx.len() - self.shape.len();
        let own: Vec<usize> =
            self.shape.iter().enumerate().map(|(d, &e)| if e == 1 { 0 } else { idx[extra + d] }).collect();
        self.at(&own)
    }
}

/// NumPy broadcasting of two shapes, or `None`.
fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    (0..rank)
        .map(|i| {
            let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
            let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
            match (da, db) {
                _ if da == db => Some(da),
                (1, _) => Some(db),
                (_, 1) => Some(da),
                _ => None,
            }
        })
        .collect()
}

/// Multiples of 1/4 in [-4, 4]: sums of them are exact in any order, so results that only
/// differ in summation order must agree exactly.
fn quarters(seed: u64, n: usize) -> Vec<f64> {
    (0..n).map(|i| (mix(seed, i as u64) % 33) as f64 / 4.0 - 4.0).collect()
}

/// Arbitrary values in [-10, 10), with a NaN now and then when `nans` is set.
fn reals(seed: u64, n: usize, nans: bool) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let r = mix(seed, i as u64);
            if nans && r.is_multiple_of(11) { f64::NAN } else { (r >> 11) as f64 / (1u64 << 53) as f64 * 20.0 - 10.0 }
        })
        .collect()
}

fn tensor(nd: &Nd<f64>) -> Tensor {
    Tensor::from_vec(nd.data.clone(), nd.shape.as_slice()).unwrap()
}

#[track_caller]
fn assert_same(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(same(*g, *w), "{what}: element {i} is {g}, want {w}\n got {got:?}\nwant {want:?}");
    }
}

/// Equal within `rel` of `scale` (an absolute floor for values near zero), NaN and
/// infinities matching exactly.
#[track_caller]
fn assert_close(got: &[f64], want: &[f64], scale: &[f64], rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for i in 0..got.len() {
        let (g, w) = (got[i], want[i]);
        let ok = same(g, w) || (w.is_finite() && (g - w).abs() <= rel * scale[i].max(1.0));
        assert!(ok, "{what}: element {i} is {g}, want {w}");
    }
}

/// A shape that broadcasts to `out`: a suffix of it, with some extents replaced by 1.
fn broadcastable_to(out: Vec<usize>) -> impl Strategy<Value = Vec<usize>> {
    let n = out.len();
    (0..=n, prop::collection::vec(any::<bool>(), n))
        .prop_map(move |(rank, ones)| (n - rank..n).map(|d| if ones[d] { 1 } else { out[d] }).collect())
}

fn any_shape(max_rank: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..=4, 0..=max_rank)
}

fn compatible_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    any_shape(4).prop_flat_map(|out| (broadcastable_to(out.clone()), broadcastable_to(out)))
}

fn compatible_triple() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, Vec<usize>)> {
    any_shape(4)
        .prop_flat_map(|out| (broadcastable_to(out.clone()), broadcastable_to(out.clone()), broadcastable_to(out)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn broadcasting_binary_ops_match_the_reference((sa, sb) in compatible_pair(), seed in any::<u64>()) {
        let out = broadcast(&sa, &sb).unwrap();
        let a = Nd { data: quarters(seed, sa.iter().product()), shape: sa.clone() };
        let mut b = Nd { data: quarters(seed ^ 1, sb.iter().product()), shape: sb.clone() };
        if seed % 4 == 0 && !b.data.is_empty() {
            b.data[0] = f64::NAN;
        }
        let (ta, tb) = (tensor(&a), tensor(&b));
        type Op = (&'static str, fn(&Tensor, &Tensor) -> ember_tensor::Result<Tensor>, fn(f64, f64) -> f64);
        let ops: [Op; 4] = [
            ("add", Tensor::add, |x, y| x + y),
            ("mul", Tensor::mul, |x, y| x * y),
            ("maximum", Tensor::maximum, max_nan),
            ("minimum", Tensor::minimum, min_nan),
        ];
        for (name, op, f) in ops {
            let got = op(&ta, &tb).unwrap();
            prop_assert_eq!(got.shape(), out.as_slice());
            let want = Nd::from_fn(out.clone(), |i| f(a.at_broadcast(i), b.at_broadcast(i)));
            assert_same(&got.to_vec::<f64>().unwrap(), &want.data, name);
            // Swapped operands broadcast the same way.
            let swapped = op(&tb, &ta).unwrap();
            let want = Nd::from_fn(out.clone(), |i| f(b.at_broadcast(i), a.at_broadcast(i)));
            assert_same(&swapped.to_vec::<f64>().unwrap(), &want.data, name);
        }
        // An integer operand promotes to f64 and broadcasts the same way.
        let ia = Tensor::from_vec(a.data.iter().map(|&v| (v * 4.0) as i64).collect(), sa.as_slice()).unwrap();
        let got = ia.add(&tb).unwrap();
        prop_assert_eq!(got.dtype(), DType::F64);
        let want = Nd::from_fn(out.clone(), |i| a.at_broadcast(i) * 4.0 + b.at_broadcast(i));
        assert_same(&got.to_vec::<f64>().unwrap(), &want.data, "i64 + f64");
    }

    #[test]
    fn broadcasting_where_matches_the_reference((sc, sa, sb) in compatible_triple(), seed in any::<u64>()) {
        let out = broadcast(&broadcast(&sc, &sa).unwrap(), &sb).unwrap();
        let bits = (0..sc.iter().product::<usize>()).map(|i| (mix(seed, i as u64) % 2) as u8).collect();
        let c = Nd { data: bits, shape: sc.clone() };
        let a = Nd { data: quarters(seed ^ 2, sa.iter().product()), shape: sa.clone() };
        let b = Nd { data: quarters(seed ^ 3, sb.iter().product()), shape: sb.clone() };
        let tc = Tensor::from_vec(c.data.clone(), sc.as_slice()).unwrap();
        let got = tc.where_cond(&tensor(&a), &tensor(&b)).unwrap();
        prop_assert_eq!(got.shape(), out.as_slice());
        let want = Nd::from_fn(out, |i| if c.at_broadcast(i) != 0 { a.at_broadcast(i) } else { b.at_broadcast(i) });
        assert_same(&got.to_vec::<f64>().unwrap(), &want.data, "where");
    }

    #[test]
    fn incompatible_shapes_are_errors(sa in any_shape(4), sb in any_shape(4)) {
        let a = Tensor::zeros(sa.as_slice(), DType::F64).unwrap();
        let b = Tensor::zeros(sb.as_slice(), DType::F32).unwrap();
        let mask = Tensor::zeros(sa.as_slice(), DType::U8).unwrap();
        let results = [
            ("add", a.add(&b)),
            ("mul", a.mul(&b)),
            ("maximum", a.maximum(&b)),
            ("lt", a.lt(&b)),
            ("where", mask.where_cond(&a, &b)),
        ];
        match broadcast(&sa, &sb) {
            Some(out) => {
                for (name, r) in results {
                    let t = r.unwrap_or_else(|e| panic!("{name}: {sa:?} and {sb:?} should broadcast: {e}"));
                    prop_assert_eq!(t.shape(), out.as_slice());
                }
            }
            None => {
                for (name, r) in results {
                    let msg = r.err().map(|e| e.to_string()).unwrap_or_default();
                    prop_assert!(msg.starts_with(name), "{}: {:?} and {:?} must not broadcast: {}", name, sa, sb, msg);
                    prop_assert!(msg.contains(&format!("{sa:?}")) && msg.contains(&format!("{sb:?}")), "{}", msg);
                }
            }
        }
    }
}

/// A view operation with its arguments resolved against the shape it applies to.
#[derive(Clone, Debug)]
enum ViewOp {
    Transpose(usize, usize),
    Permute(Vec<usize>),
    Narrow(usize, usize, usize),
    Slice(usize, usize, usize, usize),
    Expand(Vec<usize>),
    Unsqueeze(usize),
    Select(usize, usize),
}

/// Interprets raw random numbers as a view operation valid for `shape`, or `None` when the
/// chosen kind does not apply (selecting from a 0-d tensor, say).
fn pick(raw: (u8, usize, usize, usize), shape: &[usize]) -> Option<ViewOp> {
    let (kind, a, b, c) = raw;
    let rank = shape.len();
    match kind % 7 {
        _ if rank == 0 && kind % 7 != 4 && kind % 7 != 5 => None,
        0 => Some(ViewOp::Transpose(a % rank, b % rank)),
        1 => {
            let mut perm: Vec<usize> = (0..rank).collect();
            let mut x = a;
            for k in 0..rank {
                perm.swap(k, k + x % (rank - k));
                x /= rank - k;
            }
            Some(ViewOp::Permute(perm))
        }
        2 => {
            let d = a % rank;
            let start = b % (shape[d] + 1);
            Some(ViewOp::Narrow(d, start, c % (shape[d] - start + 1)))
        }
        3 => {
            // Bounds past the extent are clamped like Python slices.
            let d = a % rank;
            Some(ViewOp::Slice(d, b % (shape[d] + 2), c % (shape[d] + 3), 1 + (a / rank) % 3))
        }
        4 => {
            let ones: Vec<usize> = (0..rank).filter(|&d| shape[d] == 1).collect();
            let mut to = shape.to_vec();
            if ones.is_empty() || c % 3 == 0 {
                if rank >= 5 {
                    return None;
                }
                to.insert(0, b % 4);
            } else {
                to[ones[a % ones.len()]] = b % 4;
            }
            Some(ViewOp::Expand(to))
        }
        5 if rank < 5 => Some(ViewOp::Unsqueeze(a % (rank + 1))),
        5 => None,
        _ => {
            let d = a % rank;
            (shape[d] > 0).then(|| ViewOp::Select(d, b % shape[d]))
        }
    }
}

fn apply(t: &Tensor, op: &ViewOp) -> Tensor {
    match op {
        ViewOp::Transpose(a, b) => t.transpose(*a, *b),
        ViewOp::Permute(p) => t.permute(p),
        ViewOp::Narrow(d, s, l) => t.narrow(*d, *s, *l),
        ViewOp::Slice(d, s, e, st) => t.slice(*d, *s, *e, *st),
        ViewOp::Expand(s) => t.expand(s.as_slice()),
        ViewOp::Unsqueeze(d) => t.unsqueeze(*d),
        ViewOp::Select(d, i) => t.select(*d, *i),
    }
    .unwrap_or_else(|e| panic!("{op:?} on {:?}: {e}", t.shape()))
}

/// The same operation on the reference: each output element names the input element it
/// reads.
fn apply_nd<T: Copy>(x: &Nd<T>, op: &ViewOp) -> Nd<T> {
    let s = &x.shape;
    match op {
        ViewOp::Transpose(a, b) => {
            let mut shape = s.clone();
            shape.swap(*a, *b);
            Nd::from_fn(shape, |i| {
                let mut j = i.to_vec();
                j.swap(*a, *b);
                x.at(&j)
            })
        }
        ViewOp::Permute(p) => Nd::from_fn(p.iter().map(|&d| s[d]).collect(), |i| {
            let mut j = vec![0; i.len()];
            for (k, &d) in p.iter().enumerate() {
                j[d] = i[k];
            }
            x.at(&j)
        }),
        ViewOp::Narrow(d, start, len) => {
            let mut shape = s.clone();
            shape[*d] = *len;
            Nd::from_fn(shape, |i| {
                let mut j = i.to_vec();
                j[*d] += start;
                x.at(&j)
            })
        }
        ViewOp::Slice(d, start, end, step) => {
            let end = (*end).min(s[*d]);
            let start = (*start).min(end);
            let mut shape = s.clone();
            shape[*d] = (end - start).div_ceil(*step);
            Nd::from_fn(shape, |i| {
                let mut j = i.to_vec();
                j[*d] = start + i[*d] * step;
                x.at(&j)
            })
        }
        ViewOp::Expand(to) => Nd::from_fn(to.clone(), |i| x.at_broadcast(i)),
        ViewOp::Unsqueeze(d) => {
            let mut shape = s.clone();
            shape.insert(*d, 1);
            Nd::from_fn(shape, |i| {
                let mut j = i.to_vec();
                j.remove(*d);
                x.at(&j)
            })
        }
        ViewOp::Select(d, at) => {
            let mut shape = s.clone();
            shape.remove(*d);
            Nd::from_fn(shape, |i| {
                let mut j = i.to_vec();
                j.insert(*d, *at);
                x.at(&j)
            })
        }
    }
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_vec_f64().unwrap()
}

/// Elementwise, binary and reduction results of the view `v` against those of its
/// contiguous copy `c`. Elementwise results must agree exactly; reductions may add in
/// another order, but the quarter-valued data keeps sums exact.
fn compare_ops(v: &Tensor, c: &Tensor) {
    type Unary = fn(&Tensor) -> Tensor;
    let unary: [(&str, Unary); 10] = [
        ("neg", Tensor::neg),
        ("abs", Tensor::abs),
        ("exp", Tensor::exp),
        ("sigmoid", Tensor::sigmoid),
        ("tanh", Tensor::tanh),
        ("square", Tensor::square),
        ("relu", Tensor::relu),
        ("floor", Tensor::floor),
        ("copy", Tensor::copy),
        ("gelu", Tensor::gelu),
    ];
    for (name, f) in unary {
        assert_same(&f64s(&f(v)), &f64s(&f(c)), name);
    }
    assert_same(&f64s(&v.mul_scalar(-1.5).add_scalar(2)), &f64s(&c.mul_scalar(-1.5).add_scalar(2)), "scalar ops");
    assert_same(&f64s(&v.clamp(Some(-1.0), Some(2.0))), &f64s(&c.clamp(Some(-1.0), Some(2.0))), "clamp");
    assert_same(&f64s(&v.gt_scalar(0.5)), &f64s(&c.gt_scalar(0.5)), "gt_scalar");
    assert_same(&f64s(&v.to_dtype(DType::I64)), &f64s(&c.to_dtype(DType::I64)), "to i64");
    assert_same(&f64s(&v.to_dtype(DType::F32)), &f64s(&c.to_dtype(DType::F32)), "to f32");

    let cc = c.copy();
    assert_same(&f64s(&v.add(v).unwrap()), &f64s(&cc.add(&cc).unwrap()), "v + v");
    assert_same(&f64s(&v.mul(c).unwrap()), &f64s(&cc.mul(&cc).unwrap()), "v * c");
    assert_same(&f64s(&c.sub(v).unwrap()), &f64s(&cc.sub(&cc).unwrap()), "c - v");
    assert_same(&f64s(&v.maximum(&v.neg()).unwrap()), &f64s(&cc.abs()), "maximum");
    assert_same(&f64s(&v.le(c).unwrap()), &vec![1.0; c.numel()], "le");
    let mask = v.gt_scalar(0.0);
    assert_same(&f64s(&mask.where_cond(v, &c.neg()).unwrap()), &f64s(&cc.abs()), "where");
    if let Some(&last) = v.shape().last() {
        let row = Tensor::from_vec((0..last).map(|i| i as f64 - 1.0).collect(), [last]).unwrap();
        assert_same(&f64s(&v.add(&row).unwrap()), &f64s(&cc.add(&row).unwrap()), "row broadcast");
    }

    let dims: Vec<Vec<usize>> = (0..v.rank()).map(|d| vec![d]).chain([(0..v.rank()).collect()]).collect();
    for d in &dims {
        for keep in [false, true] {
            let pairs = [
                ("sum", v.sum(d.as_slice(), keep), c.sum(d.as_slice(), keep)),
                ("mean", v.mean(d.as_slice(), keep), c.mean(d.as_slice(), keep)),
                ("prod", v.prod(d.as_slice(), keep), c.prod(d.as_slice(), keep)),
                ("max", v.max(d.as_slice(), keep), c.max(d.as_slice(), keep)),
                ("min", v.min(d.as_slice(), keep), c.min(d.as_slice(), keep)),
                ("logsumexp", v.logsumexp(d.as_slice(), keep), c.logsumexp(d.as_slice(), keep)),
            ];
            for (name, a, b) in pairs {
                match (a, b) {
                    (Ok(a), Ok(b)) => {
                        assert_eq!(a.shape(), b.shape(), "{name} over {d:?}");
                        let (a, b) = (f64s(&a), f64s(&b));
                        let scale: Vec<f64> = b.iter().map(|x| x.abs()).collect();
                        assert_close(&a, &b, &scale, 1e-12, name);
                    }
                    (Err(_), Err(_)) => {}
                    (a, b) => panic!("{name} over {d:?}: the view gives {a:?}, the copy {b:?}"),
                }
            }
            let (a, b) = (v.var(d.as_slice(), true, keep).unwrap(), c.var(d.as_slice(), true, keep).unwrap());
            let (a, b) = (f64s(&a), f64s(&b));
            assert_close(&a, &b, &vec![16.0; b.len()], 1e-12, "var");
        }
        if d.len() == 1 {
            let (a, b) = (v.softmax(d[0]).unwrap(), c.softmax(d[0]).unwrap());
            assert_close(&f64s(&a), &f64s(&b), &vec![1.0; b.numel()], 1e-14, "softmax");
            let (a, b) = (v.log_softmax(d[0]).unwrap(), c.log_softmax(d[0]).unwrap());
            assert_close(&f64s(&a), &f64s(&b), &vec![16.0; b.numel()], 1e-14, "log_softmax");
            if v.shape()[d[0]] > 0 {
                for keep in [false, true] {
                    assert_eq!(f64s(&v.argmax(d[0], keep).unwrap()), f64s(&c.argmax(d[0], keep).unwrap()), "argmax");
                    assert_eq!(f64s(&v.argmin(d[0], keep).unwrap()), f64s(&c.argmin(d[0], keep).unwrap()), "argmin");
                }
            }
        }
    }
}

fn raw_op() -> impl Strategy<Value = (u8, usize, usize, usize)> {
    (any::<u8>(), any::<usize>(), any::<usize>(), any::<usize>())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn view_chains_match_contiguous_copies(
        shape in prop::collection::vec(0usize..=5, 1..=4),
        chain in prop::collection::vec(raw_op(), 1..=6),
        seed in any::<u64>(),
    ) {
        let n: usize = shape.iter().product();
        let data = quarters(seed, n);
        let mut v = Tensor::from_vec(data.clone(), shape.as_slice()).unwrap();
        let mut c = v.clone();
        let mut reference = Nd { shape: shape.clone(), data: (0..n).collect::<Vec<usize>>() };
        for raw in chain {
            let Some(op) = pick(raw, v.shape()) else { continue };
            v = apply(&v, &op);
            c = apply(&c.contiguous(), &op);
            reference = apply_nd(&reference, &op);
            prop_assert_eq!(v.shape(), reference.shape.as_slice(), "{:?}", op);
            prop_assert_eq!(c.shape(), reference.shape.as_slice(), "{:?}", op);
            let want: Vec<f64> = reference.data.iter().map(|&i| data[i]).collect();
            assert_same(&v.to_vec::<f64>().unwrap(), &want, &format!("view after {op:?}"));
            assert_same(&c.to_vec::<f64>().unwrap(), &want, &format!("copy after {op:?}"));
        }
        let copy = v.contiguous();
        prop_assert!(copy.is_contiguous());
        compare_ops(&v, &copy);
    }
}

/// Reference reductions of `x` over `dims`, with the output shape `keepdim` asks for.
fn reduce_ref(x: &Nd<f64>, dims: &[usize], keepdim: bool, f: impl Fn(&[f64]) -> f64) -> Nd<f64> {
    let kept: Vec<usize> = x.shape.iter().enumerate().map(|(d, &e)| if dims.contains(&d) { 1 } else { e }).collect();
    let groups = Nd::from_fn(kept.clone(), |o| {
        let inner: Vec<usize> = dims.iter().map(|&d| x.shape[d]).collect();
        let vals: Vec<f64> = indices(&inner)
            .iter()
            .map(|r| {
                let mut i = o.to_vec();
                for (k, &d) in dims.iter().enumerate() {
                    i[d] = r[k];
                }
                x.at(&i)
            })
            .collect();
        f(&vals)
    });
    let shape = if keepdim {
        kept
    } else {
        x.shape.iter().enumerate().filter(|(d, _)| !dims.contains(d)).map(|(_, &e)| e).collect()
    };
    Nd { shape, data: groups.data }
}

fn ref_sum(v: &[f64]) -> f64 {
    v.iter().sum()
}

fn ref_abs_sum(v: &[f64]) -> f64 {
    v.iter().map(|x| x.abs()).sum()
}

fn ref_mean(v: &[f64]) -> f64 {
    ref_sum(v) / v.len() as f64
}

fn ref_var(v: &[f64], unbiased: bool) -> f64 {
    let m = ref_mean(v);
    let ss: f64 = v.iter().map(|x| (x - m) * (x - m)).sum();
    // No elements (or one, unbiased) leave no degrees of freedom: 0 / 0 is NaN.
    let dof = if unbiased { v.len() as f64 - 1.0 } else { v.len() as f64 };
    ss / dof.max(0.0)
}

fn ref_logsumexp(v: &[f64]) -> f64 {
    let m = v.iter().copied().fold(f64::NEG_INFINITY, max_nan);
    if m.is_nan() {
        return m;
    }
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + v.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn reductions_match_the_reference(
        shape in any_shape(4),
        mask in any::<u8>(),
        negative in any::<bool>(),
        keepdim in any::<bool>(),
        nans in prop::bool::weighted(0.2),
        transposed in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let rank = shape.len();
        let given: Vec<usize> = (0..rank).filter(|d| mask & (1 << d) != 0).collect();
        // The same dimensions counted from the back, which must mean the same.
        let arg: Vec<i64> = given.iter().map(|&d| if negative { d as i64 - rank as i64 } else { d as i64 }).collect();
        // PyTorch's rule: no dimensions means all of them.
        let dims: Vec<usize> = if given.is_empty() { (0..rank).collect() } else { given };
        let x = Nd { data: reals(seed, shape.iter().product(), nans), shape: shape.clone() };
        let t = if transposed && rank >= 2 {
            // A non-contiguous tensor holding the same logical values.
            let op = ViewOp::Transpose(0, rank - 1);
            tensor(&apply_nd(&x, &op)).transpose(0, rank - 1).unwrap()
        } else {
            tensor(&x)
        };
        let empty = dims.iter().any(|&d| shape[d] == 0);
        let abs = reduce_ref(&x, &dims, keepdim, ref_abs_sum);
        let check = |name: &str, got: ember_tensor::Result<Tensor>, want: Nd<f64>, scale: &[f64], rel: f64| {
            let got = got.unwrap_or_else(|e| panic!("{name} over {arg:?} of {shape:?}: {e}"));
            assert_eq!(got.shape(), want.shape.as_slice(), "{name} over {arg:?} of {shape:?}");
            assert_close(&f64s(&got), &want.data, scale, rel, &format!("{name} over {arg:?} of {shape:?}"));
        };
        check("sum", t.sum(arg.as_slice(), keepdim), reduce_ref(&x, &dims, keepdim, ref_sum), &abs.data, 1e-12);
        let n = dims.iter().map(|&d| shape[d]).product::<usize>().max(1) as f64;
        let mean_scale: Vec<f64> = abs.data.iter().map(|s| s / n).collect();
        check("mean", t.mean(arg.as_slice(), keepdim), reduce_ref(&x, &dims, keepdim, ref_mean), &mean_scale, 1e-12);
        let prod = reduce_ref(&x, &dims, keepdim, |v| v.iter().product());
        let prod_scale = reduce_ref(&x, &dims, keepdim, |v| v.iter().map(|x| x.abs()).product());
        check("prod", t.prod(arg.as_slice(), keepdim), prod, &prod_scale.data, 1e-12);
        for unbiased in [false, true] {
            let var = reduce_ref(&x, &dims, keepdim, |v| ref_var(v, unbiased));
            let scale = vec![100.0; var.data.len()];
            check("var", t.var(arg.as_slice(), unbiased, keepdim), var.clone(), &scale, 1e-12);
            let std = Nd { shape: var.shape.clone(), data: var.data.iter().map(|v| v.sqrt()).collect() };
            check("std", t.std(arg.as_slice(), unbiased, keepdim), std, &scale, 1e-12);
        }
        let lse = reduce_ref(&x, &dims, keepdim, ref_logsumexp);
        let lse_scale: Vec<f64> = lse.data.iter().map(|v| v.abs()).collect();
        check("logsumexp", t.logsumexp(arg.as_slice(), keepdim), lse, &lse_scale, 1e-12);
        if empty {
            prop_assert!(t.max(arg.as_slice(), keepdim).is_err());
            prop_assert!(t.min(arg.as_slice(), keepdim).is_err());
        } else {
            // Extremes are exact: no tolerance.
            let zero = vec![0.0; abs.data.len()];
            let max = reduce_ref(&x, &dims, keepdim, |v| v.iter().copied().fold(f64::NEG_INFINITY, max_nan));
            let min = reduce_ref(&x, &dims, keepdim, |v| v.iter().copied().fold(f64::INFINITY, min_nan));
            check("max", t.max(arg.as_slice(), keepdim), max, &zero, 0.0);
            check("min", t.min(arg.as_slice(), keepdim), min, &zero, 0.0);
        }
        for (d, &extent) in shape.iter().enumerate() {
            let da = if negative { d as i64 - rank as i64 } else { d as i64 };
            if extent == 0 {
                prop_assert!(t.argmax(da, keepdim).is_err() && t.argmin(da, keepdim).is_err());
                continue;
            }
            for (name, max) in [("argmax", true), ("argmin", false)] {
                let got = if max { t.argmax(da, keepdim) } else { t.argmin(da, keepdim) }.unwrap();
                prop_assert_eq!(got.dtype(), DType::I64);
                let want = reduce_ref(&x, &[d], keepdim, |v| arg_extreme(v, max));
                prop_assert_eq!(got.shape(), want.shape.as_slice());
                assert_same(&f64s(&got), &want.data, name);
            }
        }
    }
}

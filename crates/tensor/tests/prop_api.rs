//! Property tests of the public `Tensor` API under random, often invalid, arguments: every
//! call either succeeds with the value a naive reference (or an identity) gives, or fails
//! with an error whose message names the operation. A panic anywhere fails the property,
//! and sizes too large to hold must be refused before anything is allocated.
//!
//! Shapes have rank 0 to 4 and extents 0 to 4 (zero-size tensors included); dimensions
//! range over -6..6 and indices over -2..7, so roughly half the calls are invalid.

use ember_tensor::ops::pool::{AvgPoolArgs, MaxPoolArgs};
use ember_tensor::{ConvArgs, Tensor};
use ember_testing::prop::{
    at, broadcast, broadcast_at, dtype, f64s, indices, ok_or_names, resolve, shape, tensor, values,
};
use proptest::prelude::*;

/// Cases per property: enough to hit every error path, small enough for a debug-build run
/// of a few seconds.
const CASES: u32 = 1000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// reshape and view succeed exactly when the element counts agree, and reshaping back
    /// restores the values.
    #[test]
    fn reshape_round_trips(from in shape(4), to in shape(4), seed in any::<u64>(), dt in dtype()) {
        let t = tensor(&from, seed, dt);
        let same_count = from.iter().product::<usize>() == to.iter().product::<usize>();
        let r = ok_or_names(t.reshape(to.clone()), "reshape");
        prop_assert_eq!(r.is_some(), same_count);
        if let Some(r) = r {
            prop_assert_eq!(r.shape().to_vec(), to.clone());
            prop_assert_eq!(f64s(&r.reshape(from.clone()).unwrap()), f64s(&t));
            let v = ok_or_names(r.view(from.clone()), "view").unwrap();
            prop_assert_eq!(f64s(&v), f64s(&t));
        }
    }

    /// transpose and permute accept exactly the valid dimensions, and undo themselves.
    #[test]
    fn transpose_and_permute(s in shape(4), a in -6i64..6, b in -6i64..6, perm in prop::collection::vec(-6i64..6, 0..5), seed in any::<u64>(), dt in dtype()) {
        let t = tensor(&s, seed, dt);
        let valid = resolve(a, s.len().max(1)).is_some() && resolve(b, s.len().max(1)).is_some();
        if let Some(tt) = ok_or_names(t.transpose(a, b), "transpose") {
            prop_assert!(valid || s.is_empty());
            prop_assert_eq!(f64s(&tt.transpose(a, b).unwrap()), f64s(&t));
        } else {
            prop_assert!(!valid || s.is_empty());
        }
        let resolved: Option<Vec<usize>> = perm.iter().map(|&d| resolve(d, s.len())).collect();
        let is_perm = resolved.as_ref().is_some_and(|r| {
            let mut sorted = r.clone();
            sorted.sort();
            sorted == (0..s.len()).collect::<Vec<_>>()
        });
        let p = ok_or_names(t.permute(&perm), "permute");
        prop_assert_eq!(p.is_some(), is_perm);
        if let (Some(p), Some(r)) = (p, resolved) {
            let mut inverse = vec![0usize; r.len()];
            for (i, &d) in r.iter().enumerate() {
                inverse[d] = i;
            }
            prop_assert_eq!(f64s(&p.permute(&inverse).unwrap()), f64s(&t));
        }
    }

    /// narrow and select match a naive slice when in range and are errors otherwise.
    #[test]
    fn narrow_and_select(s in shape(4), dim in -6i64..6, start in 0usize..7, len in 0usize..7, seed in any::<u64>(), dt in dtype()) {
        let t = tensor(&s, seed, dt);
        let data = values(&s, seed);
        let d = resolve(dim, s.len());
        let n = ok_or_names(t.narrow(dim, start, len), "narrow");
        prop_assert_eq!(n.is_some(), d.is_some_and(|d| start + len <= s[d]));
        if let (Some(n), Some(d)) = (n, d) {
            let mut want_shape = s.clone();
            want_shape[d] = len;
            let want: Vec<f64> = indices(&want_shape).iter().map(|i| {
                let mut src = i.clone();
                src[d] += start;
                at(&data, &s, &src)
            }).collect();
            prop_assert_eq!(f64s(&n), want);
        }
        let sel = ok_or_names(t.select(dim, start), "select");
        prop_assert_eq!(sel.is_some(), d.is_some_and(|d| start < s[d]));
        if let (Some(sel), Some(d)) = (sel, d) {
            let mut src_shape = s.clone();
            src_shape.remove(d);
            let want: Vec<f64> = indices(&src_shape).iter().map(|i| {
                let mut src = i.clone();
                src.insert(d, start);
                at(&data, &s, &src)
            }).collect();
            prop_assert_eq!(f64s(&sel), want);
        }
    }

    /// index_select, gather and scatter_add with random (sometimes out-of-range or
    /// negative) indices: a naive loop's result, or an error naming the op.
    #[test]
    fn indexing_ops(s in shape(3), dim in -4i64..4, idx in prop::collection::vec(-2i64..7, 0..6), seed in any::<u64>(), dt in dtype()) {
        let t = tensor(&s, seed, dt);
        let data = values(&s, seed);
        let d = resolve(dim, s.len());
        let index = Tensor::from_vec(idx.clone(), [idx.len()]).unwrap();
        let in_range = |extent: usize| idx.iter().all(|&i| (0..extent as i64).contains(&i));
        if let Some(out) = ok_or_names(t.index_select(dim, &index), "index_select") {
            let d = d.unwrap_or(0);
            let extent = if s.is_empty() { 1 } else { s[d] };
            prop_assert!(in_range(extent) || idx.is_empty());
            if !s.is_empty() {
                let want: Vec<f64> = indices(out.shape()).iter().map(|i| {
                    let mut src = i.clone();
                    src[d] = idx[i[d]] as usize;
                    at(&data, &s, &src)
                }).collect();
                prop_assert_eq!(f64s(&out), want);
            }
        } else {
            prop_assert!(!s.is_empty() || d.is_none() || !idx.is_empty());
        }
        // gather/scatter_add with an index of the same rank: a 1-d input only.
        if s.len() == 1 {
            let g = ok_or_names(t.gather(dim, &index), "gather");
            prop_assert_eq!(g.is_some(), d.is_some() && in_range(s[0]));
            if let Some(g) = g {
                let want: Vec<f64> = idx.iter().map(|&i| data[i as usize]).collect();
                prop_assert_eq!(f64s(&g), want);
            }
            let src = Tensor::ones([idx.len()], dt).unwrap();
            if let Some(sc) = ok_or_names(t.scatter_add(dim, &index, &src), "scatter_add") {
                prop_assert!(in_range(s[0]));
                let mut want = data.clone();
                for &i in &idx {
                    want[i as usize] += 1.0;
                }
                prop_assert_eq!(f64s(&sc), want);
            }
        }
    }

    /// cat and stack of tensors of random, usually matching shapes: the pieces come back
    /// by narrow/select, and mismatches are errors naming the op.
    #[test]
    fn cat_and_stack(base in shape(3), extents in prop::collection::vec(0usize..4, 0..4), dim in -4i64..4, mismatch in any::<bool>(), seed in any::<u64>(), dt in dtype()) {
        let d = resolve(dim, base.len());
        let mut shapes: Vec<Vec<usize>> = extents.iter().map(|&e| {
            let mut s = base.clone();
            if let Some(d) = d { s[d] = e; }
            s
        }).collect();
        // A mismatch: one extent off in a dimension other than the joined one.
        let other = d.and_then(|d| (0..base.len()).find(|&o| o != d));
        let mismatch = mismatch && shapes.len() > 1 && other.is_some();
        if let (true, Some(o)) = (mismatch, other) {
            let last = shapes.len() - 1;
            shapes[last][o] += 1;
        }
        let ts: Vec<Tensor> = shapes.iter().enumerate().map(|(i, s)| tensor(s, seed + i as u64, dt)).collect();
        let refs: Vec<&Tensor> = ts.iter().collect();
        if let Some(c) = ok_or_names(Tensor::cat(&refs, dim), "cat") {
            let d = d.unwrap();
            let mut offset = 0;
            for t in &ts {
                let e = t.shape()[d];
                prop_assert_eq!(f64s(&c.narrow(d, offset, e).unwrap()), f64s(t));
                offset += e;
            }
        } else {
            prop_assert!(ts.is_empty() || d.is_none() || mismatch);
        }
        let same: Vec<Tensor> = (0..extents.len()).map(|i| tensor(&base, seed + i as u64, dt)).collect();
        let refs: Vec<&Tensor> = same.iter().collect();
        let insert = { let r = base.len() as i64 + 1; let x = if dim < 0 { dim + r } else { dim }; (0..r).contains(&x).then_some(x as usize) };
        let st = ok_or_names(Tensor::stack(&refs, dim), "stack");
        prop_assert_eq!(st.is_some(), !same.is_empty() && insert.is_some());
        if let (Some(st), Some(i)) = (st, insert) {
            for (k, t) in same.iter().enumerate() {
                prop_assert_eq!(f64s(&st.select(i, k).unwrap()), f64s(t));
            }
        }
    }

    /// matmul of random 1-3-d operands: the naive product when the inner extents agree,
    /// an error naming matmul otherwise.
    #[test]
    fn matmul_matches_naive(m in 0usize..5, k in 0usize..5, k2 in 0usize..5, n in 0usize..5, batch in 0usize..3, seed in any::<u64>(), dt in dtype()) {
        let a = tensor(&[batch.max(1), m, k], seed, dt);
        let b = tensor(&[k2, n], seed ^ 1, dt);
        let a = if batch == 0 { a.select(0, 0).unwrap() } else { a };
        let out = ok_or_names(a.matmul(&b), "matmul");
        prop_assert_eq!(out.is_some(), k == k2);
        if let Some(out) = out {
            let (av, bv) = (f64s(&a), f64s(&b));
            let batches = if batch == 0 { 1 } else { batch };
            let mut want = Vec::new();
            for bi in 0..batches {
                for i in 0..m {
                    for j in 0..n {
                        want.push((0..k).map(|p| av[bi * m * k + i * k + p] * bv[p * n + j]).sum::<f64>());
                    }
                }
            }
            let got = f64s(&out);
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                prop_assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{} vs {}", g, w);
            }
        }
    }

    /// Reductions over random (often invalid or repeated) dimensions: the reference sum's
    /// shape and values, or an error naming the op. softmax sums to one along its dim.
    #[test]
    fn reductions_and_softmax(s in shape(4), dims in prop::collection::vec(-6i64..6, 0..3), keep in any::<bool>(), seed in any::<u64>(), dt in dtype()) {
        let t = tensor(&s, seed, dt);
        let resolved: Option<Vec<usize>> = dims.iter().map(|&d| resolve(d, s.len().max(1))).collect();
        let distinct = resolved.as_ref().is_some_and(|r| { let mut x = r.clone(); x.sort(); x.dedup(); x.len() == r.len() });
        let sum = ok_or_names(t.sum(dims.clone(), keep), "sum");
        prop_assert_eq!(sum.is_some(), distinct);
        if let Some(sum) = sum {
            prop_assert!((sum.sum_all().item().unwrap() - values(&s, seed).iter().sum::<f64>()).abs() < 1e-3);
        }
        for (name, r) in [("mean", t.mean(dims.clone(), keep)), ("max", t.max(dims.clone(), keep)), ("var", t.var(dims.clone(), true, keep)), ("logsumexp", t.logsumexp(dims.clone(), keep))] {
            if ok_or_names(r, name).is_some() {
                prop_assert!(distinct, "{} accepted {:?} on {:?}", name, dims, s);
            }
        }
        let dim = dims.first().copied().unwrap_or(-1);
        if let Some(sm) = ok_or_names(t.softmax(dim), "softmax") {
            let d = resolve(dim, s.len().max(1)).unwrap();
            if !s.is_empty() && s[d] > 0 {
                for v in f64s(&sm.sum(d, false).unwrap()) {
                    prop_assert!((v - 1.0).abs() < 1e-5);
                }
            }
        }
        ok_or_names(t.log_softmax(dim), "log_softmax");
        ok_or_names(t.argmax(dim, keep), "argmax");
    }

    /// conv2d and the 2-d pools with random shapes and arguments: the output size of
    /// PyTorch's formula, or an error naming the op.
    #[test]
    fn conv_and_pool_shapes(n in 0usize..3, c in 0usize..4, h in 0usize..7, w in 0usize..7, oc in 0usize..3, kh in 0usize..4, kw in 0usize..4, stride in 0usize..3, pad in 0usize..3, groups in 0usize..3, seed in any::<u64>(), dt in dtype()) {
        let x = tensor(&[n, c, h, w], seed, dt);
        let weight = tensor(&[oc, c / groups.max(1), kh, kw], seed ^ 3, dt);
        let args = ConvArgs::default().stride(stride).padding(pad).groups(groups);
        if let Some(y) = ok_or_names(x.conv2d(&weight, None, &args), "conv2d") {
            let out = |size: usize, k: usize| (size + 2 * pad - k) / stride + 1;
            prop_assert_eq!(y.shape().to_vec(), vec![n, oc, out(h, kh), out(w, kw)]);
        }
        let pool = MaxPoolArgs::new([kh, kw]).stride(stride.max(1)).padding(pad);
        if let Some(y) = ok_or_names(x.max_pool2d(&pool), "max_pool2d") {
            prop_assert_eq!(y.shape()[..2].to_vec(), vec![n, c]);
            prop_assert!(y.to_vec_f64().is_ok());
        }
        let avg = AvgPoolArgs::new([kh, kw]).stride(stride.max(1)).padding(pad);
        if let Some(y) = ok_or_names(x.avg_pool2d(&avg), "avg_pool2d") {
            prop_assert_eq!(y.shape()[..2].to_vec(), vec![n, c]);
        }
    }

    /// Shapes whose element count cannot be held are refused before any allocation (an
    /// attempt would abort the process, not fail the property).
    #[test]
    fn huge_sizes_are_refused(a in 1usize << 20..1usize << 40, b in 1usize << 20..1usize << 40, dt in dtype()) {
        prop_assert!(ok_or_names(Tensor::zeros([a, b], dt), "zeros").is_none());
        prop_assert!(ok_or_names(Tensor::ones([a, b], dt), "ones").is_none());
        let small = Tensor::ones([1, 1], dt).unwrap();
        // A view of any countable size is fine (no memory); past ember's element limit
        // (8-byte elements addressable by `isize`) it is refused.
        let countable = a.checked_mul(b).is_some_and(|n| n <= isize::MAX as usize / 8);
        prop_assert_eq!(ok_or_names(small.expand([a, b]), "expand").is_some_and(|e| e.numel() == a * b), countable);
        prop_assert!(ok_or_names(small.repeat(&[a, b]), "repeat").is_none());
        prop_assert!(ok_or_names(small.pad(&[(a, 0), (b, 0)], 0.0), "pad").is_none());
        prop_assert!(ok_or_names(small.reshape(vec![a, b]), "reshape").is_none());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Binary ops broadcast by NumPy's rule and compute each element as the naive loop does
    /// (exactly: the values are small quarters); shapes that do not broadcast are errors
    /// naming the op. Unary ops keep the shape and match the scalar function.
    #[test]
    fn elementwise_ops_broadcast_and_match_naive(sa in shape(4), sb in shape(4), op in 0usize..5, seed in any::<u64>(), dt in dtype()) {
        let (a, b) = (tensor(&sa, seed, dt), tensor(&sb, seed + 1, dt));
        let (name, f): (&str, fn(f64, f64) -> f64) = match op {
            0 => ("add", |x, y| x + y),
            1 => ("sub", |x, y| x - y),
            2 => ("mul", |x, y| x * y),
            3 => ("maximum", f64::max),
            _ => ("minimum", f64::min),
        };
        let result = match op {
            0 => a.add(&b),
            1 => a.sub(&b),
            2 => a.mul(&b),
            3 => a.maximum(&b),
            _ => a.minimum(&b),
        };
        let expected_shape = broadcast(&sa, &sb);
        match ok_or_names(result, name) {
            Some(out) => {
                let shape = expected_shape.expect("a result for shapes that do not broadcast");
                prop_assert_eq!(out.shape().dims(), &shape[..]);
                let (va, vb) = (values(&sa, seed), values(&sb, seed + 1));
                let want: Vec<f64> = indices(&shape).iter().map(|i| f(broadcast_at(&va, &sa, i), broadcast_at(&vb, &sb, i))).collect();
                prop_assert_eq!(f64s(&out), want);
            }
            None => prop_assert!(expected_shape.is_none(), "{} refused broadcastable shapes {:?} and {:?}", name, sa, sb),
        }
        let neg = a.neg();
        prop_assert_eq!(neg.shape().dims(), &sa[..]);
        prop_assert_eq!(f64s(&neg), values(&sa, seed).iter().map(|v| -v).collect::<Vec<_>>());
        prop_assert_eq!(f64s(&a.abs()), values(&sa, seed).iter().map(|v| v.abs()).collect::<Vec<_>>());
    }
}

//! Property tests of dtype conversion, tensor creation and the indexing ops on every dtype,
//! under random, often invalid, arguments: `to_dtype` between every pair of dtypes against
//! Rust's `as` casts (ember's documented rule); `from_vec`/`from_slice`/`from_buffer` with
//! wrong lengths; `full`, `zeros`, `ones` and the `*_like` forms; `arange`/`arange_step`
//! (zero, negative and non-finite steps, huge counts); `linspace`; `eye`; the random
//! constructors (shape, dtype, range; invalid bounds and standard deviations); `randperm`;
//! `index_select`/`gather`/`scatter_add`/`masked_fill` on integer and `u8` tensors with
//! wrong-dtype and out-of-range indices; `cat`/`stack` of mixed dtypes. Each call gives the
//! reference value or an error naming the op; sizes beyond ember's element limit (or beyond
//! any memory) are refused before anything of that size is allocated.

use ember_tensor::storage::Buffer;
use ember_tensor::{DType, Scalar, Tensor};
use ember_testing::prop::{
    Elem as V, any_dtype, cast, input, ok_or_names, read, resolve, same_elems, scalar_fits, scalar_in, shape,
};
use proptest::prelude::*;

/// Cases per property: every dtype pair and error path, in a few seconds in debug.
const CASES: u32 = 1000;

/// ember's element limit: as many 8-byte values as `isize` counts bytes.
const MAX_NUMEL: u128 = isize::MAX as u128 / 8;

/// Counts that are small, or far beyond any memory (refused by the element limit or by the
/// allocator, never attempted).
fn count() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0usize..40, 1 => prop::sample::select(vec![1usize << 48, 1 << 60, (1 << 60) + 1, usize::MAX / 2, usize::MAX])]
}

fn scalar() -> impl Strategy<Value = Scalar> {
    prop_oneof![
        prop::sample::select(vec![0i64, 1, -1, 2, -3, 7, 300, -256, (1 << 53) + 1, i64::MAX, i64::MIN])
            .prop_map(Scalar::Int),
        prop::sample::select(vec![
            0.0,
            -0.0,
            0.5,
            -1.25,
            2.9,
            -2.9,
            1e30,
            -1e300,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY
        ])
        .prop_map(Scalar::Float),
    ]
}

/// Range ends and steps: small integers and floats, with zeros, huge, infinite and NaN.
fn range_scalar() -> impl Strategy<Value = Scalar> {
    prop_oneof![
        3 => (-12i64..12).prop_map(Scalar::Int),
        1 => prop::sample::select(vec![i64::MIN, i64::MAX, 1 << 62, -(1 << 62)]).prop_map(Scalar::Int),
        2 => (-40i32..40).prop_map(|v| Scalar::Float(v as f64 / 4.0)),
        1 => prop::sample::select(vec![0.0, -0.0, 1e-300, 1e300, -1e300, f64::NAN, f64::INFINITY, f64::NEG_INFINITY]).prop_map(Scalar::Float),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// `to_dtype` from every dtype to every dtype follows Rust's `as`: integers wrap into
    /// `u8`, floats truncate toward zero and saturate (NaN gives 0), integers round into
    /// floats; converting to the same dtype keeps every bit; the shape is kept.
    #[test]
    fn casts_follow_as(s in shape(3), seed in any::<u64>(), from in any_dtype(), to in any_dtype(), strided in any::<bool>()) {
        let (t, xs) = input(&s, seed, from, strided);
        let c = t.to_dtype(to);
        prop_assert_eq!((c.dtype(), c.shape().dims()), (to, &s[..]));
        let want: Vec<V> = xs.iter().map(|&x| cast(x, to)).collect();
        prop_assert!(same_elems(&read(&c), &want, 0.0), "{} -> {}: {:?} gave {:?}", from, to, xs, read(&c));
        // Every integer of a u8 or i64 survives a round trip through the wider types.
        if from.is_int() && (to == DType::I64 || from == DType::U8 && to.is_float()) {
            prop_assert!(same_elems(&read(&c.to_dtype(from)), &xs, 0.0));
        }
    }

    /// `from_vec`, `from_slice` and `from_buffer` accept exactly the data whose length is the
    /// shape's element count; counts beyond the element limit are errors, not overflows.
    #[test]
    fn constructors_check_lengths(s in prop::collection::vec(prop_oneof![4 => 0usize..5, 1 => Just(1usize << 40)], 0..4), len in 0usize..20) {
        let numel = s.iter().map(|&e| e as u128).product::<u128>();
        let fits = numel == len as u128 && s.iter().filter(|&&e| e != 0).map(|&e| e as u128).product::<u128>() <= MAX_NUMEL;
        let data: Vec<f32> = (0..len).map(|i| i as f32).collect();
        let t = ok_or_names(Tensor::from_vec(data.clone(), s.clone()), "from_vec");
        prop_assert_eq!(t.is_some(), fits);
        if let Some(t) = t {
            prop_assert_eq!(t.to_vec::<f32>().unwrap(), data.clone());
        }
        prop_assert_eq!(ok_or_names(Tensor::from_slice(&data, s.clone()), "from_slice").is_some(), fits);
        let buf = Buffer::from_slice("test", &data).unwrap();
        prop_assert_eq!(ok_or_names(Tensor::from_buffer(buf, s.clone()), "from_buffer").is_some(), fits);
    }

    /// `full`, `zeros` and `ones` in every dtype hold the scalar converted as a kernel takes
    /// it (`as`: an integer wraps into `u8`, a float truncates into integers); a value the
    /// dtype cannot hold is refused; the `*_like` forms keep the shape and dtype; a huge
    /// shape is refused naming the op.
    #[test]
    fn filled_tensors(s in shape(3), huge in any::<bool>(), dt in any_dtype(), value in scalar(), seed in any::<u64>()) {
        let shape: Vec<usize> = if huge { vec![1 << 31, 1 << 31, 1 << 30] } else { s.clone() };
        let n: usize = s.iter().product();
        let fits = scalar_fits(value, dt);
        let full = ok_or_names(Tensor::full(shape.clone(), value, dt), "full");
        let zeros = ok_or_names(Tensor::zeros(shape.clone(), dt), "zeros");
        let ones = ok_or_names(Tensor::ones(shape.clone(), dt), "ones");
        prop_assert_eq!(full.is_some(), !huge && fits, "full({:?}) of {}", value, dt);
        prop_assert_eq!(zeros.is_some() && ones.is_some(), !huge);
        if let Some(f) = full {
            prop_assert!(same_elems(&read(&f), &vec![scalar_in(value, dt); n], 0.0));
            prop_assert_eq!((f.dtype(), f.shape().dims()), (dt, &s[..]));
        }
        if let (Some(z), Some(o)) = (zeros, ones) {
            prop_assert!(same_elems(&read(&z), &vec![cast(V::I(0), dt); n], 0.0));
            prop_assert!(same_elems(&read(&o), &vec![cast(V::I(1), dt); n], 0.0));
        }
        let (t, _) = input(&s, seed, dt, true);
        for (like, v) in [(t.zeros_like(), V::I(0)), (t.ones_like(), V::I(1))] {
            prop_assert_eq!((like.dtype(), like.shape().dims()), (dt, &s[..]));
            prop_assert!(same_elems(&read(&like), &vec![cast(v, dt); n], 0.0));
        }
        let like = ok_or_names(t.full_like(value), "full_like");
        prop_assert_eq!(like.is_some(), fits);
        if let Some(like) = like {
            prop_assert_eq!((like.dtype(), like.shape().dims()), (dt, &s[..]));
            prop_assert!(same_elems(&read(&like), &vec![scalar_in(value, dt); n], 0.0));
        }
    }

    /// `arange` and `arange_step`: integer arguments give `i64` and exact values, any float
    /// argument gives `f32`; the count is `ceil((end - start) / step)`; a zero or
    /// non-finite step, non-finite ends, a step away from the end and counts beyond the
    /// element limit are errors naming `arange`.
    #[test]
    fn arange_matches_the_count_rule(start in range_scalar(), end in range_scalar(), step in range_scalar()) {
        let got = ok_or_names(Tensor::arange_step(start, end, step), "arange");
        match (start, end, step) {
            (Scalar::Int(a), Scalar::Int(b), Scalar::Int(s)) => {
                let (span, st) = (b as i128 - a as i128, s as i128);
                let valid = s != 0 && span.signum() * st.signum() >= 0;
                let n = if valid { (span + st - st.signum()) / st } else { 0 };
                // Counts beyond the limit are refused; a count the allocator cannot serve
                // is refused too, and none of ours is in between.
                let holdable = n <= 1 << 20;
                prop_assert_eq!(got.is_some(), valid && holdable, "{}..{} step {}", a, b, s);
                if let Some(t) = got {
                    prop_assert_eq!(t.dtype(), DType::I64);
                    let want: Vec<i64> = (0..n).map(|i| (a as i128 + st * i) as i64).collect();
                    prop_assert_eq!(t.to_vec::<i64>().unwrap(), want);
                }
            }
            _ => {
                let (a, b, s) = (start.to_f64(), end.to_f64(), step.to_f64());
                let finite = a.is_finite() && b.is_finite() && s.is_finite() && s != 0.0;
                let n = ((b - a) / s).ceil().max(0.0);
                let valid = finite && (b - a) * s >= 0.0;
                let holdable = n <= (1u64 << 20) as f64;
                prop_assert_eq!(got.is_some(), valid && holdable, "{}..{} step {}", a, b, s);
                if let Some(t) = got {
                    prop_assert_eq!(t.dtype(), DType::F32);
                    let want: Vec<f64> = (0..n as usize).map(|i| (a + s * i as f64) as f32 as f64).collect();
                    prop_assert_eq!(t.to_vec_f64().unwrap(), want);
                }
            }
        }
        // `arange(start, end)` is a step of 1 of the same kind.
        let one = if matches!((start, end), (Scalar::Int(_), Scalar::Int(_))) { Scalar::Int(1) } else { Scalar::Float(1.0) };
        let (a, b) = (ok_or_names(Tensor::arange(start, end), "arange"), ok_or_names(Tensor::arange_step(start, end, one), "arange"));
        prop_assert_eq!(a.map(|t| read(&t).len()), b.map(|t| read(&t).len()));
    }

    /// `linspace` gives `steps` values from `start` to exactly `end` (rounded to `f32`),
    /// ordered like the ends; non-finite ends and huge counts are errors naming it. `eye`
    /// is the identity, and refuses sizes it cannot hold.
    #[test]
    fn linspace_and_eye(start in prop_oneof![4 => (-40i32..40).prop_map(|v| v as f64 / 4.0), 1 => prop::sample::select(vec![f64::NAN, f64::INFINITY, 1e300, -1e300])], end in (-40i32..40).prop_map(|v| v as f64 / 4.0), steps in count(), n in count()) {
        let l = ok_or_names(Tensor::linspace(start, end, steps), "linspace");
        prop_assert_eq!(l.is_some(), start.is_finite() && steps < 1 << 40);
        if let Some(l) = l {
            let v = l.to_vec::<f32>().unwrap();
            prop_assert_eq!(v.len(), steps);
            if steps > 0 {
                prop_assert_eq!(v[0], start as f32);
            }
            if steps > 1 {
                prop_assert_eq!(v[steps - 1], end as f32);
            }
            if start.abs() < 100.0 {
                prop_assert!(v.windows(2).all(|w| if start <= end { w[0] <= w[1] } else { w[0] >= w[1] }), "{:?}", v);
            }
        }
        let e = ok_or_names(Tensor::eye(n), "eye");
        prop_assert_eq!(e.is_some(), n < 1 << 20);
        if let Some(e) = e {
            let v = e.to_vec::<f32>().unwrap();
            prop_assert_eq!(e.shape().dims(), &[n, n][..]);
            let diagonal = |k: usize| k / n.max(1) == k % n.max(1);
            prop_assert!(v.iter().enumerate().all(|(k, &x)| x == f32::from(u8::from(diagonal(k)))));
        }
    }

    /// The random constructors: the shape and dtype asked for, uniform values inside their
    /// bounds, standard normal ones finite; invalid bounds or standard deviations, integer
    /// dtypes and huge shapes are errors naming the op; `rand_like` of an integer tensor is
    /// `f32`. `randperm(n)` is a permutation of `0..n` in `i64`.
    #[test]
    fn random_constructors(s in shape(3), huge in any::<bool>(), dt in any_dtype(), low in prop::sample::select(vec![-2.0, 0.0, 1.5, f64::NAN, f64::NEG_INFINITY]), high in prop::sample::select(vec![-2.0, 0.0, 3.0, 1e30, f64::INFINITY]), std in prop::sample::select(vec![0.0, 1.0, 2.5, -1.0, f64::NAN, f64::INFINITY]), n in count(), seed in any::<u64>()) {
        let shape: Vec<usize> = if huge { vec![1 << 62, 4] } else { s.clone() };
        let numel: usize = s.iter().product();
        let bounds_ok = low <= high && low.is_finite() && high.is_finite();
        let u = ok_or_names(Tensor::uniform(shape.clone(), low, high, dt), "uniform");
        prop_assert_eq!(u.is_some(), bounds_ok && dt.is_float() && !huge);
        if let Some(u) = u {
            prop_assert_eq!((u.dtype(), u.shape().dims()), (dt, &s[..]));
            let v = u.to_vec_f64().unwrap();
            // An `f32` draw may round up to `high`.
            prop_assert!(v.iter().all(|&x| x >= low && x <= high), "uniform({}, {}): {:?}", low, high, v);
        }
        let g = ok_or_names(Tensor::normal(shape.clone(), 0.5, std, dt), "normal");
        prop_assert_eq!(g.is_some(), std >= 0.0 && std.is_finite() && dt.is_float() && !huge);
        if let Some(g) = g {
            prop_assert_eq!((g.dtype(), g.shape().dims()), (dt, &s[..]));
            prop_assert!(g.to_vec_f64().unwrap().iter().all(|x| x.is_finite() && (std > 0.0 || *x == 0.5)));
        }
        let r = ok_or_names(Tensor::rand(shape.clone()), "uniform");
        prop_assert_eq!(r.as_ref().map(|r| r.to_vec::<f32>().unwrap().iter().all(|&x| (0.0..=1.0).contains(&x))), (!huge).then_some(true));
        prop_assert_eq!(ok_or_names(Tensor::randn(shape.clone()), "normal").map(|r| r.numel()), (!huge).then_some(numel));
        let (t, _) = input(&s, seed, dt, false);
        let like = t.rand_like().unwrap();
        prop_assert_eq!((like.dtype(), like.shape().dims()), (if dt.is_float() { dt } else { DType::F32 }, &s[..]));
        prop_assert_eq!(t.randn_like().unwrap().dtype(), like.dtype());
        let p = ok_or_names(Tensor::randperm(n), "randperm");
        prop_assert_eq!(p.is_some(), n < 1 << 20);
        if let Some(p) = p {
            prop_assert_eq!(p.dtype(), DType::I64);
            let mut v = p.to_vec::<i64>().unwrap();
            v.sort_unstable();
            prop_assert_eq!(v, (0..n as i64).collect::<Vec<_>>());
        }
    }

    /// `index_select`, `gather` and `scatter_add` on every dtype (the values keep theirs;
    /// integer sums wrap), with indices of every dtype (only `i64` is accepted) and out of
    /// range or negative; `masked_fill` of every dtype with masks of every dtype.
    #[test]
    fn indexing_on_every_dtype(len in 0usize..6, idx in prop::collection::vec(-2i64..7, 0..6), dim in -2i64..2, seed in any::<u64>(), dt in any_dtype(), it in any_dtype(), value in scalar(), mt in any_dtype()) {
        let (t, xs) = input(&[len], seed, dt, false);
        let index = Tensor::from_vec(idx.clone(), [idx.len()]).unwrap().to_dtype(it);
        let index_vals: Vec<i64> = read(&index).iter().map(|v| v.i()).collect();
        let valid_dim = resolve(dim, 1).is_some();
        let in_range = index_vals.iter().all(|&i| (0..len as i64).contains(&i));
        let ok = valid_dim && it == DType::I64 && in_range;
        let sel = ok_or_names(t.index_select(dim, &index), "index_select");
        prop_assert_eq!(sel.is_some(), ok, "index_select of {} by {:?} ({})", len, index_vals, it);
        if let Some(sel) = sel {
            prop_assert_eq!(sel.dtype(), dt);
            let want: Vec<V> = index_vals.iter().map(|&i| xs[i as usize]).collect();
            prop_assert!(same_elems(&read(&sel), &want, 0.0));
        }
        let g = ok_or_names(t.gather(dim, &index), "gather");
        prop_assert_eq!(g.is_some(), ok);
        if let Some(g) = g {
            let want: Vec<V> = index_vals.iter().map(|&i| xs[i as usize]).collect();
            prop_assert!(same_elems(&read(&g), &want, 0.0));
        }
        let (src, xsrc) = input(&[idx.len()], seed ^ 5, dt, false);
        let sc = ok_or_names(t.scatter_add(dim, &index, &src), "scatter_add");
        prop_assert_eq!(sc.is_some(), ok);
        if let Some(sc) = sc {
            let mut want = xs.clone();
            for (&i, &v) in index_vals.iter().zip(&xsrc) {
                let w = &mut want[i as usize];
                *w = match (*w, v) {
                    (V::I(a), V::I(b)) => cast(V::I(a.wrapping_add(b)), dt),
                    _ => cast(V::F(w.f() + v.f()), dt),
                };
            }
            prop_assert!(same_elems(&read(&sc), &want, 0.0), "{:?} vs {:?}", read(&sc), want);
        }
        // A source of another dtype is refused.
        let other = if dt == DType::F64 { DType::F32 } else { DType::F64 };
        prop_assert!(ok_or_names(t.scatter_add(dim, &index, &src.to_dtype(other)), "scatter_add").is_none());
        let (m, xm) = input(&[len], seed ^ 7, mt, false);
        let filled = ok_or_names(t.masked_fill(&m, value), "masked_fill");
        // The result keeps the tensor's dtype, a float value truncated into an integer one.
        let out = dt;
        prop_assert_eq!(filled.is_some(), mt == DType::U8 && scalar_fits(value, out));
        if let Some(f) = filled {
            prop_assert_eq!(f.dtype(), out);
            let want: Vec<V> = xs.iter().zip(&xm).map(|(&x, &m)| if m.i() != 0 { scalar_in(value, out) } else { cast(x, out) }).collect();
            prop_assert!(same_elems(&read(&f), &want, 0.0));
        }
    }

    /// `cat` and `stack` of tensors of mixed dtypes: the promoted dtype, each piece's values
    /// converted into it.
    #[test]
    fn joins_of_mixed_dtypes(dts in prop::collection::vec(any_dtype(), 1..4), rows in prop::collection::vec(0usize..3, 3), cols in 0usize..3, seed in any::<u64>()) {
        let pieces: Vec<(Tensor, Vec<V>)> = dts.iter().enumerate().map(|(i, &dt)| input(&[rows[i], cols], seed + i as u64, dt, i % 2 == 1)).collect();
        let out = dts.iter().copied().max().unwrap();
        let refs: Vec<&Tensor> = pieces.iter().map(|p| &p.0).collect();
        let c = Tensor::cat(&refs, 0).unwrap();
        prop_assert_eq!(c.dtype(), out);
        let want: Vec<V> = pieces.iter().flat_map(|p| p.1.iter().map(|&x| cast(x, out))).collect();
        prop_assert!(same_elems(&read(&c), &want, 0.0));
        let same: Vec<(Tensor, Vec<V>)> = dts.iter().enumerate().map(|(i, &dt)| input(&[2, cols], seed + i as u64, dt, false)).collect();
        let refs: Vec<&Tensor> = same.iter().map(|p| &p.0).collect();
        let st = Tensor::stack(&refs, 1).unwrap();
        prop_assert_eq!(st.dtype(), out);
        for (k, p) in same.iter().enumerate() {
            let want: Vec<V> = p.1.iter().map(|&x| cast(x, out)).collect();
            prop_assert!(same_elems(&read(&st.select(1, k).unwrap()), &want, 0.0));
        }
    }
}

/// `from_vec` once reported its length errors as `from_slice`'s, the constructor it
/// delegates to; each now names the one the caller called.
#[test]
fn length_errors_name_the_constructor_called() {
    let e = Tensor::from_vec(vec![1.0f32; 3], [2, 2]).unwrap_err().to_string();
    assert!(e.starts_with("from_vec:"), "{e}");
    let e = Tensor::from_slice(&[1.0f32; 3], [2, 2]).unwrap_err().to_string();
    assert!(e.starts_with("from_slice:"), "{e}");
}

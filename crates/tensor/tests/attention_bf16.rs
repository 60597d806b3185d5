//! The CPU attention kernel on bf16 operands, which it reads without widening (products of
//! bf16 operands summed in `f32`, the probabilities and the score gradients rounded to bf16
//! before their products, as PyTorch's CPU flash attention does), against an `f64`
//! reference computed here from the same bf16 values, and against the widened path (the
//! operands cast to `f32`, the `f32` kernel, the results rounded once).
//!
//! Bounds. The `f64` reference is exact for our purposes; `u = 2^-8` is bf16's unit
//! roundoff. Rounding the probabilities `P` before `P @ v` moves each term `p_j v_j` by at
//! most `u p_j |v_j|`, and rounding the result moves it by `u |o|`, so the output is within
//! `u (sum_j p_j |v_j| + |o|)` of the reference, plus `f32` sums (below `2^-24` times the
//! same magnitudes, covered by a factor 2 on the bound). Likewise `dv` within
//! `u (sum_i p_ij |dO_i| + |dv|)`, and `dq` (`dk`), which multiply the rounded score
//! gradients `dS` by `k` (`q`), within `u (scale sum |dS| |k| + |dq|)`. The backward's
//! reference reads the rounded output the kernel saved (`D = rowsum(dO * O)`), as the
//! backward kernels do, and so does the widened backward here.

use ember_tensor::{Attention, DType, Result, Tensor, manual_seed};

const U: f64 = 1.0 / 256.0;

/// The elements of `t` as `f64`.
fn values(t: &Tensor) -> Result<Vec<f64>> {
    t.to_dtype(DType::F64).contiguous().to_vec::<f64>()
}

/// A random bf16 tensor.
fn bf16(shape: &[usize]) -> Result<Tensor> {
    Ok(Tensor::randn(shape.to_vec())?.to_dtype(DType::BF16))
}

/// The mask as the reference reads it: for each score, `None` where the key is excluded,
/// else the value added to the score.
type MaskFn = dyn Fn(usize, usize, usize) -> Option<f64>;

/// One case: `batch` matrices of `l` queries, `s` keys, widths `e` and `ev`.
struct Case {
    batch: usize,
    l: usize,
    s: usize,
    e: usize,
    ev: usize,
    scale: f64,
}

/// What the reference computes, and the magnitudes its bounds scale with.
struct Reference {
    out: Vec<f64>,
    lse: Vec<f64>,
    dq: Vec<f64>,
    dk: Vec<f64>,
    dv: Vec<f64>,
    out_mag: Vec<f64>,
    dq_mag: Vec<f64>,
    dk_mag: Vec<f64>,
    dv_mag: Vec<f64>,
}

/// Attention and its gradients in `f64`, row by row (rows that see no key give 0); the
/// backward reads `out` where given (the output the kernel saved, as the backward kernel
/// does), else the exact one.
#[allow(clippy::too_many_arguments)]
fn reference(
    c: &Case,
    [q, k, v, g]: [&[f64]; 4],
    out: Option<&[f64]>,
    mask: impl Fn(usize, usize, usize) -> Option<f64>,
) -> Reference {
    let (l, s, e, ev) = (c.l, c.s, c.e, c.ev);
    let zeros = |n: usize| vec![0f64; c.batch * n];
    let mut r = Reference {
        out: zeros(l * ev),
        lse: zeros(l),
        dq: zeros(l * e),
        dk: zeros(s * e),
        dv: zeros(s * ev),
        out_mag: zeros(l * ev),
        dq_mag: zeros(l * e),
        dk_mag: zeros(s * e),
        dv_mag: zeros(s * ev),
    };
    for b in 0..c.batch {
        for i in 0..l {
            let scores: Vec<Option<f64>> = (0..s)
                .map(|j| {
                    let dot: f64 = (0..e).map(|x| q[(b * l + i) * e + x] * k[(b * s + j) * e + x]).sum();
                    mask(b, i, j).map(|add| c.scale * dot + add)
                })
                .collect();
            let top = scores.iter().flatten().fold(f64::NEG_INFINITY, |a, &x| a.max(x));
            if top == f64::NEG_INFINITY {
                r.lse[b * l + i] = f64::NEG_INFINITY;
                continue;
            }
            let total: f64 = scores.iter().flatten().map(|x| (x - top).exp()).sum();
            r.lse[b * l + i] = top + total.ln();
            let p: Vec<f64> = scores.iter().map(|x| x.map_or(0.0, |x| (x - top).exp() / total)).collect();
            for y in 0..ev {
                let at = (b * l + i) * ev + y;
                r.out[at] = (0..s).map(|j| p[j] * v[(b * s + j) * ev + y]).sum();
                r.out_mag[at] = (0..s).map(|j| p[j] * v[(b * s + j) * ev + y].abs()).sum();
            }
            let gi = &g[(b * l + i) * ev..(b * l + i + 1) * ev];
            let oi = &out.unwrap_or(&r.out)[(b * l + i) * ev..(b * l + i + 1) * ev];
            let dd: f64 = gi.iter().zip(oi).map(|(g, o)| g * o).sum();
            for j in 0..s {
                let dp: f64 = (0..ev).map(|y| gi[y] * v[(b * s + j) * ev + y]).sum();
                let ds = p[j] * (dp - dd);
                for (y, &gy) in gi.iter().enumerate() {
                    r.dv[(b * s + j) * ev + y] += p[j] * gy;
                    r.dv_mag[(b * s + j) * ev + y] += p[j] * gy.abs();
                }
                for x in 0..e {
                    let (qx, kx) = (q[(b * l + i) * e + x], k[(b * s + j) * e + x]);
                    r.dq[(b * l + i) * e + x] += c.scale * ds * kx;
                    r.dq_mag[(b * l + i) * e + x] += c.scale * ds.abs() * kx.abs();
                    r.dk[(b * s + j) * e + x] += c.scale * ds * qx;
                    r.dk_mag[(b * s + j) * e + x] += c.scale * ds.abs() * qx.abs();
                }
            }
        }
    }
    r
}

/// Asserts `got` within `slack * u (mag + |want|)` (plus `f32`-level absolute slack) of
/// `want`, element by element.
fn assert_close(what: &str, got: &[f64], want: &[f64], mag: &[f64], slack: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, ((&x, &y), &m)) in got.iter().zip(want).zip(mag).enumerate() {
        let bound = slack * U * (m + y.abs()) + 1e-6;
        assert!((x - y).abs() <= bound, "{what}[{i}]: {x} against {y} (bound {bound})");
    }
}

/// Runs one case through the bf16 kernel and the widened path and checks both against the
/// reference: `shape` is the leading dimensions, `mask` the mask tensor given to ember and
/// `mask_fn` the same mask as the reference reads it.
fn check(
    name: &str,
    shape: &[usize],
    (l, s, e, ev): (usize, usize, usize, usize),
    causal: bool,
    mask: Option<&Tensor>,
    mask_fn: &MaskFn,
) -> Result<()> {
    let dims = |last: [usize; 2]| [shape, &last].concat();
    let (q, k, v) = (bf16(&dims([l, e]))?, bf16(&dims([s, e]))?, bf16(&dims([s, ev]))?);
    let g = bf16(&dims([l, ev]))?;
    let spec = Attention { scale: Attention::default_scale(e), causal };
    let batch = shape.iter().product();
    let case = Case { batch, l, s, e, ev, scale: spec.scale };
    let causal_fn = |b: usize, i: usize, j: usize| if causal && j > i { None } else { mask_fn(b, i, j) };
    let operands = [values(&q)?, values(&k)?, values(&v)?, values(&g)?];
    let operands = [&operands[0][..], &operands[1], &operands[2], &operands[3]];
    let want = reference(&case, operands, None, causal_fn);

    let (out, lse) = q.attention(&k, &v, mask, &spec)?;
    // The backward's reference from the rounded output the backward reads.
    let back = reference(&case, operands, Some(&values(&out)?), causal_fn);
    assert_eq!((out.dtype(), lse.dtype()), (DType::BF16, DType::F32), "{name}");
    let (dq, dk, dv) = q.attention_backward(&k, &v, mask, &out, &lse, &g, &spec)?;
    assert_eq!([dq.dtype(), dk.dtype(), dv.dtype()], [DType::BF16; 3], "{name}");
    let got = [values(&out)?, values(&dq)?, values(&dk)?, values(&dv)?];

    let wide = |t: &Tensor| t.to_dtype(DType::F32);
    let wm = mask.map(|m| if m.dtype() == DType::U8 { m.clone() } else { wide(m) });
    let (wout, _) = wide(&q).attention(&wide(&k), &wide(&v), wm.as_ref(), &spec)?;
    let (wq, wk, wv) = (wide(&q), wide(&k), wide(&v));
    let (wdq, wdk, wdv) = wq.attention_backward(&wk, &wv, wm.as_ref(), &wide(&out), &lse, &wide(&g), &spec)?;
    let narrow = |t: &Tensor| values(&t.to_dtype(DType::BF16));
    let widened = [narrow(&wout)?, narrow(&wdq)?, narrow(&wdk)?, narrow(&wdv)?];

    // The log-sum-exp is f32 throughout: within f32 sums of bf16 products of the reference.
    for (i, (&x, &y)) in values(&lse)?.iter().zip(&want.lse).enumerate() {
        assert!(x == y || (x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{name}: lse[{i}] {x} against {y}");
    }
    let parts = [
        ("output", &want.out, &want.out_mag),
        ("dq", &back.dq, &back.dq_mag),
        ("dk", &back.dk, &back.dk_mag),
        ("dv", &back.dv, &back.dv_mag),
    ];
    for (i, (what, w, mag)) in parts.into_iter().enumerate() {
        assert_close(&format!("{name}: bf16 {what}"), &got[i], w, mag, 2.0);
        assert_close(&format!("{name}: widened {what}"), &widened[i], w, mag, 2.0);
        // Both within their bounds of the reference, so within twice of each other.
        assert_close(&format!("{name}: bf16 against widened {what}"), &got[i], &widened[i], mag, 4.0);
    }
    Ok(())
}

#[test]
fn bf16_attention_without_a_mask_over_batch_and_head_dimensions() -> Result<()> {
    manual_seed(11);
    check("plain", &[2, 3], (5, 7, 8, 3), false, None, &|_, _, _| Some(0.0))?;
    check("one by one", &[1], (1, 1, 1, 1), false, None, &|_, _, _| Some(0.0))?;
    // Past one block of queries (64) and of keys (256), odd widths.
    check("blocks", &[2], (70, 300, 17, 9), false, None, &|_, _, _| Some(0.0))
}

#[test]
fn bf16_attention_causal_across_blocks() -> Result<()> {
    manual_seed(12);
    check("causal", &[2, 2], (9, 9, 8, 8), true, None, &|_, _, _| Some(0.0))?;
    // More keys than queries and fewer: the triangle is aligned at the top left.
    check("causal wide", &[1], (70, 290, 16, 5), true, None, &|_, _, _| Some(0.0))?;
    check("causal tall", &[3], (66, 20, 6, 7), true, None, &|_, _, _| Some(0.0))
}

#[test]
fn bf16_attention_with_a_broadcast_bool_mask_and_a_row_without_keys() -> Result<()> {
    manual_seed(13);
    let (l, s) = (6, 11);
    // Keys kept where (i + 2j) % 3 != 0, and row 4 sees none.
    let keep = |i: usize, j: usize| i != 4 && !(i + 2 * j).is_multiple_of(3);
    let bits: Vec<u8> = (0..l * s).map(|x| keep(x / s, x % s) as u8).collect();
    let mask = Tensor::from_vec(bits, [l, s])?.expand([2, 2, l, s])?;
    let mask_fn = move |_: usize, i: usize, j: usize| keep(i, j).then_some(0.0);
    check("bool", &[2, 2], (l, s, 8, 4), false, Some(&mask), &mask_fn)?;
    check("bool causal", &[2, 2], (l, s, 8, 4), true, Some(&mask), &mask_fn)
}

#[test]
fn bf16_attention_with_an_additive_bf16_mask_broadcast_over_heads() -> Result<()> {
    manual_seed(14);
    let (batch, heads, l, s) = (2, 3, 5, 9);
    let add = Tensor::randn([batch, 1, l, s])?.to_dtype(DType::BF16);
    let host = values(&add)?;
    let mask = add.expand([batch, heads, l, s])?;
    // Matrix `b` of the `[batch, heads]` leading dimensions reads the mask of `b / heads`.
    let mask_fn = move |b: usize, i: usize, j: usize| Some(host[((b / heads) * l + i) * s + j]);
    check("additive", &[batch, heads], (l, s, 4, 6), false, Some(&mask), &mask_fn)
}

#[test]
fn bf16_attention_reads_strided_operands() -> Result<()> {
    manual_seed(15);
    let spec = Attention { scale: 0.3, causal: false };
    let q = bf16(&[2, 4, 5])?;
    // Keys `[2, 6, 5]` read through a transposed view of `[2, 5, 6]`.
    let k = bf16(&[2, 5, 6])?.transpose(1, 2)?;
    let v = bf16(&[2, 6, 3])?;
    let g = bf16(&[2, 4, 3])?;
    let (out, lse) = q.attention(&k, &v, None, &spec)?;
    let (want, want_lse) = q.attention(&k.contiguous(), &v, None, &spec)?;
    assert_eq!(values(&out)?, values(&want)?);
    assert_eq!(values(&lse)?, values(&want_lse)?);
    let grads = q.attention_backward(&k, &v, None, &out, &lse, &g, &spec)?;
    let want = q.attention_backward(&k.contiguous(), &v, None, &out, &lse, &g, &spec)?;
    for (x, y) in [(grads.0, want.0), (grads.1, want.1), (grads.2, want.2)] {
        assert_eq!(values(&x)?, values(&y)?);
    }
    Ok(())
}

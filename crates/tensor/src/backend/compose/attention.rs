//! The default attention kernels, composed from `matmul`, `binary`, `unary`, `reduce` and
//! `where_cond`: they hold the whole `[batch.., L, S]` scores (and, backward, three more
//! score-sized intermediates), which is what the CPU backend's blocked kernel avoids.

use crate::backend::kernels::Kernels;
use crate::backend::{BinaryOp, CmpOp, ReduceOp, UnaryOp, View};
use crate::layout::Layout;
use crate::ops::attention::{Attention, AttentionShapes, check_laid_out, check_views};
use crate::shape::Shape;
use crate::storage::{Buffer, CpuStorage, Storage};
use crate::{DType, Result, Scalar};

/// The contiguous layout of `shape`.
fn dense(shape: Shape) -> Layout {
    Layout::contiguous(shape)
}

/// One `value` in `dtype`, read through a layout that broadcasts it to `shape`.
fn splat<B: Kernels + ?Sized>(b: &B, value: f64, dtype: DType, shape: &Shape) -> Result<(Storage, Layout)> {
    let one = b.full(1, Scalar::Float(value), dtype)?;
    let layout = dense(Shape::from(vec![1; shape.rank()])).broadcast_to("scaled_dot_product_attention", shape)?;
    Ok((one, layout))
}

/// The masked, scaled scores `[batch.., L, S]`, contiguous, `-inf` where a key is excluded.
fn scores<B: Kernels + ?Sized>(
    b: &B,
    [q, k]: [View<'_>; 2],
    mask: Option<View<'_>>,
    spec: &Attention,
    shapes: &AttentionShapes,
) -> Result<Storage> {
    let op = "scaled_dot_product_attention";
    let dtype = q.0.dtype();
    let shape = shapes.scores();
    let r = shape.rank();
    let kt = k.1.transposed(r - 2, r - 1);
    let raw = b.matmul(q, (k.0, &kt))?;
    let (sc, sl) = splat(b, spec.scale, dtype, &shape)?;
    let mut s = b.binary(BinaryOp::Mul, (&raw, &dense(shape.clone())), (&sc, &sl))?;
    let (neg, nl) = splat(b, f64::NEG_INFINITY, dtype, &shape)?;
    if let Some((m, ml)) = mask {
        s = if m.dtype() == DType::U8 {
            b.where_cond((m, ml), (&s, &dense(shape.clone())), (&neg, &nl))?
        } else {
            b.binary(BinaryOp::Add, (&s, &dense(shape.clone())), (m, ml))?
        };
    }
    if spec.causal {
        let (l, n) = (shapes.l, shapes.s);
        let keep = Buffer::<u8>::from_fn(op, l * n, |p| u8::from(p % n <= p / n))?;
        let keep = b.upload(CpuStorage::from(keep))?;
        let kl = dense(Shape::from([l, n].as_slice())).broadcast_to(op, &shape)?;
        s = b.where_cond((&keep, &kl), (&s, &dense(shape.clone())), (&neg, &nl))?;
    }
    Ok(s)
}

/// The output and log-sum-exp as `softmax(s) @ v` and `m + ln sum e^(s - m)`, with rows of
/// only `-inf` set to 0 and `-inf`.
pub(crate) fn forward<B: Kernels + ?Sized>(
    b: &B,
    [q, k, v]: [View<'_>; 3],
    mask: Option<View<'_>>,
    spec: &Attention,
) -> Result<[Storage; 2]> {
    let shapes = check_views(
        [(q.0.dtype(), q.1), (k.0.dtype(), k.1), (v.0.dtype(), v.1)],
        mask.map(|(s, l)| (s.dtype(), l)),
        None,
    )?;
    let dtype = q.0.dtype();
    let shape = shapes.scores();
    let whole = dense(shape.clone());
    let s = scores(b, [q, k], mask, spec, &shapes)?;
    let r = shape.rank();
    let row = dense(shapes.with_last(&[shapes.l, 1]));
    let per_row = row.broadcast_to("scaled_dot_product_attention", &shape)?;
    let max = b.reduce(ReduceOp::Max, (&s, &whole), &[r - 1])?;
    let dead = b.compare_scalar(CmpOp::Eq, (&max, &row), Scalar::Float(f64::NEG_INFINITY))?;
    let (zero, zl) = splat(b, 0.0, dtype, row.shape())?;
    let shift = b.where_cond((&dead, &row), (&zero, &zl), (&max, &row))?;
    let shifted = b.binary(BinaryOp::Sub, (&s, &whole), (&shift, &per_row))?;
    let e = b.unary(UnaryOp::Exp, (&shifted, &whole))?;
    let sum = b.reduce(ReduceOp::Sum, (&e, &whole), &[r - 1])?;
    let log_sum = b.unary(UnaryOp::Log, (&sum, &row))?;
    let lse = b.binary(BinaryOp::Add, (&log_sum, &row), (&shift, &row))?;
    let p = b.binary(BinaryOp::Div, (&e, &whole), (&sum, &per_row))?;
    let (zs, zsl) = splat(b, 0.0, dtype, &shape)?;
    let dead_rows = row.broadcast_to("scaled_dot_product_attention", &shape)?;
    let p = b.where_cond((&dead, &dead_rows), (&zs, &zsl), (&p, &whole))?;
    let out = b.matmul((&p, &whole), v)?;
    Ok([out, lse])
}

/// The gradients with respect to query, key and value, from the probabilities recomputed as
/// `e^(s - lse)`: `dv = P^T g`, `dS = P * (g v^T - rowsum(g * out))`, `dq = scale dS k`,
/// `dk = scale dS^T q`.
pub(crate) fn backward<B: Kernels + ?Sized>(
    b: &B,
    [q, k, v]: [View<'_>; 3],
    mask: Option<View<'_>>,
    [out, lse, grad]: [View<'_>; 3],
    spec: &Attention,
) -> Result<[Storage; 3]> {
    let views = [(q.0.dtype(), q.1), (k.0.dtype(), k.1), (v.0.dtype(), v.1)];
    let saved = [(out.0.dtype(), out.1), (lse.0.dtype(), lse.1), (grad.0.dtype(), grad.1)];
    let shapes = check_views(views, mask.map(|(s, l)| (s.dtype(), l)), Some(saved))?;
    let dtype = q.0.dtype();
    let shape = shapes.scores();
    let r = shape.rank();
    let whole = dense(shape.clone());
    let s = scores(b, [q, k], mask, spec, &shapes)?;
    // A row with nothing to attend to has lse = -inf; +inf in its place makes its
    // probabilities e^(s - inf) = 0.
    let lse_row = lse.1.unsqueezed(r - 1);
    let dead = b.compare_scalar(CmpOp::Eq, (lse.0, &lse_row), Scalar::Float(f64::NEG_INFINITY))?;
    let row = dense(shapes.with_last(&[shapes.l, 1]));
    let (inf, il) = splat(b, f64::INFINITY, dtype, row.shape())?;
    let safe = b.where_cond((&dead, &row), (&inf, &il), (lse.0, &lse_row))?;
    let per_row = row.broadcast_to("scaled_dot_product_attention", &shape)?;
    let shifted = b.binary(BinaryOp::Sub, (&s, &whole), (&safe, &per_row))?;
    let p = b.unary(UnaryOp::Exp, (&shifted, &whole))?;
    let pt = whole.transposed(r - 2, r - 1);
    let dv = b.matmul((&p, &pt), grad)?;
    let vt = v.1.transposed(r - 2, r - 1);
    let dp = b.matmul(grad, (v.0, &vt))?;
    let go = b.binary(BinaryOp::Mul, grad, out)?;
    let out_whole = dense(shapes.output());
    let d = b.reduce(ReduceOp::Sum, (&go, &out_whole), &[r - 1])?;
    let centred = b.binary(BinaryOp::Sub, (&dp, &whole), (&d, &per_row))?;
    let ds = b.binary(BinaryOp::Mul, (&p, &whole), (&centred, &whole))?;
    let dq = b.matmul((&ds, &whole), k)?;
    let dk = b.matmul((&ds, &pt), q)?;
    let scale = |x: Storage, sh: Shape| -> Result<Storage> {
        let (sc, sl) = splat(b, spec.scale, dtype, &sh)?;
        b.binary(BinaryOp::Mul, (&x, &dense(sh)), (&sc, &sl))
    };
    let dq = scale(dq, q.1.shape().clone())?;
    let dk = scale(dk, k.1.shape().clone())?;
    Ok([dq, dk, dv])
}

/// [`forward`]'s output stored through the dense layout `out`.
pub(crate) fn forward_laid_out<B: Kernels + ?Sized>(
    b: &B,
    qkv: [View<'_>; 3],
    mask: Option<View<'_>>,
    spec: &Attention,
    out: &Layout,
) -> Result<[Storage; 2]> {
    let [q, k, v] = qkv;
    let views = [(q.0.dtype(), q.1), (k.0.dtype(), k.1), (v.0.dtype(), v.1)];
    let shapes = check_views(views, mask.map(|(s, l)| (s.dtype(), l)), None)?;
    check_laid_out("output", out, &shapes.output())?;
    let [o, lse] = b.attention(qkv, mask, spec)?;
    Ok([lay_out(b, o, out)?, lse])
}

/// [`backward`]'s gradients, each stored through its dense layout in `grads`.
pub(crate) fn backward_laid_out<B: Kernels + ?Sized>(
    b: &B,
    qkv: [View<'_>; 3],
    mask: Option<View<'_>>,
    saved: [View<'_>; 3],
    spec: &Attention,
    [lq, lk, lv]: [&Layout; 3],
) -> Result<[Storage; 3]> {
    for (what, l, operand) in
        [("query gradient", lq, qkv[0]), ("key gradient", lk, qkv[1]), ("value gradient", lv, qkv[2])]
    {
        check_laid_out(what, l, operand.1.shape())?;
    }
    let [dq, dk, dv] = b.attention_backward(qkv, mask, saved, spec)?;
    Ok([lay_out(b, dq, lq)?, lay_out(b, dk, lk)?, lay_out(b, dv, lv)?])
}

/// The contiguous result `src` copied into a fresh storage read through the dense `layout`
/// of its shape (`src` itself when that layout is the contiguous one).
fn lay_out<B: Kernels + ?Sized>(b: &B, src: Storage, layout: &Layout) -> Result<Storage> {
    if layout.is_contiguous() {
        return Ok(src);
    }
    let mut dst = b.full(layout.numel(), Scalar::Float(0.0), src.dtype())?;
    b.copy_inplace(&mut dst, layout, (&src, &dense(layout.shape().clone())))?;
    Ok(dst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;
    use crate::tensor::Tensor;

    fn values(s: &Storage, shape: &[usize]) -> Vec<f64> {
        let c = CpuBackend.download((s, &dense(Shape::from(shape)))).unwrap();
        c.as_slice::<f64>().unwrap().to_vec()
    }

    fn max_diff(a: &Storage, b: &Storage, shape: &[usize]) -> f64 {
        let (a, b) = (values(a, shape), values(b, shape));
        a.iter().zip(&b).map(|(x, y)| if x == y { 0.0 } else { (x - y).abs() }).fold(0.0, f64::max)
    }

    /// The composed default against the CPU kernel, forward and backward, with a broadcast
    /// bool mask that empties one row, and with the causal triangle; the queries span more
    /// than one block (and a part block) with and without it, the keys two blocks. Two
    /// matrices take the short query blocks, four the tall ones.
    #[test]
    fn composition_matches_the_cpu_kernel() {
        crate::manual_seed(3);
        let (l, s) = (270, 300);
        let t = |shape: [usize; 3]| Tensor::randn(shape).unwrap().to_dtype(DType::F64);
        for nb in [2, 4] {
            let (q, k, v, g) = (t([nb, l, 8]), t([nb, s, 8]), t([nb, s, 5]), t([nb, l, 5]));
            let keep: Vec<u8> = (0..l * s).map(|i| u8::from(i / s != 4 && i % 3 != 0)).collect();
            let mask = Tensor::from_vec(keep, [l, s]).unwrap();
            let ml = mask.layout().broadcast_to("test", &Shape::from([nb, l, s].as_slice())).unwrap();
            let guards = [&q, &k, &v, &g, &mask].map(|x| x.storage().read());
            let qkv = [(&*guards[0], q.layout()), (&*guards[1], k.layout()), (&*guards[2], v.layout())];
            let gv = (&*guards[3], g.layout());
            let b = CpuBackend;
            for (m, causal) in [(Some((&*guards[4], &ml)), false), (None, true)] {
                let spec = Attention { scale: 0.4, causal };
                let fused = b.attention(qkv, m, &spec).unwrap();
                let composed = forward(&b, qkv, m, &spec).unwrap();
                assert!(max_diff(&fused[0], &composed[0], &[nb, l, 5]) < 1e-12);
                let (lf, lc) = (values(&fused[1], &[nb, l]), values(&composed[1], &[nb, l]));
                assert!(lf.iter().zip(&lc).all(|(x, y)| x == y || (x - y).abs() < 1e-12));
                let (ol, rl) = (dense(Shape::from([nb, l, 5].as_slice())), dense(Shape::from([nb, l].as_slice())));
                let saved = [(&fused[0], &ol), (&fused[1], &rl), gv];
                let gf = b.attention_backward(qkv, m, saved, &spec).unwrap();
                let gc = backward(&b, qkv, m, saved, &spec).unwrap();
                for (i, shape) in [[nb, l, 8], [nb, s, 8], [nb, s, 5]].iter().enumerate() {
                    let d = max_diff(&gf[i], &gc[i], shape);
                    assert!(d < 1e-11, "gradient {i} differs by {d} (causal {causal}, {nb} matrices)");
                }
            }
        }
    }

    /// The default laid-out methods (a copy into the layout) give the same storages as the
    /// CPU kernel writing through the layout itself: the heads' output as `[B, L, H, Ev]`,
    /// the query's gradient as `[B, L, H, E]`, the rest contiguous. A layout that is not
    /// dense, or not of the result's shape, is an error on both.
    #[test]
    fn laid_out_defaults_match_the_cpu_kernel() {
        crate::manual_seed(5);
        let (bh, h, l, s) = (2, 3, 70, 90);
        let t = |shape: [usize; 4]| Tensor::randn(shape).unwrap().to_dtype(DType::F64);
        let heads = |x: Tensor| x.permute(&[0, 2, 1, 3]).unwrap();
        let (q, g) = (heads(t([bh, l, h, 8])), heads(t([bh, l, h, 5])));
        let (k, v) = (t([bh, h, s, 8]), t([bh, h, s, 5]));
        let guards = [&q, &k, &v, &g].map(|x| x.storage().read());
        let qkv = [(&*guards[0], q.layout()), (&*guards[1], k.layout()), (&*guards[2], v.layout())];
        let out = crate::ops::attention::laid_out_like(q.layout(), &Shape::from([bh, h, l, 5].as_slice()));
        assert_eq!(out.strides(), &[l * h * 5, 5, h * 5, 1]);
        let grads = [q.layout(), k.layout(), v.layout()].map(|x| crate::ops::attention::laid_out_like(x, x.shape()));
        let grads = [&grads[0], &grads[1], &grads[2]];
        let b = CpuBackend;
        let spec = Attention { scale: 0.3, causal: true };
        let fused = b.attention_laid_out(qkv, None, &spec, &out).unwrap();
        let composed = forward_laid_out(&b, qkv, None, &spec, &out).unwrap();
        let flat = |s: &Storage, n: usize| values(s, &[n]);
        let n_out = bh * h * l * 5;
        let diff = |a: &[f64], c: &[f64]| a.iter().zip(c).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        assert!(diff(&flat(&fused[0], n_out), &flat(&composed[0], n_out)) < 1e-12);
        let rl = dense(Shape::from([bh, h, l].as_slice()));
        let saved = [(&fused[0], &out), (&fused[1], &rl), (&*guards[3], g.layout())];
        let gf = b.attention_backward_laid_out(qkv, None, saved, &spec, grads).unwrap();
        let gc = backward_laid_out(&b, qkv, None, saved, &spec, grads).unwrap();
        for (i, n) in [bh * h * l * 8, bh * h * s * 8, bh * h * s * 5].into_iter().enumerate() {
            let d = diff(&flat(&gf[i], n), &flat(&gc[i], n));
            assert!(d < 1e-11, "gradient {i} differs by {d}");
        }
        // A gap between rows, and the output's shape given for the query's gradient.
        let gappy = Layout::new(Shape::from([bh, h, l, 5].as_slice()), [h * l * 6, l * 6, 6, 1].into(), 0).unwrap();
        assert!(b.attention_laid_out(qkv, None, &spec, &gappy).is_err());
        assert!(forward_laid_out(&b, qkv, None, &spec, &gappy).is_err());
        let wrong = [&out, grads[1], grads[2]];
        assert!(b.attention_backward_laid_out(qkv, None, saved, &spec, wrong).is_err());
        assert!(backward_laid_out(&b, qkv, None, saved, &spec, wrong).is_err());
    }
}

//! Scaled dot-product attention, the kernel under `scaled_dot_product_attention`: what it
//! computes and the checks on its operands.
//!
//! For a query `q` (`[.., L, E]`), keys `k` (`[.., S, E]`) and values `v` (`[.., S, Ev]`)
//! the scores are `s = scale * q @ k^T` (`[.., L, S]`), plus a float mask or with the
//! positions a bool mask (or the causal triangle) excludes set to `-inf`; the output is
//! `softmax(s) @ v` (`[.., L, Ev]`). A query row whose every key is excluded has no
//! distribution to average with: its output (and every gradient through it) is 0, which
//! is what PyTorch's CPU `scaled_dot_product_attention` gives.
//!
//! Besides the output, the kernel returns each row's log-sum-exp `lse = ln sum_j e^s[j]`
//! (`[.., L]`, `-inf` for a row with nothing to attend to): the backward recomputes the
//! probabilities `p = e^(s - lse)` from it block by block, so neither pass keeps the
//! `[.., L, S]` scores.

use crate::layout::{Layout, Strides};
use crate::shape::{Shape, broadcast_shapes};
use crate::{DType, Error, Result};

/// The name of the attention kernel in errors.
pub const OP: &str = "scaled_dot_product_attention";

/// How scores become attention weights, apart from the mask tensor: the factor on
/// `q @ k^T` and whether the causal triangle applies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Attention {
    /// The factor on `q @ k^T`; PyTorch's default is `1 / sqrt(E)`.
    pub scale: f64,
    /// Whether query `i` sees only keys `j <= i`: the lower triangle of an `[L, S]` matrix
    /// of ones, aligned at the top-left corner, as PyTorch's `is_causal`.
    pub causal: bool,
}

impl Attention {
    /// PyTorch's default scale for queries of width `e`: `1 / sqrt(e)`.
    pub fn default_scale(e: usize) -> f64 {
        1.0 / (e as f64).sqrt()
    }
}

/// The sizes of one attention call, after its operands were checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttentionShapes {
    /// The broadcast leading dimensions of the query, keys and values.
    pub batch: Shape,
    /// Query rows.
    pub l: usize,
    /// Keys (and values).
    pub s: usize,
    /// Width of queries and keys.
    pub e: usize,
    /// Width of values, and of the output.
    pub ev: usize,
}

impl AttentionShapes {
    /// `[batch.., L, S]`: the shape of the scores, to which a mask must broadcast.
    pub fn scores(&self) -> Shape {
        self.with_last(&[self.l, self.s])
    }
    /// `[batch.., L, Ev]`: the shape of the output.
    pub fn output(&self) -> Shape {
        self.with_last(&[self.l, self.ev])
    }
    /// `[batch.., L]`: the shape of the per-row log-sum-exp.
    pub fn rows(&self) -> Shape {
        self.with_last(&[self.l])
    }
    /// `[batch.., rows, cols]`, the shape an operand is broadcast to.
    pub fn with_last(&self, last: &[usize]) -> Shape {
        let mut dims = self.batch.dims().to_vec();
        dims.extend_from_slice(last);
        Shape::from(dims)
    }
}

/// Checks the shapes and dtypes of an attention call: `q` `[.., L, E]`, `k` `[.., S, E]`,
/// `v` `[.., S, Ev]` of one float dtype with leading dimensions that broadcast together,
/// and a `mask` (bool `u8`, or the query's float dtype) that broadcasts to the scores
/// `[.., L, S]` without enlarging them. Errors name the op and the shapes.
pub fn check_attention(
    (q, qd): (&Shape, DType),
    (k, kd): (&Shape, DType),
    (v, vd): (&Shape, DType),
    mask: Option<(&Shape, DType)>,
) -> Result<AttentionShapes> {
    for (name, s) in [("query", q), ("key", k), ("value", v)] {
        if s.rank() < 2 {
            return Err(Error::shape(OP, format!("the {name} must have at least 2 dimensions, got shape {s}")));
        }
    }
    if !qd.is_float() || kd != qd || vd != qd {
        return Err(Error::dtype(
            OP,
            format!("query, key and value must share one float dtype, got {qd}, {kd} and {vd}"),
        ));
    }
    let (rq, rk, rv) = (q.rank(), k.rank(), v.rank());
    let (l, e) = (q[rq - 2], q[rq - 1]);
    let (s, ek) = (k[rk - 2], k[rk - 1]);
    let (sv, ev) = (v[rv - 2], v[rv - 1]);
    if ek != e {
        return Err(Error::shape(
            OP,
            format!("query {q} and key {k} must have the same last dimension (E), got {e} and {ek}"),
        ));
    }
    if sv != s {
        return Err(Error::shape(
            OP,
            format!("key {k} and value {v} must have the same number of positions (S), got {s} and {sv}"),
        ));
    }
    let batch = broadcast_shapes(OP, &q.dims()[..rq - 2], &k.dims()[..rk - 2])
        .and_then(|b| broadcast_shapes(OP, b.dims(), &v.dims()[..rv - 2]))
        .map_err(|_| {
            Error::shape(OP, format!("the batch dimensions of query {q}, key {k} and value {v} do not broadcast"))
        })?;
    let shapes = AttentionShapes { batch, l, s, e, ev };
    if let Some((m, md)) = mask {
        if md != DType::U8 && md != qd {
            return Err(Error::dtype(OP, format!("attn_mask must be bool (u8) or the query's dtype {qd}, got {md}")));
        }
        let scores = shapes.scores();
        let fits = broadcast_shapes(OP, m.dims(), scores.dims()).is_ok_and(|b| b == scores);
        if !fits {
            return Err(Error::shape(
                OP,
                format!("attn_mask of shape {m} does not broadcast to the attention scores' shape {scores}"),
            ));
        }
    }
    Ok(shapes)
}

/// The layout of a result of `shape` laid out like the operand `like` (of the same rank):
/// dense from offset 0, its leading dimensions nested in the order of `like`'s strides
/// (PyTorch's `empty_like`, which keeps an operand's memory format) and the last innermost.
/// The heads of a `[B, T, H, D]` projection viewed as `[B, H, T, D]` give an output that
/// lies in memory as `[B, T, H, Ev]`, which merging the heads reads as `[B, T, H * Ev]`
/// without a copy, and gradients that lie as their operands do. An operand broadcast along
/// a dimension (stride 0) gives the contiguous layout.
pub fn laid_out_like(like: &Layout, shape: &Shape) -> Layout {
    let r = shape.rank();
    let (dims, strides) = (like.shape(), like.strides());
    if r < 2 || like.rank() != r || (0..r).any(|d| dims[d] > 1 && strides[d] == 0) {
        return Layout::contiguous(shape.clone());
    }
    // Outermost first: the largest stride, a dimension of extent 1 anywhere (first), ties in
    // their order.
    let mut order: Vec<usize> = (0..r - 1).collect();
    order.sort_by_key(|&d| std::cmp::Reverse(if dims[d] == 1 { usize::MAX } else { strides[d] }));
    order.push(r - 1);
    let mut dense = Strides::from_elem(0, r);
    let mut step = 1usize;
    for &d in order.iter().rev() {
        dense[d] = step;
        step = step.saturating_mul(shape[d]);
    }
    Layout { shape: shape.clone(), strides: dense, offset: 0 }
}

/// Checks a layout a backend is asked to store a result of `shape` through: that shape,
/// offset 0, the last dimension innermost (adjacent elements), and every element of a
/// storage of its size addressed once (dense, dimensions nested in any order).
pub(crate) fn check_laid_out(what: &str, l: &Layout, shape: &Shape) -> Result<()> {
    let r = l.rank();
    let mut nested: Vec<(usize, usize)> =
        (0..r).filter(|&d| l.shape()[d] != 1).map(|d| (l.strides()[d], l.shape()[d])).collect();
    nested.sort_unstable();
    let mut step = 1usize;
    let dense = nested.iter().all(|&(stride, n)| {
        let ok = stride == step;
        step = step.saturating_mul(n);
        ok
    });
    let adjacent = r == 0 || l.shape()[r - 1] <= 1 || l.strides()[r - 1] == 1;
    if l.shape() != shape || l.offset() != 0 || l.numel() > 0 && !(dense && adjacent) {
        return Err(Error::shape(
            OP,
            format!(
                "the {what} must be stored through a dense layout of shape {shape} with adjacent rows, got shape {} strides {:?} offset {}",
                l.shape(),
                l.strides(),
                l.offset()
            ),
        ));
    }
    Ok(())
}

/// Checks the views a backend's attention kernel gets: `q` `[batch.., L, E]`, `k`
/// `[batch.., S, E]`, `v` `[batch.., S, Ev]` with one batch shape (already broadcast), a
/// mask of the scores' shape, and for the backward the output and incoming gradient
/// `[batch.., L, Ev]` and log-sum-exp `[batch.., L]` of the query's dtype.
pub(crate) fn check_views(
    [q, k, v]: [(DType, &Layout); 3],
    mask: Option<(DType, &Layout)>,
    saved: Option<[(DType, &Layout); 3]>,
) -> Result<AttentionShapes> {
    let shapes =
        check_attention((q.1.shape(), q.0), (k.1.shape(), k.0), (v.1.shape(), v.0), mask.map(|(d, l)| (l.shape(), d)))?;
    let expect = |what: &str, got: &Shape, want: Shape| {
        if *got == want {
            Ok(())
        } else {
            Err(Error::shape(OP, format!("expected the {what} to have shape {want}, got {got}")))
        }
    };
    expect("query", q.1.shape(), shapes.with_last(&[shapes.l, shapes.e]))?;
    expect("key", k.1.shape(), shapes.with_last(&[shapes.s, shapes.e]))?;
    expect("value", v.1.shape(), shapes.with_last(&[shapes.s, shapes.ev]))?;
    if let Some((_, m)) = mask {
        expect("mask", m.shape(), shapes.scores())?;
    }
    if let Some([(od, o), (ld, l), (gd, g)]) = saved {
        if od != q.0 || ld != q.0 || gd != q.0 {
            return Err(Error::dtype(
                OP,
                format!("expected the saved tensors and gradient in {}, got {od}, {ld} and {gd}", q.0),
            ));
        }
        expect("output", o.shape(), shapes.output())?;
        expect("log-sum-exp", l.shape(), shapes.rows())?;
        expect("gradient", g.shape(), shapes.output())?;
    }
    Ok(shapes)
}

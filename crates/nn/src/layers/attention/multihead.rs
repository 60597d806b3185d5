//! [`MultiheadAttention`]: PyTorch's `nn.MultiheadAttention`.

use super::mask::{self, MaskShape};
use super::options::{MultiheadAttentionArgs, MultiheadAttentionOptions, MultiheadAttentionOutput};
use super::weights;
use crate::init;
use crate::layers::Linear;
use crate::layers::param_alloc::named;
use crate::module::{Module, TrainingFlag};
use crate::parts::Parts;
use ember_autograd::{Var, autocast};
use ember_tensor::{DType, Error, Result, Tensor};
use std::fmt;

const OP: &str = "MultiheadAttention";

/// The input projections' weights.
enum InProjection {
    /// `in_proj_weight`, `[3 * embed_dim, embed_dim]`: the query, key and value projections
    /// stacked, when keys and values have the embedding's size.
    Packed(Var),
    /// `q_proj_weight` `[embed_dim, embed_dim]`, `k_proj_weight` `[embed_dim, kdim]` and
    /// `v_proj_weight` `[embed_dim, vdim]`.
    Separate { q: Var, k: Var, v: Var },
}

/// Attention of a query sequence over a key/value sequence in `num_heads` parallel heads;
/// PyTorch's `nn.MultiheadAttention`, with its arguments, shapes, initialisation and
/// `state_dict` names (`in_proj_weight` or `q_proj_weight`/`k_proj_weight`/`v_proj_weight`,
/// `in_proj_bias`, `bias_k`, `bias_v`, `out_proj.weight`, `out_proj.bias`).
///
/// Queries, keys and values are projected to `embed_dim`, split into heads of `embed_dim /
/// num_heads` features, attended with `softmax(q k^T / sqrt(head_dim) + mask)` and merged by
/// `out_proj`. Inputs are `[seq, batch, feature]` (`[batch, seq, feature]` with
/// `batch_first`) or unbatched `[seq, feature]`. See [`MultiheadAttentionArgs`] for the
/// masks: a boolean mask's *true* entries are the ones that may **not** be attended.
///
/// Initialisation follows PyTorch's `_reset_parameters`: Xavier-uniform input projections,
/// zero input and output biases, `out_proj.weight` as a [`Linear`]'s, and Xavier-normal
/// `bias_k`/`bias_v`.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{MultiheadAttention, MultiheadAttentionArgs, MultiheadAttentionOptions};
/// use ember_tensor::Tensor;
/// let opts = MultiheadAttentionOptions { batch_first: true, ..Default::default() };
/// let mha = MultiheadAttention::with_options(8, 2, opts)?;
/// let x = Var::new(Tensor::randn([3, 5, 8])?); // [batch, seq, embed]
/// // Key 4 of every sequence is padding: nobody attends to it.
/// let pad = Tensor::from_vec([0u8, 0, 0, 0, 1].repeat(3), [3, 5])?;
/// let args = MultiheadAttentionArgs { key_padding_mask: Some(&pad), ..Default::default() };
/// let out = mha.forward_with(&x, &x, &x, &args)?;
/// assert_eq!(out.output.shape().dims(), &[3, 5, 8]);
/// let w = out.weights.expect("need_weights is on by default").value();
/// assert_eq!(w.shape().dims(), &[3, 5, 5]); // averaged over the heads
/// assert!(w.to_vec::<f32>()?.chunks(5).all(|row| row[4] == 0.0));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct MultiheadAttention {
    embed_dim: usize,
    num_heads: usize,
    kdim: usize,
    vdim: usize,
    dropout: f64,
    batch_first: bool,
    add_zero_attn: bool,
    in_proj: InProjection,
    in_proj_bias: Option<Var>,
    bias_kv: Option<(Var, Var)>,
    out_proj: Linear,
    training: TrainingFlag,
}

impl MultiheadAttention {
    /// Attention over `embed_dim` features in `num_heads` heads (which must divide it), with
    /// PyTorch's default options.
    pub fn new(embed_dim: usize, num_heads: usize) -> Result<MultiheadAttention> {
        Self::with_options(embed_dim, num_heads, MultiheadAttentionOptions::default())
    }

    /// Attention with the given options.
    pub fn with_options(
        embed_dim: usize,
        num_heads: usize,
        options: MultiheadAttentionOptions,
    ) -> Result<MultiheadAttention> {
        let MultiheadAttentionOptions { dropout, bias, add_bias_kv, add_zero_attn, kdim, vdim, batch_first, dtype } =
            options;
        let (kdim, vdim) = (kdim.unwrap_or(embed_dim), vdim.unwrap_or(embed_dim));
        if embed_dim == 0 || num_heads == 0 || kdim == 0 || vdim == 0 {
            return Err(Error::invalid(
                OP,
                format!(
                    "embed_dim, num_heads, kdim and vdim must be positive, got {embed_dim}, {num_heads}, {kdim}, {vdim}"
                ),
            ));
        }
        if !embed_dim.is_multiple_of(num_heads) {
            return Err(Error::invalid(
                OP,
                format!("embed_dim must be divisible by num_heads, got {embed_dim} and {num_heads}"),
            ));
        }
        if !(0.0..=1.0).contains(&dropout) {
            return Err(Error::invalid(OP, format!("dropout must be in [0, 1], got {dropout}")));
        }
        if !dtype.is_float() {
            return Err(Error::dtype(OP, format!("parameters must be float, got {dtype}")));
        }
        // PyTorch draws in this order: the output projection's Linear constructor (weight,
        // then a bias that `_reset_parameters` zeroes), the input projections, then
        // bias_k and bias_v.
        // The packed projection and its bias stack three blocks of `embed_dim` rows.
        let rows = embed_dim.checked_mul(3).ok_or_else(|| {
            Error::shape("MultiheadAttention.in_proj_weight", format!("3 x {embed_dim} rows do not fit in usize"))
        })?;
        let out_weight = init::kaiming_uniform(&[embed_dim, embed_dim], 5f64.sqrt(), dtype)
            .map_err(named("MultiheadAttention.out_proj.weight"))?;
        let out_bias = if bias {
            let op = "MultiheadAttention.out_proj.bias";
            init::uniform(&[embed_dim], 1.0 / (embed_dim as f64).sqrt(), dtype).map_err(named(op))?;
            Some(Tensor::zeros([embed_dim], dtype).map_err(named(op))?)
        } else {
            None
        };
        let out_proj = Linear::from_parts(out_weight, out_bias)?;
        let xavier = |shape: &[usize], op| init::xavier_uniform(shape, dtype).map(Var::param).map_err(named(op));
        let in_proj = if kdim == embed_dim && vdim == embed_dim {
            InProjection::Packed(xavier(&[rows, embed_dim], "MultiheadAttention.in_proj_weight")?)
        } else {
            InProjection::Separate {
                q: xavier(&[embed_dim, embed_dim], "MultiheadAttention.q_proj_weight")?,
                k: xavier(&[embed_dim, kdim], "MultiheadAttention.k_proj_weight")?,
                v: xavier(&[embed_dim, vdim], "MultiheadAttention.v_proj_weight")?,
            }
        };
        let in_proj_bias = if bias {
            Some(Var::param(Tensor::zeros([rows], dtype).map_err(named("MultiheadAttention.in_proj_bias"))?))
        } else {
            None
        };
        let bias_kv = if add_bias_kv {
            let k =
                Var::param(init::xavier_normal(&[1, 1, embed_dim], dtype).map_err(named("MultiheadAttention.bias_k"))?);
            let v =
                Var::param(init::xavier_normal(&[1, 1, embed_dim], dtype).map_err(named("MultiheadAttention.bias_v"))?);
            Some((k, v))
        } else {
            None
        };
        Ok(MultiheadAttention {
            embed_dim,
            num_heads,
            kdim,
            vdim,
            dropout,
            batch_first,
            add_zero_attn,
            in_proj,
            in_proj_bias,
            bias_kv,
            out_proj,
            training: TrainingFlag::new(),
        })
    }

    /// A copy with its own parameters holding the same values (PyTorch's `deepcopy`, which
    /// `nn.TransformerEncoder` uses to stack layers), in the same training mode.
    pub fn deep_copy(&self) -> Result<MultiheadAttention> {
        let fresh = |v: &Var| Var::param(v.value().copy());
        let in_proj = match &self.in_proj {
            InProjection::Packed(w) => InProjection::Packed(fresh(w)),
            InProjection::Separate { q, k, v } => InProjection::Separate { q: fresh(q), k: fresh(k), v: fresh(v) },
        };
        let out_proj = Linear::from_params(fresh(self.out_proj.weight()), self.out_proj.bias().map(fresh))?;
        let training = TrainingFlag::new();
        training.set(self.training.get());
        Ok(MultiheadAttention {
            in_proj,
            in_proj_bias: self.in_proj_bias.as_ref().map(fresh),
            bias_kv: self.bias_kv.as_ref().map(|(k, v)| (fresh(k), fresh(v))),
            out_proj,
            training,
            ..*self
        })
    }

    /// The embedding (query and output) size.
    pub fn embed_dim(&self) -> usize {
        self.embed_dim
    }

    /// The number of heads.
    pub fn num_heads(&self) -> usize {
        self.num_heads
    }

    /// The size of each head, `embed_dim / num_heads`.
    pub fn head_dim(&self) -> usize {
        self.embed_dim / self.num_heads
    }

    /// The keys' feature size.
    pub fn kdim(&self) -> usize {
        self.kdim
    }

    /// The values' feature size.
    pub fn vdim(&self) -> usize {
        self.vdim
    }

    /// The dropout probability on the attention probabilities.
    pub fn dropout(&self) -> f64 {
        self.dropout
    }

    /// Whether inputs are `[batch, seq, feature]`.
    pub fn batch_first(&self) -> bool {
        self.batch_first
    }

    /// The packed input projection `in_proj_weight`, `[3 * embed_dim, embed_dim]`, unless
    /// keys or values have another size (then see [`q_proj_weight`](Self::q_proj_weight)).
    pub fn in_proj_weight(&self) -> Option<&Var> {
        match &self.in_proj {
            InProjection::Packed(w) => Some(w),
            InProjection::Separate { .. } => None,
        }
    }

    /// The separate projections `(q_proj_weight, k_proj_weight, v_proj_weight)`, when
    /// `kdim` or `vdim` differs from `embed_dim`.
    pub fn q_proj_weight(&self) -> Option<(&Var, &Var, &Var)> {
        match &self.in_proj {
            InProjection::Packed(_) => None,
            InProjection::Separate { q, k, v } => Some((q, k, v)),
        }
    }

    /// The input projections' bias `in_proj_bias`, `[3 * embed_dim]`, if the layer has one.
    pub fn in_proj_bias(&self) -> Option<&Var> {
        self.in_proj_bias.as_ref()
    }

    /// The appended key and value `(bias_k, bias_v)`, each `[1, 1, embed_dim]`, with
    /// `add_bias_kv`.
    pub fn bias_kv(&self) -> Option<(&Var, &Var)> {
        self.bias_kv.as_ref().map(|(k, v)| (k, v))
    }

    /// The output projection.
    pub fn out_proj(&self) -> &Linear {
        &self.out_proj
    }

    /// Attention of `query` over `key` and `value` with the masks and flags of `args`:
    /// PyTorch's `forward(query, key, value, key_padding_mask, need_weights, attn_mask,
    /// average_attn_weights, is_causal)`.
    ///
    /// `query` is `[target, batch, embed_dim]`, `key` `[source, batch, kdim]` and `value`
    /// `[source, batch, vdim]` (batch first with `batch_first`), or all three unbatched
    /// `[seq, feature]`. Shapes, dtypes and masks that do not fit are errors naming them.
    pub fn forward_with(
        &self,
        query: &Var,
        key: &Var,
        value: &Var,
        args: &MultiheadAttentionArgs<'_>,
    ) -> Result<MultiheadAttentionOutput> {
        let MultiheadAttentionArgs { key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal } =
            *args;
        let unbatched = self.check_inputs(query, key, value)?;
        if is_causal && attn_mask.is_none() {
            return Err(Error::invalid(
                OP,
                "is_causal is a hint that attn_mask is causal and needs the mask itself \
                 (generate_square_subsequent_mask makes it)",
            ));
        }
        let (batch_dim, seq_dim) = if self.batch_first { (0, 1) } else { (1, 0) };
        let lift = |x: &Var| if unbatched { x.unsqueeze(batch_dim) } else { Ok(x.clone()) };
        let (qx, kx, vx) = (lift(query)?, lift(key)?, lift(value)?);
        let n = qx.shape()[batch_dim];
        let (target, source) = (qx.shape()[seq_dim], kx.shape()[seq_dim]);
        let (q, mut k, mut v) = self.project(&qx, &kx, &vx)?;

        let mut extra = 0;
        if let Some((bias_k, bias_v)) = &self.bias_kv {
            let mut shape = [1, 1, self.embed_dim];
            shape[batch_dim] = n;
            k = Var::cat(&[&k, &bias_k.expand(shape)?], seq_dim)?;
            v = Var::cat(&[&v, &bias_v.expand(shape)?], seq_dim)?;
            extra += 1;
        }
        let (q, mut k, mut v) = (self.split_heads(&q, n)?, self.split_heads(&k, n)?, self.split_heads(&v, n)?);
        if self.add_zero_attn {
            let zeros = Var::new(Tensor::full_on([n, self.num_heads, 1, self.head_dim()], 0, q.dtype(), q.device())?);
            k = Var::cat(&[&k, &zeros], 2)?;
            v = Var::cat(&[&v, &zeros], 2)?;
            extra += 1;
        }
        let shape = MaskShape { batch: n, heads: self.num_heads, target, source, unbatched };
        let mask = mask::combined(attn_mask, key_padding_mask, shape, extra, q.dtype())?;
        let dropout_p = if self.training.get() { self.dropout } else { 0.0 };

        // The one place the attention is computed.
        let attended = weights::attend(&q, &k, &v, mask.as_ref(), dropout_p, is_causal, need_weights)?;

        let mut output = self.out_proj.forward(&self.merge_heads(&attended.output, n, target)?)?;
        if unbatched {
            output = output.squeeze(batch_dim)?;
        }
        let weights = match attended.probs {
            None => None,
            Some(p) => {
                let p = if average_attn_weights { p.mean(1, false)? } else { p };
                Some(if unbatched { p.squeeze(0)? } else { p })
            }
        };
        Ok(MultiheadAttentionOutput { output, weights })
    }

    /// Checks ranks, sizes and dtypes; returns whether the inputs are unbatched.
    fn check_inputs(&self, query: &Var, key: &Var, value: &Var) -> Result<bool> {
        let (qs, ks, vs) = (query.shape(), key.shape(), value.shape());
        let shapes = || format!("query {:?}, key {:?}, value {:?}", qs.dims(), ks.dims(), vs.dims());
        let unbatched = match (qs.rank(), ks.rank(), vs.rank()) {
            (3, 3, 3) => false,
            (2, 2, 2) => true,
            _ => {
                return Err(Error::shape(
                    OP,
                    format!("query, key and value must all be 3-D (batched) or all 2-D (unbatched), got {}", shapes()),
                ));
            }
        };
        let last = |s: &ember_tensor::Shape| s[s.rank() - 1];
        if last(&qs) != self.embed_dim || last(&ks) != self.kdim || last(&vs) != self.vdim {
            return Err(Error::shape(
                OP,
                format!(
                    "expected features embed_dim={}, kdim={}, vdim={}, got {}",
                    self.embed_dim,
                    self.kdim,
                    self.vdim,
                    shapes()
                ),
            ));
        }
        // Key and value share their leading (sequence and batch) dimensions; the query
        // shares the batch.
        let lead = |s: &ember_tensor::Shape| s.dims()[..s.rank() - 1].to_vec();
        let batch = |s: &ember_tensor::Shape| if unbatched { 1 } else { s[usize::from(!self.batch_first)] };
        if lead(&ks) != lead(&vs) || batch(&qs) != batch(&ks) {
            return Err(Error::shape(
                OP,
                format!(
                    "key and value must have the same sequence and batch sizes and the query the same batch, got {}",
                    shapes()
                ),
            ));
        }
        let dtype = self.out_proj.weight().dtype();
        for (name, x) in [("query", query), ("key", key), ("value", value)] {
            // Inside an autocast region the projections cast both to the region's dtype.
            if x.dtype() != dtype && !autocast::is_autocast_enabled(x.device()) {
                return Err(Error::dtype(OP, format!("the {name} is {} but the parameters are {dtype}", x.dtype())));
            }
        }
        Ok(unbatched)
    }

    /// The projected queries, keys and values, in the inputs' layout.
    fn project(&self, q: &Var, k: &Var, v: &Var) -> Result<(Var, Var, Var)> {
        let e = self.embed_dim;
        let bias = |i: usize| self.in_proj_bias.as_ref().map(|b| b.narrow(0, i * e, e)).transpose();
        match &self.in_proj {
            // Three products with thirds of the packed weight rather than one product cut
            // into thirds: the backward then adds three input gradients instead of
            // embedding each third's gradient into a zero tensor three times as large.
            InProjection::Packed(w) => {
                let part = |x: &Var, i: usize| x.linear(&w.narrow(0, i * e, e)?, bias(i)?.as_ref());
                if q.same_node(k) && k.same_node(v) {
                    // Self-attention: under autocast each product would cast the input
                    // again, and the backward keeps every copy; one cast serves all three.
                    let x = lowered_once(q);
                    return Ok((part(&x, 0)?, part(&x, 1)?, part(&x, 2)?));
                }
                Ok((part(q, 0)?, part(k, 1)?, part(v, 2)?))
            }
            InProjection::Separate { q: wq, k: wk, v: wv } => Ok((
                q.linear(wq, bias(0)?.as_ref())?,
                k.linear(wk, bias(1)?.as_ref())?,
                v.linear(wv, bias(2)?.as_ref())?,
            )),
        }
    }

    /// `[seq, n, embed]` (or `[n, seq, embed]`) to `[n, heads, seq, head_dim]`.
    fn split_heads(&self, x: &Var, n: usize) -> Result<Var> {
        let (h, d) = (self.num_heads, self.head_dim());
        if self.batch_first {
            let t = x.shape()[1];
            x.reshape([n, t, h, d])?.permute(&[0, 2, 1, 3])
        } else {
            let t = x.shape()[0];
            x.reshape([t, n, h, d])?.permute(&[1, 2, 0, 3])
        }
    }

    /// `[n, heads, target, head_dim]` back to the inputs' layout with `embed` features.
    fn merge_heads(&self, x: &Var, n: usize, target: usize) -> Result<Var> {
        if self.batch_first {
            x.permute(&[0, 2, 1, 3])?.reshape([n, target, self.embed_dim])
        } else {
            x.permute(&[2, 0, 1, 3])?.reshape([target, n, self.embed_dim])
        }
    }
}

/// `x` in the autocast dtype of its device when a region is open for it and `x` is a float
/// that autocast lowers (as each product would cast it), else `x` itself.
fn lowered_once(x: &Var) -> Var {
    let lowered = matches!(x.dtype(), DType::F32 | DType::F16 | DType::BF16);
    if lowered && autocast::is_autocast_enabled(x.device()) {
        x.to_dtype(autocast::autocast_dtype(x.device()))
    } else {
        x.clone()
    }
}

impl Module for MultiheadAttention {
    /// Self-attention of `x` without masks, returning the output alone (so the layer fits in
    /// a [`Sequential`](crate::Sequential)); [`forward_with`](MultiheadAttention::forward_with)
    /// takes the rest.
    fn forward(&self, x: &Var) -> Result<Var> {
        let args = MultiheadAttentionArgs { need_weights: false, ..Default::default() };
        Ok(self.forward_with(x, x, x, &args)?.output)
    }

    /// PyTorch's parameters (`in_proj_weight` or `q_proj_weight`, `k_proj_weight`,
    /// `v_proj_weight`; `in_proj_bias`, `bias_k`, `bias_v`), then `out_proj`.
    fn children(&self) -> Parts<'_> {
        let parts = match &self.in_proj {
            InProjection::Packed(w) => Parts::new().parameter("in_proj_weight", w),
            InProjection::Separate { q, k, v } => {
                Parts::new().parameter("q_proj_weight", q).parameter("k_proj_weight", k).parameter("v_proj_weight", v)
            }
        };
        let mut parts = parts.training(&self.training);
        if let Some(b) = &self.in_proj_bias {
            parts = parts.parameter("in_proj_bias", b);
        }
        if let Some((k, v)) = &self.bias_kv {
            parts = parts.parameter("bias_k", k).parameter("bias_v", v);
        }
        parts.module("out_proj", &self.out_proj)
    }
}

impl fmt::Debug for MultiheadAttention {
    /// PyTorch's repr, with the output projection as a `Linear`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MultiheadAttention(\n  (out_proj): {:?}\n)", self.out_proj)
    }
}

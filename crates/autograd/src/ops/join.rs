//! Joining and tiling: cat, stack, pad, repeat, tril/triu.

use super::apply;
use crate::autocast::{self, policy};
use crate::backward_ctx::BackwardCtx;
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::{DType, Dim, Error, Result, Scalar, Shape, Tensor};
use smallvec::smallvec;

struct Cat {
    dim: usize,
    sizes: Vec<usize>,
    /// Per input: its dtype if it differs from the promoted dtype of the output.
    casts: Vec<Option<DType>>,
}

impl Op for Cat {
    fn name(&self) -> &str {
        "cat"
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        Ok(crate::export::OpExport::new("cat").attr("dim", crate::export::ExportAttr::Int(self.dim as i64)))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Tensor::cat(inputs, self.dim)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let mut out = Grads::new();
        let mut start = 0;
        for (i, &len) in self.sizes.iter().enumerate() {
            out.push(if ctx.needs_input_grad(i) {
                let gi = g.narrow(self.dim, start, len)?;
                Some(match self.casts.get(i).copied().flatten() {
                    Some(dtype) => gi.to_dtype(dtype),
                    None => gi,
                })
            } else {
                None
            });
            start += len;
        }
        Ok(out)
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

struct Pad {
    pads: Vec<(usize, usize)>,
    value: Scalar,
    from: Shape,
}

impl Op for Pad {
    fn name(&self) -> &str {
        "pad"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].pad(&self.pads, self.value)
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let rank = self.from.rank();
        let mut gx = g.clone();
        for (i, &(before, _)) in self.pads.iter().enumerate() {
            let d = rank - 1 - i;
            gx = gx.narrow(d, before, self.from[d])?;
        }
        Ok(smallvec![Some(gx)])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

struct Repeat {
    repeats: Vec<usize>,
    from: Shape,
}

impl Op for Repeat {
    fn name(&self) -> &str {
        "repeat"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].repeat(&self.repeats)
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        // Output dimension i is [repeats[i], base[i]] merged: split it and sum the repeats.
        let extra = self.repeats.len() - self.from.rank();
        let mut split = Vec::with_capacity(2 * self.repeats.len());
        for (i, &r) in self.repeats.iter().enumerate() {
            let base = if i < extra { 1 } else { self.from[i - extra] };
            split.extend([r, base]);
        }
        let rep_dims: Vec<usize> = (0..self.repeats.len()).map(|i| 2 * i).collect();
        let summed = g.reshape(split)?.sum(rep_dims, false)?;
        Ok(smallvec![Some(summed.reshape(self.from.clone())?)])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

struct Triangle {
    diagonal: i64,
    upper: bool,
}

impl Op for Triangle {
    fn name(&self) -> &str {
        if self.upper { "triu" } else { "tril" }
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        if self.upper { inputs[0].triu(self.diagonal) } else { inputs[0].tril(self.diagonal) }
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        Ok(smallvec![Some(if self.upper { g.triu(self.diagonal)? } else { g.tril(self.diagonal)? })])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

impl Var {
    /// The `Var`s joined along `dim`.
    #[track_caller]
    pub fn cat(vars: &[&Var], dim: impl Dim) -> Result<Var> {
        if let Some(cast) = autocast::cast_list(&policy::JOIN, vars) {
            return Var::cat(&cast.iter().collect::<Vec<_>>(), dim);
        }
        let first = vars.first().ok_or_else(|| Error::invalid("cat", "expected at least one Var"))?;
        let d = dim.resolve(first.rank(), "cat")?;
        let metas: Vec<(Shape, DType)> = vars.iter().map(|v| v.shape_and_dtype()).collect();
        let sizes: Vec<usize> = metas.iter().map(|(s, _)| s.get(d).copied().unwrap_or(0)).collect();
        let out = metas.iter().map(|&(_, dt)| dt).reduce(DType::promote).unwrap_or(DType::F32);
        let casts = if metas.iter().all(|&(_, dt)| dt == out) {
            Vec::new()
        } else {
            metas.iter().map(|&(_, dt)| (dt != out).then_some(dt)).collect()
        };
        apply(Cat { dim: d, sizes, casts }, vars)
    }

    /// The `Var`s (of one shape) stacked along a new dimension `dim`.
    #[track_caller]
    pub fn stack(vars: &[&Var], dim: impl Dim) -> Result<Var> {
        let first = vars.first().ok_or_else(|| Error::invalid("stack", "expected at least one Var"))?;
        let d = dim.resolve_insert(first.rank(), "stack")?;
        for v in vars {
            if v.shape() != first.shape() {
                return Err(Error::shape("stack", format!("cannot stack {:?} with {:?}", first.shape(), v.shape())));
            }
        }
        let expanded: Vec<Var> = vars.iter().map(|v| v.unsqueeze(d)).collect::<Result<_>>()?;
        let refs: Vec<&Var> = expanded.iter().collect();
        Var::cat(&refs, d)
    }

    /// Constant padding with `(before, after)` pairs from the last dimension backwards.
    #[track_caller]
    pub fn pad(&self, pads: &[(usize, usize)], value: impl Into<Scalar>) -> Result<Var> {
        apply(Pad { pads: pads.to_vec(), value: value.into(), from: self.shape() }, &[self])
    }

    /// The value tiled `repeats[i]` times along dimension `i`.
    #[track_caller]
    pub fn repeat(&self, repeats: &[usize]) -> Result<Var> {
        apply(Repeat { repeats: repeats.to_vec(), from: self.shape() }, &[self])
    }

    /// The lower triangle of the last two dimensions.
    #[track_caller]
    pub fn tril(&self, diagonal: i64) -> Result<Var> {
        apply(Triangle { diagonal, upper: false }, &[self])
    }

    /// The upper triangle of the last two dimensions.
    #[track_caller]
    pub fn triu(&self, diagonal: i64) -> Result<Var> {
        apply(Triangle { diagonal, upper: true }, &[self])
    }
}

//! Indexing: index_select, gather, scatter_add, masked_fill, where_cond.
//!
//! Index tensors and masks are inputs of the graph like any other (so that a traced graph
//! can be re-run with new ones), but gradients never flow into them.

use super::{apply, constant};
use crate::autocast::{self, policy};
use crate::backward_ctx::BackwardCtx;
use crate::op::{Grads, Op, Saves};
use crate::var::{IntoVar, Var};
use ember_tensor::{DType, Dim, Result, Scalar, Shape, Tensor};
use smallvec::smallvec;

struct IndexSelect {
    dim: usize,
    from: Shape,
}

impl Op for IndexSelect {
    fn name(&self) -> &str {
        "index_select"
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        Ok(crate::export::OpExport::new("index_select").attr("dim", crate::export::ExportAttr::Int(self.dim as i64)))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].index_select(self.dim, inputs[1])
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let idx = ctx.input(1)?;
        Ok(smallvec![Some(apply(IndexAdd { dim: self.dim, into: self.from.clone() }, &[g, &idx])?), None])
    }
    fn saves(&self) -> Saves {
        Saves::input(1)
    }
}

/// Zeros of shape `into` with the rows of the input added at the 1-d `index` along `dim`:
/// the reverse of `index_select`.
struct IndexAdd {
    dim: usize,
    into: Shape,
}

impl Op for IndexAdd {
    fn name(&self) -> &str {
        "index_add"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (src, idx) = (&inputs[0], &inputs[1]);
        // Spread the 1-d index over the source's shape so that scatter_add can take it.
        let mut view = vec![1usize; src.rank()];
        view[self.dim] = idx.numel();
        let full = idx.reshape(view)?.expand(src.shape().clone())?.contiguous();
        Tensor::full_on(self.into.clone(), 0, src.dtype(), src.device())?.scatter_add(self.dim, &full, src)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let idx = ctx.input(1)?;
        Ok(smallvec![Some(g.index_select(self.dim, &idx)?), None])
    }
    fn saves(&self) -> Saves {
        Saves::input(1)
    }
}

struct Gather {
    dim: usize,
    from: Shape,
}

impl Op for Gather {
    fn name(&self) -> &str {
        "gather"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].gather(self.dim, inputs[1])
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let idx = ctx.input(1)?;
        let zeros = constant(Tensor::full_on(self.from.clone(), 0, g.dtype(), g.device())?);
        Ok(smallvec![Some(zeros.scatter_add(self.dim, &idx, g)?), None])
    }
    fn saves(&self) -> Saves {
        Saves::input(1)
    }
}

struct ScatterAdd {
    dim: usize,
    src_shape: Shape,
}

impl Op for ScatterAdd {
    fn name(&self) -> &str {
        "scatter_add"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].scatter_add(self.dim, inputs[1], inputs[2])
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let src = if ctx.needs_input_grad(2) {
            // The index may be smaller than the source, whose elements past it were not
            // scattered: their gradient is zero.
            let gs = g.gather(self.dim, &ctx.input(1)?)?;
            let pads: Vec<(usize, usize)> =
                self.src_shape.iter().zip(gs.shape().iter()).rev().map(|(&s, &i)| (0, s - i)).collect();
            Some(if pads.iter().all(|&(_, after)| after == 0) { gs } else { gs.pad(&pads, 0.0)? })
        } else {
            None
        };
        Ok(smallvec![Some(g.clone()), None, src])
    }
    fn saves(&self) -> Saves {
        Saves::input(1)
    }
}

struct MaskedFill {
    value: Scalar,
}

impl Op for MaskedFill {
    fn name(&self) -> &str {
        "masked_fill"
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        Ok(crate::export::OpExport::new("masked_fill")
            .attr("value", crate::export::ExportAttr::Float(self.value.to_f64())))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].masked_fill(inputs[1], self.value)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        Ok(smallvec![Some(g.masked_fill(&ctx.input(1)?, 0.0)?), None])
    }
    fn saves(&self) -> Saves {
        Saves::input(1)
    }
}

struct WhereCond {
    shapes: [Shape; 2],
    /// The dtype of a branch that differs from the promoted dtype of the output.
    casts: [Option<DType>; 2],
}

impl Op for WhereCond {
    fn name(&self) -> &str {
        "where"
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        Ok(crate::export::OpExport::new("where_cond"))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].where_cond(inputs[1], inputs[2])
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let c = ctx.input(0)?;
        let zero = constant(g.value().zeros_like());
        let cast = |g: Var, k: usize| match self.casts[k] {
            Some(dtype) => g.to_dtype(dtype),
            None => g,
        };
        let ga = if ctx.needs_input_grad(1) {
            Some(cast(c.where_cond(g, &zero)?.sum_to(&self.shapes[0])?, 0))
        } else {
            None
        };
        let gb = if ctx.needs_input_grad(2) {
            Some(cast(c.where_cond(&zero, g)?.sum_to(&self.shapes[1])?, 1))
        } else {
            None
        };
        Ok(smallvec![None, ga, gb])
    }
    fn saves(&self) -> Saves {
        Saves::input(0)
    }
}

impl Var {
    /// The entries of dimension `dim` listed by the 1-d `i64` `index`.
    #[track_caller]
    pub fn index_select(&self, dim: impl Dim, index: impl IntoVar) -> Result<Var> {
        let d = dim.resolve(self.rank(), "index_select")?;
        let idx = index.into_var();
        apply(IndexSelect { dim: d, from: self.shape() }, &[self, &idx])
    }

    /// `out[i][j] = self[i][index[i][j]]` for `dim = 1` (and likewise for other dims).
    #[track_caller]
    pub fn gather(&self, dim: impl Dim, index: impl IntoVar) -> Result<Var> {
        let d = dim.resolve(self.rank(), "gather")?;
        let idx = index.into_var();
        apply(Gather { dim: d, from: self.shape() }, &[self, &idx])
    }

    /// A copy of `self` with `src` added at the positions `index` names along `dim`.
    #[track_caller]
    pub fn scatter_add(&self, dim: impl Dim, index: impl IntoVar, src: &Var) -> Result<Var> {
        let d = dim.resolve(self.rank(), "scatter_add")?;
        let idx = index.into_var();
        if let Some([x, src]) = autocast::cast(&policy::SCATTER_ADD, [self, src]) {
            return apply(ScatterAdd { dim: d, src_shape: src.shape() }, &[&x, &idx, &src]);
        }
        apply(ScatterAdd { dim: d, src_shape: src.shape() }, &[self, &idx, src])
    }

    /// `value` where the `u8` `mask` is set.
    #[track_caller]
    pub fn masked_fill(&self, mask: impl IntoVar, value: impl Into<Scalar>) -> Result<Var> {
        let m = mask.into_var();
        apply(MaskedFill { value: value.into() }, &[self, &m])
    }

    /// `self ? on_true : on_false` for a `u8` mask `self`; the gradient flows into the
    /// branch that was taken.
    #[track_caller]
    pub fn where_cond(&self, on_true: &Var, on_false: &Var) -> Result<Var> {
        let ((st, dt), (sf, df)) = (on_true.shape_and_dtype(), on_false.shape_and_dtype());
        let out = ember_tensor::dtype::result_type(&[(dt, st.rank()), (df, sf.rank())]);
        let casts = [(dt != out).then_some(dt), (df != out).then_some(df)];
        apply(WhereCond { shapes: [st, sf], casts }, &[self, on_true, on_false])
    }
}

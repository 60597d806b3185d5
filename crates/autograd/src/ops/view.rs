//! Views and reshapes. Forward calls the `Tensor` view (no copy where the layout allows);
//! backward maps the gradient back to the input's layout.

use super::{apply, apply_infallible, infallible};
use crate::backward_ctx::BackwardCtx;
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::{Dim, Error, Result, Shape, ShapeSpec, Tensor};
use smallvec::smallvec;

struct Reshape {
    from: Shape,
    to: Shape,
}

impl Op for Reshape {
    fn name(&self) -> &str {
        "reshape"
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        Ok(crate::export::OpExport::new("reshape").ints("shape", self.to.dims().iter().copied()))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].reshape(&self.to)
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        Ok(smallvec![Some(g.reshape(self.from.clone())?)])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

struct Permute {
    perm: Vec<usize>,
}

impl Op for Permute {
    fn name(&self) -> &str {
        "permute"
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        Ok(crate::export::OpExport::new("permute").ints("perm", self.perm.iter().copied()))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].permute(&self.perm)
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let mut inv = vec![0usize; self.perm.len()];
        for (i, &p) in self.perm.iter().enumerate() {
            inv[p] = i;
        }
        Ok(smallvec![Some(g.permute(&inv)?)])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

struct Expand {
    from: Shape,
    to: Shape,
}

impl Op for Expand {
    fn name(&self) -> &str {
        "expand"
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        Ok(crate::export::OpExport::new("expand").ints("shape", self.to.dims().iter().copied()))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].expand(self.to.clone())
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        Ok(smallvec![Some(g.sum_to(&self.from)?)])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

/// Elements `start, start + step, ...` (`len` of them) of dimension `dim`.
#[derive(Clone)]
struct SliceSpec {
    dim: usize,
    start: usize,
    len: usize,
    step: usize,
}

struct Slice {
    spec: SliceSpec,
    from: Shape,
}

impl Op for Slice {
    fn name(&self) -> &str {
        "slice"
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        let s = &self.spec;
        Ok(crate::export::OpExport::new("slice").ints("spec", [s.dim, s.start, s.len, s.step]))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let s = &self.spec;
        inputs[0].slice(s.dim, s.start, s.start + s.len.saturating_sub(1) * s.step + 1.min(s.len), s.step)
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        Ok(smallvec![Some(apply(Embed { spec: self.spec.clone(), into: self.from.clone() }, &[g])?)])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

/// The reverse of a slice: the input placed into zeros of the full shape.
struct Embed {
    spec: SliceSpec,
    into: Shape,
}

impl Op for Embed {
    fn name(&self) -> &str {
        "embed"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let s = &self.spec;
        let out = Tensor::full_on(self.into.clone(), 0, inputs[0].dtype(), inputs[0].device())?;
        let end = s.start + s.len.saturating_sub(1) * s.step + 1.min(s.len);
        out.slice(s.dim, s.start, end, s.step)?.copy_(inputs[0])?;
        Ok(out)
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let from = g.shape();
        Ok(smallvec![Some(apply(Slice { spec: self.spec.clone(), from }, &[g])?)])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

/// An identity that makes the value contiguous.
struct Contiguous;

impl Op for Contiguous {
    fn name(&self) -> &str {
        "contiguous"
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        Ok(crate::export::OpExport::new("contiguous"))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(inputs[0].contiguous())
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        Ok(smallvec![Some(g.clone())])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

/// A copy into fresh storage (PyTorch's `clone()`): identity for the gradient.
struct CopyValue;

impl Op for CopyValue {
    fn name(&self) -> &str {
        "copy"
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        Ok(crate::export::OpExport::new("copy"))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(inputs[0].copy())
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        Ok(smallvec![Some(g.clone())])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

impl Var {
    /// A differentiable copy of the value into storage of its own (PyTorch's `clone()`,
    /// named after [`Tensor::copy`] since `Clone` on a `Var` copies the handle): writing
    /// the copy in place leaves this value alone, and gradients flow back through it.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::Tensor;
    /// let x = Var::param(Tensor::from_vec(vec![1.0f32, 2.0], [2])?);
    /// let y = x.copy();
    /// assert!(!y.value().shares_storage(&x.value()));
    /// y.mul_scalar(3.0).sum_all().backward()?;
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![3.0, 3.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    #[track_caller]
    pub fn copy(&self) -> Var {
        apply_infallible(CopyValue, &[self])
    }

    /// The same elements with another shape (one extent may be `-1`).
    #[track_caller]
    pub fn reshape(&self, shape: impl ShapeSpec) -> Result<Var> {
        let from = self.shape();
        let to = shape.resolve_shape(from.numel(), "reshape")?;
        if to == from {
            return Ok(self.clone());
        }
        apply(Reshape { from, to }, &[self])
    }

    /// Alias of [`Var::reshape`].
    #[track_caller]
    pub fn view(&self, shape: impl ShapeSpec) -> Result<Var> {
        self.reshape(shape)
    }

    /// Dimensions `a` and `b` swapped.
    #[track_caller]
    pub fn transpose(&self, a: impl Dim, b: impl Dim) -> Result<Var> {
        let rank = self.rank();
        let (a, b) = (a.resolve(rank, "transpose")?, b.resolve(rank, "transpose")?);
        let mut perm: Vec<usize> = (0..rank).collect();
        perm.swap(a, b);
        apply(Permute { perm }, &[self])
    }

    /// The matrix transpose (0-d and 1-d values are returned as they are).
    #[track_caller]
    pub fn t(&self) -> Result<Var> {
        match self.rank() {
            0 | 1 => Ok(self.clone()),
            2 => self.transpose(0, 1),
            r => Err(Error::shape("t", format!("t() expects rank <= 2, got rank {r}; use transpose"))),
        }
    }

    /// The dimensions reordered: new dimension `i` is old dimension `dims[i]`.
    #[track_caller]
    pub fn permute<D: Dim>(&self, dims: &[D]) -> Result<Var> {
        let rank = self.rank();
        let perm: Vec<usize> = dims.iter().map(|d| d.resolve(rank, "permute")).collect::<Result<_>>()?;
        // Validate (duplicates, count) with the tensor's rules before recording.
        self.value().permute(&perm)?;
        apply(Permute { perm }, &[self])
    }

    /// The value broadcast to `shape`; the gradient is summed back.
    #[track_caller]
    pub fn expand(&self, shape: impl Into<Shape>) -> Result<Var> {
        let to = shape.into();
        let from = self.shape();
        if to == from {
            return Ok(self.clone());
        }
        apply(Expand { from, to }, &[self])
    }

    /// Alias of [`Var::expand`].
    #[track_caller]
    pub fn broadcast_to(&self, shape: impl Into<Shape>) -> Result<Var> {
        self.expand(shape)
    }

    #[track_caller]
    fn slice_op(&self, dim: usize, start: usize, len: usize, step: usize) -> Result<Var> {
        apply(Slice { spec: SliceSpec { dim, start, len, step }, from: self.shape() }, &[self])
    }

    /// `len` elements of dimension `dim` from `start`.
    #[track_caller]
    pub fn narrow(&self, dim: impl Dim, start: usize, len: usize) -> Result<Var> {
        let d = dim.resolve(self.rank(), "narrow")?;
        self.value().narrow(d, start, len)?;
        self.slice_op(d, start, len, 1)
    }

    /// Elements `start, start + step, ...` below `end` of dimension `dim`.
    #[track_caller]
    pub fn slice(&self, dim: impl Dim, start: usize, end: usize, step: usize) -> Result<Var> {
        let d = dim.resolve(self.rank(), "slice")?;
        let len = self.value().slice(d, start, end, step)?.shape()[d];
        let start = start.min(self.shape()[d]);
        self.slice_op(d, start, len, step)
    }

    /// Entry `index` of dimension `dim` (the dimension is removed).
    #[track_caller]
    pub fn select(&self, dim: impl Dim, index: usize) -> Result<Var> {
        let d = dim.resolve(self.rank(), "select")?;
        self.value().select(d, index)?;
        self.slice_op(d, index, 1, 1)?.squeeze(d)
    }

    /// Dimension `dim` removed if its extent is 1.
    #[track_caller]
    pub fn squeeze(&self, dim: impl Dim) -> Result<Var> {
        let d = dim.resolve(self.rank(), "squeeze")?;
        let shape = self.shape();
        if shape[d] != 1 {
            return Ok(self.clone());
        }
        let mut s = shape.to_vec();
        s.remove(d);
        self.reshape(s)
    }

    /// Every dimension of extent 1 removed.
    #[track_caller]
    pub fn squeeze_all(&self) -> Var {
        let s: Vec<usize> = self.shape().iter().copied().filter(|&d| d != 1).collect();
        infallible(self.reshape(s), "squeezing (which keeps the element count)")
    }

    /// A dimension of extent 1 inserted at `dim`.
    #[track_caller]
    pub fn unsqueeze(&self, dim: impl Dim) -> Result<Var> {
        let d = dim.resolve_insert(self.rank(), "unsqueeze")?;
        let mut s = self.shape().to_vec();
        s.insert(d, 1);
        self.reshape(s)
    }

    /// Dimensions `start..=end` merged into one.
    #[track_caller]
    pub fn flatten(&self, start: impl Dim, end: impl Dim) -> Result<Var> {
        let shape = self.value().flatten(start, end)?.shape().to_vec();
        self.reshape(shape)
    }

    /// All dimensions merged into one.
    #[track_caller]
    pub fn flatten_all(&self) -> Var {
        let n = self.numel();
        // A non-viewable layout (an expanded view, say) is copied, which can only fail for
        // want of memory.
        infallible(self.reshape([n]), "flattening")
    }

    /// The value made contiguous (identity for the gradient).
    #[track_caller]
    pub fn contiguous(&self) -> Var {
        if self.value().is_contiguous() {
            return self.clone();
        }
        apply_infallible(Contiguous, &[self])
    }

    /// Consecutive pieces of `size` along `dim`.
    #[track_caller]
    pub fn split(&self, size: usize, dim: impl Dim) -> Result<Vec<Var>> {
        let d = dim.resolve(self.rank(), "split")?;
        let pieces = self.value().split(size, d)?;
        let mut start = 0;
        pieces
            .iter()
            .map(|p| {
                let len = p.shape()[d];
                let v = self.narrow(d, start, len);
                start += len;
                v
            })
            .collect()
    }

    /// Pieces of the given sizes along `dim`.
    #[track_caller]
    pub fn split_sizes(&self, sizes: &[usize], dim: impl Dim) -> Result<Vec<Var>> {
        let d = dim.resolve(self.rank(), "split_sizes")?;
        self.value().split_sizes(sizes, d)?;
        let mut start = 0;
        sizes
            .iter()
            .map(|&len| {
                let v = self.narrow(d, start, len);
                start += len;
                v
            })
            .collect()
    }

    /// `chunks` pieces of (nearly) equal size along `dim`.
    #[track_caller]
    pub fn chunk(&self, chunks: usize, dim: impl Dim) -> Result<Vec<Var>> {
        let d = dim.resolve(self.rank(), "chunk")?;
        if chunks == 0 {
            return Err(Error::invalid("chunk", "the number of chunks must be positive"));
        }
        let size = self.shape()[d].div_ceil(chunks).max(1);
        self.split(size, d)
    }
}

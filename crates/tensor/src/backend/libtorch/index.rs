//! Indexing and joining on LibTorch: `index_select`, `gather`, `scatter_add`,
//! `masked_fill`, the triangles, `cat`, and the flat gathers and scatters of max pooling.

use super::elementwise::element;
use super::storage::{TORCH_DEVICE, i, torch_err};
use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use tch::Tensor;

/// An error unless every index lies in `0..extent`: ember reports an index out of range
/// with the index and the extent, before any kernel runs.
pub(crate) fn check_range(op: &'static str, index: &Tensor, extent: usize) -> Result<()> {
    if index.numel() == 0 {
        return Ok(());
    }
    let e = torch_err(op);
    let lo = index.f_min().and_then(|t| t.f_int64_value(&[])).map_err(&e)?;
    let hi = index.f_max().and_then(|t| t.f_int64_value(&[])).map_err(&e)?;
    let bad = if lo < 0 { lo } else { hi };
    if lo < 0 || hi >= i(extent) {
        return Err(Error::invalid(op, format!("index {bad} is out of bounds for dimension with size {extent}")));
    }
    Ok(())
}

/// Entries `index` along `dim`.
pub(crate) fn index_select(x: &Tensor, dim: usize, index: &Tensor) -> Result<Tensor> {
    x.f_index_select(dim as i64, index).map_err(torch_err("index_select"))
}

/// `out[..][j][..] = x[..][index[..][j][..]][..]` along `dim`.
pub(crate) fn gather(x: &Tensor, dim: usize, index: &Tensor) -> Result<Tensor> {
    x.f_gather(dim as i64, index, false).map_err(torch_err("gather"))
}

/// A copy of `dst` with `src` added where `index` points along `dim`.
pub(crate) fn scatter_add(dst: &Tensor, dim: usize, index: &Tensor, src: &Tensor) -> Result<Tensor> {
    // ATen reads as much of `src` as `index` covers, as ember does.
    let src = src.f_narrow_copy_like(index).map_err(torch_err("scatter_add"))?;
    dst.f_scatter_add(dim as i64, index, &src).map_err(torch_err("scatter_add"))
}

/// The narrowing of `src` to `index`'s shape in every dimension.
trait NarrowLike: Sized {
    fn f_narrow_copy_like(&self, index: &Tensor) -> std::result::Result<Tensor, tch::TchError>;
}

impl NarrowLike for Tensor {
    fn f_narrow_copy_like(&self, index: &Tensor) -> std::result::Result<Tensor, tch::TchError> {
        let mut t = self.shallow_clone();
        for (d, &n) in index.size().iter().enumerate() {
            t = t.f_narrow(d as i64, 0, n)?;
        }
        Ok(t)
    }
}

/// `x` with `value` where the `u8` mask (broadcast to `x`'s shape) is non-zero.
pub(crate) fn masked_fill(x: &Tensor, mask: &Tensor, value: Scalar, dtype: DType) -> Result<Tensor> {
    let e = torch_err("masked_fill");
    x.f_masked_fill(&mask.f_ne(0).map_err(&e)?, element(value, dtype)).map_err(e)
}

/// The lower (or upper) triangle of the last two dimensions relative to `diagonal`.
pub(crate) fn triangle(x: &Tensor, diagonal: i64, upper: bool) -> Result<Tensor> {
    let e = torch_err("triangle");
    if upper { x.f_triu(diagonal) } else { x.f_tril(diagonal) }.map_err(e)
}

/// The views joined along `dim`.
pub(crate) fn cat(xs: &[Tensor], dim: usize) -> Result<Tensor> {
    Tensor::f_cat(xs, dim as i64).map_err(torch_err("cat"))
}

/// `out[n, c, p] = x[n, c, index[n, c, p]]` over flattened planes.
pub(crate) fn gather_planes(x: &Tensor, index: &Tensor) -> Result<Tensor> {
    let e = torch_err("gather_planes");
    let (xs, is) = (x.size(), index.size());
    let flat = x.f_reshape([xs[0], xs[1], xs[2] * xs[3]]).map_err(&e)?;
    let idx = index.f_reshape([is[0], is[1], is[2] * is[3]]).map_err(&e)?;
    flat.f_gather(2, &idx, false).and_then(|t| t.f_reshape(is.as_slice())).map_err(e)
}

/// Zero planes `[N, C, h, w]` with `src` added at the flat positions `index` names.
pub(crate) fn scatter_planes(src: &Tensor, index: &Tensor, plane: [usize; 2]) -> Result<Tensor> {
    let e = torch_err("scatter_planes");
    let ss = src.size();
    let (n, c, hw) = (ss[0], ss[1], i(plane[0] * plane[1]));
    let zeros = Tensor::f_zeros([n, c, hw], (src.kind(), TORCH_DEVICE)).map_err(&e)?;
    let s = src.f_reshape([n, c, ss[2] * ss[3]]).map_err(&e)?;
    let idx = index.f_reshape([n, c, ss[2] * ss[3]]).map_err(&e)?;
    zeros.f_scatter_add(2, &idx, &s).and_then(|t| t.f_reshape([n, c, i(plane[0]), i(plane[1])])).map_err(e)
}

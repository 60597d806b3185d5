//! Reductions, softmax and the power sums of gradient norms.

use super::kernel_source::reduce_code;
use super::launch::{Strided, arg, launch};
use super::memory::{CudaStorage, download};
use super::sfx;
use crate::backend::ReduceOp;
use crate::dtype::DType;
use crate::layout::Layout;
use crate::{Error, Result};

/// Output rows a grid-stride reduction launches at most blocks for.
const MAX_BLOCKS: usize = 65_535;

/// The view's shape and strides with `moved` taken out of their place and put last (in
/// order): kernels then read output element `r` from elements `r * inner .. (r + 1) *
/// inner` of the result. Also the product of the kept and of the moved extents.
pub(crate) fn moved_last(l: &Layout, moved: &[usize]) -> (Vec<usize>, Vec<usize>, usize, usize) {
    let (mut shape, mut strides) = (Vec::new(), Vec::new());
    let (mut outer, mut inner) = (1usize, 1usize);
    for d in (0..l.rank()).filter(|d| !moved.contains(d)) {
        shape.push(l.shape()[d]);
        strides.push(l.strides()[d]);
        outer *= l.shape()[d];
    }
    for &d in moved {
        shape.push(l.shape()[d]);
        strides.push(l.strides()[d]);
        inner *= l.shape()[d];
    }
    (shape, strides, outer, inner)
}

pub(crate) fn reduce(op: ReduceOp, src: &CudaStorage, l: &Layout, dims: &[usize]) -> Result<CudaStorage> {
    let name = op.name();
    let gpu = src.gpu();
    let (shape, strides, outer, inner) = moved_last(l, dims);
    let view = Strided::new(name, &shape, &strides, l.offset())?;
    let arg_op = op.is_arg();
    let out = CudaStorage::alloc(gpu, name, outer, if arg_op { DType::I64 } else { src.dtype() })?;
    if outer == 0 {
        return Ok(out);
    }
    if arg_op && inner == 0 {
        return Err(Error::shape(name, format!("cannot take {name} over an empty dimension of shape {}", l.shape())));
    }
    let (o64, i64_, po, ps) = (outer as i64, inner as i64, out.ptr(), src.ptr());
    let code = reduce_code(op);
    let mut args = [arg(&code), arg(&o64), arg(&i64_), arg(&po), arg(&ps), arg(&view)];
    if arg_op {
        let f = gpu.func(("arg_rows", sfx(src.dtype()), ""))?;
        return launch(gpu, f, outer.min(MAX_BLOCKS) as u32, 256, &mut args).map(|()| out);
    }
    // A thread per output element when rows are short, or when neighbouring outputs are
    // neighbours in memory (a reduction over leading dimensions), where its reads coalesce;
    // a block per output element otherwise.
    let kept_stride_one = dims.len() < l.rank() && strides.get(l.rank() - dims.len() - 1) == Some(&1);
    let per_thread = inner <= 16 || (kept_stride_one && outer >= 2048);
    if per_thread {
        let f = gpu.func(("reduce_cols", sfx(src.dtype()), ""))?;
        let blocks = outer.div_ceil(256).min(MAX_BLOCKS) as u32;
        launch(gpu, f, blocks, 256, &mut args)?;
    } else {
        let f = gpu.func(("reduce_rows", sfx(src.dtype()), ""))?;
        launch(gpu, f, outer.min(MAX_BLOCKS) as u32, 256, &mut args)?;
    }
    Ok(out)
}

pub(crate) fn softmax(src: &CudaStorage, l: &Layout, dim: usize, log: bool) -> Result<CudaStorage> {
    if !src.dtype().is_float() {
        return Err(Error::dtype("softmax", format!("softmax needs a float tensor, got {}", src.dtype())));
    }
    let gpu = src.gpu();
    let n = l.numel();
    let out = CudaStorage::alloc(gpu, "softmax", n, src.dtype())?;
    if n == 0 {
        return Ok(out);
    }
    let (shape, strides, outer, inner) = moved_last(l, &[dim]);
    let view = Strided::new("softmax", &shape, &strides, l.offset())?;
    let dense = Layout::contiguous(l.shape().clone());
    let (_, out_strides, _, _) = moved_last(&dense, &[dim]);
    let out_view = Strided::new("softmax", &shape, &out_strides, 0)?;
    let f = gpu.func(("softmax", sfx(src.dtype()), ""))?;
    let (o64, i64_, logv, po, ps) = (outer as i64, inner as i64, log as i32, out.ptr(), src.ptr());
    let mut args = [arg(&o64), arg(&i64_), arg(&logv), arg(&po), arg(&out_view), arg(&ps), arg(&view)];
    launch(gpu, f, outer.min(MAX_BLOCKS) as u32, 256, &mut args)?;
    Ok(out)
}

/// `Σ|x|^p` of a float view in `f64` (see `Backend::power_sum`); waits for the result.
pub(crate) fn power_sum(src: &CudaStorage, l: &Layout, p: f64) -> Result<f64> {
    if !src.dtype().is_float() {
        return Err(Error::dtype("power_sum", format!("expected a float tensor, got {}", src.dtype())));
    }
    let gpu = src.gpu();
    let out = CudaStorage::alloc(gpu, "power_sum", 1, DType::F64)?;
    let view = Strided::of("power_sum", l)?;
    let f = gpu.func(("power_sum", sfx(src.dtype()), ""))?;
    let (n, ps, po) = (l.numel() as i64, src.ptr(), out.ptr());
    launch(gpu, f, 1, 1024, &mut [arg(&n), arg(&ps), arg(&view), arg(&p), arg(&po)])?;
    let host = download(&out)?;
    Ok(host.as_slice::<f64>().and_then(|s| s.first().copied()).unwrap_or(0.0))
}

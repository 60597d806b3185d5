//! The checks that views fit a plane kernel (max pooling, its plane gather and scatter,
//! resampling), which every backend makes before it touches memory.

use super::{check_numel, view};
use crate::layout::Layout;
use crate::shape::Shape;
use crate::storage::Storage;
use crate::{DType, Error, Result};
use std::borrow::Cow;

/// The checks before a plane kernel: `src` fits its storage, is 4-d with planes of extent
/// `plane` and has a float dtype (or `dtype`, when given); the result `[N, C, out]` may
/// exist. Returns the validated layout.
pub(crate) fn check_planes<'a>(
    op: &'static str,
    s: &Storage,
    l: &'a Layout,
    plane: [usize; 2],
    out: [usize; 2],
    dtype: Option<DType>,
) -> Result<Cow<'a, Layout>> {
    let l = view(op, s, l)?;
    let dims = l.shape().dims();
    if dims.len() != 4 || dims[2..] != plane {
        return Err(Error::shape(op, format!("expected planes of extent {plane:?}, got shape {}", l.shape())));
    }
    let ok = match dtype {
        Some(d) => s.dtype() == d,
        None => s.dtype().is_float(),
    };
    if !ok {
        let want = dtype.map_or("a float dtype".to_string(), |d| d.to_string());
        return Err(Error::dtype(op, format!("expected {want}, got {}", s.dtype())));
    }
    check_numel(op, &Shape::from([dims[0], dims[1], out[0], out[1]]))?;
    Ok(l)
}

/// The checked views of a plane gather (the backward of max pooling,
/// [`Backend::gather_planes`](crate::backend::Backend::gather_planes)): float planes `[N, C, h, w]`
/// and an `i64` index `[N, C, oh, ow]`.
pub(crate) fn check_gather_planes<'a>(
    s: &Storage,
    l: &'a Layout,
    si: &Storage,
    li: &'a Layout,
) -> Result<(Cow<'a, Layout>, Cow<'a, Layout>)> {
    let op = "max_pool2d_backward";
    let li = view(op, si, li)?;
    let out = li.shape().dims();
    if out.len() != 4 {
        return Err(Error::shape(op, format!("expected a 4-d index, got shape {}", li.shape())));
    }
    let plane = l.shape().dims().get(2..4).map_or([0, 0], |d| [d[0], d[1]]);
    let l = check_planes(op, s, l, plane, [out[2], out[3]], None)?;
    if l.shape()[..2] != out[..2] || si.dtype() != DType::I64 {
        return Err(Error::shape(
            op,
            format!("an index of shape {} does not fit planes of shape {}", li.shape(), l.shape()),
        ));
    }
    Ok((l, li))
}

/// The checked views of a plane scatter ([`Backend::scatter_planes`](crate::backend::Backend::scatter_planes)):
/// float values and an `i64` index of one shape `[N, C, oh, ow]`.
pub(crate) fn check_scatter_planes<'a>(
    s: &Storage,
    l: &'a Layout,
    si: &Storage,
    li: &'a Layout,
    plane: [usize; 2],
) -> Result<(Cow<'a, Layout>, Cow<'a, Layout>)> {
    let op = "max_pool2d_backward";
    let from = l.shape().dims().get(2..4).map_or([0, 0], |d| [d[0], d[1]]);
    let l = check_planes(op, s, l, from, plane, None)?;
    let li = check_planes(op, si, li, from, from, Some(DType::I64))?;
    if l.shape() != li.shape() {
        return Err(Error::shape(
            op,
            format!("an index of shape {} does not fit values of shape {}", li.shape(), l.shape()),
        ));
    }
    Ok((l, li))
}

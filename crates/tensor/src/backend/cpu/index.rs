//! Indexing kernels: index_select, gather, scatter_add, masked_fill and triangles.
//!
//! Every index is checked against its dimension; an out-of-range index is an error that
//! names the op, the index and the bound.

use super::binary::zip;
use super::unary::map;
use crate::cpu_dispatch;
use crate::dtype::Element;
use crate::host::iter::{GRAIN_CHEAP, Runs, fill_chunks};
use crate::layout::Layout;
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result, Scalar};

fn indices<'a>(op: &'static str, s: &'a CpuStorage) -> Result<&'a [i64]> {
    s.as_slice::<i64>().ok_or_else(|| Error::dtype(op, format!("indices must be i64, got {}", s.dtype())))
}

fn checked(op: &'static str, i: i64, bound: usize, dim: usize) -> Result<usize> {
    if i < 0 || i as u64 >= bound as u64 {
        return Err(Error::index(op, format!("index {i} is out of range for dimension {dim} of size {bound}")));
    }
    Ok(i as usize)
}

fn contiguous<T: Element>(s: &[T], l: &Layout) -> Result<Buffer<T>> {
    map("contiguous", s, l, GRAIN_CHEAP, |v| v)
}

/// The index values of a 1-d (or any-rank, read in order) index view, validated.
fn index_list(op: &'static str, idx: &CpuStorage, li: &Layout, bound: usize, dim: usize) -> Result<Vec<usize>> {
    let raw = indices(op, idx)?;
    // An expanded index can list more entries than fit in memory.
    let mut out = crate::host::read::vec_with_capacity(op, li.numel(), "indices")?;
    let runs = Runs::new([li]);
    let s = runs.inner_stride(0);
    let mut err = None;
    runs.for_each(0, li.numel(), |[o], len, _| {
        for i in 0..len {
            match checked(op, raw[o + i * s], bound, dim) {
                Ok(v) => out.push(v),
                Err(e) => {
                    err.get_or_insert(e);
                }
            }
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Entries `index` along `dim` of `(src, l)`.
pub(crate) fn index_select(
    src: &CpuStorage,
    l: &Layout,
    dim: usize,
    idx: &CpuStorage,
    li: &Layout,
) -> Result<CpuStorage> {
    let d = l.shape()[dim];
    let list = index_list("index_select", idx, li, d, dim)?;
    fn go<T: Element>(s: &[T], l: &Layout, dim: usize, list: &[usize]) -> Result<Buffer<T>> {
        let owned;
        let s = match l.contiguous_range() {
            Some(r) => &s[r],
            None => {
                owned = contiguous(s, l)?;
                &owned[..]
            }
        };
        let outer: usize = l.shape()[..dim].iter().product();
        let inner: usize = l.shape()[dim + 1..].iter().product();
        let d = l.shape()[dim];
        let n = outer.checked_mul(list.len()).and_then(|n| n.checked_mul(inner));
        let n = n.ok_or(Error::Alloc { op: "index_select", elements: usize::MAX, dtype: T::DTYPE.name() })?;
        let mut out = Buffer::<T>::uninit("index_select", n)?;
        if inner == 0 {
            return Ok(out);
        }
        for o in 0..outer {
            for (j, &i) in list.iter().enumerate() {
                let dst = (o * list.len() + j) * inner;
                let srco = (o * d + i) * inner;
                out[dst..dst + inner].copy_from_slice(&s[srco..srco + inner]);
            }
        }
        Ok(out)
    }
    cpu_dispatch!(src, s => Ok(go(s, l, dim, &list)?.into()))
}

/// Walks every position of `shape` (row-major), calling `f(position, multi_index)`.
fn for_each_index(shape: &[usize], mut f: impl FnMut(usize, &[usize]) -> Result<()>) -> Result<()> {
    let n: usize = shape.iter().product();
    if n == 0 {
        return Ok(());
    }
    let mut idx = vec![0usize; shape.len()];
    for p in 0..n {
        f(p, &idx)?;
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(())
}

fn offset_of(l: &Layout, idx: &[usize], dim: usize, at: usize) -> usize {
    l.offset() + idx.iter().enumerate().map(|(d, &i)| if d == dim { at } else { i } * l.strides()[d]).sum::<usize>()
}

/// `out[p] = src[p with dim replaced by index[p]]`, shaped like `index`.
pub(crate) fn gather(src: &CpuStorage, l: &Layout, dim: usize, idx: &CpuStorage, li: &Layout) -> Result<CpuStorage> {
    let raw = indices("gather", idx)?;
    let bound = l.shape()[dim];
    fn go<T: Element>(s: &[T], l: &Layout, dim: usize, raw: &[i64], li: &Layout, bound: usize) -> Result<Buffer<T>> {
        let mut out = Buffer::<T>::uninit("gather", li.numel())?;
        for_each_index(li.shape(), |p, ix| {
            let at = checked("gather", raw[li.storage_index(ix)], bound, dim)?;
            out[p] = s[offset_of(l, ix, dim, at)];
            Ok(())
        })?;
        Ok(out)
    }
    cpu_dispatch!(src, s => Ok(go(s, l, dim, raw, li, bound)?.into()))
}

/// A contiguous copy of `dst` with `src[p]` added at `p with dim replaced by index[p]`
/// for every position `p` of `index`.
pub(crate) fn scatter_add(
    dst: &CpuStorage,
    ld: &Layout,
    dim: usize,
    idx: &CpuStorage,
    li: &Layout,
    src: &CpuStorage,
    ls: &Layout,
) -> Result<CpuStorage> {
    let raw = indices("scatter_add", idx)?;
    let bound = ld.shape()[dim];
    let out_layout = Layout::contiguous(ld.shape().clone());
    #[allow(clippy::too_many_arguments)]
    fn go<T: Element>(
        d: &[T],
        ld: &Layout,
        dim: usize,
        raw: &[i64],
        li: &Layout,
        s: &[T],
        ls: &Layout,
        out_layout: &Layout,
        bound: usize,
    ) -> Result<Buffer<T>> {
        let mut out = contiguous(d, ld)?;
        for_each_index(li.shape(), |_, ix| {
            let at = checked("scatter_add", raw[li.storage_index(ix)], bound, dim)?;
            let o = offset_of(out_layout, ix, dim, at);
            out[o] = out[o].wadd(s[ls.storage_index(ix)]);
            Ok(())
        })?;
        Ok(out)
    }
    match (dst, src) {
        (CpuStorage::F32(d), CpuStorage::F32(s)) => Ok(go(d, ld, dim, raw, li, s, ls, &out_layout, bound)?.into()),
        (CpuStorage::F64(d), CpuStorage::F64(s)) => Ok(go(d, ld, dim, raw, li, s, ls, &out_layout, bound)?.into()),
        (CpuStorage::I64(d), CpuStorage::I64(s)) => Ok(go(d, ld, dim, raw, li, s, ls, &out_layout, bound)?.into()),
        (CpuStorage::U8(d), CpuStorage::U8(s)) => Ok(go(d, ld, dim, raw, li, s, ls, &out_layout, bound)?.into()),
        _ => Err(Error::dtype(
            "scatter_add",
            format!("source and destination must share a dtype, got {} and {}", src.dtype(), dst.dtype()),
        )),
    }
}

/// `mask ? value : src` elementwise; `mask` is `u8`, broadcast to `src`'s shape.
pub(crate) fn masked_fill(
    src: &CpuStorage,
    l: &Layout,
    mask: &CpuStorage,
    lm: &Layout,
    value: Scalar,
) -> Result<CpuStorage> {
    let m = mask
        .as_slice::<u8>()
        .ok_or_else(|| Error::dtype("masked_fill", format!("the mask must be u8, got {}", mask.dtype())))?;
    fn go<T: Element>(s: &[T], l: &Layout, m: &[u8], lm: &Layout, v: T) -> Result<Buffer<T>> {
        zip("masked_fill", (s, l), (m, lm), GRAIN_CHEAP, move |x, k| if k != 0 { v } else { x })
    }
    cpu_dispatch!(src, s => Ok(go(s, l, m, lm, value.to_element())?.into()))
}

/// The lower (or upper) triangle of the last two dimensions; other entries zero.
pub(crate) fn triangle(src: &CpuStorage, l: &Layout, diagonal: i64, upper: bool) -> Result<CpuStorage> {
    let rank = l.rank();
    let (rows, cols) = (l.shape()[rank - 2], l.shape()[rank - 1]);
    fn go<T: Element>(s: &[T], l: &Layout, rows: usize, cols: usize, diagonal: i64, upper: bool) -> Result<Buffer<T>> {
        let mut out = Buffer::<T>::uninit("tril", l.numel())?;
        let runs = Runs::new([l]);
        let st = runs.inner_stride(0);
        fill_chunks(&mut out, GRAIN_CHEAP, |start, chunk| {
            runs.for_each(start, start + chunk.len(), |[o], len, pos| {
                for i in 0..len {
                    let p = pos + i;
                    let (r, c) = ((p / cols) % rows, p % cols);
                    let keep = if upper { c as i64 - r as i64 >= diagonal } else { c as i64 - r as i64 <= diagonal };
                    chunk[p - start] = if keep { s[o + i * st] } else { T::ZERO };
                }
            });
        });
        Ok(out)
    }
    cpu_dispatch!(src, s => Ok(go(s, l, rows, cols, diagonal, upper)?.into()))
}

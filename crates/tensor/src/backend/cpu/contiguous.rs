//! A view's elements in row-major order, for kernels that read their operands as plain
//! slices: the storage itself when the view is contiguous, else a copy.

use super::unary::map;
use crate::Result;
use crate::dtype::Element;
use crate::layout::Layout;
use crate::storage::Buffer;

/// A view's elements in row-major order: borrowed when contiguous, else copied.
pub(super) enum Contiguous<'a, T: Element> {
    Borrowed(&'a [T]),
    Copied(Buffer<T>),
}

impl<T: Element> Contiguous<'_, T> {
    /// `src` read through `l`: borrowed when `l` is one contiguous range, else copied in
    /// parallel pieces of at least `grain` elements (`op` names a failed allocation).
    pub(super) fn of<'a>(op: &'static str, src: &'a [T], l: &Layout, grain: usize) -> Result<Contiguous<'a, T>> {
        Ok(match l.contiguous_range() {
            Some(r) => Contiguous::Borrowed(&src[r]),
            None => Contiguous::Copied(map(op, src, l, grain, |v| v)?),
        })
    }

    /// The elements.
    pub(super) fn slice(&self) -> &[T] {
        match self {
            Contiguous::Borrowed(s) => s,
            Contiguous::Copied(b) => b,
        }
    }
}

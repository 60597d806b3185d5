//! `unfold` (im2col) and `fold` (col2im) kernels. The convolutions compose from them and
//! cuBLAS products (the `Backend` defaults), without building gather indices on the host.

use super::launch::{arg, launch_elems};
use super::memory::CudaStorage;
use super::sfx;
use crate::layout::Layout;
use crate::ops::conv::SlidingWindow;
use crate::shape::Shape;
use crate::{Error, Result};

/// `struct Window` in kernels.cu.
#[repr(C)]
struct Window {
    input: [i64; 2],
    output: [i64; 2],
    kernel: [i64; 2],
    stride: [i64; 2],
    padding: [i64; 2],
    dilation: [i64; 2],
}

impl Window {
    fn of(w: &SlidingWindow) -> Window {
        let f = |a: [usize; 2]| [a[0] as i64, a[1] as i64];
        Window {
            input: f(w.input),
            output: f(w.output),
            kernel: f(w.kernel),
            stride: f(w.stride),
            padding: f(w.padding),
            dilation: f(w.dilation),
        }
    }
}

fn float_only(op: &'static str, s: &CudaStorage) -> Result<()> {
    if !s.dtype().is_float() {
        return Err(Error::dtype(op, format!("expected a float input, got {}", s.dtype())));
    }
    Ok(())
}

/// `[N, C * kh * kw, oh * ow]` columns of the checked input view `[N, C, h, w]`.
pub(crate) fn unfold(s: &CudaStorage, l: &Layout, w: &SlidingWindow, (n, c): (usize, usize)) -> Result<CudaStorage> {
    float_only("unfold", s)?;
    let gpu = s.gpu();
    let shape = Shape::from(vec![n, c * w.taps(), w.positions()]);
    let total = shape.numel();
    let out = CudaStorage::alloc(gpu, "unfold", total, s.dtype())?;
    let f = gpu.func(("unfold", sfx(s.dtype()), ""))?;
    let st: Vec<i64> = l.strides().iter().map(|&v| v as i64).collect();
    let (t64, c64, win, po, ps, off) = (total as i64, c as i64, Window::of(w), out.ptr(), s.ptr(), l.offset() as i64);
    let mut args = [
        arg(&t64),
        arg(&c64),
        arg(&win),
        arg(&po),
        arg(&ps),
        arg(&st[0]),
        arg(&st[1]),
        arg(&st[2]),
        arg(&st[3]),
        arg(&off),
    ];
    launch_elems(gpu, f, total, &mut args)?;
    Ok(out)
}

/// `[N, C, h, w]` sums of the checked column view `[N, C * kh * kw, oh * ow]`.
pub(crate) fn fold(s: &CudaStorage, l: &Layout, w: &SlidingWindow, (n, c): (usize, usize)) -> Result<CudaStorage> {
    float_only("fold", s)?;
    let gpu = s.gpu();
    let total = n * c * w.input[0] * w.input[1];
    let out = CudaStorage::alloc(gpu, "fold", total, s.dtype())?;
    let f = gpu.func(("fold", sfx(s.dtype()), ""))?;
    let st: Vec<i64> = l.strides().iter().map(|&v| v as i64).collect();
    let (t64, c64, win, po, ps, off) = (total as i64, c as i64, Window::of(w), out.ptr(), s.ptr(), l.offset() as i64);
    let mut args =
        [arg(&t64), arg(&c64), arg(&win), arg(&po), arg(&ps), arg(&st[0]), arg(&st[1]), arg(&st[2]), arg(&off)];
    launch_elems(gpu, f, total, &mut args)?;
    Ok(out)
}

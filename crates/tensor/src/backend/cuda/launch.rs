//! Launching kernels: views as the kernels' `Strided` argument, grid sizes, and the raw
//! launch call.

use super::device::{Func, Gpu};
use crate::layout::Layout;
use crate::{Error, Result};
use cudarc::driver::result;
use std::ffi::c_void;

/// The most dimensions a kernel's view argument holds (`MAX_DIMS` in kernels.cu). Views
/// are merged first (adjacent dimensions that step through memory as one are one), so only
/// a view that is strided in more than this many independent ways is refused.
pub(crate) const MAX_DIMS: usize = 8;

/// A view as kernels read it: `struct Strided` in kernels.cu, field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Strided {
    ndim: i32,
    contiguous: i32,
    offset: i64,
    shape: [i64; MAX_DIMS],
    stride: [i64; MAX_DIMS],
}

impl Strided {
    /// Logical elements `0..numel` read in row-major order through `shape` and `strides`
    /// from `offset`. Dimensions are merged where possible; a dense view becomes the
    /// `contiguous` fast path.
    pub(crate) fn new(op: &'static str, shape: &[usize], strides: &[usize], offset: usize) -> Result<Strided> {
        // The CPU kernels' merging of dimensions that step through memory as one.
        let (dims, [steps]) = crate::layout::coalesce(shape, [strides]);
        let mut k =
            Strided { ndim: 0, contiguous: 0, offset: offset as i64, shape: [1; MAX_DIMS], stride: [0; MAX_DIMS] };
        if dims.is_empty() || (dims.len() == 1 && steps[0] == 1) {
            k.contiguous = 1;
            return Ok(k);
        }
        if dims.len() > MAX_DIMS {
            return Err(Error::invalid(
                op,
                format!(
                    "the CUDA kernels read views of at most {MAX_DIMS} strided dimensions; this one has {} (make it contiguous first)",
                    dims.len()
                ),
            ));
        }
        k.ndim = dims.len() as i32;
        for (i, (&n, &s)) in dims.iter().zip(&steps).enumerate() {
            k.shape[i] = n as i64;
            k.stride[i] = s as i64;
        }
        Ok(k)
    }

    /// A layout as it is.
    pub(crate) fn of(op: &'static str, l: &Layout) -> Result<Strided> {
        Strided::new(op, l.shape(), l.strides(), l.offset())
    }

    /// A dense block of `n` elements from `offset`.
    pub(crate) fn dense(offset: usize) -> Strided {
        Strided { ndim: 0, contiguous: 1, offset: offset as i64, shape: [1; MAX_DIMS], stride: [0; MAX_DIMS] }
    }

    /// Every dimension of `shape` kept as it is (no merging), for kernels that rebuild
    /// coordinates from it (`gather`, `scatter_add`).
    pub(crate) fn unmerged(op: &'static str, shape: &[usize], strides: &[usize], offset: usize) -> Result<Strided> {
        if shape.len() > MAX_DIMS {
            return Err(Error::invalid(
                op,
                format!("the CUDA kernels take at most {MAX_DIMS} dimensions, got {}", shape.len()),
            ));
        }
        let mut k = Strided {
            ndim: shape.len() as i32,
            contiguous: 0,
            offset: offset as i64,
            shape: [1; MAX_DIMS],
            stride: [0; MAX_DIMS],
        };
        for (i, (&n, &s)) in shape.iter().zip(strides).enumerate() {
            k.shape[i] = n as i64;
            k.stride[i] = s as i64;
        }
        Ok(k)
    }
}

/// The address of a kernel argument, as `cuLaunchKernel` takes it.
pub(crate) fn arg<T>(v: &T) -> *mut c_void {
    v as *const T as *mut c_void
}

/// Threads per block of the elementwise kernels.
pub(crate) const BLOCK: u32 = 256;

/// Launches `f` over `n` elements with a grid-stride loop: enough blocks to cover them, at
/// most a few waves of the device's multiprocessors.
pub(crate) fn launch_elems(gpu: &Gpu, f: Func, n: usize, args: &mut [*mut c_void]) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let blocks = n.div_ceil(BLOCK as usize).min(gpu.sm_count as usize * 32).max(1) as u32;
    launch(gpu, f, blocks, BLOCK, args)
}

/// Launches `f` with `blocks` blocks of `threads` threads on the legacy default stream.
pub(crate) fn launch(gpu: &Gpu, f: Func, blocks: u32, threads: u32, args: &mut [*mut c_void]) -> Result<()> {
    // SAFETY: every argument points at a live value of the type the kernel declares (the
    // callers pass them in the kernel's order), and every device pointer refers to memory
    // large enough for the elements the kernel touches (the backend validated the views).
    unsafe { result::launch_kernel(f.0, (blocks, 1, 1), (threads, 1, 1), 0, std::ptr::null_mut(), args) }
        .map_err(|e| gpu.err("kernel launch", e))
}

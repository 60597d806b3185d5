//! One GPU's state: its context, the cuBLAS handle, the compiled kernels and the memory
//! cache. Made on first use of `Device::Cuda(n)` and kept for the life of the process.

use super::allocator::{Allocator, StagingPool};
use crate::{Error, Result};
use cudarc::driver::{CudaContext, result, sys};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, OnceLock};

/// A kernel handle. Function handles stay valid for the life of their module, which is
/// never unloaded, and may be launched from any thread with the context current.
#[derive(Clone, Copy)]
pub(crate) struct Func(pub(crate) sys::CUfunction);

// SAFETY: see `Func`: the handle is an immutable driver object.
unsafe impl Send for Func {}
unsafe impl Sync for Func {}

/// The cuBLAS handle; cuBLAS handles must not be used from two threads at once.
pub(crate) struct Blas(pub(crate) cudarc::cublas::sys::cublasHandle_t);

// SAFETY: the handle is only used under the `Mutex` in `Gpu`.
unsafe impl Send for Blas {}

/// The loaded kernel module, never unloaded.
struct Module(sys::CUmodule);

// SAFETY: a module handle is an immutable driver object usable from any thread.
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

/// A kernel's name as the parts its `extern "C"` name joins with `_` (`("convert", "f32",
/// "f64")` is `convert_f32_f64`); static parts let a launch look its kernel up without
/// allocating.
pub(crate) type KernelName = (&'static str, &'static str, &'static str);

/// A GPU in use.
pub(crate) struct Gpu {
    pub(crate) ordinal: usize,
    ctx: Arc<CudaContext>,
    module: Module,
    funcs: RwLock<HashMap<KernelName, Func>>,
    pub(crate) blas: Mutex<Blas>,
    pub(crate) memory: Allocator,
    pub(crate) staging: StagingPool,
    pub(crate) name: String,
    pub(crate) sm_count: u32,
}

/// Devices are numbered from 0; more than this many are not looked for.
const MAX_DEVICES: usize = 16;

static GPUS: [OnceLock<std::result::Result<&'static Gpu, String>>; MAX_DEVICES] =
    [const { OnceLock::new() }; MAX_DEVICES];

/// The GPU `ordinal`, initialised on first use; an error says why it cannot be used.
pub(crate) fn gpu(ordinal: usize) -> Result<&'static Gpu> {
    let fail = |msg: String| Error::Device { device: format!("cuda:{ordinal}"), msg };
    let slot = GPUS.get(ordinal).ok_or_else(|| fail(format!("ember looks for at most {MAX_DEVICES} GPUs")))?;
    let r = slot.get_or_init(|| Gpu::open(ordinal).map(|g| &*Box::leak(Box::new(g))));
    let g = r.as_ref().map_err(|m| fail(m.clone()))?;
    g.bind()?;
    Ok(g)
}

/// The number of CUDA devices the driver reports (0 without a driver).
pub(crate) fn device_count() -> usize {
    if !driver_present() {
        return 0;
    }
    result::init().ok().and_then(|()| result::device::get_count().ok()).map_or(0, |n| n.max(0) as usize)
}

fn driver_present() -> bool {
    // SAFETY: only tries to load the library.
    unsafe { sys::is_culib_present() }
}

pub(crate) fn driver_error(ordinal: usize, what: &str, e: impl std::fmt::Debug) -> Error {
    Error::Device { device: format!("cuda:{ordinal}"), msg: format!("{what}: {e:?}") }
}

impl Gpu {
    fn open(ordinal: usize) -> std::result::Result<Gpu, String> {
        if !driver_present() {
            return Err("no CUDA driver found (libcuda.so could not be loaded)".into());
        }
        result::init().map_err(|e| format!("the CUDA driver failed to start: {e:?}"))?;
        let count = result::device::get_count().map_err(|e| format!("cannot count devices: {e:?}"))?;
        if ordinal >= count.max(0) as usize {
            return Err(format!("the driver reports {count} CUDA device(s)"));
        }
        // SAFETY: only tries to load the libraries.
        if unsafe { !cudarc::nvrtc::sys::is_culib_present() } {
            return Err(
                "NVRTC (libnvrtc.so.13) could not be loaded; add the CUDA 13 libraries to LD_LIBRARY_PATH".into()
            );
        }
        if unsafe { !cudarc::cublas::sys::is_culib_present() } {
            return Err(
                "cuBLAS (libcublas.so.13) could not be loaded; add the CUDA 13 libraries to LD_LIBRARY_PATH".into()
            );
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| format!("cannot create a context: {e:?}"))?;
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        let (major, minor) =
            ctx.compute_capability().map_err(|e| format!("cannot read the compute capability: {e:?}"))?;
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_or(32, |n| n.max(1) as u32);
        // The kernel source (`kernels.cu` with the op tables' switches spliced in), compiled at
        // run time for the device found.
        let image = super::compile::kernels(&super::kernel_source::source(), major, minor)?;
        // SAFETY: the image is a complete CUBIN or NUL-terminated PTX for this device, and
        // the context is current on this thread (CudaContext::new binds it).
        let module = unsafe { result::module::load_data(image.as_ptr().cast()) }
            .map_err(|e| format!("cannot load the kernels: {e:?}"))?;
        let handle = cudarc::cublas::result::create_handle().map_err(|e| format!("cannot start cuBLAS: {e:?}"))?;
        // Kernels and cuBLAS share the legacy default stream (as PyTorch does by default), so
        // every operation is ordered after the ones queued before it.
        // SAFETY: the handle was just created.
        unsafe { cudarc::cublas::result::set_stream(handle, std::ptr::null_mut()) }
            .map_err(|e| format!("cannot set cuBLAS's stream: {e:?}"))?;
        // 16-bit products sum in f32 and round once, as on the CPU: by default cuBLAS may add
        // the partial sums of a split product in the output's 16-bit type.
        use cudarc::cublas::sys::{cublasMath_t, cublasSetMathMode, cublasStatus_t};
        // SAFETY: the handle was just created.
        let status =
            unsafe { cublasSetMathMode(handle, cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) };
        if status != cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(format!("cannot set cuBLAS's math mode: {status:?}"));
        }
        Ok(Gpu {
            ordinal,
            ctx,
            module: Module(module),
            funcs: RwLock::new(HashMap::new()),
            blas: Mutex::new(Blas(handle)),
            memory: Allocator::new(ordinal),
            staging: StagingPool::new(),
            name: format!("{name} (sm_{major}{minor})"),
            sm_count,
        })
    }

    /// Makes the context current on the calling thread (a driver call only when another
    /// context is current).
    pub(crate) fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(|e| driver_error(self.ordinal, "cannot bind the context", e))
    }

    /// The kernel `name`, looked up in the module on first use.
    pub(crate) fn func(&self, name: KernelName) -> Result<Func> {
        if let Some(&f) = self.funcs.read().get(&name) {
            return Ok(f);
        }
        let full = [name.0, name.1, name.2].iter().filter(|p| !p.is_empty()).copied().collect::<Vec<_>>().join("_");
        let c = CString::new(full.clone()).map_err(|e| self.err("bad kernel name", e))?;
        // SAFETY: the module is loaded and never unloaded; the context is current.
        let f = Func(
            unsafe { result::module::get_function(self.module.0, c) }
                .map_err(|e| self.err(&format!("no kernel {full}"), e))?,
        );
        self.funcs.write().insert(name, f);
        Ok(f)
    }

    /// Waits for all queued work; reports errors of kernels that already returned.
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.bind()?;
        self.ctx.synchronize().map_err(|e| driver_error(self.ordinal, "a kernel failed", e))
    }

    /// A timing event recorded on the default stream, after the work queued so far.
    pub(crate) fn timing_event(&self) -> Result<cudarc::driver::CudaEvent> {
        let event = self
            .ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| self.err("cannot create an event", e))?;
        event.record(&self.ctx.default_stream()).map_err(|e| self.err("cannot record an event", e))?;
        Ok(event)
    }

    pub(crate) fn err(&self, what: &str, e: impl std::fmt::Debug) -> Error {
        driver_error(self.ordinal, what, e)
    }
}

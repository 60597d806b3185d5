//! The CUDA backend (`Device::Cuda(n)`, cargo feature `cuda`).
//!
//! Built on `cudarc`, which loads the driver, cuBLAS and NVRTC at run time: a build with
//! the feature runs on machines without a GPU and reports CUDA unavailable there. The
//! kernels (kernels.cu, with the elementwise and reduction `switch`es generated from the op
//! tables spliced in by `kernel_source`) are compiled by NVRTC on first use of a device and
//! cached on disk (`compile`). Every kernel and copy goes on the device's legacy default stream, so
//! operations run in the order they were issued and the host only waits when it reads
//! data back (`download`, `item`, index checks, `power_sum`) or calls
//! [`Device::synchronize`](crate::Device::synchronize).
//!
//! Memory comes from a caching allocator (`memory`); host data goes up through pinned
//! staging buffers without blocking the host. Matrix products use cuBLAS; elementwise
//! functions, reductions, softmax, the class losses, indexing, joins and the optimizer
//! steps, `unfold`, `fold` and max pooling have their own kernels; the heavy ops without one here
//! (convolutions, which compose from `unfold`, `fold` and cuBLAS; average pooling and
//! interpolation, normalisation, attention, the LSTM cell) run as the `Backend` trait's default compositions. Random
//! numbers are drawn on the host from the global generator and uploaded, so `manual_seed`
//! gives the same values on every device.
//!
//! `f16` and `bf16` compute in `f32` and round each result once, as on the CPU: the
//! elementwise, cast, selection and indexing kernels have 16-bit variants, cuBLAS multiplies
//! 16-bit matrices summing in `f32`, and every other kernel runs in `f32` on operands
//! widened on the device (`backend/widen.rs`, shared with the CPU backend).

mod allocator;
mod compile;
mod device;
mod elementwise;
mod index;
mod kernel_source;
mod launch;
mod loss;
mod matmul;
mod memory;
mod optim;
mod pool;
mod reduce;
pub(crate) mod timer;
mod window;

pub use memory::CudaStorage;

use crate::backend::compose;
use crate::backend::validate::conv::check_window_view;
use crate::backend::validate::pool::{check_gather_planes, check_planes, check_scatter_planes};
use crate::backend::widen::{self, Narrow, Operand, low_of, operands};
use crate::backend::{AdamState, Backend, BinaryOp, CmpOp, ReduceOp, RmsPropState, Target, UnaryOp, View, validate};
use crate::dtype::DType;
use crate::host::{float_mode, random};
use crate::layout::Layout;
use crate::ops::attention::Attention;
use crate::ops::conv::SlidingWindow;
use crate::ops::loss::ClassLoss;
use crate::ops::lstm::LstmRun;
use crate::ops::optim::{AdamStep, RmsPropStep, SgdStep};
use crate::ops::pool::{PoolWindows, Resample};
use crate::random::Distribution;
use crate::storage::{CpuStorage, DeviceStorage, Storage};
use crate::{Device, DeviceMemory, Error, Result, Scalar};
use device::{Gpu, gpu};

/// The kernel-name suffix of a dtype.
pub(crate) fn sfx(d: DType) -> &'static str {
    match d {
        DType::U8 => "u8",
        DType::I64 => "i64",
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
    }
}

/// The device storage inside `s`, or an error for a storage of another device.
pub(crate) fn storage_of(s: &Storage) -> Result<&CudaStorage> {
    s.as_cuda().and_then(DeviceStorage::downcast_ref).ok_or_else(|| foreign(s.device()))
}

/// [`storage_of`] for a storage written in place.
pub(crate) fn storage_of_mut(s: &mut Storage) -> Result<&mut CudaStorage> {
    let device = s.device();
    s.as_cuda_mut().and_then(DeviceStorage::downcast_mut).ok_or_else(|| foreign(device))
}

fn foreign(d: Device) -> Error {
    Error::Device { device: d.to_string(), msg: "the CUDA backend was given a storage of this device".into() }
}

/// The backend of one GPU.
#[derive(Debug)]
pub struct CudaBackend {
    ordinal: usize,
}

const MAX_BACKENDS: usize = 16;

static BACKENDS: [CudaBackend; MAX_BACKENDS] = {
    let mut b = [const { CudaBackend { ordinal: 0 } }; MAX_BACKENDS];
    let mut i = 0;
    while i < MAX_BACKENDS {
        b[i].ordinal = i;
        i += 1;
    }
    b
};

/// The backend of GPU `ordinal`, initialising the device on first use; an error says why
/// it cannot be used (no driver, no such device, libraries missing, kernels failing to
/// build).
pub fn backend(ordinal: usize) -> Result<&'static CudaBackend> {
    gpu(ordinal)?;
    BACKENDS.get(ordinal).ok_or_else(|| Error::Device {
        device: format!("cuda:{ordinal}"),
        msg: format!("ember drives at most {MAX_BACKENDS} GPUs"),
    })
}

/// The number of CUDA devices the driver reports (0 without a driver or GPU).
pub fn device_count() -> usize {
    device::device_count()
}

/// The GPU's name and compute capability, e.g. `NVIDIA H100 80GB HBM3 (sm_90)`.
pub fn device_name(ordinal: usize) -> Result<String> {
    Ok(gpu(ordinal)?.name.clone())
}

impl CudaBackend {
    fn gpu(&self) -> Result<&'static Gpu> {
        gpu(self.ordinal)
    }

    /// The device storage of `s`, which must be on this backend's GPU.
    fn st<'a>(&self, s: &'a Storage) -> Result<&'a CudaStorage> {
        let c = storage_of(s)?;
        self.mine(c)?;
        Ok(c)
    }

    fn st_mut<'a>(&self, s: &'a mut Storage) -> Result<&'a mut CudaStorage> {
        let c = storage_of_mut(s)?;
        self.mine(c)?;
        Ok(c)
    }

    fn mine(&self, c: &CudaStorage) -> Result<()> {
        if c.ordinal() != self.ordinal {
            return Err(Error::Device {
                device: format!("cuda:{}", c.ordinal()),
                msg: format!("expected a storage on cuda:{}", self.ordinal),
            });
        }
        Ok(())
    }
}

/// A device storage as a [`Storage`].
fn stored(c: CudaStorage) -> Storage {
    Storage::Cuda(DeviceStorage::new(c))
}

fn wrap(r: Result<CudaStorage>) -> Result<Storage> {
    r.map(stored)
}

impl Backend for CudaBackend {
    fn device(&self) -> Device {
        Device::Cuda(self.ordinal)
    }

    fn synchronize(&self) -> Result<()> {
        self.gpu()?.synchronize()
    }

    fn memory(&self) -> Result<Option<DeviceMemory>> {
        let (allocated, peak_allocated, cached) = self.gpu()?.memory.stats();
        Ok(Some(DeviceMemory { allocated, peak_allocated, cached }))
    }

    fn reset_peak_memory(&self) -> Result<()> {
        self.gpu()?.memory.reset_peak();
        Ok(())
    }

    fn empty_cache(&self) -> Result<()> {
        let g = self.gpu()?;
        g.synchronize()?;
        g.memory.empty_cache();
        Ok(())
    }

    fn full(&self, numel: usize, value: Scalar, dtype: DType) -> Result<Storage> {
        wrap(elementwise::full(self.gpu()?, numel, value, dtype))
    }

    fn upload(&self, data: CpuStorage) -> Result<Storage> {
        wrap(memory::upload(self.gpu()?, &data))
    }

    fn download(&self, (s, l): View<'_>) -> Result<CpuStorage> {
        self.gpu()?;
        let l = validate::view("download", s, l)?;
        elementwise::download(self.st(s)?, &l)
    }

    fn cast(&self, (s, l): View<'_>, dtype: DType) -> Result<Storage> {
        self.gpu()?;
        let l = validate::view("to_dtype", s, l)?;
        wrap(elementwise::cast("to_dtype", self.st(s)?, &l, dtype))
    }

    fn unary(&self, op: UnaryOp, (s, l): View<'_>) -> Result<Storage> {
        self.gpu()?;
        let op = if s.dtype().is_half() { widen::scalar_as_pytorch(op, s.dtype()) } else { op };
        let l = validate::view(op.name(), s, l)?;
        wrap(elementwise::unary(op, self.st(s)?, &l))
    }

    fn binary(&self, op: BinaryOp, (a, la): View<'_>, (b, lb): View<'_>) -> Result<Storage> {
        self.gpu()?;
        let (la, lb) = (validate::view(op.name(), a, la)?, validate::view(op.name(), b, lb)?);
        validate::same_shape(op.name(), &la, &lb)?;
        wrap(elementwise::binary(op, self.st(a)?, &la, self.st(b)?, &lb))
    }

    fn compare(&self, op: CmpOp, (a, la): View<'_>, (b, lb): View<'_>) -> Result<Storage> {
        self.gpu()?;
        let (la, lb) = (validate::view(op.name(), a, la)?, validate::view(op.name(), b, lb)?);
        validate::same_shape(op.name(), &la, &lb)?;
        wrap(elementwise::compare(op, self.st(a)?, &la, self.st(b)?, &lb))
    }

    fn compare_scalar(&self, op: CmpOp, (a, la): View<'_>, scalar: Scalar) -> Result<Storage> {
        self.gpu()?;
        let la = validate::view(op.name(), a, la)?;
        wrap(elementwise::compare_scalar(op, self.st(a)?, &la, scalar))
    }

    fn where_cond(&self, (c, lc): View<'_>, (a, la): View<'_>, (b, lb): View<'_>) -> Result<Storage> {
        self.gpu()?;
        let lc = validate::view("where", c, lc)?;
        let (la, lb) = (validate::view("where", a, la)?, validate::view("where", b, lb)?);
        validate::same_shape("where", &lc, &la)?;
        validate::same_shape("where", &lc, &lb)?;
        wrap(elementwise::where_cond(self.st(c)?, &lc, self.st(a)?, &la, self.st(b)?, &lb))
    }

    fn unary_inplace(&self, op: UnaryOp, dst: &mut Storage, layout: &Layout) -> Result<()> {
        self.gpu()?;
        let op = if dst.dtype().is_half() { widen::scalar_as_pytorch(op, dst.dtype()) } else { op };
        let l = validate::view(op.name(), dst, layout)?;
        elementwise::unary_inplace(op, self.st_mut(dst)?, &l)
    }

    fn binary_inplace(&self, op: BinaryOp, dst: &mut Storage, layout: &Layout, (s, ls): View<'_>) -> Result<()> {
        self.gpu()?;
        let (ld, ls) = (validate::view(op.name(), dst, layout)?, validate::view(op.name(), s, ls)?);
        validate::same_shape(op.name(), &ld, &ls)?;
        let src = self.st(s)?;
        elementwise::binary_inplace(op, self.st_mut(dst)?, &ld, src, &ls)
    }

    fn copy_inplace(&self, dst: &mut Storage, layout: &Layout, (s, ls): View<'_>) -> Result<()> {
        self.gpu()?;
        let (ld, ls) = (validate::view("copy_", dst, layout)?, validate::view("copy_", s, ls)?);
        validate::same_shape("copy_", &ld, &ls)?;
        let src = self.st(s)?;
        elementwise::copy_inplace(self.st_mut(dst)?, &ld, src, &ls)
    }

    fn fill_inplace(&self, dst: &mut Storage, layout: &Layout, value: Scalar) -> Result<()> {
        self.gpu()?;
        let l = validate::view("fill_", dst, layout)?;
        elementwise::fill_inplace(self.st_mut(dst)?, &l, value)
    }

    fn reduce(&self, op: ReduceOp, (s, l): View<'_>, dims: &[usize]) -> Result<Storage> {
        self.gpu()?;
        if let Some(low) = low_of([s]) {
            let [a] = operands(self, [(s, l)])?;
            return self.reduce(op, a.view(), dims)?.narrow(self, low);
        }
        let name = op.name();
        let l = validate::view(name, s, l)?;
        validate::sorted_dims(name, &l, dims)?;
        if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) && dims.len() != 1 {
            return Err(Error::invalid(name, format!("expected exactly one dimension, got {dims:?}")));
        }
        wrap(reduce::reduce(op, self.st(s)?, &l, dims))
    }

    fn softmax(&self, (s, l): View<'_>, dim: usize, log: bool) -> Result<Storage> {
        self.gpu()?;
        if let Some(low) = low_of([s]) {
            let [a] = operands(self, [(s, l)])?;
            return self.softmax(a.view(), dim, log)?.narrow(self, low);
        }
        let l = validate::view("softmax", s, l)?;
        validate::dim("softmax", &l, dim)?;
        wrap(reduce::softmax(self.st(s)?, &l, dim, log))
    }

    fn class_loss(&self, (s, l): View<'_>, (t, lt): View<'_>, loss: &ClassLoss) -> Result<Storage> {
        self.gpu()?;
        if let Some(low) = low_of([s, t]) {
            let [x, y] = operands(self, [(s, l), (t, lt)])?;
            return self.class_loss(x.view(), y.view(), loss)?.narrow(self, low);
        }
        let op = loss.name();
        let (l, lt) = (validate::view(op, s, l)?, validate::view(op, t, lt)?);
        validate::class_loss(loss, (s.dtype(), &l), (t.dtype(), &lt), None)?;
        wrap(loss::forward(self.st(s)?, &l, self.st(t)?, &lt, loss))
    }

    fn class_loss_backward(
        &self,
        (s, l): View<'_>,
        (t, lt): View<'_>,
        (g, lg): View<'_>,
        loss: &ClassLoss,
    ) -> Result<Storage> {
        self.gpu()?;
        if let Some(low) = low_of([s, t, g]) {
            let [x, y, z] = operands(self, [(s, l), (t, lt), (g, lg)])?;
            return self.class_loss_backward(x.view(), y.view(), z.view(), loss)?.narrow(self, low);
        }
        let op = loss.name();
        let (l, lt, lg) = (validate::view(op, s, l)?, validate::view(op, t, lt)?, validate::view(op, g, lg)?);
        validate::class_loss(loss, (s.dtype(), &l), (t.dtype(), &lt), Some((g.dtype(), &lg)))?;
        wrap(loss::backward(self.st(s)?, &l, self.st(t)?, &lt, self.st(g)?, &lg, loss))
    }

    // The heavy ops below run as the `Backend` defaults' compositions; their 16-bit forms
    // compute in f32 and round once, as on the CPU (see `widen`).

    fn attention(&self, [q, k, v]: [View<'_>; 3], mask: Option<View<'_>>, spec: &Attention) -> Result<[Storage; 2]> {
        self.gpu()?;
        if let Some(low) = low_of([q.0, k.0, v.0].into_iter().chain(mask.map(|(s, _)| s))) {
            let [q, k, v] = operands(self, [q, k, v])?;
            let mask = Operand::optional(self, mask)?;
            let [out, lse] = self.attention([q.view(), k.view(), v.view()], mask.as_ref().map(Operand::view), spec)?;
            // The log-sum-exp stays f32, as the CPU keeps it (and PyTorch): the backward
            // recomputes the probabilities from it.
            return Ok([out.narrow(self, low)?, lse]);
        }
        compose::attention::forward(self, [q, k, v], mask, spec)
    }

    fn attention_backward(
        &self,
        [q, k, v]: [View<'_>; 3],
        mask: Option<View<'_>>,
        [o, lse, g]: [View<'_>; 3],
        spec: &Attention,
    ) -> Result<[Storage; 3]> {
        self.gpu()?;
        let all = [q, k, v, o, lse, g];
        if let Some(low) = low_of(all.iter().map(|v| v.0).chain(mask.map(|(s, _)| s))) {
            let [q, k, v, o, lse, g] = operands(self, all)?;
            let mask = Operand::optional(self, mask)?;
            let m = mask.as_ref().map(Operand::view);
            return self
                .attention_backward([q.view(), k.view(), v.view()], m, [o.view(), lse.view(), g.view()], spec)?
                .narrow(self, low);
        }
        compose::attention::backward(self, [q, k, v], mask, [o, lse, g], spec)
    }

    fn lstm_cell(&self, a: View<'_>, gi: View<'_>, c: View<'_>, bh: (usize, usize)) -> Result<Storage> {
        self.gpu()?;
        if let Some(low) = low_of([a.0, gi.0, c.0]) {
            let [x, y, z] = operands(self, [a, gi, c])?;
            return self.lstm_cell(x.view(), y.view(), z.view(), bh)?.narrow(self, low);
        }
        compose::lstm::forward(self, a, gi, c, bh)
    }

    fn lstm_cell_backward(
        &self,
        y: View<'_>,
        gy: Option<View<'_>>,
        dh: View<'_>,
        dc: View<'_>,
        c: View<'_>,
        bh: (usize, usize),
    ) -> Result<[Storage; 2]> {
        self.gpu()?;
        if let Some(low) = low_of([y.0, dh.0, dc.0, c.0].into_iter().chain(gy.map(|(s, _)| s))) {
            let [y, dh, dc, c] = operands(self, [y, dh, dc, c])?;
            let gy = Operand::optional(self, gy)?;
            let gy = gy.as_ref().map(Operand::view);
            return self.lstm_cell_backward(y.view(), gy, dh.view(), dc.view(), c.view(), bh)?.narrow(self, low);
        }
        compose::lstm::backward(self, y, gy, dh, dc, c, bh)
    }

    fn lstm_sequence(&self, gi: View<'_>, w: View<'_>, h0: View<'_>, c0: View<'_>, run: &LstmRun) -> Result<Storage> {
        self.gpu()?;
        if let Some(low) = low_of([gi.0, w.0, h0.0, c0.0]) {
            let [a, b, c, d] = operands(self, [gi, w, h0, c0])?;
            return self.lstm_sequence(a.view(), b.view(), c.view(), d.view(), run)?.narrow(self, low);
        }
        compose::lstm::sequence(self, gi, w, h0, c0, run)
    }

    fn lstm_sequence_backward(
        &self,
        y: View<'_>,
        gy: View<'_>,
        w: View<'_>,
        c0: View<'_>,
        run: &LstmRun,
    ) -> Result<[Storage; 3]> {
        self.gpu()?;
        if let Some(low) = low_of([y.0, gy.0, w.0, c0.0]) {
            let [a, b, c, d] = operands(self, [y, gy, w, c0])?;
            return self.lstm_sequence_backward(a.view(), b.view(), c.view(), d.view(), run)?.narrow(self, low);
        }
        compose::lstm::sequence_backward(self, y, gy, w, c0, run)
    }

    fn channel_norm(
        &self,
        x: View<'_>,
        weight: Option<View<'_>>,
        bias: Option<View<'_>>,
        eps: f64,
    ) -> Result<[Storage; 3]> {
        self.gpu()?;
        if let Some(low) = low_of([x.0].into_iter().chain(weight.map(|v| v.0)).chain(bias.map(|v| v.0))) {
            return widen::channel_norm(self, low, x, weight, bias, eps);
        }
        compose::norm::channel_norm(self, x, weight, bias, eps)
    }

    fn channel_norm_backward(
        &self,
        x: View<'_>,
        grad: View<'_>,
        mean: View<'_>,
        var: View<'_>,
        weight: Option<View<'_>>,
        eps: f64,
    ) -> Result<[Storage; 3]> {
        self.gpu()?;
        if let Some(low) = low_of([x.0, grad.0, mean.0, var.0].into_iter().chain(weight.map(|v| v.0))) {
            return widen::channel_norm_backward(self, low, [x, grad, mean, var], weight, eps);
        }
        compose::norm::channel_norm_backward(self, x, grad, mean, var, weight, eps)
    }

    fn resample2d(&self, (s, l): View<'_>, map: &Resample) -> Result<Storage> {
        self.gpu()?;
        if let Some(low) = low_of([s]) {
            let [a] = operands(self, [(s, l)])?;
            return self.resample2d(a.view(), map)?.narrow(self, low);
        }
        compose::pool::resample2d(self, (s, l), map)
    }

    fn matmul(&self, (a, la): View<'_>, (b, lb): View<'_>) -> Result<Storage> {
        self.gpu()?;
        let (la, lb) = (validate::view("matmul", a, la)?, validate::view("matmul", b, lb)?);
        validate::matmul(&la, &lb)?;
        if !a.dtype().is_float() || !b.dtype().is_float() {
            // cuBLAS has no integer products: the elementwise composition computes them.
            return crate::backend::compose::matmul(self, (a, &la), (b, &lb));
        }
        wrap(matmul::matmul(self.st(a)?, &la, self.st(b)?, &lb))
    }

    fn unfold(&self, (s, l): View<'_>, window: &SlidingWindow) -> Result<Storage> {
        self.gpu()?;
        if let Some(low) = low_of([s]) {
            let [a] = operands(self, [(s, l)])?;
            return self.unfold(a.view(), window)?.narrow(self, low);
        }
        let (n, c, l) = check_window_view("unfold", window, s, l, false)?;
        wrap(window::unfold(self.st(s)?, &l, window, (n, c)))
    }

    fn fold(&self, (s, l): View<'_>, window: &SlidingWindow) -> Result<Storage> {
        self.gpu()?;
        if let Some(low) = low_of([s]) {
            let [a] = operands(self, [(s, l)])?;
            return self.fold(a.view(), window)?.narrow(self, low);
        }
        let (n, c, l) = check_window_view("fold", window, s, l, true)?;
        wrap(window::fold(self.st(s)?, &l, window, (n, c)))
    }

    fn max_pool2d(&self, (s, l): View<'_>, windows: &PoolWindows) -> Result<(Storage, Storage)> {
        self.gpu()?;
        if let Some(low) = low_of([s]) {
            let [a] = operands(self, [(s, l)])?;
            return self.max_pool2d(a.view(), windows)?.narrow(self, low);
        }
        windows.check("max_pool2d")?;
        let l = check_planes("max_pool2d", s, l, windows.input(), windows.output(), None)?;
        let (values, index) = pool::max_pool2d(self.st(s)?, &l, windows)?;
        Ok((stored(values), stored(index)))
    }

    fn gather_planes(&self, (s, l): View<'_>, (si, li): View<'_>) -> Result<Storage> {
        self.gpu()?;
        if let Some(low) = low_of([s]) {
            let [a] = operands(self, [(s, l)])?;
            return self.gather_planes(a.view(), (si, li))?.narrow(self, low);
        }
        let (l, li) = check_gather_planes(s, l, si, li)?;
        wrap(pool::gather_planes(self.st(s)?, &l, self.st(si)?, &li))
    }

    fn scatter_planes(&self, (s, l): View<'_>, (si, li): View<'_>, plane: [usize; 2]) -> Result<Storage> {
        self.gpu()?;
        if let Some(low) = low_of([s]) {
            let [a] = operands(self, [(s, l)])?;
            return self.scatter_planes(a.view(), (si, li), plane)?.narrow(self, low);
        }
        let (l, li) = check_scatter_planes(s, l, si, li, plane)?;
        wrap(pool::scatter_planes(self.st(s)?, &l, self.st(si)?, &li, plane))
    }

    fn index_select(&self, (s, l): View<'_>, dim: usize, (i, li): View<'_>) -> Result<Storage> {
        self.gpu()?;
        let (l, li) = (validate::view("index_select", s, l)?, validate::view("index_select", i, li)?);
        validate::dim("index_select", &l, dim)?;
        wrap(index::index_select(self.st(s)?, &l, dim, self.st(i)?, &li))
    }

    fn gather(&self, (s, l): View<'_>, dim: usize, (i, li): View<'_>) -> Result<Storage> {
        self.gpu()?;
        let (l, li) = (validate::view("gather", s, l)?, validate::view("gather", i, li)?);
        validate::dim("gather", &l, dim)?;
        validate::index_within("gather", &li, &l, dim, "input")?;
        wrap(index::gather(self.st(s)?, &l, dim, self.st(i)?, &li))
    }

    fn scatter_add(&self, (d, ld): View<'_>, dim: usize, (i, li): View<'_>, (s, ls): View<'_>) -> Result<Storage> {
        self.gpu()?;
        if let Some(low) = low_of([d, s]) {
            // No 16-bit atomics: the sums are made in f32 and rounded once.
            let [x, y] = operands(self, [(d, ld), (s, ls)])?;
            return self.scatter_add(x.view(), dim, (i, li), y.view())?.narrow(self, low);
        }
        let ld = validate::view("scatter_add", d, ld)?;
        let (li, ls) = (validate::view("scatter_add", i, li)?, validate::view("scatter_add", s, ls)?);
        validate::dim("scatter_add", &ld, dim)?;
        validate::index_within("scatter_add", &li, &ld, dim, "destination")?;
        validate::index_within("scatter_add", &li, &ls, usize::MAX, "source")?;
        wrap(index::scatter_add(self.st(d)?, &ld, dim, self.st(i)?, &li, self.st(s)?, &ls))
    }

    fn random(&self, numel: usize, dist: Distribution, dtype: DType) -> Result<Storage> {
        if dtype.is_half() {
            // Drawn in f32 and rounded, as the CPU backend draws 16-bit floats.
            self.gpu()?;
            return self.random(numel, dist, DType::F32)?.narrow(self, dtype);
        }
        // Drawn on the host from the global generator, in the kernels' float mode as on the
        // CPU, so that a seeded program gets the same numbers on every device.
        let host = {
            let _mode = float_mode::enter();
            random::random(numel, dist, dtype)?
        };
        self.upload(host)
    }

    fn randperm(&self, n: usize) -> Result<Storage> {
        self.upload(random::randperm(n)?)
    }

    fn cat(&self, srcs: &[View<'_>], dim: usize) -> Result<Storage> {
        self.gpu()?;
        let (layouts, shape) = validate::cat(srcs, dim)?;
        let views = srcs.iter().zip(&layouts).map(|((s, _), l)| Ok((self.st(s)?, &**l))).collect::<Result<Vec<_>>>()?;
        wrap(index::cat(&views, dim, &shape))
    }

    fn power_sum(&self, (s, l): View<'_>, p: f64) -> Result<f64> {
        self.gpu()?;
        if low_of([s]).is_some() {
            let [a] = operands(self, [(s, l)])?;
            return self.power_sum(a.view(), p);
        }
        let l = validate::view("power_sum", s, l)?;
        reduce::power_sum(self.st(s)?, &l, p)
    }

    fn sgd_step(&self, param: Target<'_>, grad: View<'_>, buffer: Option<Target<'_>>, hp: &SgdStep) -> Result<()> {
        self.gpu()?;
        if widen::any_low([&*param.0, grad.0].into_iter().chain(buffer.as_ref().map(|b| &*b.0))) {
            return widen::sgd_step(self, param, grad, buffer, hp);
        }
        self.st(param.0)?;
        self.st(grad.0)?;
        optim::sgd_step(param, grad, buffer, hp)
    }

    fn adam_step(&self, param: Target<'_>, grad: View<'_>, state: AdamState<'_>, hp: &AdamStep) -> Result<()> {
        self.gpu()?;
        let max = state.max_exp_avg_sq.as_ref().map(|t| &*t.0);
        if widen::any_low([&*param.0, grad.0, &*state.exp_avg.0, &*state.exp_avg_sq.0].into_iter().chain(max)) {
            return widen::adam_step(self, param, grad, state, hp);
        }
        self.st(param.0)?;
        self.st(grad.0)?;
        optim::adam_step(param, grad, state, hp)
    }

    fn rmsprop_step(&self, param: Target<'_>, grad: View<'_>, state: RmsPropState<'_>, hp: &RmsPropStep) -> Result<()> {
        self.gpu()?;
        let optional = [&state.grad_avg, &state.momentum_buffer];
        let extra = optional.into_iter().filter_map(|t| t.as_ref().map(|t| &*t.0));
        if widen::any_low([&*param.0, grad.0, &*state.square_avg.0].into_iter().chain(extra)) {
            return widen::rmsprop_step(self, param, grad, state, hp);
        }
        self.st(param.0)?;
        self.st(grad.0)?;
        optim::rmsprop_step(param, grad, state, hp)
    }
}

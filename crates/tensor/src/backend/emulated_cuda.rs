//! An emulated `Device::Cuda(0)` for testing the device plumbing on machines without a GPU,
//! in builds without the `cuda` feature: off until [`Device::emulate_cuda`] turns it on.
//!
//! Its storages are [`Storage::Cuda`] values, so every check that compares devices, every
//! `to_device` and every tensor that should follow its inputs onto the device behaves as
//! it would with a GPU, while the data stays in host memory and every kernel is the CPU
//! backend's. Results are therefore bit-identical to the CPU's: a training run on
//! `Device::Cuda(0)` that differs in any bit from the same run on the CPU has a tensor
//! that left the device or was made on the wrong one. What it cannot show is anything
//! about the real GPU kernels (their rounding, their speed, asynchronous errors).
//!
//! The emulation has one device, ordinal 0. A storage of another device handed to its
//! backend is an [`Error::Device`], never a reinterpretation of the data.

use super::attention::Attention;
use super::cpu::CpuBackend;
use super::pool::{PoolWindows, Resample};
use super::{
    AdamState, AdamStep, Backend, BinaryOp, ClassLoss, CmpOp, ConvGeometry, ReduceOp, RmsPropState, RmsPropStep,
    SgdStep, SlidingWindow, Target, UnaryOp, View,
};
use crate::layout::Layout;
use crate::random::Distribution;
use crate::storage::{CpuStorage, Storage};
use crate::{DType, Device, Error, Result, Scalar};
use std::sync::atomic::{AtomicBool, Ordering};

/// The data of a tensor on the emulated device: a host storage in disguise.
#[derive(Debug)]
pub struct CudaStorage {
    // Always `Storage::Cpu`: only `wrap` builds a `CudaStorage`, from CPU backend results.
    // Boxed as a whole `Storage` (not a `CpuStorage`) so that the CPU backend, which takes
    // `&Storage`, can be handed a reference to it without a copy.
    inner: Box<Storage>,
}

impl CudaStorage {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        self.inner.dtype()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// The device ordinal: always 0, the emulation's only device.
    pub fn ordinal(&self) -> usize {
        0
    }
}

/// The backend of the emulated `cuda:0`: the CPU backend's kernels on storages marked as
/// living on the device.
#[derive(Debug, Clone, Copy, Default)]
pub struct CudaBackend;

static BACKEND: CudaBackend = CudaBackend;

/// The backend of `cuda:{ordinal}`: ordinal 0 only, the emulation having one device.
pub fn backend(ordinal: usize) -> Result<&'static CudaBackend> {
    if ordinal != 0 {
        return Err(Error::Device {
            device: Device::Cuda(ordinal).to_string(),
            msg: "the emulated CUDA backend (`Device::emulate_cuda`) has one device, cuda:0".into(),
        });
    }
    Ok(&BACKEND)
}

const DEVICE: Device = Device::Cuda(0);

/// Whether [`Device::emulate_cuda`] has turned the emulation on.
static ON: AtomicBool = AtomicBool::new(false);

/// Turns the emulation on for the rest of the process.
pub(crate) fn turn_on() {
    ON.store(true, Ordering::Relaxed);
}

/// Whether the emulation is on: `cuda:0` exists only then.
pub(crate) fn is_on() -> bool {
    ON.load(Ordering::Relaxed)
}

fn foreign(op: &'static str, s: &Storage) -> Error {
    Error::Device {
        device: s.device().to_string(),
        msg: format!("{op}: the emulated {DEVICE} backend was given a storage of this device"),
    }
}

fn wrap(s: Storage) -> Storage {
    Storage::Cuda(CudaStorage { inner: Box::new(s) })
}

fn wrap_r(r: Result<Storage>) -> Result<Storage> {
    r.map(wrap)
}

fn wrap_n<const N: usize>(r: Result<[Storage; N]>) -> Result<[Storage; N]> {
    r.map(|a| a.map(wrap))
}

/// The host storage behind a device storage.
fn host<'a>(op: &'static str, s: &'a Storage) -> Result<&'a Storage> {
    match s {
        Storage::Cuda(c) => Ok(&c.inner),
        other => Err(foreign(op, other)),
    }
}

fn host_mut<'a>(op: &'static str, s: &'a mut Storage) -> Result<&'a mut Storage> {
    match s {
        Storage::Cuda(c) => Ok(&mut c.inner),
        other => Err(foreign(op, other)),
    }
}

fn view<'a>(op: &'static str, (s, l): View<'a>) -> Result<View<'a>> {
    Ok((host(op, s)?, l))
}

fn opt_view<'a>(op: &'static str, v: Option<View<'a>>) -> Result<Option<View<'a>>> {
    v.map(|v| view(op, v)).transpose()
}

fn target<'a>(op: &'static str, (s, l): Target<'a>) -> Result<Target<'a>> {
    Ok((host_mut(op, s)?, l))
}

fn opt_target<'a>(op: &'static str, t: Option<Target<'a>>) -> Result<Option<Target<'a>>> {
    t.map(|t| target(op, t)).transpose()
}

impl Backend for CudaBackend {
    fn device(&self) -> Device {
        DEVICE
    }

    fn synchronize(&self) -> Result<()> {
        CpuBackend.synchronize()
    }

    fn full(&self, numel: usize, value: Scalar, dtype: DType) -> Result<Storage> {
        wrap_r(CpuBackend.full(numel, value, dtype))
    }

    fn upload(&self, data: CpuStorage) -> Result<Storage> {
        Ok(wrap(Storage::Cpu(data)))
    }

    fn download(&self, src: View<'_>) -> Result<CpuStorage> {
        CpuBackend.download(view("download", src)?)
    }

    fn cast(&self, src: View<'_>, dtype: DType) -> Result<Storage> {
        wrap_r(CpuBackend.cast(view("to_dtype", src)?, dtype))
    }

    fn unary(&self, op: UnaryOp, src: View<'_>) -> Result<Storage> {
        wrap_r(CpuBackend.unary(op, view(op.name(), src)?))
    }

    fn binary(&self, op: BinaryOp, a: View<'_>, b: View<'_>) -> Result<Storage> {
        let name = op.name();
        wrap_r(CpuBackend.binary(op, view(name, a)?, view(name, b)?))
    }

    fn compare(&self, op: CmpOp, a: View<'_>, b: View<'_>) -> Result<Storage> {
        let name = op.name();
        wrap_r(CpuBackend.compare(op, view(name, a)?, view(name, b)?))
    }

    fn compare_scalar(&self, op: CmpOp, a: View<'_>, scalar: Scalar) -> Result<Storage> {
        wrap_r(CpuBackend.compare_scalar(op, view(op.name(), a)?, scalar))
    }

    fn where_cond(&self, cond: View<'_>, a: View<'_>, b: View<'_>) -> Result<Storage> {
        let op = "where";
        wrap_r(CpuBackend.where_cond(view(op, cond)?, view(op, a)?, view(op, b)?))
    }

    fn unary_inplace(&self, op: UnaryOp, dst: &mut Storage, layout: &Layout) -> Result<()> {
        CpuBackend.unary_inplace(op, host_mut(op.name(), dst)?, layout)
    }

    fn binary_inplace(&self, op: BinaryOp, dst: &mut Storage, layout: &Layout, src: View<'_>) -> Result<()> {
        let name = op.name();
        let src = view(name, src)?;
        CpuBackend.binary_inplace(op, host_mut(name, dst)?, layout, src)
    }

    fn copy_inplace(&self, dst: &mut Storage, layout: &Layout, src: View<'_>) -> Result<()> {
        let src = view("copy_", src)?;
        CpuBackend.copy_inplace(host_mut("copy_", dst)?, layout, src)
    }

    fn fill_inplace(&self, dst: &mut Storage, layout: &Layout, value: Scalar) -> Result<()> {
        CpuBackend.fill_inplace(host_mut("fill_", dst)?, layout, value)
    }

    fn reduce(&self, op: ReduceOp, src: View<'_>, dims: &[usize]) -> Result<Storage> {
        wrap_r(CpuBackend.reduce(op, view(op.name(), src)?, dims))
    }

    fn softmax(&self, src: View<'_>, dim: usize, log: bool) -> Result<Storage> {
        wrap_r(CpuBackend.softmax(view("softmax", src)?, dim, log))
    }

    fn class_loss(&self, scores: View<'_>, target: View<'_>, loss: &ClassLoss) -> Result<Storage> {
        let op = loss.name();
        wrap_r(CpuBackend.class_loss(view(op, scores)?, view(op, target)?, loss))
    }

    fn class_loss_backward(
        &self,
        scores: View<'_>,
        target: View<'_>,
        grad: View<'_>,
        loss: &ClassLoss,
    ) -> Result<Storage> {
        let op = loss.name();
        wrap_r(CpuBackend.class_loss_backward(view(op, scores)?, view(op, target)?, view(op, grad)?, loss))
    }

    fn attention(&self, [q, k, v]: [View<'_>; 3], mask: Option<View<'_>>, spec: &Attention) -> Result<[Storage; 2]> {
        let op = super::attention::OP;
        let qkv = [view(op, q)?, view(op, k)?, view(op, v)?];
        wrap_n(CpuBackend.attention(qkv, opt_view(op, mask)?, spec))
    }

    fn attention_backward(
        &self,
        [q, k, v]: [View<'_>; 3],
        mask: Option<View<'_>>,
        [o, lse, g]: [View<'_>; 3],
        spec: &Attention,
    ) -> Result<[Storage; 3]> {
        let op = super::attention::OP;
        let qkv = [view(op, q)?, view(op, k)?, view(op, v)?];
        let saved = [view(op, o)?, view(op, lse)?, view(op, g)?];
        wrap_n(CpuBackend.attention_backward(qkv, opt_view(op, mask)?, saved, spec))
    }

    fn lstm_cell(&self, a: View<'_>, gi: View<'_>, c: View<'_>, bh: (usize, usize)) -> Result<Storage> {
        let op = "lstm_cell";
        wrap_r(CpuBackend.lstm_cell(view(op, a)?, view(op, gi)?, view(op, c)?, bh))
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
        let op = "lstm_cell_backward";
        wrap_n(CpuBackend.lstm_cell_backward(
            view(op, y)?,
            opt_view(op, gy)?,
            view(op, dh)?,
            view(op, dc)?,
            view(op, c)?,
            bh,
        ))
    }

    fn lstm_sequence(
        &self,
        gi: View<'_>,
        w_hh: View<'_>,
        h0: View<'_>,
        c0: View<'_>,
        run: &super::lstm::LstmRun,
    ) -> Result<Storage> {
        let op = "lstm_sequence";
        wrap_r(CpuBackend.lstm_sequence(view(op, gi)?, view(op, w_hh)?, view(op, h0)?, view(op, c0)?, run))
    }

    fn lstm_sequence_backward(
        &self,
        y: View<'_>,
        gy: View<'_>,
        w_hh: View<'_>,
        c0: View<'_>,
        run: &super::lstm::LstmRun,
    ) -> Result<[Storage; 3]> {
        let op = "lstm_sequence_backward";
        wrap_n(CpuBackend.lstm_sequence_backward(view(op, y)?, view(op, gy)?, view(op, w_hh)?, view(op, c0)?, run))
    }

    fn matmul(&self, a: View<'_>, b: View<'_>) -> Result<Storage> {
        wrap_r(CpuBackend.matmul(view("matmul", a)?, view("matmul", b)?))
    }

    fn index_select(&self, src: View<'_>, dim: usize, index: View<'_>) -> Result<Storage> {
        let op = "index_select";
        wrap_r(CpuBackend.index_select(view(op, src)?, dim, view(op, index)?))
    }

    fn gather(&self, src: View<'_>, dim: usize, index: View<'_>) -> Result<Storage> {
        wrap_r(CpuBackend.gather(view("gather", src)?, dim, view("gather", index)?))
    }

    fn scatter_add(&self, dst: View<'_>, dim: usize, index: View<'_>, src: View<'_>) -> Result<Storage> {
        let op = "scatter_add";
        wrap_r(CpuBackend.scatter_add(view(op, dst)?, dim, view(op, index)?, view(op, src)?))
    }

    fn masked_fill(&self, src: View<'_>, mask: View<'_>, value: Scalar) -> Result<Storage> {
        let op = "masked_fill";
        wrap_r(CpuBackend.masked_fill(view(op, src)?, view(op, mask)?, value))
    }

    fn triangle(&self, src: View<'_>, diagonal: i64, upper: bool) -> Result<Storage> {
        let op = if upper { "triu" } else { "tril" };
        wrap_r(CpuBackend.triangle(view(op, src)?, diagonal, upper))
    }

    fn conv2d(
        &self,
        input: View<'_>,
        weight: View<'_>,
        bias: Option<View<'_>>,
        geom: &ConvGeometry,
    ) -> Result<Storage> {
        let op = "conv2d";
        wrap_r(CpuBackend.conv2d(view(op, input)?, view(op, weight)?, opt_view(op, bias)?, geom))
    }

    fn conv_transpose2d(
        &self,
        input: View<'_>,
        weight: View<'_>,
        bias: Option<View<'_>>,
        geom: &ConvGeometry,
    ) -> Result<Storage> {
        let op = "conv_transpose2d";
        wrap_r(CpuBackend.conv_transpose2d(view(op, input)?, view(op, weight)?, opt_view(op, bias)?, geom))
    }

    fn conv2d_weight_grad(&self, input: View<'_>, grad: View<'_>, geom: &ConvGeometry) -> Result<Storage> {
        let op = "conv2d_weight_grad";
        wrap_r(CpuBackend.conv2d_weight_grad(view(op, input)?, view(op, grad)?, geom))
    }

    fn unfold(&self, input: View<'_>, window: &SlidingWindow) -> Result<Storage> {
        wrap_r(CpuBackend.unfold(view("unfold", input)?, window))
    }

    fn fold(&self, input: View<'_>, window: &SlidingWindow) -> Result<Storage> {
        wrap_r(CpuBackend.fold(view("fold", input)?, window))
    }

    fn channel_norm(
        &self,
        input: View<'_>,
        weight: Option<View<'_>>,
        bias: Option<View<'_>>,
        eps: f64,
    ) -> Result<[Storage; 3]> {
        let op = "channel_norm";
        wrap_n(CpuBackend.channel_norm(view(op, input)?, opt_view(op, weight)?, opt_view(op, bias)?, eps))
    }

    fn channel_norm_backward(
        &self,
        input: View<'_>,
        grad: View<'_>,
        mean: View<'_>,
        var: View<'_>,
        weight: Option<View<'_>>,
        eps: f64,
    ) -> Result<[Storage; 3]> {
        let op = "channel_norm_backward";
        wrap_n(CpuBackend.channel_norm_backward(
            view(op, input)?,
            view(op, grad)?,
            view(op, mean)?,
            view(op, var)?,
            opt_view(op, weight)?,
            eps,
        ))
    }

    fn max_pool2d(&self, input: View<'_>, windows: &PoolWindows) -> Result<(Storage, Storage)> {
        let (values, indices) = CpuBackend.max_pool2d(view("max_pool2d", input)?, windows)?;
        Ok((wrap(values), wrap(indices)))
    }

    fn gather_planes(&self, src: View<'_>, index: View<'_>) -> Result<Storage> {
        let op = "gather_planes";
        wrap_r(CpuBackend.gather_planes(view(op, src)?, view(op, index)?))
    }

    fn scatter_planes(&self, src: View<'_>, index: View<'_>, plane: [usize; 2]) -> Result<Storage> {
        let op = "scatter_planes";
        wrap_r(CpuBackend.scatter_planes(view(op, src)?, view(op, index)?, plane))
    }

    fn resample2d(&self, input: View<'_>, map: &Resample) -> Result<Storage> {
        wrap_r(CpuBackend.resample2d(view("resample2d", input)?, map))
    }

    fn random(&self, numel: usize, dist: Distribution, dtype: DType) -> Result<Storage> {
        // The CPU backend draws from the global generator in element order, as the trait
        // asks, so seeded runs draw the same numbers on both devices.
        wrap_r(CpuBackend.random(numel, dist, dtype))
    }

    fn randperm(&self, n: usize) -> Result<Storage> {
        wrap_r(CpuBackend.randperm(n))
    }

    fn cat(&self, srcs: &[View<'_>], dim: usize) -> Result<Storage> {
        let hosts = srcs.iter().map(|&v| view("cat", v)).collect::<Result<Vec<_>>>()?;
        wrap_r(CpuBackend.cat(&hosts, dim))
    }

    fn power_sum(&self, src: View<'_>, p: f64) -> Result<f64> {
        CpuBackend.power_sum(view("power_sum", src)?, p)
    }

    fn sgd_step(
        &self,
        param: Target<'_>,
        grad: View<'_>,
        momentum_buffer: Option<Target<'_>>,
        hp: &SgdStep,
    ) -> Result<()> {
        let op = "sgd_step";
        CpuBackend.sgd_step(target(op, param)?, view(op, grad)?, opt_target(op, momentum_buffer)?, hp)
    }

    fn adam_step(&self, param: Target<'_>, grad: View<'_>, state: AdamState<'_>, hp: &AdamStep) -> Result<()> {
        let op = "adam_step";
        let state = AdamState {
            exp_avg: target(op, state.exp_avg)?,
            exp_avg_sq: target(op, state.exp_avg_sq)?,
            max_exp_avg_sq: opt_target(op, state.max_exp_avg_sq)?,
        };
        CpuBackend.adam_step(target(op, param)?, view(op, grad)?, state, hp)
    }

    fn rmsprop_step(&self, param: Target<'_>, grad: View<'_>, state: RmsPropState<'_>, hp: &RmsPropStep) -> Result<()> {
        let op = "rmsprop_step";
        let state = RmsPropState {
            square_avg: target(op, state.square_avg)?,
            grad_avg: opt_target(op, state.grad_avg)?,
            momentum_buffer: opt_target(op, state.momentum_buffer)?,
        };
        CpuBackend.rmsprop_step(target(op, param)?, view(op, grad)?, state, hp)
    }
}

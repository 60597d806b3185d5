//! The LibTorch backend (`Device::TorchCpu`, printed `torch-cpu`, cargo feature
//! `libtorch`): ember's tensors, autograd, layers and optimizers on PyTorch's CPU kernels,
//! through the `tch` bindings of LibTorch.
//!
//! A storage is one flat LibTorch tensor (`storage`); a view reaches a kernel as
//! `as_strided` over it with ember's shape, strides and offset, so views, expansions and
//! offsets cost no copy, and a kernel's output becomes a storage as it is. Host data comes
//! onto the device without a copy (the tensor borrows ember's buffer, which the storage
//! keeps) and goes back with one copy, made by LibTorch's copy kernel into ember's buffer.
//!
//! Every method validates its views with `backend/validate` first, as the CPU backend
//! does, then calls PyTorch's kernel for the op: the elementwise tables (`elementwise`),
//! reductions and softmax (`reduce`), indexing and joins (`index`), matrix products,
//! convolutions with their gradients, `unfold` and `fold` (`conv`), pooling and
//! resampling (`pool`), batch and layer normalisation (`norm`, `layer_norm`), the class
//! losses (`loss`), attention (`attention`), the optimizer steps (`optim`) and gradient
//! unscaling. The LSTM steps, whose slot layout is ember's own, run as the trait's
//! compositions of these kernels.
//! Random numbers are drawn on the host from the global generator, so `manual_seed` gives
//! the same numbers on every device. ATen is told to run on one thread per op unless
//! ember's thread setting says otherwise (`threads`).

mod attention;
mod conv;
mod elementwise;
mod index;
mod layer_norm;
mod loss;
mod norm;
mod optim;
mod pool;
mod reduce;
mod storage;

pub use storage::TorchStorage;

use crate::backend::compose;
use crate::backend::validate::layer_norm as layer_norm_check;
use crate::backend::widen::{InPlace, Narrow, Operand, low_of, operands};
use crate::backend::{AdamState, Backend, BinaryOp, CmpOp, ReduceOp, RmsPropState, Target, UnaryOp, View, validate};
use crate::dtype::DType;
use crate::host::{float_mode, random};
use crate::layout::Layout;
use crate::ops::attention::Attention;
use crate::ops::conv::{ConvGeometry, SlidingWindow};
use crate::ops::loss::ClassLoss;
use crate::ops::lstm::LstmRun;
use crate::ops::optim::{AdamStep, RmsPropStep, SgdStep};
use crate::ops::pool::{PoolWindows, Resample};
use crate::random::Distribution;
use crate::storage::{CpuStorage, Storage};
use crate::{Device, Error, Result, Scalar};
use storage::{DEVICE, TORCH_DEVICE, kind, storage_of, storage_of_mut, stored, torch_err};
use tch::Tensor;

/// The LibTorch backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct TorchBackend;

/// The validated view `(s, l)` as a LibTorch tensor over the storage's memory.
fn view(op: &'static str, (s, l): View<'_>) -> Result<Tensor> {
    let l = validate::view(op, s, l)?;
    storage_of(op, s)?.view(op, &l)
}

/// [`view`] for an optional operand.
fn view_opt(op: &'static str, v: Option<View<'_>>) -> Result<Option<Tensor>> {
    v.map(|v| view(op, v)).transpose()
}

/// The elements of `dst` that `layout` addresses, as a LibTorch tensor to write through.
fn target(op: &'static str, dst: &mut Storage, layout: &Layout) -> Result<Tensor> {
    let l = validate::view(op, dst, layout)?;
    storage_of_mut(op, dst)?.view(op, &l)
}

/// A kernel's fresh output as a storage.
fn out(op: &'static str, t: Tensor) -> Result<Storage> {
    Ok(stored(TorchStorage::owning(op, t)?))
}

/// Writes `value` into the target view (converting its dtype).
fn write(op: &'static str, mut dst: Tensor, value: &Tensor) -> Result<()> {
    dst.f_copy_(value).map_err(torch_err(op))
}

impl TorchBackend {
    /// Runs `f` with ATen's kernels in ember's float mode (flushing subnormals or not, as
    /// ember's kernels do) and on ember's thread budget.
    fn run<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
        threads::sync();
        let _mode = float_mode::enter();
        f()
    }
}

mod threads {
    //! ATen's intra-op threads follow ember's thread setting.

    use std::sync::atomic::{AtomicUsize, Ordering};

    static SET: AtomicUsize = AtomicUsize::new(0);

    /// Tells ATen to use as many threads as ember does, when that setting has changed.
    pub(super) fn sync() {
        let want = crate::threading::num_threads().max(1);
        if SET.swap(want, Ordering::Relaxed) != want {
            tch::set_num_threads(want as i32);
        }
    }
}

impl Backend for TorchBackend {
    fn device(&self) -> Device {
        DEVICE
    }

    fn full(&self, numel: usize, value: Scalar, dtype: DType) -> Result<Storage> {
        let op = "full";
        let t = Tensor::f_full([numel as i64], elementwise::element(value, dtype), (kind(dtype), TORCH_DEVICE))
            .map_err(torch_err(op))?;
        out(op, t)
    }

    fn upload(&self, data: CpuStorage) -> Result<Storage> {
        Ok(stored(TorchStorage::borrowing(data)?))
    }

    fn download(&self, (s, l): View<'_>) -> Result<CpuStorage> {
        let l = validate::view("download", s, l)?;
        storage_of("download", s)?.download("download", &l)
    }

    fn cast(&self, src: View<'_>, dtype: DType) -> Result<Storage> {
        let op = "to_dtype";
        Self::run(|| {
            let x = view(op, src)?;
            out(op, elementwise::cast(op, &x, src.0.dtype(), dtype)?)
        })
    }

    fn unary(&self, op: UnaryOp, src: View<'_>) -> Result<Storage> {
        Self::run(|| out(op.name(), elementwise::unary(op, &view(op.name(), src)?, src.0.dtype())?))
    }

    fn binary(&self, op: BinaryOp, a: View<'_>, b: View<'_>) -> Result<Storage> {
        let name = op.name();
        Self::run(|| {
            let (x, y) = (view(name, a)?, view(name, b)?);
            validate::same_shape(name, a.1, b.1)?;
            check_same_dtype(name, a.0, b.0)?;
            out(name, elementwise::binary(op, &x, &y, a.0.dtype())?)
        })
    }

    fn compare(&self, op: CmpOp, a: View<'_>, b: View<'_>) -> Result<Storage> {
        let name = op.name();
        Self::run(|| {
            let (x, y) = (view(name, a)?, view(name, b)?);
            validate::same_shape(name, a.1, b.1)?;
            check_same_dtype(name, a.0, b.0)?;
            out(name, elementwise::compare(op, &x, &y)?)
        })
    }

    fn compare_scalar(&self, op: CmpOp, a: View<'_>, scalar: Scalar) -> Result<Storage> {
        let name = op.name();
        Self::run(|| out(name, elementwise::compare_scalar(op, &view(name, a)?, a.0.dtype(), scalar)?))
    }

    fn where_cond(&self, cond: View<'_>, a: View<'_>, b: View<'_>) -> Result<Storage> {
        let op = "where";
        Self::run(|| {
            let (c, x, y) = (view(op, cond)?, view(op, a)?, view(op, b)?);
            validate::same_shape(op, cond.1, a.1)?;
            validate::same_shape(op, cond.1, b.1)?;
            check_same_dtype(op, a.0, b.0)?;
            out(op, elementwise::where_cond(&c, &x, &y)?)
        })
    }

    fn unary_inplace(&self, op: UnaryOp, dst: &mut Storage, layout: &Layout) -> Result<()> {
        let name = op.inplace_name();
        let dtype = dst.dtype();
        Self::run(|| {
            let t = target(name, dst, layout)?;
            let y = elementwise::unary(op, &t, dtype)?;
            write(name, t, &y)
        })
    }

    fn binary_inplace(&self, op: BinaryOp, dst: &mut Storage, layout: &Layout, src: View<'_>) -> Result<()> {
        let name = op.name();
        let dtype = dst.dtype();
        Self::run(|| {
            validate::same_shape(name, layout, src.1)?;
            check_same_dtype(name, dst, src.0)?;
            let s = view(name, src)?;
            let t = target(name, dst, layout)?;
            let y = elementwise::binary(op, &t, &s, dtype)?;
            write(name, t, &y)
        })
    }

    fn copy_inplace(&self, dst: &mut Storage, layout: &Layout, src: View<'_>) -> Result<()> {
        let op = "copy_";
        let (from, to) = (src.0.dtype(), dst.dtype());
        Self::run(|| {
            validate::same_shape(op, layout, src.1)?;
            let s = view(op, src)?;
            // Converted with ember's casts into a tensor of its own (`cast` always copies):
            // the source may share memory with the destination.
            let y = elementwise::cast(op, &s, from, to)?;
            write(op, target(op, dst, layout)?, &y)
        })
    }

    fn fill_inplace(&self, dst: &mut Storage, layout: &Layout, value: Scalar) -> Result<()> {
        let op = "fill_";
        let dtype = dst.dtype();
        Self::run(|| {
            let mut t = target(op, dst, layout)?;
            t.f_fill_(elementwise::element(value, dtype)).map(|_| ()).map_err(torch_err(op))
        })
    }

    fn reduce(&self, op: ReduceOp, src: View<'_>, dims: &[usize]) -> Result<Storage> {
        if let Some(low) = low_of([src.0]) {
            // Summed and multiplied in f32 and rounded once, as ember's 16-bit reductions
            // (ATen's 16-bit product rounds every step).
            let [a] = operands(self, [src])?;
            return self.reduce(op, a.view(), dims)?.narrow(self, low);
        }
        let name = op.name();
        Self::run(|| {
            let x = view(name, src)?;
            validate::sorted_dims(name, src.1, dims)?;
            if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) && dims.len() != 1 {
                return Err(Error::invalid(name, format!("expected exactly one dimension, got {dims:?}")));
            }
            out(name, reduce::reduce(op, &x, src.0.dtype(), dims)?)
        })
    }

    fn softmax(&self, src: View<'_>, dim: usize, log: bool) -> Result<Storage> {
        if let Some(low) = low_of([src.0]) {
            let [a] = operands(self, [src])?;
            return self.softmax(a.view(), dim, log)?.narrow(self, low);
        }
        let op = "softmax";
        Self::run(|| {
            let x = view(op, src)?;
            validate::dim(op, src.1, dim)?;
            check_float(op, src.0)?;
            out(op, reduce::softmax(&x, dim, log)?)
        })
    }

    fn class_loss(&self, scores: View<'_>, target: View<'_>, spec: &ClassLoss) -> Result<Storage> {
        if let Some(low) = low_of([scores.0, target.0]) {
            let [x, y] = operands(self, [scores, target])?;
            return self.class_loss(x.view(), y.view(), spec)?.narrow(self, low);
        }
        let op = spec.name();
        Self::run(|| {
            let (x, t) = (view(op, scores)?, view(op, target)?);
            validate::class_loss(spec, (scores.0.dtype(), scores.1), (target.0.dtype(), target.1), None)?;
            out(op, loss::forward(&x, &t, spec)?)
        })
    }

    fn class_loss_backward(
        &self,
        scores: View<'_>,
        target: View<'_>,
        grad: View<'_>,
        spec: &ClassLoss,
    ) -> Result<Storage> {
        if let Some(low) = low_of([scores.0, target.0, grad.0]) {
            let [x, y, z] = operands(self, [scores, target, grad])?;
            return self.class_loss_backward(x.view(), y.view(), z.view(), spec)?.narrow(self, low);
        }
        let op = spec.name();
        Self::run(|| {
            let (x, t, g) = (view(op, scores)?, view(op, target)?, view(op, grad)?);
            let g_spec = (grad.0.dtype(), grad.1);
            validate::class_loss(spec, (scores.0.dtype(), scores.1), (target.0.dtype(), target.1), Some(g_spec))?;
            out(op, loss::backward(&x, &t, &g, spec)?)
        })
    }

    fn attention(&self, qkv: [View<'_>; 3], mask: Option<View<'_>>, spec: &Attention) -> Result<[Storage; 2]> {
        if let Some(low) = low_of(qkv.iter().map(|v| v.0).chain(mask.map(|(s, _)| s))) {
            let [q, k, v] = operands(self, qkv)?;
            let mask = Operand::optional(self, mask)?;
            let [out, lse] = self.attention([q.view(), k.view(), v.view()], mask.as_ref().map(Operand::view), spec)?;
            // The log-sum-exp stays f32, as ember's CPU kernel and PyTorch keep it.
            return Ok([out.narrow(self, low)?, lse]);
        }
        let op = crate::ops::attention::OP;
        if !attention::same_width(qkv) {
            // ATen's CPU flash kernel needs the values as wide as the queries.
            return compose::attention::forward(self, qkv, mask, spec);
        }
        Self::run(|| {
            let [q, k, v] = [view(op, qkv[0])?, view(op, qkv[1])?, view(op, qkv[2])?];
            let m = view_opt(op, mask)?;
            attention::check(qkv, mask)?;
            let [o, lse] = attention::forward([&q, &k, &v], m.as_ref(), spec)?;
            Ok([out(op, o)?, out(op, lse)?])
        })
    }

    fn attention_backward(
        &self,
        qkv: [View<'_>; 3],
        mask: Option<View<'_>>,
        saved: [View<'_>; 3],
        spec: &Attention,
    ) -> Result<[Storage; 3]> {
        let all = [qkv[0], qkv[1], qkv[2], saved[0], saved[1], saved[2]];
        if let Some(low) = low_of(all.iter().map(|v| v.0).chain(mask.map(|(s, _)| s))) {
            let [q, k, v, o, lse, g] = operands(self, all)?;
            let mask = Operand::optional(self, mask)?;
            let m = mask.as_ref().map(Operand::view);
            return self
                .attention_backward([q.view(), k.view(), v.view()], m, [o.view(), lse.view(), g.view()], spec)?
                .narrow(self, low);
        }
        let op = crate::ops::attention::OP;
        if !attention::same_width(qkv) {
            return compose::attention::backward(self, qkv, mask, saved, spec);
        }
        Self::run(|| {
            let [q, k, v] = [view(op, qkv[0])?, view(op, qkv[1])?, view(op, qkv[2])?];
            let [o, lse, g] = [view(op, saved[0])?, view(op, saved[1])?, view(op, saved[2])?];
            let m = view_opt(op, mask)?;
            attention::check(qkv, mask)?;
            let [dq, dk, dv] = attention::backward([&q, &k, &v], m.as_ref(), [&o, &lse, &g], spec)?;
            Ok([out(op, dq)?, out(op, dk)?, out(op, dv)?])
        })
    }

    // The LSTM steps are the trait's compositions of the kernels here (their slot layout
    // is ember's own); 16-bit operands are widened first, as the CPU backend widens them.

    fn lstm_cell(&self, a: View<'_>, gi: View<'_>, c: View<'_>, bh: (usize, usize)) -> Result<Storage> {
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
        if let Some(low) = low_of([y.0, dh.0, dc.0, c.0].into_iter().chain(gy.map(|(s, _)| s))) {
            let [y, dh, dc, c] = operands(self, [y, dh, dc, c])?;
            let gy = Operand::optional(self, gy)?;
            let gy = gy.as_ref().map(Operand::view);
            return self.lstm_cell_backward(y.view(), gy, dh.view(), dc.view(), c.view(), bh)?.narrow(self, low);
        }
        compose::lstm::backward(self, y, gy, dh, dc, c, bh)
    }

    fn lstm_sequence(&self, gi: View<'_>, w: View<'_>, h0: View<'_>, c0: View<'_>, run: &LstmRun) -> Result<Storage> {
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
        if let Some(low) = low_of([y.0, gy.0, w.0, c0.0]) {
            let [a, b, c, d] = operands(self, [y, gy, w, c0])?;
            return self.lstm_sequence_backward(a.view(), b.view(), c.view(), d.view(), run)?.narrow(self, low);
        }
        compose::lstm::sequence_backward(self, y, gy, w, c0, run)
    }

    fn matmul(&self, a: View<'_>, b: View<'_>) -> Result<Storage> {
        let op = "matmul";
        Self::run(|| {
            let (x, y) = (view(op, a)?, view(op, b)?);
            validate::matmul(a.1, b.1)?;
            if !a.0.dtype().is_float() || a.0.dtype() != b.0.dtype() {
                // As the CPU backend: the tensor layer multiplies integers as floats.
                return Err(Error::dtype(
                    op,
                    format!("matmul needs two operands of one float dtype, got {} and {}", a.0.dtype(), b.0.dtype()),
                ));
            }
            out(op, conv::matmul(&x, &y)?)
        })
    }

    fn index_select(&self, src: View<'_>, dim: usize, index: View<'_>) -> Result<Storage> {
        let op = "index_select";
        Self::run(|| {
            let (x, i) = (view(op, src)?, view(op, index)?);
            validate::dim(op, src.1, dim)?;
            check_index(op, index.0)?;
            index::check_range(op, &i, src.1.shape().dims()[dim])?;
            out(op, index::index_select(&x, dim, &i)?)
        })
    }

    fn gather(&self, src: View<'_>, dim: usize, index: View<'_>) -> Result<Storage> {
        let op = "gather";
        Self::run(|| {
            let (x, i) = (view(op, src)?, view(op, index)?);
            validate::dim(op, src.1, dim)?;
            check_index(op, index.0)?;
            validate::index_within(op, index.1, src.1, dim, "input")?;
            index::check_range(op, &i, src.1.shape().dims()[dim])?;
            out(op, index::gather(&x, dim, &i)?)
        })
    }

    fn scatter_add(&self, dst: View<'_>, dim: usize, index: View<'_>, src: View<'_>) -> Result<Storage> {
        let op = "scatter_add";
        Self::run(|| {
            let (d, i, s) = (view(op, dst)?, view(op, index)?, view(op, src)?);
            validate::dim(op, dst.1, dim)?;
            check_index(op, index.0)?;
            check_same_dtype(op, dst.0, src.0)?;
            validate::index_within(op, index.1, dst.1, dim, "destination")?;
            validate::index_within(op, index.1, src.1, usize::MAX, "source")?;
            index::check_range(op, &i, dst.1.shape().dims()[dim])?;
            out(op, index::scatter_add(&d, dim, &i, &s)?)
        })
    }

    fn masked_fill(&self, src: View<'_>, mask: View<'_>, value: Scalar) -> Result<Storage> {
        let op = "masked_fill";
        Self::run(|| {
            let (x, m) = (view(op, src)?, view(op, mask)?);
            validate::same_shape(op, src.1, mask.1)?;
            out(op, index::masked_fill(&x, &m, value, src.0.dtype())?)
        })
    }

    fn triangle(&self, src: View<'_>, diagonal: i64, upper: bool) -> Result<Storage> {
        let op = if upper { "triu" } else { "tril" };
        Self::run(|| {
            let x = view(op, src)?;
            if src.1.rank() < 2 {
                return Err(Error::shape(op, format!("expected at least 2 dimensions, got shape {}", src.1.shape())));
            }
            out(op, index::triangle(&x, diagonal, upper)?)
        })
    }

    fn conv2d(
        &self,
        input: View<'_>,
        weight: View<'_>,
        bias: Option<View<'_>>,
        geom: &ConvGeometry,
    ) -> Result<Storage> {
        let op = "conv2d";
        Self::run(|| {
            conv::check(op, geom, input, weight, bias, false)?;
            let (x, w, b) = (view(op, input)?, view(op, weight)?, view_opt(op, bias)?);
            out(op, conv::conv2d(&x, &w, b.as_ref(), geom)?)
        })
    }

    fn conv_transpose2d(
        &self,
        input: View<'_>,
        weight: View<'_>,
        bias: Option<View<'_>>,
        geom: &ConvGeometry,
    ) -> Result<Storage> {
        let op = "conv_transpose2d";
        Self::run(|| {
            conv::check(op, geom, input, weight, bias, true)?;
            let (x, w, b) = (view(op, input)?, view(op, weight)?, view_opt(op, bias)?);
            out(op, conv::conv_transpose2d(&x, &w, b.as_ref(), geom)?)
        })
    }

    fn conv2d_weight_grad(&self, input: View<'_>, grad: View<'_>, geom: &ConvGeometry) -> Result<Storage> {
        let op = "conv2d_weight_grad";
        Self::run(|| {
            conv::check_weight_grad(geom, input, grad)?;
            let (x, g) = (view(op, input)?, view(op, grad)?);
            out(op, conv::weight_grad(&x, &g, geom)?)
        })
    }

    fn unfold(&self, (s, l): View<'_>, window: &SlidingWindow) -> Result<Storage> {
        let op = "unfold";
        Self::run(|| {
            let (_, _, l) = crate::backend::validate::conv::check_window_view(op, window, s, l, false)?;
            let x = storage_of(op, s)?.view(op, &l)?;
            out(op, conv::unfold(&x, window)?)
        })
    }

    fn fold(&self, (s, l): View<'_>, window: &SlidingWindow) -> Result<Storage> {
        let op = "fold";
        Self::run(|| {
            let (_, _, l) = crate::backend::validate::conv::check_window_view(op, window, s, l, true)?;
            let x = storage_of(op, s)?.view(op, &l)?;
            out(op, conv::fold(&x, window)?)
        })
    }

    fn channel_norm(
        &self,
        x: View<'_>,
        weight: Option<View<'_>>,
        bias: Option<View<'_>>,
        eps: f64,
    ) -> Result<[Storage; 3]> {
        if let Some(low) = low_of([x.0].into_iter().chain(weight.map(|v| v.0)).chain(bias.map(|v| v.0))) {
            let [a] = operands(self, [x])?;
            let (w, b) = (Operand::optional(self, weight)?, Operand::optional(self, bias)?);
            let [out, mean, var] =
                self.channel_norm(a.view(), w.as_ref().map(Operand::view), b.as_ref().map(Operand::view), eps)?;
            // The statistics stay f32, as the CPU backend keeps them.
            return Ok([out.narrow(self, low)?, mean, var]);
        }
        let op = crate::ops::norm::OP;
        Self::run(|| {
            norm::check(x, weight, bias)?;
            let (t, w, b) = (view(op, x)?, view_opt(op, weight)?, view_opt(op, bias)?);
            let [y, mean, var] = norm::forward(&t, w.as_ref(), b.as_ref(), eps)?;
            Ok([out(op, y)?, out(op, mean)?, out(op, var)?])
        })
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
        if let Some(low) = low_of([x.0, grad.0, mean.0, var.0].into_iter().chain(weight.map(|v| v.0))) {
            let [a, g, m, v] = operands(self, [x, grad, mean, var])?;
            let w = Operand::optional(self, weight)?;
            let w = w.as_ref().map(Operand::view);
            return self.channel_norm_backward(a.view(), g.view(), m.view(), v.view(), w, eps)?.narrow(self, low);
        }
        let op = crate::ops::norm::OP;
        Self::run(|| {
            norm::check_backward(x, grad, mean, var, weight)?;
            let (t, g, m, v) = (view(op, x)?, view(op, grad)?, view(op, mean)?, view(op, var)?);
            let w = view_opt(op, weight)?;
            let [dx, gb, gw] = norm::backward(&t, &g, &m, &v, w.as_ref(), eps)?;
            Ok([out(op, dx)?, out(op, gb)?, out(op, gw)?])
        })
    }

    fn layer_norm(
        &self,
        x: View<'_>,
        n: usize,
        weight: Option<View<'_>>,
        bias: Option<View<'_>>,
        eps: f64,
    ) -> Result<[Storage; 3]> {
        let op = crate::ops::layer_norm::OP;
        let params = [("weight", weight), ("bias", bias)].into_iter().filter_map(|(w, v)| v.map(|v| (w, v))).collect();
        let rows = layer_norm_check::check(x, n, &layer_norm_check::Operands { grad: None, stats: None, params })?;
        if let Some(low) = low_of([x.0]) {
            let [a] = operands(self, [x])?;
            let (w, b) = (Operand::optional(self, weight)?, Operand::optional(self, bias)?);
            let [y, mean, rstd] =
                self.layer_norm(a.view(), n, w.as_ref().map(Operand::view), b.as_ref().map(Operand::view), eps)?;
            // The statistics stay f32, the compute dtype of a 16-bit input.
            return Ok([y.narrow(self, low)?, mean, rstd]);
        }
        Self::run(|| {
            let (t, w, b) = (view(op, x)?, view_opt(op, weight)?, view_opt(op, bias)?);
            let [y, mean, rstd] = layer_norm::forward(&t, rows, n, w.as_ref(), b.as_ref(), eps)?;
            Ok([out(op, y)?, out(op, mean)?, out(op, rstd)?])
        })
    }

    fn layer_norm_backward(
        &self,
        x: View<'_>,
        grad: View<'_>,
        n: usize,
        mean: View<'_>,
        rstd: View<'_>,
        weight: Option<View<'_>>,
    ) -> Result<[Storage; 3]> {
        let op = crate::ops::layer_norm::OP;
        let params = weight.map(|w| ("weight", w)).into_iter().collect();
        let operands_of = layer_norm_check::Operands { grad: Some(grad), stats: Some([mean, rstd]), params };
        let rows = layer_norm_check::check(x, n, &operands_of)?;
        if let Some(low) = low_of([x.0]) {
            let [a, g, m, r] = operands(self, [x, grad, mean, rstd])?;
            let w = Operand::optional(self, weight)?;
            let [gx, gw, gb] =
                self.layer_norm_backward(a.view(), g.view(), n, m.view(), r.view(), w.as_ref().map(Operand::view))?;
            // The parameters' gradients take the weight's dtype (f32 beside a 16-bit input)
            // or, without a weight, the input's.
            let param = weight.map_or(low, |(s, _)| s.dtype());
            let narrow_param = |s: Storage| if param.is_half() { s.narrow(self, param) } else { Ok(s) };
            return Ok([gx.narrow(self, low)?, narrow_param(gw)?, narrow_param(gb)?]);
        }
        Self::run(|| {
            let (t, g, m, r) = (view(op, x)?, view(op, grad)?, view(op, mean)?, view(op, rstd)?);
            let w = view_opt(op, weight)?;
            let [gx, gw, gb] = layer_norm::backward(&t, &g, rows, n, [&m, &r], w.as_ref())?;
            Ok([out(op, gx)?, out(op, gw)?, out(op, gb)?])
        })
    }

    fn max_pool2d(&self, (s, l): View<'_>, windows: &PoolWindows) -> Result<(Storage, Storage)> {
        if let Some(low) = low_of([s]) {
            // Widened as the CPU backend widens them: ATen's 16-bit kernel breaks ties
            // between equal values differently from its f32 kernel and ember's.
            let [a] = operands(self, [(s, l)])?;
            return self.max_pool2d(a.view(), windows)?.narrow(self, low);
        }
        let op = "max_pool2d";
        Self::run(|| {
            windows.check(op)?;
            let l = crate::backend::validate::pool::check_planes(op, s, l, windows.input(), windows.output(), None)?;
            let x = storage_of(op, s)?.view(op, &l)?;
            match pool::max_pool2d(&x, windows)? {
                Some((values, index)) => Ok((out(op, values)?, out(op, index)?)),
                None => compose::pool::max_pool2d(self, (s, &l), windows),
            }
        })
    }

    fn gather_planes(&self, (s, l): View<'_>, (si, li): View<'_>) -> Result<Storage> {
        let op = "gather_planes";
        Self::run(|| {
            let (l, li) = crate::backend::validate::pool::check_gather_planes(s, l, si, li)?;
            let (x, i) = (storage_of(op, s)?.view(op, &l)?, storage_of(op, si)?.view(op, &li)?);
            out(op, index::gather_planes(&x, &i)?)
        })
    }

    fn scatter_planes(&self, (s, l): View<'_>, (si, li): View<'_>, plane: [usize; 2]) -> Result<Storage> {
        let op = "scatter_planes";
        Self::run(|| {
            let (l, li) = crate::backend::validate::pool::check_scatter_planes(s, l, si, li, plane)?;
            let (x, i) = (storage_of(op, s)?.view(op, &l)?, storage_of(op, si)?.view(op, &li)?);
            out(op, index::scatter_planes(&x, &i, plane)?)
        })
    }

    fn resample2d(&self, (s, l): View<'_>, map: &Resample) -> Result<Storage> {
        if let Some(low) = low_of([s]) {
            let [a] = operands(self, [(s, l)])?;
            return self.resample2d(a.view(), map)?.narrow(self, low);
        }
        let op = "resample2d";
        Self::run(|| {
            map.check(op)?;
            let l = crate::backend::validate::pool::check_planes(op, s, l, map.input(), map.output(), None)?;
            let x = storage_of(op, s)?.view(op, &l)?;
            out(op, pool::resample2d(&x, map)?)
        })
    }

    fn random(&self, numel: usize, dist: Distribution, dtype: DType) -> Result<Storage> {
        if dtype.is_half() {
            // Drawn in f32 and rounded, as the CPU backend draws 16-bit floats.
            return self.random(numel, dist, DType::F32)?.narrow(self, dtype);
        }
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
        let op = "cat";
        Self::run(|| {
            let (layouts, _) = validate::cat(srcs, dim)?;
            let xs = srcs
                .iter()
                .zip(&layouts)
                .map(|((s, _), l)| storage_of(op, s)?.view(op, l))
                .collect::<Result<Vec<_>>>()?;
            out(op, index::cat(&xs, dim)?)
        })
    }

    fn power_sum(&self, src: View<'_>, p: f64) -> Result<f64> {
        if low_of([src.0]).is_some() {
            let [a] = operands(self, [src])?;
            return self.power_sum(a.view(), p);
        }
        let op = "power_sum";
        Self::run(|| {
            check_float(op, src.0)?;
            reduce::power_sum(&view(op, src)?, p)
        })
    }

    fn sgd_step(&self, param: Target<'_>, grad: View<'_>, buffer: Option<Target<'_>>, hp: &SgdStep) -> Result<()> {
        if low_of([&*param.0, grad.0].into_iter().chain(buffer.as_ref().map(|b| &*b.0))).is_some() {
            let (mut p, g, mut b) =
                (InPlace::new(self, param)?, Operand::new(self, grad)?, InPlace::optional(self, buffer)?);
            self.sgd_step(p.target(), g.view(), b.as_mut().map(InPlace::target), hp)?;
            return b.map(InPlace::finish).transpose().and(p.finish());
        }
        let op = "sgd_step";
        Self::run(|| {
            crate::backend::validate::optim::check_sgd((&*param.0, param.1), grad, &buffer, hp)?;
            let dtype = param.0.dtype();
            let g = view(op, grad)?;
            let mut b = match buffer {
                Some((s, l)) => Some(target(op, s, l)?),
                None => None,
            };
            let mut p = target(op, param.0, param.1)?;
            optim::sgd(optim::Views { param: &mut p, grad: &g }, b.as_mut(), hp, dtype)
        })
    }

    fn adam_step(&self, param: Target<'_>, grad: View<'_>, state: AdamState<'_>, hp: &AdamStep) -> Result<()> {
        let max = state.max_exp_avg_sq.as_ref().map(|t| &*t.0);
        if low_of([&*param.0, grad.0, &*state.exp_avg.0, &*state.exp_avg_sq.0].into_iter().chain(max)).is_some() {
            let (mut p, g) = (InPlace::new(self, param)?, Operand::new(self, grad)?);
            let (mut m, mut v) = (InPlace::new(self, state.exp_avg)?, InPlace::new(self, state.exp_avg_sq)?);
            let mut vmax = InPlace::optional(self, state.max_exp_avg_sq)?;
            let wide = AdamState {
                exp_avg: m.target(),
                exp_avg_sq: v.target(),
                max_exp_avg_sq: vmax.as_mut().map(InPlace::target),
            };
            self.adam_step(p.target(), g.view(), wide, hp)?;
            vmax.map(InPlace::finish).transpose()?;
            return m.finish().and(v.finish()).and(p.finish());
        }
        let op = "adam_step";
        Self::run(|| {
            crate::backend::validate::optim::check_adam((&*param.0, param.1), grad, &state, hp)?;
            let dtype = param.0.dtype();
            let g = view(op, grad)?;
            let AdamState { exp_avg, exp_avg_sq, max_exp_avg_sq } = state;
            let mut m = target(op, exp_avg.0, exp_avg.1)?;
            let mut v = target(op, exp_avg_sq.0, exp_avg_sq.1)?;
            let mut vmax = match max_exp_avg_sq {
                Some((s, l)) => Some(target(op, s, l)?),
                None => None,
            };
            let mut p = target(op, param.0, param.1)?;
            let st = optim::AdamViews { m: &mut m, v: &mut v, vmax: vmax.as_mut() };
            optim::adam(optim::Views { param: &mut p, grad: &g }, st, hp, dtype)
        })
    }

    fn rmsprop_step(&self, param: Target<'_>, grad: View<'_>, state: RmsPropState<'_>, hp: &RmsPropStep) -> Result<()> {
        let optional = [&state.grad_avg, &state.momentum_buffer];
        let extra = optional.into_iter().filter_map(|t| t.as_ref().map(|t| &*t.0));
        if low_of([&*param.0, grad.0, &*state.square_avg.0].into_iter().chain(extra)).is_some() {
            let (mut p, g) = (InPlace::new(self, param)?, Operand::new(self, grad)?);
            let mut sq = InPlace::new(self, state.square_avg)?;
            let mut avg = InPlace::optional(self, state.grad_avg)?;
            let mut mom = InPlace::optional(self, state.momentum_buffer)?;
            let wide = RmsPropState {
                square_avg: sq.target(),
                grad_avg: avg.as_mut().map(InPlace::target),
                momentum_buffer: mom.as_mut().map(InPlace::target),
            };
            self.rmsprop_step(p.target(), g.view(), wide, hp)?;
            avg.map(InPlace::finish).transpose()?;
            mom.map(InPlace::finish).transpose()?;
            return sq.finish().and(p.finish());
        }
        let op = "rmsprop_step";
        Self::run(|| {
            crate::backend::validate::optim::check_rmsprop((&*param.0, param.1), grad, &state, hp)?;
            let dtype = param.0.dtype();
            let g = view(op, grad)?;
            let RmsPropState { square_avg, grad_avg, momentum_buffer } = state;
            let mut s = target(op, square_avg.0, square_avg.1)?;
            let mut ga = match grad_avg {
                Some((st, l)) => Some(target(op, st, l)?),
                None => None,
            };
            let mut mb = match momentum_buffer {
                Some((st, l)) => Some(target(op, st, l)?),
                None => None,
            };
            let mut p = target(op, param.0, param.1)?;
            let st = optim::RmsPropViews { square_avg: &mut s, grad_avg: ga.as_mut(), momentum: mb.as_mut() };
            optim::rmsprop(optim::Views { param: &mut p, grad: &g }, st, hp, dtype)
        })
    }

    fn non_finite_check_and_unscale(&self, (g, l): Target<'_>, inv_scale: f32) -> Result<bool> {
        let op = "non_finite_check_and_unscale";
        Self::run(|| {
            let l = crate::backend::validate::unscale::check(g, l)?;
            let dtype = g.dtype();
            let t = target(op, g, &l)?;
            optim::unscale(t, inv_scale, dtype)
        })
    }
}

/// An error unless both storages have one dtype.
fn check_same_dtype(op: &'static str, a: &Storage, b: &Storage) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(Error::dtype(op, format!("expected one dtype, got {} and {}", a.dtype(), b.dtype())));
    }
    Ok(())
}

/// An error unless the storage holds floats.
fn check_float(op: &'static str, s: &Storage) -> Result<()> {
    if !s.dtype().is_float() {
        return Err(Error::dtype(op, format!("expected a float tensor, got {}", s.dtype())));
    }
    Ok(())
}

/// An error unless the storage holds `i64` indices.
fn check_index(op: &'static str, s: &Storage) -> Result<()> {
    if s.dtype() != DType::I64 {
        return Err(Error::dtype(op, format!("expected i64 indices, got {}", s.dtype())));
    }
    Ok(())
}

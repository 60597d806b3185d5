//! The fused classification loss of class-index targets ([`ClassLoss`]) and its gradient:
//! a warp per row, the targets checked on the device.
//!
//! A target out of range raises a flag that the host reads back (waiting for the kernel)
//! and reports with the CPU backend's message, found by checking the targets on the host.

use super::elementwise::zero;
use super::launch::{Strided, arg, launch};
use super::memory::{CudaStorage, download};
use super::reduce::moved_last;
use super::sfx;
use crate::backend::validate;
use crate::dtype::DType;
use crate::layout::Layout;
use crate::ops::loss::{ClassLoss, ClassScores, LossReduction};
use crate::{Error, Result};
use std::ffi::c_void;

/// A float constant in the scores' dtype.
enum F {
    F32(f32),
    F64(f64),
}

impl F {
    fn new(v: f64, dtype: DType) -> F {
        if dtype == DType::F32 { F::F32(v as f32) } else { F::F64(v) }
    }
    fn arg(&self) -> *mut c_void {
        match self {
            F::F32(v) => arg(v),
            F::F64(v) => arg(v),
        }
    }
}

/// What every kernel of the loss reads: the scores as rows, the targets, the settings.
struct Rows {
    rows: usize,
    classes: usize,
    /// `rows` and `classes` as the kernels take them.
    extents: [i64; 2],
    scores: Strided,
    targets: Strided,
    logits: i32,
    has_ignore: i32,
    ignore: i64,
    hit: F,
    spread: F,
    /// The flag a bad target raises, and the count of rows that are not ignored.
    bad: CudaStorage,
    counted: CudaStorage,
}

impl Rows {
    fn new(loss: &ClassLoss, s: &CudaStorage, l: &Layout, lt: &Layout) -> Result<Rows> {
        let op = loss.name();
        let gpu = s.gpu();
        let (shape, strides, rows, classes) = moved_last(l, &[ClassLoss::class_dim(l.rank())]);
        let e = loss.label_smoothing;
        let bad = CudaStorage::alloc(gpu, op, 4, DType::U8)?;
        let counted = CudaStorage::alloc(gpu, op, 1, DType::I64)?;
        zero(gpu, &bad)?;
        zero(gpu, &counted)?;
        Ok(Rows {
            rows,
            classes,
            extents: [rows as i64, classes as i64],
            scores: Strided::new(op, &shape, &strides, l.offset())?,
            targets: Strided::of(op, lt)?,
            logits: (loss.scores == ClassScores::Logits) as i32,
            has_ignore: loss.ignore_index.is_some() as i32,
            ignore: loss.ignore_index.unwrap_or(0),
            hit: F::new(1.0 - e, s.dtype()),
            // Zero exactly when there is no smoothing (see the CPU kernel).
            spread: F::new(if e > 0.0 { e / classes.max(1) as f64 } else { 0.0 }, s.dtype()),
            bad,
            counted,
        })
    }

    /// The arguments the loss and gradient kernels begin with: the extents, the scores and
    /// targets (`scores`, `targets` are their device addresses), and the settings.
    fn head<'a>(&'a self, scores: &'a u64, targets: &'a u64) -> Vec<*mut c_void> {
        vec![
            arg(&self.extents[0]),
            arg(&self.extents[1]),
            arg(scores),
            arg(&self.scores),
            arg(targets),
            arg(&self.targets),
            arg(&self.logits),
            arg(&self.has_ignore),
            arg(&self.ignore),
            self.hit.arg(),
            self.spread.arg(),
        ]
    }

    /// Blocks of 256 threads for a warp per row.
    fn blocks(&self) -> u32 {
        self.rows.div_ceil(8).clamp(1, 65_535) as u32
    }

    /// Counts the rows that are not ignored (and checks every target).
    fn count(&self, t: &CudaStorage) -> Result<()> {
        let gpu = t.gpu();
        let f = gpu.func(("class_targets", "", ""))?;
        let (pt, pc, pb) = (t.ptr(), self.counted.ptr(), self.bad.ptr());
        let mut args = [
            arg(&self.extents[0]),
            arg(&self.extents[1]),
            arg(&pt),
            arg(&self.targets),
            arg(&self.has_ignore),
            arg(&self.ignore),
            arg(&pc),
            arg(&pb),
        ];
        launch(gpu, f, self.rows.div_ceil(256).clamp(1, 65_535) as u32, 256, &mut args)
    }

    /// `Ok` unless a target was out of range: then the CPU backend's error for it.
    fn check(&self, loss: &ClassLoss, t: &CudaStorage, lt: &Layout) -> Result<()> {
        let raised = download(&self.bad)?.as_slice::<u8>().is_some_and(|f| f.iter().any(|&b| b != 0));
        if !raised {
            return Ok(());
        }
        let host = super::elementwise::download(t, lt)?;
        let targets = host.as_slice::<i64>().unwrap_or(&[]);
        validate::class_targets(loss, targets, self.classes)?;
        Err(Error::index(loss.name(), "a target is out of range"))
    }
}

pub(crate) fn forward(
    s: &CudaStorage,
    l: &Layout,
    t: &CudaStorage,
    lt: &Layout,
    loss: &ClassLoss,
) -> Result<CudaStorage> {
    let op = loss.name();
    let gpu = s.gpu();
    let r = Rows::new(loss, s, l, lt)?;
    let per_row = CudaStorage::alloc(gpu, op, r.rows, s.dtype())?;
    if r.rows > 0 {
        let f = gpu.func(("class_loss", sfx(s.dtype()), ""))?;
        let (ps, pt, po, pb) = (s.ptr(), t.ptr(), per_row.ptr(), r.bad.ptr());
        let mut args = r.head(&ps, &pt);
        args.extend([arg(&po), arg(&pb)]);
        launch(gpu, f, r.blocks(), 256, &mut args)?;
    }
    let out = match loss.reduction {
        LossReduction::None => per_row,
        LossReduction::Sum | LossReduction::Mean => {
            let mean = (loss.reduction == LossReduction::Mean) as i32;
            if mean == 1 && r.rows > 0 {
                r.count(t)?;
            }
            let total = CudaStorage::alloc(gpu, op, 1, s.dtype())?;
            let f = gpu.func(("class_loss_total", sfx(s.dtype()), ""))?;
            let (rows, pr, pc, po) = (r.rows as i64, per_row.ptr(), r.counted.ptr(), total.ptr());
            launch(gpu, f, 1, 1024, &mut [arg(&rows), arg(&pr), arg(&pc), arg(&mean), arg(&po)])?;
            total
        }
    };
    if r.rows > 0 {
        r.check(loss, t, lt)?;
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn backward(
    s: &CudaStorage,
    l: &Layout,
    t: &CudaStorage,
    lt: &Layout,
    g: &CudaStorage,
    lg: &Layout,
    loss: &ClassLoss,
) -> Result<CudaStorage> {
    let op = loss.name();
    let gpu = s.gpu();
    let r = Rows::new(loss, s, l, lt)?;
    let out = CudaStorage::alloc(gpu, op, l.numel(), s.dtype())?;
    if r.rows == 0 || r.classes == 0 {
        return Ok(out);
    }
    let reduction: i32 = match loss.reduction {
        LossReduction::None => 0,
        LossReduction::Sum => 1,
        LossReduction::Mean => 2,
    };
    if reduction == 2 {
        r.count(t)?;
    }
    let class_dim = ClassLoss::class_dim(l.rank());
    let dense = Layout::contiguous(l.shape().clone());
    let (shape, out_strides, _, _) = moved_last(&dense, &[class_dim]);
    let lo = Strided::new(op, &shape, &out_strides, 0)?;
    let lgs = Strided::of(op, lg)?;
    let f = gpu.func(("class_loss_grad", sfx(s.dtype()), ""))?;
    let (ps, pt, pg, pc, po, pb) = (s.ptr(), t.ptr(), g.ptr(), r.counted.ptr(), out.ptr(), r.bad.ptr());
    let mut args = r.head(&ps, &pt);
    args.extend([arg(&pg), arg(&lgs), arg(&reduction), arg(&pc), arg(&po), arg(&lo), arg(&pb)]);
    launch(gpu, f, r.blocks(), 256, &mut args)?;
    r.check(loss, t, lt)?;
    Ok(out)
}

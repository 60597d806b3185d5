//! The default bodies of the layer-normalisation kernels (see `ops/layer_norm.rs`): the
//! operands cast to the input's compute dtype, row sums by `reduce` over the last
//! dimension of the `[rows, n]` reading, per-row and per-column values broadcast back with
//! stride-0 layouts, the results cast back. They allocate a few full-size intermediates.

use crate::backend::kernels::Kernels;
use crate::backend::validate::layer_norm::{Operands, check};
use crate::backend::{BinaryOp, ReduceOp, UnaryOp, View};
use crate::layout::Layout;
use crate::shape::Shape;
use crate::storage::Storage;
use crate::{DType, Result, Scalar};
use smallvec::smallvec;

/// The layouts of the `[rows, n]` reading.
struct Frame {
    /// `[rows, n]`, contiguous.
    full: Layout,
    /// `[rows]` values broadcast along each row.
    per_row: Layout,
    /// `[n]` values broadcast down each column.
    per_column: Layout,
    /// `[rows]`, contiguous.
    rows: Layout,
    /// The arithmetic's dtype.
    compute: DType,
}

impl Frame {
    fn new(rows: usize, n: usize, dtype: DType) -> Result<Frame> {
        let shape = Shape::from([rows, n]);
        Ok(Frame {
            full: Layout::contiguous(shape.clone()),
            per_row: Layout::new(shape.clone(), smallvec![1, 0], 0)?,
            per_column: Layout::new(shape, smallvec![0, 1], 0)?,
            rows: Layout::contiguous(Shape::from([rows])),
            compute: dtype.compute_dtype(),
        })
    }

    /// `a op (per-row v)` over the full shape.
    fn with_row<B: Kernels + ?Sized>(&self, b: &B, op: BinaryOp, a: &Storage, v: &Storage) -> Result<Storage> {
        b.binary(op, (a, &self.full), (v, &self.per_row))
    }

    /// `a op (per-column v)` over the full shape.
    fn with_column<B: Kernels + ?Sized>(&self, b: &B, op: BinaryOp, a: &Storage, v: &Storage) -> Result<Storage> {
        b.binary(op, (a, &self.full), (v, &self.per_column))
    }

    /// `a op c` over the full shape.
    fn full_op<B: Kernels + ?Sized>(&self, b: &B, op: BinaryOp, a: &Storage, c: &Storage) -> Result<Storage> {
        b.binary(op, (a, &self.full), (c, &self.full))
    }

    /// The sum of each row of a full-shape storage, times `k`.
    fn row_sum<B: Kernels + ?Sized>(&self, b: &B, s: &Storage, k: f64) -> Result<Storage> {
        let sum = b.reduce(ReduceOp::Sum, (s, &self.full), &[1])?;
        let k = b.full(self.rows.numel(), Scalar::Float(k), self.compute)?;
        b.binary(BinaryOp::Mul, (&sum, &self.rows), (&k, &self.rows))
    }

    /// A view in the compute dtype, contiguous.
    fn widen<B: Kernels + ?Sized>(&self, b: &B, v: View<'_>) -> Result<Storage> {
        b.cast(v, self.compute)
    }
}

pub(crate) fn layer_norm<B: Kernels + ?Sized>(
    b: &B,
    input: View<'_>,
    n: usize,
    weight: Option<View<'_>>,
    bias: Option<View<'_>>,
    eps: f64,
) -> Result<[Storage; 3]> {
    let params = [("weight", weight), ("bias", bias)].into_iter().filter_map(|(w, v)| v.map(|v| (w, v))).collect();
    let rows = check(input, n, &Operands { grad: None, stats: None, params })?;
    let f = Frame::new(rows, n, input.0.dtype())?;
    let x = f.widen(b, input)?;
    let mean = f.row_sum(b, &x, 1.0 / n as f64)?;
    let centred = f.with_row(b, BinaryOp::Sub, &x, &mean)?;
    let squares = b.unary(UnaryOp::Square, (&centred, &f.full))?;
    let var = f.row_sum(b, &squares, 1.0 / n as f64)?;
    let eps = b.full(rows, Scalar::Float(eps), f.compute)?;
    let shifted = b.binary(BinaryOp::Add, (&var, &f.rows), (&eps, &f.rows))?;
    let rstd = b.unary(UnaryOp::Rsqrt, (&shifted, &f.rows))?;
    let mut y = f.with_row(b, BinaryOp::Mul, &centred, &rstd)?;
    if let Some(w) = weight {
        y = f.with_column(b, BinaryOp::Mul, &y, &f.widen(b, w)?)?;
    }
    if let Some(bias) = bias {
        y = f.with_column(b, BinaryOp::Add, &y, &f.widen(b, bias)?)?;
    }
    let y = b.cast((&y, &f.full), input.0.dtype())?;
    Ok([y, mean, rstd])
}

pub(crate) fn layer_norm_backward<B: Kernels + ?Sized>(
    b: &B,
    input: View<'_>,
    grad: View<'_>,
    n: usize,
    mean: View<'_>,
    rstd: View<'_>,
    weight: Option<View<'_>>,
) -> Result<[Storage; 3]> {
    let params = weight.map(|w| ("weight", w)).into_iter().collect();
    let rows = check(input, n, &Operands { grad: Some(grad), stats: Some([mean, rstd]), params })?;
    let dtype = input.0.dtype();
    let f = Frame::new(rows, n, dtype)?;
    let (x, g) = (f.widen(b, input)?, f.widen(b, grad)?);
    let (mean, rstd) = (f.widen(b, mean)?, f.widen(b, rstd)?);
    let xhat = f.with_row(b, BinaryOp::Mul, &f.with_row(b, BinaryOp::Sub, &x, &mean)?, &rstd)?;
    let gh = match weight {
        Some(w) => f.with_column(b, BinaryOp::Mul, &g, &f.widen(b, w)?)?,
        None => b.cast((&g, &f.full), f.compute)?,
    };
    // gx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)), means along the row.
    let c1 = f.row_sum(b, &gh, 1.0 / n as f64)?;
    let c2 = f.row_sum(b, &f.full_op(b, BinaryOp::Mul, &gh, &xhat)?, 1.0 / n as f64)?;
    let along = f.with_row(b, BinaryOp::Mul, &xhat, &c2)?;
    let centred = f.full_op(b, BinaryOp::Sub, &f.with_row(b, BinaryOp::Sub, &gh, &c1)?, &along)?;
    let gx = b.cast((&f.with_row(b, BinaryOp::Mul, &centred, &rstd)?, &f.full), dtype)?;
    let param_dtype = weight.map_or(dtype, |(s, _)| s.dtype());
    let gw = b.reduce(ReduceOp::Sum, (&f.full_op(b, BinaryOp::Mul, &g, &xhat)?, &f.full), &[0])?;
    let gb = b.reduce(ReduceOp::Sum, (&g, &f.full), &[0])?;
    let columns = Layout::contiguous(Shape::from([n]));
    Ok([gx, b.cast((&gw, &columns), param_dtype)?, b.cast((&gb, &columns), param_dtype)?])
}

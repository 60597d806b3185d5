//! Layer normalisation on LibTorch: the forward is ATen's `native_layer_norm` over the input
//! read as `[rows, n]`, which returns the output and each row's mean and `rstd` as ember's
//! `Backend::layer_norm` does. tch binds no `native_layer_norm_backward`, and the trait's
//! backward is given the saved statistics but not `eps`, so LibTorch's autograd cannot
//! recompute the forward to reach that kernel; the backward is its formula written with
//! ATen's kernels over the saved `mean` and `rstd`, five full-size passes.

use super::storage::{i, torch_err};
use crate::error::Result;
use crate::ops::layer_norm::OP;
use tch::Tensor;

/// `t` read as `[rows, n]` (a view when its strides allow one).
fn rows_of(t: &Tensor, rows: usize, n: usize) -> Result<Tensor> {
    t.f_reshape([i(rows), i(n)]).map_err(torch_err(OP))
}

/// A per-element parameter read as `[n]`.
fn flat(t: Option<&Tensor>, n: usize) -> Result<Option<Tensor>> {
    t.map(|t| t.f_reshape([i(n)]).map_err(torch_err(OP))).transpose()
}

/// The output (`[rows, n]`) and each row's mean and `rstd` (`[rows, 1]`), in the input's
/// dtype (f32 or f64: 16-bit operands are widened by the caller).
pub(crate) fn forward(
    x: &Tensor,
    rows: usize,
    n: usize,
    w: Option<&Tensor>,
    b: Option<&Tensor>,
    eps: f64,
) -> Result<[Tensor; 3]> {
    let x = rows_of(x, rows, n)?;
    let (w, b) = (flat(w, n)?, flat(b, n)?);
    let (y, mean, rstd) =
        x.f_native_layer_norm([i(n)].as_slice(), w.as_ref(), b.as_ref(), eps).map_err(torch_err(OP))?;
    Ok([y, mean, rstd])
}

/// The input's gradient (`[rows, n]`), `sum_rows(g * xhat)` and `sum_rows(g)` (`[n]`), from
/// the saved `mean` and `rstd` (`rows` elements each), as `native_layer_norm_backward`
/// computes them: `gx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat))` with `gh = g * w`
/// and the means along each row.
pub(crate) fn backward(
    x: &Tensor,
    g: &Tensor,
    rows: usize,
    n: usize,
    [mean, rstd]: [&Tensor; 2],
    w: Option<&Tensor>,
) -> Result<[Tensor; 3]> {
    let e = torch_err(OP);
    let (x, g) = (rows_of(x, rows, n)?, rows_of(g, rows, n)?);
    let (mean, rstd) = (rows_of(mean, rows, 1)?, rows_of(rstd, rows, 1)?);
    let xhat = x.f_sub(&mean).and_then(|c| c.f_mul(&rstd)).map_err(&e)?;
    let gh = match flat(w, n)? {
        Some(w) => g.f_mul(&w).map_err(&e)?,
        None => g.shallow_clone(),
    };
    let row_mean = |t: &Tensor| t.f_mean_dim([1i64].as_slice(), true, None::<tch::Kind>);
    let c1 = row_mean(&gh).map_err(&e)?;
    let c2 = gh.f_mul(&xhat).and_then(|t| row_mean(&t)).map_err(&e)?;
    let gx = gh.f_sub(&c1).and_then(|t| t.f_sub(&xhat.f_mul(&c2)?)).and_then(|t| t.f_mul(&rstd)).map_err(&e)?;
    let column_sum = |t: &Tensor| t.f_sum_dim_intlist([0i64].as_slice(), false, None::<tch::Kind>);
    let gw = g.f_mul(&xhat).and_then(|t| column_sum(&t)).map_err(&e)?;
    let gb = column_sum(&g).map_err(&e)?;
    Ok([gx, gw, gb])
}

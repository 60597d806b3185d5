//! Layer normalisation as one kernel: what it computes (PyTorch's `native_layer_norm`).
//!
//! The input is read as `[rows, n]` in row-major order, `n` being the number of elements of
//! the normalized (trailing) shape. Each row's statistics are its mean and its *biased*
//! variance, and the output is
//! `y = (x - mean[r]) * rstd[r] * weight + bias` with `rstd = 1 / sqrt(var + eps)`, an absent
//! weight read as 1 and an absent bias as 0; `weight` and `bias` have `n` elements.
//!
//! Dtypes: the output has the input's dtype. A 16-bit input is computed in `f32` (each
//! element widened as it is read, each result rounded once) and may take `f32` or
//! 16-bit parameters of its own dtype, as PyTorch's mixed-type CPU kernel does; the
//! statistics (`mean`, `rstd`, one per row) are the input's
//! [`compute_dtype`](crate::DType::compute_dtype), `f32` for 16-bit inputs, because the
//! backward needs them to more than 8 bits.
//!
//! The backward, for an incoming gradient `g` of `y` (the input's dtype), returns the
//! input's gradient
//! `gx = rstd * (gh - mean_n(gh) - xhat * mean_n(gh * xhat))` with `gh = g * weight` and
//! `xhat = (x - mean) * rstd`, and the column sums `sum_rows(g * xhat)` and `sum_rows(g)`,
//! the weight's and the bias's gradients (in the weight's dtype, or the input's without
//! one).

/// The name of layer normalisation in errors.
pub const OP: &str = "layer_norm";

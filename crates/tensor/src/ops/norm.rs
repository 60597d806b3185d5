//! Per-channel normalisation, the kernel under batch, group and instance norm: what it
//! computes.
//!
//! The input is read as `[outer, C, inner]`. Each of the `C` channels gathers the
//! `m = outer * inner` elements it sees; its statistics are their mean and *biased*
//! variance, and the output is
//! `y = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c]`, with an absent weight
//! read as 1 and an absent bias as 0.
//!
//! Batch norm of `[N, C, *]` is this with `outer = N`; group norm with `G` groups reads
//! the input as `[1, N * G, (C / G) * prod(*)]`, one "channel" per sample and group, and
//! applies its per-channel affine afterwards.
//!
//! The backward, for an incoming gradient `g` of `y`, returns `(grad_input, sum_c g,
//! sum_c g * xhat)` with `xhat = (x - mean) * invstd`: the last two are the bias's and the
//! weight's gradients, and
//! `grad_input = weight * invstd * (g - sum g / m - xhat * sum(g * xhat) / m)`.

/// The name of the per-channel normalisation in errors.
pub const OP: &str = "channel_norm";

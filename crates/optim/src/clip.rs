//! Gradient clipping by total norm (PyTorch's `torch.nn.utils.clip_grad_norm_`).

use ember_autograd::{NoGradGuard, Var};
use ember_tensor::{Error, Result, Tensor};

const OP: &str = "clip_grad_norm_";

/// Scales the gradients of `params` so that their total norm is at most `max_norm`, and
/// returns the total norm before clipping.
///
/// The total norm is the `norm_type`-norm of all gradients taken together, as if
/// concatenated into one vector: `norm_type = 2.0` is the Euclidean norm,
/// `f64::INFINITY` the largest absolute value, any other positive `p` gives
/// `(Σ|g|^p)^(1/p)`. When `max_norm / (total + 1e-6)` is below one, every gradient is
/// multiplied by it (PyTorch's rule, whose `1e-6` keeps the division finite). A non-finite
/// total norm gives non-finite gradients, as in PyTorch; check the returned norm to skip
/// such steps. Parameters without a gradient are ignored; with none at all the norm is 0.
/// Sums are accumulated in f64 whatever the gradients' dtype.
///
/// ```
/// use ember_autograd::Var;
/// use ember_optim::clip_grad_norm_;
/// use ember_tensor::Tensor;
/// let w = Var::param(Tensor::zeros([2], ember_tensor::DType::F64)?);
/// w.set_grad(Some(Tensor::from_vec(vec![3.0f64, 4.0], [2])?))?;
/// let norm = clip_grad_norm_(&[w.clone()], 1.0, 2.0)?;
/// assert_eq!(norm, 5.0);
/// let g = w.grad().unwrap().to_vec::<f64>()?;
/// assert!((g[0] - 0.6).abs() < 1e-6 && (g[1] - 0.8).abs() < 1e-6);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn clip_grad_norm_(params: &[Var], max_norm: f64, norm_type: f64) -> Result<f64> {
    if max_norm.is_nan() || max_norm < 0.0 {
        return Err(Error::invalid(OP, format!("max_norm must be >= 0, got {max_norm}")));
    }
    if norm_type.is_nan() || norm_type <= 0.0 {
        return Err(Error::invalid(OP, format!("norm_type must be positive or f64::INFINITY, got {norm_type}")));
    }
    let _no_grad = NoGradGuard::new();
    let grads: Vec<(&Var, Tensor)> = params.iter().filter_map(|p| p.grad().map(|g| (p, g))).collect();
    if grads.is_empty() {
        return Ok(0.0);
    }
    let mut acc = 0.0f64;
    for (_, g) in &grads {
        let part = partial_norm(g, norm_type)?;
        acc = if norm_type == f64::INFINITY { nan_max(acc, part) } else { acc + part };
    }
    let total = if norm_type == f64::INFINITY || norm_type == 1.0 {
        acc
    } else if norm_type == 2.0 {
        acc.sqrt()
    } else {
        acc.powf(norm_type.recip())
    };
    let coef = max_norm / (total + 1e-6);
    // A NaN norm scales by NaN, as PyTorch's clamp lets NaN through.
    if coef.is_nan() || coef < 1.0 {
        scale(params, &grads, coef)?;
    }
    Ok(total)
}

/// Multiplies each gradient by `coef`: in place where the gradient's storage is its own,
/// out of place (replacing the gradient) where scaling in place would also change another
/// gradient or a parameter sharing that storage, or where the layout cannot be written.
fn scale(params: &[Var], grads: &[(&Var, Tensor)], coef: f64) -> Result<()> {
    let shared = |i: usize, g: &Tensor| {
        grads.iter().enumerate().any(|(j, (_, h))| j != i && h.shares_storage(g))
            || params.iter().any(|p| p.value().shares_storage(g))
    };
    let aliased: Vec<bool> = grads.iter().enumerate().map(|(i, (_, g))| shared(i, g) || !g.is_contiguous()).collect();
    // Replacements first, computed from the values before any in-place scaling.
    for ((p, g), &a) in grads.iter().zip(&aliased) {
        if a {
            p.set_grad(Some(g.mul_scalar(coef)))?;
        }
    }
    for ((_, g), &a) in grads.iter().zip(&aliased) {
        if !a {
            g.mul_scalar_(coef)?;
        }
    }
    Ok(())
}

/// `Σ|g|^p` over one gradient (`max |g|` for the infinity norm), in f64.
fn partial_norm(g: &Tensor, p: f64) -> Result<f64> {
    if !g.dtype().is_float() {
        return Err(Error::dtype(OP, format!("gradients must be f32 or f64, got {}", g.dtype())));
    }
    g.power_sum(p)
}

/// The larger of two values, NaN if either is (`f64::max` would drop the NaN).
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) }
}

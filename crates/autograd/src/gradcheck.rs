//! Numerical gradient checking, like `torch.autograd.gradcheck`.

use crate::backward::grad;
use crate::grad_mode::no_grad;
use crate::var::Var;
use ember_tensor::{DType, Error, Result, Tensor};

/// Checks the gradients of `f` at `inputs` against central differences.
///
/// Every input must be an `f64` tensor (finite differences in `f32` are too coarse). The
/// analytical Jacobian comes from one backward per output element; the numerical one from
/// `(f(x + eps) - f(x - eps)) / 2 eps` per input element. They must agree within
/// `atol + rtol * |numerical|` everywhere. Inputs keep their layout for the analytical pass,
/// so transposed or narrowed inputs exercise the strided kernels.
///
/// ```
/// use ember_autograd::gradcheck;
/// use ember_tensor::{DType, Tensor};
/// let x = Tensor::normal([3, 4], 0.0, 1.0, DType::F64)?;
/// gradcheck(|v| Ok(v[0].tanh().mul(&v[0])?.sum(1, false)?), &[x], 1e-6, 1e-8, 1e-6)?;
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn gradcheck<F>(f: F, inputs: &[Tensor], eps: f64, atol: f64, rtol: f64) -> Result<()>
where
    F: Fn(&[Var]) -> Result<Var>,
{
    for (i, t) in inputs.iter().enumerate() {
        if t.dtype() != DType::F64 {
            return Err(Error::dtype("gradcheck", format!("input {i} is {}; gradcheck needs f64 inputs", t.dtype())));
        }
    }
    let vars: Vec<Var> = inputs.iter().map(|t| Var::param(t.clone())).collect();
    let out = f(&vars)?;
    if out.dtype() != DType::F64 {
        return Err(Error::dtype("gradcheck", format!("the output is {}; expected f64", out.dtype())));
    }
    let n_out = out.numel();
    let refs: Vec<&Var> = vars.iter().collect();

    // Analytical Jacobian: analytic[i][k * n_out + j] = d out[j] / d input_i[k].
    let mut analytic: Vec<Vec<f64>> = inputs.iter().map(|t| vec![0.0; t.numel() * n_out]).collect();
    for j in 0..n_out {
        let mut onehot = vec![0.0f64; n_out];
        onehot[j] = 1.0;
        let go = Var::new(Tensor::from_vec(onehot, out.shape())?.to_device(out.device())?);
        let grads = grad(&[&out], &refs, &[&go], true, false)?;
        for (i, g) in grads.iter().enumerate() {
            if let Some(g) = g {
                for (k, v) in g.value().to_vec_f64()?.into_iter().enumerate() {
                    analytic[i][k * n_out + j] = v;
                }
            }
        }
    }

    // Numerical Jacobian by central differences, one input element at a time.
    let eval = |i: usize, k: usize, delta: f64| -> Result<Vec<f64>> {
        let mut data = inputs[i].to_vec::<f64>()?;
        data[k] += delta;
        let perturbed = Tensor::from_vec(data, inputs[i].shape().clone())?.to_device(inputs[i].device())?;
        let vs: Vec<Var> = inputs
            .iter()
            .enumerate()
            .map(|(m, t)| Var::new(if m == i { perturbed.clone() } else { t.clone() }))
            .collect();
        no_grad(|| f(&vs))?.value().to_vec_f64()
    };
    for (i, t) in inputs.iter().enumerate() {
        for k in 0..t.numel() {
            let plus = eval(i, k, eps)?;
            let minus = eval(i, k, -eps)?;
            for j in 0..n_out {
                let numeric = (plus[j] - minus[j]) / (2.0 * eps);
                let a = analytic[i][k * n_out + j];
                if (a - numeric).abs() > atol + rtol * numeric.abs() || a.is_nan() != numeric.is_nan() {
                    return Err(Error::autograd(format!(
                        "gradcheck: d output[{j}] / d input{i}[{k}]: analytical {a}, numerical {numeric} \
                         (input shape {:?}, output shape {:?})",
                        t.shape(),
                        out.shape()
                    )));
                }
            }
        }
    }
    Ok(())
}

//! Numerical gradient checking, like `torch.autograd.gradcheck` and `gradgradcheck`.

use crate::backward::grad;
use crate::grad_mode::{enable_grad, no_grad};
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

/// Checks the second-order gradients of `f` at `inputs` against central differences, like
/// `torch.autograd.gradgradcheck`.
///
/// It runs [`gradcheck`] on the function that takes the inputs and a gradient `v` of the
/// output and returns the first-order gradients `grad(f(x), x, v, create_graph = true)`,
/// flattened and joined (an input that does not influence the output contributes zeros):
/// that checks the backward of `f`'s backward with respect to the inputs and to `v`.
/// `grad_output` is `v` (of the output's shape, `f64`); `None` draws it from the standard
/// normal distribution with the global generator. `eps`, `atol` and `rtol` are
/// [`gradcheck`]'s.
///
/// ```
/// use ember_autograd::gradgradcheck;
/// use ember_tensor::{DType, Tensor};
/// let x = Tensor::normal([2, 3], 0.0, 1.0, DType::F64)?;
/// let w = Tensor::normal([3, 2], 0.0, 1.0, DType::F64)?;
/// gradgradcheck(|v| Ok(v[0].matmul(&v[1])?.tanh()), &[x, w], None, 1e-6, 1e-7, 1e-5)?;
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn gradgradcheck<F>(
    f: F,
    inputs: &[Tensor],
    grad_output: Option<&Tensor>,
    eps: f64,
    atol: f64,
    rtol: f64,
) -> Result<()>
where
    F: Fn(&[Var]) -> Result<Var>,
{
    for (i, t) in inputs.iter().enumerate() {
        if t.dtype() != DType::F64 {
            return Err(Error::dtype(
                "gradgradcheck",
                format!("input {i} is {}; gradgradcheck needs f64 inputs", t.dtype()),
            ));
        }
    }
    let out = no_grad(|| f(&inputs.iter().map(|t| Var::new(t.clone())).collect::<Vec<_>>()))?;
    let v = match grad_output {
        Some(v) if v.shape() != out.shape() || v.dtype() != DType::F64 => {
            return Err(Error::autograd(format!(
                "gradgradcheck: grad_output is [{} {:?}]; expected [f64 {:?}], the output's shape",
                v.dtype(),
                v.shape(),
                out.shape()
            )));
        }
        Some(v) => v.clone(),
        None => Tensor::normal(out.shape(), 0.0, 1.0, DType::F64)?.to_device(out.device())?,
    };
    let n = inputs.len();
    let first_order = |vs: &[Var]| -> Result<Var> {
        let (xs, v) = vs.split_at(n);
        // The numerical pass runs this in no_grad on plain values: the first-order gradient
        // still needs a graph to come from.
        enable_grad(|| {
            let xs: Vec<Var> =
                xs.iter().map(|x| if x.requires_grad() { x.clone() } else { Var::param(x.value()) }).collect();
            let y = f(&xs)?;
            if !y.requires_grad() {
                return Err(Error::autograd("gradgradcheck: the output does not depend on any input"));
            }
            let refs: Vec<&Var> = xs.iter().collect();
            let grads = grad(&[&y], &refs, &[&v[0]], true, true)?;
            let flat = grads
                .iter()
                .zip(&xs)
                .map(|(g, x)| match g {
                    Some(g) => Ok(g.flatten_all()),
                    None => Ok(Var::new(Tensor::zeros([x.numel()], DType::F64)?.to_device(x.device())?)),
                })
                .collect::<Result<Vec<Var>>>()?;
            Var::cat(&flat.iter().collect::<Vec<_>>(), 0)
        })
    };
    let mut all = inputs.to_vec();
    all.push(v);
    gradcheck(first_order, &all, eps, atol, rtol)
}

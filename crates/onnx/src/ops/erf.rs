//! `Erf`, as PyTorch exports exact GELU before opset 20 (`0.5 x (1 + erf(x / sqrt 2))`).
//! ember has no erf operation of its own, so this is one, with its derivative written in
//! `Var` operations (differentiable again).

use super::{float, float_in};
use crate::ir::{Node, Value};
use ember_autograd::{BackwardCtx, Grads, Op, Var};
use ember_tensor::{DType, Result, Tensor};

struct Erf;

impl Op for Erf {
    fn name(&self) -> &str {
        "erf"
    }

    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let x = inputs[0];
        // Computed on the host; the result goes back to the input's device.
        let y = match x.dtype() {
            DType::F32 => {
                let v: Vec<f32> = x.to_vec::<f32>()?.into_iter().map(libm::erff).collect();
                Tensor::from_vec(v, x.shape().clone())?
            }
            _ => {
                let v: Vec<f64> = x.to_dtype(DType::F64).to_vec::<f64>()?.into_iter().map(libm::erf).collect();
                Tensor::from_vec(v, x.shape().clone())?.to_dtype(x.dtype())
            }
        };
        y.to_device(x.device())
    }

    fn backward(&self, ctx: &BackwardCtx<'_>, grad: &Var) -> Result<Grads> {
        // d/dx erf(x) = 2 / sqrt(pi) * exp(-x^2)
        let x = ctx.input(0)?;
        let d = x.square().neg().exp().mul_scalar(std::f64::consts::FRAC_2_SQRT_PI);
        Ok([Some(grad.mul(&d)?)].into_iter().collect())
    }
}

pub(crate) fn erf(_: &Node, args: &[Option<Value>]) -> Result<Vec<Value>> {
    float(Var::apply_op(Erf, &[float_in(args, 0)?])?)
}

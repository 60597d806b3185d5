//! Operations without a gradient (comparisons, argmax, ...), dtype casts, device moves, and
//! the detaching identity. They are recorded all the same, so that a traced graph re-runs them.

use super::{apply, apply_infallible};
use crate::backward_ctx::BackwardCtx;
use crate::node::REQUIRES_GRAD;
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::{CmpOp, DType, Device, Dim, Result, Scalar, Tensor};
use smallvec::smallvec;

struct Compare(CmpOp);

impl Op for Compare {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        compare(self.0, inputs[0], inputs[1])
    }
    fn backward(&self, _: &BackwardCtx<'_>, _: &Var) -> Result<Grads> {
        Ok(smallvec![None, None])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

struct CompareScalar(CmpOp, Scalar);

impl Op for CompareScalar {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(compare_scalar(self.0, inputs[0], self.1))
    }
    fn backward(&self, _: &BackwardCtx<'_>, _: &Var) -> Result<Grads> {
        Ok(smallvec![None])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

/// A `Var` computed from others without a gradient.
fn no_grad_result(v: Var) -> Var {
    v.node.set(REQUIRES_GRAD, false);
    v
}

/// Turns ember-tensor's comparison table (`crates/tensor/src/ops/compare.rs`) into the
/// forwards of [`Compare`] and [`CompareScalar`] and the `Var` methods.
macro_rules! var_comparisons {
    ($(
        $(#[$meta:meta])*
        $V:ident => $method:ident, $scalar_method:ident, $symbol:literal, cpu $cpu:tt, cuda $cuda:tt;
    )*) => {
        /// `a op b` through the `Tensor` method of `op`.
        fn compare(op: CmpOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
            match op {
                $( CmpOp::$V => a.$method(b), )*
            }
        }

        /// `a op s` through the `Tensor` method of `op`.
        fn compare_scalar(op: CmpOp, a: &Tensor, s: Scalar) -> Tensor {
            match op {
                $( CmpOp::$V => a.$scalar_method(s), )*
            }
        }

        impl Var {
            $(
                #[doc = concat!("The `u8` mask of `", stringify!($method), "`, broadcasting; no gradient.")]
                #[track_caller]
                pub fn $method(&self, other: &Var) -> Result<Var> {
                    Ok(no_grad_result(apply(Compare(CmpOp::$V), &[self, other])?))
                }
                #[doc = concat!("The `u8` mask of `", stringify!($method), "` with a scalar; no gradient.")]
                #[track_caller]
                pub fn $scalar_method(&self, s: impl Into<Scalar>) -> Var {
                    no_grad_result(apply_infallible(CompareScalar(CmpOp::$V, s.into()), &[self]))
                }
            )*
        }
    };
}

ember_tensor::compare_table!(var_comparisons);

struct ArgExtreme {
    dim: usize,
    keepdim: bool,
    max: bool,
}

impl Op for ArgExtreme {
    fn name(&self) -> &str {
        if self.max { "argmax" } else { "argmin" }
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        if self.max { inputs[0].argmax(self.dim, self.keepdim) } else { inputs[0].argmin(self.dim, self.keepdim) }
    }
    fn backward(&self, _: &BackwardCtx<'_>, _: &Var) -> Result<Grads> {
        Ok(smallvec![None])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

/// A conversion to `to`; backward converts back to `from`, recorded here so that it does
/// not have to read the input (which saves nothing and may have been freed).
struct Cast {
    to: DType,
    from: DType,
}

impl Op for Cast {
    fn name(&self) -> &str {
        "to_dtype"
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        Ok(crate::export::OpExport::new("to_dtype").attr("dtype", crate::export::ExportAttr::DType(self.to)))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(inputs[0].to_dtype(self.to))
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        Ok(smallvec![Some(g.to_dtype(self.from))])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

/// A move to another device: `to_device`. The gradient moves back to the source device.
struct ToDevice {
    to: Device,
    from: Device,
}

impl Op for ToDevice {
    fn name(&self) -> &str {
        "to_device"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].to_device(self.to)
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        Ok(smallvec![Some(g.to_device(self.from)?)])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

/// The identity that stops gradients: `detach_node`.
struct Detach;

impl Op for Detach {
    fn name(&self) -> &str {
        "detach"
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        Ok(crate::export::OpExport::new("detach"))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(inputs[0].clone())
    }
    fn backward(&self, _: &BackwardCtx<'_>, _: &Var) -> Result<Grads> {
        Ok(smallvec![None])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

impl Var {
    /// The `i64` index of the first maximum along `dim`; no gradient.
    #[track_caller]
    pub fn argmax(&self, dim: impl Dim, keepdim: bool) -> Result<Var> {
        // A 0-d value takes dimension 0 or -1, as `Tensor::argmax` (and PyTorch) does.
        let d = dim.resolve(self.rank().max(1), "argmax")?;
        Ok(no_grad_result(apply(ArgExtreme { dim: d, keepdim, max: true }, &[self])?))
    }

    /// The `i64` index of the first minimum along `dim`; no gradient.
    #[track_caller]
    pub fn argmin(&self, dim: impl Dim, keepdim: bool) -> Result<Var> {
        // A 0-d value takes dimension 0 or -1, as `Tensor::argmin` (and PyTorch) does.
        let d = dim.resolve(self.rank().max(1), "argmin")?;
        Ok(no_grad_result(apply(ArgExtreme { dim: d, keepdim, max: false }, &[self])?))
    }

    /// The value converted to `dtype`. Between float dtypes the gradient is converted back;
    /// a cast to an integer dtype has no gradient.
    #[track_caller]
    pub fn to_dtype(&self, dtype: DType) -> Var {
        let from = self.dtype();
        if dtype == from {
            return self.clone();
        }
        let v = apply_infallible(Cast { to: dtype, from }, &[self]);
        if dtype.is_float() { v } else { no_grad_result(v) }
    }

    /// The value on `device` (PyTorch's `x.to(device)`): `self` when it is already there,
    /// otherwise a copy whose gradient flows back to `self`'s device. An error for a device
    /// that is not available.
    #[track_caller]
    pub fn to_device(&self, device: Device) -> Result<Var> {
        let from = self.device();
        if device == from {
            device.check_available()?;
            return Ok(self.clone());
        }
        apply(ToDevice { to: device, from }, &[self])
    }

    /// An identity node that stops gradients: it stays in the graph (visible in exports,
    /// re-run by `forward`), but nothing flows back through it.
    #[track_caller]
    pub fn detach_node(&self) -> Var {
        no_grad_result(apply_infallible(Detach, &[self]))
    }
}

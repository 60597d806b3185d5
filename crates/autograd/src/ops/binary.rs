//! Elementwise operations of two `Var`s with broadcasting, generated from the `grad`
//! sections of ember-tensor's binary op table (`crates/tensor/src/ops/binary.rs`). Gradients
//! are summed back to each input's shape.

use super::{apply, constant};
use crate::autocast::{self, OpPolicy, policy};
use crate::backward_ctx::BackwardCtx;
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::{DType, Result, Shape, Tensor};
use smallvec::smallvec;

/// The input shapes, recorded so that backward can reduce broadcast gradients without
/// reading the inputs, and the dtype of an input that differs from the promoted dtype of
/// the output (an `f32` parameter times an `f64` tensor computes in `f64`).
struct Shapes {
    shapes: [Shape; 2],
    casts: [Option<DType>; 2],
}

impl Shapes {
    fn of(a: &Var, b: &Var) -> Self {
        let ((sa, da), (sb, db)) = (a.shape_and_dtype(), b.shape_and_dtype());
        let out = ember_tensor::dtype::result_type(&[(da, sa.rank()), (db, sb.rank())]);
        Shapes { shapes: [sa, sb], casts: [(da != out).then_some(da), (db != out).then_some(db)] }
    }

    /// `grad` for input `i` summed to its shape and cast to its dtype (PyTorch's
    /// `validate_outputs`: a gradient has its input's dtype), if that input needs one.
    fn reduce(&self, ctx: &BackwardCtx<'_>, i: usize, grad: impl FnOnce() -> Result<Var>) -> Result<Option<Var>> {
        if !ctx.needs_input_grad(i) {
            return Ok(None);
        }
        let g = grad()?.sum_to(&self.shapes[i])?;
        Ok(Some(match self.casts[i] {
            Some(dtype) => g.to_dtype(dtype),
            None => g,
        }))
    }
}

/// Turns the binary table's `grad` sections into `Var` ops: for each row, a struct named
/// like the variant holding the operands' [`Shapes`], its `Op` impl (forward through the
/// broadcasting `Tensor` method of the same name, backward summed back to each operand's
/// shape) and the `Var` method.
macro_rules! binary_var_ops {
    ($(
        $(#[$meta:meta])*
        $V:ident => $method:ident,
            cpu $cpu:tt,
            cuda $cuda:tt,
            tensor $tensor:tt,
            grad [
                $(#[$doc:meta])*
                saves $saves:ident,
                |$ctx:ident, $g:ident| [$ga:expr, $gb:expr]
            ];
    )*) => {
        $(
            struct $V(Shapes);

            impl Op for $V {
                fn name(&self) -> &str {
                    stringify!($method)
                }
                fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
                    inputs[0].$method(inputs[1])
                }
                #[allow(unused_variables)]
                fn backward(&self, $ctx: &BackwardCtx<'_>, $g: &Var) -> Result<Grads> {
                    Ok(smallvec![self.0.reduce($ctx, 0, || $ga)?, self.0.reduce($ctx, 1, || $gb)?])
                }
                fn saves(&self) -> Saves {
                    Saves::$saves
                }
                fn export(&self) -> Result<crate::export::OpExport> {
                    Ok(crate::export::OpExport::new(stringify!($method)))
                }
            }

            impl Var {
                $(#[$doc])*
                #[track_caller]
                pub fn $method(&self, other: &Var) -> Result<Var> {
                    // A constant: the check is compiled out of the ops autocast leaves alone.
                    const POLICY: OpPolicy = policy::binary(stringify!($method));
                    if POLICY.is_active() {
                        // One call site of the inlined `apply`, whichever inputs it gets.
                        let cast = autocast::cast(&POLICY, [self, other]);
                        let (a, b) = match &cast {
                            Some([a, b]) => (a, b),
                            None => (self, other),
                        };
                        return apply($V(Shapes::of(a, b)), &[a, b]);
                    }
                    apply($V(Shapes::of(self, other)), &[self, other])
                }
            }
        )*
    };
}

ember_tensor::binary_table!(binary_var_ops);

/// 1 where `a` wins (`a > b` for the maximum), 0.5 on ties, 0 elsewhere.
fn tie_mask(a: &Tensor, b: &Tensor, max: bool) -> Result<Var> {
    let wins = if max { a.gt(b)? } else { a.lt(b)? };
    let dtype = a.result_type(b).float_or_default();
    let m = wins.to_dtype(dtype).add(&a.eq(b)?.to_dtype(dtype).mul_scalar(0.5))?;
    Ok(constant(m))
}

//! Elementwise functions of one `Var`, including the operations with a Rust number.
//!
//! The ops are generated from the `grad` sections of ember-tensor's unary op table
//! (`crates/tensor/src/ops/unary.rs`), which hold each op's derivative beside its kernels;
//! `clamp`, whose bounds are optional here, is written by hand below. In the formulas, `x`
//! is the input, `y` the output and `g` the incoming gradient.

use super::{apply, apply_infallible, constant};
use crate::autocast::{self, OpPolicy, policy};
use crate::backward_ctx::BackwardCtx;
use crate::export::{ExportAttr, OpExport};
use crate::grad_mode::is_grad_enabled;
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::{Result, Scalar, Tensor, UnaryOp};
use smallvec::smallvec;

/// The gradient of a piecewise-constant function: zeros, as in PyTorch (not "no gradient": a
/// parameter reached only through such a function gets a zero `.grad`, not none).
pub(super) fn zero_gradient(g: &Var) -> Var {
    constant(g.value().zeros_like())
}

/// The gradient `op(g)` of an elementwise function whose derivative is a function of the
/// incoming gradient alone (`-g`, `s * g`, `g / s`): written into `g`'s own buffer when
/// backward allows it ([`BackwardCtx::writable_grad`]), else `fresh(g)`, which must compute
/// the same (the `Var` operation of `op`, differentiable under `create_graph`).
fn grad_in_place(ctx: &BackwardCtx<'_>, g: &Var, op: UnaryOp, fresh: impl FnOnce(&Var) -> Var) -> Result<Var> {
    match ctx.writable_grad(g) {
        Some(t) => {
            t.apply_(op)?;
            Ok(g.clone())
        }
        None => Ok(fresh(g)),
    }
}

/// `g * d` for a derivative `d` computed from saved values (`e^x`: `d = y`): written into
/// `g`'s own buffer when backward allows it ([`BackwardCtx::writable_grad`]) and `d` has
/// `g`'s shape and dtype (so that the in-place product is the one `g.mul(d)` computes),
/// else `g.mul(d)`.
fn grad_times(ctx: &BackwardCtx<'_>, g: &Var, d: &Var) -> Result<Var> {
    if let Some(t) = ctx.writable_grad(g) {
        let d = d.value();
        if d.dtype() == t.dtype() && d.shape() == t.shape() && d.device() == t.device() {
            t.mul_(&d)?;
            return Ok(g.clone());
        }
    }
    g.mul(d)
}

/// ReLU's gradient from its output `y`: `g` where `y > 0`, 0 elsewhere. Outside
/// `create_graph` (grad mode off in backward) it is the backend's one-pass kernel; under it,
/// or for a gradient whose dtype or shape is not the output's, the same as a `masked_fill`
/// (which broadcasts, and can be differentiated again).
fn relu_gradient(g: &Var, y: &Tensor) -> Result<Var> {
    if is_grad_enabled() || g.dtype() != y.dtype() || g.shape() != *y.shape() {
        return g.masked_fill(constant(y.le_scalar(0)), 0.0);
    }
    Ok(constant(g.value().relu_backward(y)?))
}

/// `x` as a float tensor's dtype, for masks: `mask.to_dtype(float)`.
fn float_mask(mask: Tensor, like: &Tensor) -> Var {
    constant(mask.to_dtype(like.dtype().float_or_default()))
}

/// Turns the unary table's `grad` sections into `Var` ops: for each row, a struct named
/// like the variant with the parameters as fields, its `Op` impl (forward through the
/// `Tensor` method of the same name) and the `Var` method. Rows with `grad []` are skipped.
macro_rules! unary_var_ops {
    ($(
        $(#[$meta:meta])*
        $V:ident $(( $($tp:ident: $tty:tt),* ))? $({ $($(#[$fmeta:meta])* $f:ident: $fty:tt),* })?
            => $method:ident,
            float $float:tt,
            int $int:tt,
            cuda $cuda:tt,
            tensor $tensor:tt,
            grad $grad:tt;
    )*) => {
        $( unary_var_ops!(@op $V, $method, [$( $($tp: $tty),* )? $( $($f: $fty),* )?], $grad); )*
    };

    (@op $V:ident, $method:ident, [$($p:ident: $pt:tt),*], []) => {};
    (@op $V:ident, $method:ident, [$($p:ident: $pt:tt),*], [
        $(#[$doc:meta])*
        saves $saves:tt,
        $(returns $ret:ident,)?
        $(export $export:tt,)?
        |$ctx:ident, $g:ident| $backward:expr
    ]) => {
        #[derive(Clone, Copy)]
        struct $V {
            $($p: $pt,)*
        }

        impl Op for $V {
            fn name(&self) -> &str {
                stringify!($method)
            }
            #[allow(unused_variables)]
            fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
                let $V { $($p),* } = *self;
                unary_var_ops!(@forward $($ret)?, inputs[0].$method($($p),*))
            }
            #[allow(unused_variables)]
            fn backward(&self, $ctx: &BackwardCtx<'_>, $g: &Var) -> Result<Grads> {
                let $V { $($p),* } = *self;
                Ok(smallvec![$backward])
            }
            fn saves(&self) -> Saves {
                unary_var_ops!(@saves $saves)
            }
            unary_var_ops!(@export $V, $method, [$($p),*] $(, $export)?);
        }

        impl Var {
            $(#[$doc])*
            #[track_caller]
            pub fn $method(&self $(, $p: unary_var_ops!(@arg $pt))*) -> unary_var_ops!(@ret $($ret)?) {
                let op = $V { $($p: unary_var_ops!(@into $pt, $p)),* };
                // A constant: the check is compiled out of the ops autocast leaves alone.
                const POLICY: OpPolicy = policy::unary(stringify!($method));
                if POLICY.is_active() {
                    // One call site of the inlined `apply`, whichever input it gets.
                    let cast = autocast::cast(&POLICY, [self]);
                    let x = match &cast {
                        Some([x]) => x,
                        None => self,
                    };
                    return unary_var_ops!(@apply $($ret)?, op, x);
                }
                unary_var_ops!(@apply $($ret)?, op, self)
            }
        }
    };

    (@export $V:ident, $method:ident, [$($p:ident),*]) => {};
    (@export $V:ident, $method:ident, [$($p:ident),*], $export:tt) => {
        #[allow(unused_variables)]
        fn export(&self) -> Result<OpExport> {
            let $V { $($p),* } = *self;
            Ok(unary_var_ops!(@describe $method, $export))
        }
    };
    (@describe $method:ident, ()) => { OpExport::new(stringify!($method)) };
    (@describe $method:ident, ($attr:ident = $value:expr)) => {
        OpExport::new(stringify!($method)).attr(stringify!($attr), ExportAttr::Float($value))
    };

    (@saves $saves:ident) => { Saves::$saves };
    (@saves { $($fields:tt)* }) => { Saves { $($fields)* } };

    (@forward , $call:expr) => { Ok($call) };
    (@forward Result, $call:expr) => { $call };
    (@ret) => { Var };
    (@ret Result) => { Result<Var> };
    (@apply , $op:expr, $x:ident) => { apply_infallible($op, &[$x]) };
    (@apply Result, $op:expr, $x:ident) => { apply($op, &[$x]) };

    (@arg Scalar) => { impl Into<Scalar> };
    (@arg $t:tt) => { $t };
    (@into Scalar, $v:ident) => { $v.into() };
    (@into $t:tt, $v:ident) => { $v };
}

ember_tensor::unary_table!(unary_var_ops);

/// `clamp` with optional bounds (the table's `UnaryOp::Clamp` takes infinite ones instead).
struct Clamp {
    min: Option<f64>,
    max: Option<f64>,
}

impl Op for Clamp {
    fn name(&self) -> &str {
        "clamp"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(inputs[0].clamp(self.min, self.max))
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        // The gradient passes strictly inside the bounds: at a bound PyTorch takes the
        // minimum-norm subgradient 0, like relu at 0 (the kinks_and_ties parity scenario).
        let x = ctx.input(0)?.value();
        let inside = match (self.min, self.max) {
            (Some(lo), Some(hi)) => x.gt_scalar(lo).mul(&x.lt_scalar(hi))?,
            (Some(lo), None) => x.gt_scalar(lo),
            (None, Some(hi)) => x.lt_scalar(hi),
            (None, None) => return Ok(smallvec![Some(g.clone())]),
        };
        Ok(smallvec![Some(g.mul(&float_mask(inside, &x))?)])
    }
}

impl Var {
    /// Values limited to `[min, max]`; the gradient passes strictly inside the bounds.
    #[track_caller]
    pub fn clamp(&self, min: Option<f64>, max: Option<f64>) -> Var {
        apply_infallible(Clamp { min, max }, &[self])
    }
}

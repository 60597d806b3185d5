//! The table of elementwise functions of two tensors: one entry per [`BinaryOp`] variant
//! with its name, its per-element function (wrapping arithmetic for integers) and its
//! `Tensor` method (see the module docs of [`crate::ops`] for the entry format).

use crate::dtype::Element;

define_binary_ops! {
    /// `a + b`
    Add => "add", cheap |x, y| x.wadd(y),
        tensor [/// `self + other`, broadcasting.
                add];
    /// `a - b`
    Sub => "sub", cheap |x, y| x.wsub(y),
        tensor [/// `self - other`, broadcasting.
                sub];
    /// `a * b`
    Mul => "mul", cheap |x, y| x.wmul(y),
        tensor [/// `self * other`, broadcasting.
                mul];
    /// `a / b` (integer division by zero gives 0)
    Div => "div", cheap |x, y| Element::div(x, y),
        tensor [/// `self / other`, broadcasting; integers divide as floats.
                div];
    /// `a ^ b`
    Pow => "pow", costly |x, y| x.pow_elem(y),
        tensor [/// `self ^ other` elementwise, broadcasting.
                pow];
    /// `max(a, b)` propagating NaN
    Maximum => "maximum", cheap |x, y| x.max_nan(y),
        tensor [/// The elementwise maximum (NaN propagates), broadcasting.
                maximum];
    /// `min(a, b)` propagating NaN
    Minimum => "minimum", cheap |x, y| x.min_nan(y),
        tensor [/// The elementwise minimum (NaN propagates), broadcasting.
                minimum];
}

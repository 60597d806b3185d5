//! The checks that views fit a convolution's geometry ([`ConvGeometry`],
//! [`SlidingWindow`]), which every backend makes before a sliding-window kernel.

use super::{check_numel, view};
use crate::layout::Layout;
use crate::ops::conv::{ConvGeometry, SlidingWindow};
use crate::shape::Shape;
use crate::storage::Storage;
use crate::{Error, Result};
use std::borrow::Cow;

/// What an operand of a convolution kernel is, which fixes the shape it must have.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Role {
    /// `[N, in_channels, h, w]`.
    Input,
    /// `[N, out_channels, oh, ow]`.
    Output,
    /// `[out_channels, in_channels / groups, kh, kw]`.
    Weight,
    /// `[channels]`.
    Bias(usize),
}

impl Role {
    fn shape(self, geom: &ConvGeometry, batch: usize) -> Shape {
        match self {
            Role::Input => geom.input_shape(batch),
            Role::Output => geom.output_shape(batch),
            Role::Weight => geom.weight_shape(),
            Role::Bias(n) => Shape::from([n]),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Role::Input => "input",
            Role::Output => "output gradient",
            Role::Weight => "weight",
            Role::Bias(_) => "bias",
        }
    }
}

/// The checks every backend makes before a convolution kernel: the geometry is valid, every
/// view fits its storage, all share one float dtype, and each has the shape its [`Role`]
/// gives for the batch size of the first view's leading dimension; and the `result` role's
/// shape may exist. Returns the batch size and the validated layouts, in order.
pub(crate) fn check_views<'a>(
    op: &'static str,
    geom: &ConvGeometry,
    views: &[(&Storage, &'a Layout, Role)],
    result: Role,
) -> Result<(usize, Vec<Cow<'a, Layout>>)> {
    geom.check(op)?;
    let mut layouts = Vec::with_capacity(views.len());
    for (s, l, _) in views {
        layouts.push(view(op, s, l)?);
    }
    let batch = layouts.first().and_then(|l| l.shape().first().copied()).unwrap_or(0);
    let dtype = views.first().map(|v| v.0.dtype()).unwrap_or(crate::DType::F32);
    for ((s, _, role), l) in views.iter().zip(&layouts) {
        let want = role.shape(geom, batch);
        check_numel(op, &want)?;
        if *l.shape() != want {
            return Err(Error::shape(op, format!("expected the {} of shape {want}, got {}", role.name(), l.shape())));
        }
        if !s.dtype().is_float() || s.dtype() != dtype {
            return Err(Error::dtype(
                op,
                format!("expected float operands of one dtype, got {dtype} and {} ({})", s.dtype(), role.name()),
            ));
        }
    }
    check_numel(op, &result.shape(geom, batch))?;
    Ok((batch, layouts))
}

/// The checks before `unfold` (`columns` false: `input` is `[N, C, h, w]`) or `fold`
/// (`columns` true: `input` is `[N, C * kh * kw, positions]`): a valid window, a view that
/// fits its storage, a float dtype and the shape the window gives. Returns `(N, C)` and the
/// validated layout.
pub(crate) fn check_window_view<'a>(
    op: &'static str,
    window: &SlidingWindow,
    s: &Storage,
    l: &'a Layout,
    columns: bool,
) -> Result<(usize, usize, Cow<'a, Layout>)> {
    window.check(op)?;
    let l = view(op, s, l)?;
    if !s.dtype().is_float() {
        return Err(Error::dtype(op, format!("expected a float input, got {}", s.dtype())));
    }
    let dims = l.shape().dims();
    let (taps, [h, w]) = (window.taps(), window.input);
    let fits = if columns {
        dims.len() == 3 && dims[1].is_multiple_of(taps) && dims[2] == window.positions()
    } else {
        dims.len() == 4 && dims[2..] == [h, w]
    };
    if !fits {
        return Err(Error::shape(op, format!("an input of shape {} does not fit the window {window:?}", l.shape())));
    }
    let (batch, channels) = if columns { (dims[0], dims[1] / taps) } else { (dims[0], dims[1]) };
    let result = if columns {
        Shape::from([batch, channels, h, w])
    } else {
        Shape::from(vec![batch, channels.saturating_mul(taps), window.positions()])
    };
    check_numel(op, &result)?;
    Ok((batch, channels, l))
}

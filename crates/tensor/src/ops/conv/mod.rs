//! Convolutions, transposed convolutions and `unfold`/`fold`: their arguments as a caller
//! gives them ([`ConvArgs`], [`ConvTransposeArgs`], [`UnfoldArgs`]), PyTorch's output-size
//! rules and errors, and the geometry a backend computes with ([`ConvGeometry`],
//! [`SlidingWindow`]).
//!
//! Every operation works on two spatial dimensions underneath: a 1-d operation is the 2-d
//! one over a height of 1, so the resolution lifts 1-d arguments to 2-d after checking them
//! in their own terms (errors name the shapes the caller passed).
//!
//! ```
//! use ember_tensor::ops::conv::{ConvArgs, Padding, conv_geometry};
//! let args = ConvArgs::<2>::default().stride(2).padding(1).dilation([1, 2]);
//! assert_eq!(args.stride, [2, 2]);
//! assert_eq!(args.padding, Padding::Explicit([1, 1]));
//! let g = conv_geometry("conv2d", &[8, 3, 32, 32], &[16, 3, 5, 5], None, &args)?;
//! assert_eq!(g.window.output, [15, 13]);
//! # Ok::<(), ember_tensor::Error>(())
//! ```

mod args;
mod geometry;
mod plan;

pub use args::{ConvArgs, ConvTransposeArgs, Padding, Spatial, UnfoldArgs};
pub use geometry::{ConvGeometry, SlidingWindow};
pub use plan::{
    ConvPlan, WindowPlan, conv_geometry, conv_plan, conv_transpose_geometry, conv_transpose_plan, fold_plan,
    fold_window, unfold_plan, unfold_window,
};

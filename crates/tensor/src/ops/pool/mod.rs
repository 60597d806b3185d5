//! Pooling and interpolation: their arguments as a caller gives them ([`MaxPoolArgs`],
//! [`AvgPoolArgs`], [`InterpolateArgs`]), PyTorch's output-size rules, index rules and
//! errors, and the maps a backend computes with ([`PoolWindows`], [`Resample`]).
//!
//! Every operation works on `[N, C, h, w]` planes underneath: a 1-d operation is the 2-d one
//! over a height of 1, and an unbatched input gets a batch of 1 ([`PoolPlan`]), so errors
//! name the shapes the caller passed while the kernels see one layout.
//!
//! ```
//! use ember_tensor::ops::pool::{AvgPoolArgs, MaxPoolArgs, max_pool_plan};
//! let args = MaxPoolArgs::<2>::new(3).stride(2).padding(1);
//! assert_eq!((args.kernel_size, args.stride, args.padding), ([3, 3], Some([2, 2]), [1, 1]));
//! let plan = max_pool_plan("max_pool2d", &[1, 4, 8, 8], &args)?;
//! assert_eq!(plan.output.dims(), &[1, 4, 4, 4]);
//! let avg = AvgPoolArgs::<1>::new(2).count_include_pad(false);
//! assert!(!avg.count_include_pad);
//! # Ok::<(), ember_tensor::Error>(())
//! ```

mod args;
mod plan;
mod windows;

pub use args::{AvgPoolArgs, InterpolateArgs, InterpolateMode, MaxPoolArgs};
pub use plan::{
    PoolPlan, adaptive_avg_pool_plan, adaptive_max_pool_plan, avg_pool_plan, interpolate_plan, max_pool_plan,
};
pub use windows::{AxisTaps, AxisWindows, PoolWindows, Resample};

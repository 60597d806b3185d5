//! [`unfold`] (im2col) and [`fold`] (col2im), PyTorch's `torch.nn.functional.unfold` and
//! `fold`: sliding blocks of an image as columns, and columns summed back into an image.

use ember_autograd::Var;
use ember_tensor::{Result, Spatial, UnfoldArgs};

/// The sliding blocks of `input` (`[N, C, h, w]` or `[C, h, w]`) as columns
/// `[N, C * kh * kw, L]`, `L` the number of block positions (PyTorch's `F.unfold`).
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::functional as F;
/// use ember_tensor::{Tensor, UnfoldArgs};
/// let x = Var::new(Tensor::randn([2, 3, 8, 8])?);
/// let cols = F::unfold(&x, &UnfoldArgs::new(3).padding(1).stride(2))?;
/// assert_eq!(cols.shape().dims(), &[2, 27, 16]);
/// // fold undoes it where blocks do not overlap.
/// let blocks = F::unfold(&x, &UnfoldArgs::new(2).stride(2))?;
/// let back = F::fold(&blocks, [8, 8], &UnfoldArgs::new(2).stride(2))?;
/// assert_eq!(back.value().to_vec::<f32>()?, x.value().to_vec::<f32>()?);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn unfold(input: &Var, args: &UnfoldArgs) -> Result<Var> {
    input.im2col(args)
}

/// Columns `[N, C * kh * kw, L]` (or `[C * kh * kw, L]`) of blocks summed into an image of
/// `output_size`, `[N, C, h, w]`; overlapping blocks add up (PyTorch's `F.fold`).
pub fn fold(input: &Var, output_size: impl Spatial<2>, args: &UnfoldArgs) -> Result<Var> {
    input.col2im(output_size.spatial(), args)
}

//! Convolutions, transposed convolutions, `unfold` (im2col) and `fold` (col2im), with
//! PyTorch's semantics (NCHW, cross-correlation, its output sizes and argument checks; see
//! [`crate::ops::conv`]).

use super::Tensor;
use crate::ops::conv::{
    ConvArgs, ConvGeometry, ConvPlan, ConvTransposeArgs, SlidingWindow, UnfoldArgs, conv_plan, conv_transpose_plan,
    fold_plan, unfold_plan,
};
use crate::shape::Shape;
use crate::{Error, Result};

impl Tensor {
    /// An error unless the operands share a device and one float dtype.
    fn conv_operands(&self, op: &'static str, weight: &Tensor, bias: Option<&Tensor>) -> Result<()> {
        self.same_device(op, weight)?;
        let dtypes_agree = weight.dtype == self.dtype && bias.is_none_or(|b| b.dtype == self.dtype);
        if !self.dtype.is_float() || !dtypes_agree {
            return Err(Error::dtype(
                op,
                format!(
                    "expected a float input, weight and bias of one dtype, got {}, {} and {}",
                    self.dtype,
                    weight.dtype,
                    bias.map_or("no bias".to_string(), |b| b.dtype.to_string())
                ),
            ));
        }
        if let Some(b) = bias {
            self.same_device(op, b)?;
        }
        Ok(())
    }

    /// Runs a planned convolution (`transposed` or not) and shapes the result as planned.
    fn run_conv(&self, weight: &Tensor, bias: Option<&Tensor>, plan: &ConvPlan, transposed: bool) -> Result<Tensor> {
        let x = self.reshape(&plan.input)?;
        let w = weight.reshape(&plan.weight)?;
        let out = if transposed {
            x.conv_transpose2d_resolved(&w, bias, &plan.geometry)?
        } else {
            x.conv2d_resolved(&w, bias, &plan.geometry)?
        };
        out.reshape(&plan.output)
    }

    /// A 1-d convolution (PyTorch's `conv1d`, a cross-correlation): `self` is
    /// `[N, in, L]` (or unbatched `[in, L]`), `weight` `[out, in / groups, k]`, `bias`
    /// `[out]`; the result is `[N, out, L_out]`.
    ///
    /// ```
    /// use ember_tensor::{ConvArgs, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [1, 1, 4])?;
    /// let w = Tensor::from_vec(vec![1.0f32, -1.0], [1, 1, 2])?;
    /// let y = x.conv1d(&w, None, &ConvArgs::default().padding(1))?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![-1.0, -1.0, -1.0, -1.0, 4.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn conv1d(&self, weight: &Tensor, bias: Option<&Tensor>, args: &ConvArgs<1>) -> Result<Tensor> {
        let op = "conv1d";
        self.conv_operands(op, weight, bias)?;
        let plan = conv_plan(op, self.shape(), weight.shape(), bias.map(|b| b.shape().dims()), args)?;
        self.run_conv(weight, bias, &plan, false)
    }

    /// A 2-d convolution (PyTorch's `conv2d`, a cross-correlation): `self` is
    /// `[N, in, h, w]` (or unbatched `[in, h, w]`), `weight` `[out, in / groups, kh, kw]`,
    /// `bias` `[out]`; the result is `[N, out, h_out, w_out]` with
    /// `h_out = (h + 2 padding - dilation (kh - 1) - 1) / stride + 1`.
    ///
    /// ```
    /// use ember_tensor::{ConvArgs, Padding, Tensor};
    /// let x = Tensor::ones([2, 3, 8, 8], ember_tensor::DType::F32)?;
    /// let w = Tensor::ones([4, 3, 3, 3], ember_tensor::DType::F32)?;
    /// let y = x.conv2d(&w, None, &ConvArgs::default().stride(2).padding(1))?;
    /// assert_eq!(y.shape(), &[2, 4, 4, 4]);
    /// // Inside the image every output sums 27 ones.
    /// assert_eq!(y.to_vec::<f32>()?[5], 27.0);
    /// let same = x.conv2d(&w, None, &ConvArgs::default().padding(Padding::Same))?;
    /// assert_eq!(same.shape(), &[2, 4, 8, 8]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn conv2d(&self, weight: &Tensor, bias: Option<&Tensor>, args: &ConvArgs<2>) -> Result<Tensor> {
        let op = "conv2d";
        self.conv_operands(op, weight, bias)?;
        let plan = conv_plan(op, self.shape(), weight.shape(), bias.map(|b| b.shape().dims()), args)?;
        self.run_conv(weight, bias, &plan, false)
    }

    /// A 1-d transposed convolution (PyTorch's `conv_transpose1d`): `self` is `[N, in, L]`
    /// (or `[in, L]`), `weight` `[in, out / groups, k]`, `bias` `[out]`; the result is
    /// `[N, out, (L - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1]`.
    pub fn conv_transpose1d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        args: &ConvTransposeArgs<1>,
    ) -> Result<Tensor> {
        let op = "conv_transpose1d";
        self.conv_operands(op, weight, bias)?;
        let plan = conv_transpose_plan(op, self.shape(), weight.shape(), bias.map(|b| b.shape().dims()), args)?;
        self.run_conv(weight, bias, &plan, true)
    }

    /// A 2-d transposed convolution (PyTorch's `conv_transpose2d`, the gradient of a
    /// convolution with respect to its input): `self` is `[N, in, h, w]` (or unbatched),
    /// `weight` `[in, out / groups, kh, kw]`, `bias` `[out]`; the result is
    /// `[N, out, (h - 1) stride - 2 padding + dilation (kh - 1) + output_padding + 1, ..]`.
    ///
    /// ```
    /// use ember_tensor::{ConvTransposeArgs, DType, Tensor};
    /// let x = Tensor::ones([1, 8, 7, 7], DType::F32)?;
    /// let w = Tensor::ones([8, 4, 3, 3], DType::F32)?;
    /// let args = ConvTransposeArgs::default().stride(2).padding(1).output_padding(1);
    /// assert_eq!(x.conv_transpose2d(&w, None, &args)?.shape(), &[1, 4, 14, 14]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn conv_transpose2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        args: &ConvTransposeArgs<2>,
    ) -> Result<Tensor> {
        let op = "conv_transpose2d";
        self.conv_operands(op, weight, bias)?;
        let plan = conv_transpose_plan(op, self.shape(), weight.shape(), bias.map(|b| b.shape().dims()), args)?;
        self.run_conv(weight, bias, &plan, true)
    }

    /// The sliding blocks of `self` (`[N, C, h, w]` or unbatched `[C, h, w]`) as columns:
    /// PyTorch's `torch.nn.functional.unfold` (im2col). The result is
    /// `[N, C * kh * kw, L]`, `L` the number of block positions; row
    /// `c * kh * kw + i * kw + j` holds element `(i, j)` of channel `c`'s blocks.
    ///
    /// ```
    /// use ember_tensor::{Tensor, UnfoldArgs};
    /// let x = Tensor::arange(0.0, 9.0)?.reshape([1, 1, 3, 3])?;
    /// let cols = x.im2col(&UnfoldArgs::new(2))?;
    /// assert_eq!(cols.shape(), &[1, 4, 4]);
    /// // The first block is [[0, 1], [3, 4]].
    /// assert_eq!(cols.select(2, 0)?.to_vec::<f32>()?, vec![0.0, 1.0, 3.0, 4.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn im2col(&self, args: &UnfoldArgs) -> Result<Tensor> {
        Self::float_only("unfold", self)?;
        let plan = unfold_plan(self.shape(), args)?;
        self.reshape(&plan.input)?.unfold_resolved(&plan.window)?.reshape(&plan.output)
    }

    /// Sums columns of blocks back into an image of `output_size`: PyTorch's
    /// `torch.nn.functional.fold` (col2im), the adjoint of [`Tensor::im2col`]. `self` is
    /// `[N, C * kh * kw, L]` (or `[C * kh * kw, L]`) and the result `[N, C, h, w]`;
    /// overlapping blocks add up.
    ///
    /// ```
    /// use ember_tensor::{DType, Tensor, UnfoldArgs};
    /// let ones = Tensor::ones([1, 4, 4], DType::F32)?;
    /// let counts = ones.col2im([3, 3], &UnfoldArgs::new(2))?;
    /// // How many 2x2 blocks cover each pixel of a 3x3 image.
    /// assert_eq!(counts.to_vec::<f32>()?, vec![1.0, 2.0, 1.0, 2.0, 4.0, 2.0, 1.0, 2.0, 1.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn col2im(&self, output_size: [usize; 2], args: &UnfoldArgs) -> Result<Tensor> {
        Self::float_only("fold", self)?;
        let plan = fold_plan(self.shape(), output_size, args)?;
        self.reshape(&plan.input)?.fold_resolved(&plan.window)?.reshape(&plan.output)
    }

    fn float_only(op: &'static str, t: &Tensor) -> Result<()> {
        if !t.dtype.is_float() {
            return Err(Error::dtype(op, format!("expected a float input, got {}", t.dtype)));
        }
        Ok(())
    }

    /// The convolution of `self` (`[N, in, h, w]`) by `weight` with a resolved geometry
    /// (see [`crate::ops::conv::conv_plan`]), plus `bias`: `[N, out, oh, ow]`. For code that
    /// keeps a geometry, such as autograd's backward formulas; shapes must match the
    /// geometry exactly.
    pub fn conv2d_resolved(&self, weight: &Tensor, bias: Option<&Tensor>, geom: &ConvGeometry) -> Result<Tensor> {
        let op = "conv2d";
        self.conv_operands(op, weight, bias)?;
        let n = self.shape().first().copied().unwrap_or(0);
        let s = match bias {
            Some(b) => self.read3(weight, b, |x, w, b| self.backend().conv2d(x, w, Some(b), geom))?,
            None => self.read2(weight, |x, w| self.backend().conv2d(x, w, None, geom))?,
        };
        Ok(Tensor::from_storage(s, geom.output_shape(n)))
    }

    /// The transposed convolution of `self` (of the convolution's output shape
    /// `[N, out, oh, ow]`) by `weight` (`[out, in / groups, kh, kw]`) with a resolved
    /// geometry, plus `bias` (`[in]`): `[N, in, h, w]`. This is also the gradient of the
    /// convolution with respect to its input, for an output gradient `self`.
    pub fn conv_transpose2d_resolved(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        geom: &ConvGeometry,
    ) -> Result<Tensor> {
        let op = "conv_transpose2d";
        self.conv_operands(op, weight, bias)?;
        let n = self.shape().first().copied().unwrap_or(0);
        let s = match bias {
            Some(b) => self.read3(weight, b, |y, w, b| self.backend().conv_transpose2d(y, w, Some(b), geom))?,
            None => self.read2(weight, |y, w| self.backend().conv_transpose2d(y, w, None, geom))?,
        };
        Ok(Tensor::from_storage(s, geom.input_shape(n)))
    }

    /// The gradient of a convolution with respect to its weight, `self` being its input
    /// (`[N, in, h, w]`) and `grad` the gradient of its output (`[N, out, oh, ow]`):
    /// `[out, in / groups, kh, kw]`, summed over the batch (PyTorch's
    /// `torch.nn.grad.conv2d_weight`).
    pub fn conv2d_weight_grad(&self, grad: &Tensor, geom: &ConvGeometry) -> Result<Tensor> {
        let op = "conv2d_weight_grad";
        self.conv_operands(op, grad, None)?;
        let s = self.read2(grad, |x, g| self.backend().conv2d_weight_grad(x, g, geom))?;
        Ok(Tensor::from_storage(s, geom.weight_shape()))
    }

    /// `unfold` of a batched `[N, C, h, w]` input with a resolved window:
    /// `[N, C * kh * kw, oh * ow]`.
    pub fn unfold_resolved(&self, window: &SlidingWindow) -> Result<Tensor> {
        Self::float_only("unfold", self)?;
        let s = self.read(|v| self.backend().unfold(v, window))?;
        let dims = self.shape();
        let rows = dims.get(1).copied().unwrap_or(0) * window.taps();
        Ok(Tensor::from_storage(s, Shape::from([dims[0], rows, window.positions()])))
    }

    /// `fold` of a batched `[N, C * kh * kw, oh * ow]` input with a resolved window:
    /// `[N, C, h, w]`.
    pub fn fold_resolved(&self, window: &SlidingWindow) -> Result<Tensor> {
        Self::float_only("fold", self)?;
        let s = self.read(|v| self.backend().fold(v, window))?;
        let dims = self.shape();
        let channels = dims.get(1).copied().unwrap_or(0) / window.taps().max(1);
        let [h, w] = window.input;
        Ok(Tensor::from_storage(s, Shape::from([dims[0], channels, h, w])))
    }
}

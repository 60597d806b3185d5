//! The methods of the [`Backend`](super::Backend) trait, written once: the list
//! [`backend_methods!`](crate::backend_methods), from which the trait, the kernels the
//! default compositions call (`kernels.rs`) and the backends that hand kernels to another
//! backend ([`delegate_backend!`](crate::delegate_backend)) are generated. A method added
//! to the list reaches every one of them without anyone forwarding it by hand.
//!
//! The default bodies name `compose`, the default compositions: they are resolved where
//! the trait is generated (`seam.rs`).

/// Calls the macro `$cb` (a path in brackets, followed by any tokens of its own) with every
/// method of [`Backend`](crate::backend::Backend), in the trait's order, each as
/// `{ [attributes] name self (arg: Type, ..) (ReturnType) (body) }`, where `body` is the
/// default body's block for a method that has one and `;` for a method every backend must
/// write. The types are those of [`signature`](crate::backend::signature), which an
/// expansion must bring into scope.
#[doc(hidden)]
#[macro_export]
macro_rules! backend_methods {
    ([$($cb:tt)*] $($extra:tt)*) => {
        $crate::__backend_methods_parse! { ([$($cb)*] $($extra)*) []
            /// The device this backend computes on.
            fn device(&self) -> Device;
            /// Waits until every kernel and copy queued on the device has finished (a no-op where
            /// kernels run synchronously, as on the CPU). Errors a device reports late, from a
            /// kernel that already returned, surface here.
            fn synchronize(&self) -> Result<()> {
                Ok(())
            }
            /// The device memory the backend's allocator counts, where it keeps such figures.
            fn memory(&self) -> Result<Option<DeviceMemory>> {
                Ok(None)
            }
            /// Starts the peak of [`Backend::memory`] again from the memory held now.
            fn reset_peak_memory(&self) -> Result<()> {
                Ok(())
            }
            /// Returns memory kept for reuse to the device's driver.
            fn empty_cache(&self) -> Result<()> {
                Ok(())
            }
            /// `numel` elements of `value` (converted to `dtype` by [`Scalar::to_element`]).
            fn full(&self, numel: usize, value: Scalar, dtype: DType) -> Result<Storage>;
            /// Moves host data onto the device.
            fn upload(&self, data: CpuStorage) -> Result<Storage>;
            /// A contiguous host copy of a view.
            fn download(&self, src: View<'_>) -> Result<CpuStorage>;
            /// A contiguous copy of a view, converted to `dtype`.
            fn cast(&self, src: View<'_>, dtype: DType) -> Result<Storage>;
            /// An elementwise function.
            fn unary(&self, op: UnaryOp, src: View<'_>) -> Result<Storage>;
            /// An elementwise function of two same-dtype views of one shape.
            fn binary(&self, op: BinaryOp, a: View<'_>, b: View<'_>) -> Result<Storage>;
            /// An elementwise comparison of two same-dtype views of one shape, as a `u8` mask.
            fn compare(&self, op: CmpOp, a: View<'_>, b: View<'_>) -> Result<Storage>;
            /// An elementwise comparison with a scalar, as a `u8` mask. Integer elements compare
            /// exactly with the scalar's value; float elements with the scalar rounded to their
            /// dtype (as PyTorch converts it).
            fn compare_scalar(&self, op: CmpOp, a: View<'_>, scalar: Scalar) -> Result<Storage>;
            /// `cond ? a : b` elementwise; `cond` is `u8`, `a` and `b` share a dtype.
            fn where_cond(&self, cond: View<'_>, a: View<'_>, b: View<'_>) -> Result<Storage>;
            /// Applies `op` in place to the elements of `dst` that `layout` addresses.
            fn unary_inplace(&self, op: UnaryOp, dst: &mut Storage, layout: &Layout) -> Result<()>;
            /// `dst = dst op src` in place; `src` has `dst`'s dtype and is broadcast to its shape.
            fn binary_inplace(&self, op: BinaryOp, dst: &mut Storage, layout: &Layout, src: View<'_>) -> Result<()>;
            /// Copies `src` (broadcast to `layout`'s shape, any dtype) into `dst`.
            fn copy_inplace(&self, dst: &mut Storage, layout: &Layout, src: View<'_>) -> Result<()>;
            /// Sets the elements that `layout` addresses to `value` (see [`Backend::full`]).
            fn fill_inplace(&self, dst: &mut Storage, layout: &Layout, value: Scalar) -> Result<()>;
            /// Reduces over `dims` (sorted, unique); the result has the input's shape with those
            /// dimensions set to 1. `ArgMax`/`ArgMin` take exactly one dimension.
            fn reduce(&self, op: ReduceOp, src: View<'_>, dims: &[usize]) -> Result<Storage>;
            /// Softmax (or log-softmax) along `dim`, for float views.
            ///
            /// The default composes it from `reduce`, `binary` and `unary` (max, subtract, exp,
            /// sum, divide or subtract the log).
            fn softmax(&self, src: View<'_>, dim: usize, log: bool) -> Result<Storage> {
                compose::softmax(self, src, dim, log)
            }
            /// A classification loss of class-index targets ([`ClassLoss`]): `scores` are `[C]`,
            /// `[N, C]` or `[N, C, d1, ..]` (float), `target` the `i64` class indices of the scores'
            /// shape without the class dimension. The result, in the scores' dtype, has the target's
            /// shape for [`LossReduction::None`](crate::ops::loss::LossReduction::None) and is
            /// 0-d otherwise. A target that is neither ignored nor in `0..C` is an error naming it.
            ///
            /// The default composes it from `softmax`, `gather`, `where_cond` and `reduce`, with the
            /// targets checked on the host.
            fn class_loss(&self, scores: View<'_>, target: View<'_>, loss: &ClassLoss) -> Result<Storage> {
                compose::class_loss(self, scores, target, loss)
            }
            /// The gradient of [`Backend::class_loss`] with respect to the scores, for the incoming
            /// gradient `grad` (of the loss's shape and the scores' dtype); the result has the
            /// scores' shape.
            ///
            /// The default composes it from `softmax`, `scatter_add`, `where_cond` and `binary`.
            fn class_loss_backward(
                &self,
                scores: View<'_>,
                target: View<'_>,
                grad: View<'_>,
                loss: &ClassLoss,
            ) -> Result<Storage> {
                compose::class_loss_backward(self, scores, target, grad, loss)
            }
            /// Scaled dot-product attention (see [`crate::ops::attention`]) of `[q, k, v]`
            /// (`[batch.., L, E]`, `[batch.., S, E]`, `[batch.., S, Ev]`, one float dtype, batch
            /// dimensions already broadcast) with an optional `mask` of the scores' shape
            /// `[batch.., L, S]` (`u8`: non-zero takes part; or the query's dtype: added): the
            /// output `[batch.., L, Ev]` and each query row's log-sum-exp `[batch.., L]`.
            ///
            /// The default composes it from `matmul`, `binary`, `unary`, `reduce` and `where_cond`,
            /// holding the whole `[batch.., L, S]` scores.
            fn attention(&self, qkv: [View<'_>; 3], mask: Option<View<'_>>, spec: &Attention) -> Result<[Storage; 2]> {
                compose::attention::forward(self, qkv, mask, spec)
            }
            /// The gradients of [`Backend::attention`] with respect to `[q, k, v]` (their shapes),
            /// given what its forward returned and the incoming gradient: `saved` is
            /// `[output, lse, grad]`.
            ///
            /// The default composes it like the forward.
            fn attention_backward(
                &self,
                qkv: [View<'_>; 3],
                mask: Option<View<'_>>,
                saved: [View<'_>; 3],
                spec: &Attention,
            ) -> Result<[Storage; 3]> {
                compose::attention::backward(self, qkv, mask, saved, spec)
            }
            /// [`Backend::attention`] with the output stored through `out`, a dense layout of the
            /// output's shape `[batch.., L, Ev]`: offset 0, every element of a storage of that size
            /// once, the dimensions nested in any order with the last innermost (see
            /// [`crate::ops::attention::laid_out_like`]). The first storage returned is read
            /// through `out`.
            ///
            /// The default copies [`Backend::attention`]'s output into such a storage.
            fn attention_laid_out(
                &self,
                qkv: [View<'_>; 3],
                mask: Option<View<'_>>,
                spec: &Attention,
                out: &Layout,
            ) -> Result<[Storage; 2]> {
                compose::attention::forward_laid_out(self, qkv, mask, spec, out)
            }
            /// [`Backend::attention_backward`] with each gradient stored through its layout in
            /// `grads`, dense layouts of the query's, key's and value's shapes as for
            /// [`Backend::attention_laid_out`].
            ///
            /// The default copies [`Backend::attention_backward`]'s gradients into such storages.
            fn attention_backward_laid_out(
                &self,
                qkv: [View<'_>; 3],
                mask: Option<View<'_>>,
                saved: [View<'_>; 3],
                spec: &Attention,
                grads: [&Layout; 3],
            ) -> Result<[Storage; 3]> {
                compose::attention::backward_laid_out(self, qkv, mask, saved, spec, grads)
            }
            /// One LSTM time step's gates and state update ([`crate::ops::lstm`]): the recurrent product `a` and
            /// the input projection `gi` `[B, 4H]`, the cell state `c` `[B, H]`; `bh` is `(B, H)`.
            /// Returns the step's `[7, B, H]` slots.
            ///
            /// The default composes it from elementwise kernels on strided views of the gates.
            fn lstm_cell(&self, a: View<'_>, gi: View<'_>, c: View<'_>, bh: (usize, usize)) -> Result<Storage> {
                compose::lstm::forward(self, a, gi, c, bh)
            }
            /// The gradients of [`Backend::lstm_cell`] with respect to the gate pre-activations
            /// (`[B, 4H]`) and the cell state (`[B, H]`), from the step's slots `y`, the gradient
            /// arriving at them `gy` (if any) and those of the hidden and cell state `dh`, `dc`.
            ///
            /// The default composes it like the forward.
            fn lstm_cell_backward(
                &self,
                y: View<'_>,
                gy: Option<View<'_>>,
                dh: View<'_>,
                dc: View<'_>,
                c: View<'_>,
                bh: (usize, usize),
            ) -> Result<[Storage; 2]> {
                compose::lstm::backward(self, y, gy, dh, dc, c, bh)
            }
            /// One LSTM direction over a whole sequence ([`LstmRun`]): from the input
            /// projection `gi` `[T, B, 4H]`, the recurrent weight `w_hh` `[4H, H]` and the initial
            /// state `h0`, `c0` `[B, H]`, every step's slots `[T, 7, B, H]`.
            ///
            /// The default runs one [`Backend::matmul`] and one [`Backend::lstm_cell`] per step.
            fn lstm_sequence(
                &self,
                gi: View<'_>,
                w_hh: View<'_>,
                h0: View<'_>,
                c0: View<'_>,
                run: &LstmRun,
            ) -> Result<Storage> {
                compose::lstm::sequence(self, gi, w_hh, h0, c0, run)
            }
            /// The gradients of [`Backend::lstm_sequence`] with respect to the input projection
            /// (`[T, B, 4H]`), `h0` and `c0` (`[B, H]`), from its output `y` (`[T, 7, B, H]`), the
            /// gradient arriving at every step's state `gs` (`[T, 2, B, H]`: `c_t`, `h_t`), `w_hh`
            /// and `c0`. The recurrent weight's gradient is one product the caller forms from the
            /// first of these.
            ///
            /// The default runs one [`Backend::lstm_cell_backward`] and one [`Backend::matmul`] per
            /// step.
            fn lstm_sequence_backward(
                &self,
                y: View<'_>,
                gs: View<'_>,
                w_hh: View<'_>,
                c0: View<'_>,
                run: &LstmRun,
            ) -> Result<[Storage; 3]> {
                compose::lstm::sequence_backward(self, y, gs, w_hh, c0, run)
            }
            /// Batched matrix product. `a` is `[batch.., m, k]` and `b` is `[batch.., k, n]` with
            /// identical (already broadcast) batch dimensions; the result is `[batch.., m, n]`.
            ///
            /// The default multiplies the operands broadcast to `[batch.., m, k, n]` with `binary`
            /// and sums over `k` with `reduce`, which needs memory for `m * k * n` elements.
            fn matmul(&self, a: View<'_>, b: View<'_>) -> Result<Storage> {
                compose::matmul(self, a, b)
            }
            /// [`Backend::matmul`] written into the elements `dst`'s layout addresses (`[batch..,
            /// m, n]`, the operands' dtype, storage shared with neither operand): for a product
            /// whose home already exists, such as a gradient that lands in a communication bucket.
            ///
            /// The default computes the product with `matmul` and copies it into `dst`.
            fn matmul_into(&self, a: View<'_>, b: View<'_>, dst: Target<'_>) -> Result<()> {
                compose::matmul_into(self, a, b, dst)
            }
            /// Selects entries `index` (`i64`, 1-d) along `dim`.
            fn index_select(&self, src: View<'_>, dim: usize, index: View<'_>) -> Result<Storage>;
            /// `out[i][j] = src[index[i][j]][j]` along `dim`; the result has `index`'s shape.
            fn gather(&self, src: View<'_>, dim: usize, index: View<'_>) -> Result<Storage>;
            /// A copy of `dst` with `src` added at the positions `index` names along `dim`.
            fn scatter_add(&self, dst: View<'_>, dim: usize, index: View<'_>, src: View<'_>) -> Result<Storage>;
            /// Entries where the `u8` mask (broadcast to `src`'s shape) is non-zero set to `value`
            /// (see [`Backend::full`]).
            ///
            /// The default is `where_cond(mask, full(value), src)`.
            fn masked_fill(&self, src: View<'_>, mask: View<'_>, value: Scalar) -> Result<Storage> {
                compose::masked_fill(self, src, mask, value)
            }
            /// ReLU's gradient from its output: `grad` where `output > 0` and 0 where
            /// `output <= 0` (PyTorch's `threshold_backward(grad, output, 0)`, so a NaN output
            /// passes the gradient and a non-finite gradient of a clamped entry gives 0), for two
            /// float views of one shape and dtype.
            ///
            /// The default is `masked_fill(grad, output <= 0, 0)` (`compare_scalar`, then
            /// `masked_fill`).
            fn relu_backward(&self, grad: View<'_>, output: View<'_>) -> Result<Storage> {
                compose::relu_backward(self, grad, output)
            }
            /// The lower (or, with `upper`, upper) triangle of the last two dimensions relative to
            /// `diagonal`; other entries are zero.
            ///
            /// The default builds the `[rows, cols]` mask of kept entries on the host, uploads it
            /// and selects with `where_cond` against `full(0)`.
            fn triangle(&self, src: View<'_>, diagonal: i64, upper: bool) -> Result<Storage> {
                compose::triangle(self, src, diagonal, upper)
            }
            /// A 2-d convolution (a cross-correlation, as in PyTorch) of `input`
            /// (`[N, in_channels, h, w]`) by `weight` (`[out_channels, in_channels / groups, kh, kw]`),
            /// plus `bias` (`[out_channels]`) broadcast over the output, `[N, out_channels, oh, ow]`.
            /// Float operands of one dtype; `geom` gives every size but the batch.
            ///
            /// The default is `unfold`, a batched `matmul` per image and group, and a broadcast add.
            fn conv2d(
                &self,
                input: View<'_>,
                weight: View<'_>,
                bias: Option<View<'_>>,
                geom: &ConvGeometry,
            ) -> Result<Storage> {
                compose::conv::conv2d(self, input, weight, bias, geom)
            }
            /// The transposed convolution: the adjoint of [`Backend::conv2d`] with respect to its
            /// input, which maps `input` of the convolution's output shape (`[N, out_channels, oh,
            /// ow]`) to its input shape (`[N, in_channels, h, w]`), plus `bias` (`[in_channels]`).
            /// This is both PyTorch's `conv_transpose2d` (whose weight `[in, out / groups, kh, kw]`
            /// is the transposed convolution's weight read as the convolution's) and the gradient of
            /// a convolution with respect to its input.
            ///
            /// The default is a batched `matmul` with the transposed weight, `fold`, and a broadcast
            /// add.
            fn conv_transpose2d(
                &self,
                input: View<'_>,
                weight: View<'_>,
                bias: Option<View<'_>>,
                geom: &ConvGeometry,
            ) -> Result<Storage> {
                compose::conv::conv_transpose2d(self, input, weight, bias, geom)
            }
            /// The gradient of [`Backend::conv2d`] with respect to its weight, for the convolution's
            /// `input` (`[N, in_channels, h, w]`) and the gradient `grad` of its output
            /// (`[N, out_channels, oh, ow]`): `[out_channels, in_channels / groups, kh, kw]`, summed
            /// over the batch.
            ///
            /// The default is `unfold`, a batched `matmul` with the output gradient, and a sum over
            /// the batch.
            fn conv2d_weight_grad(&self, input: View<'_>, grad: View<'_>, geom: &ConvGeometry) -> Result<Storage> {
                compose::conv::conv2d_weight_grad(self, input, grad, geom)
            }
            /// The blocks the window visits in a float `input` (`[N, C, h, w]`), as columns
            /// (PyTorch's `unfold`, im2col): `[N, C * kh * kw, oh * ow]`, entry `(c * kh * kw +
            /// i * kw + j, y * ow + x)` being tap `(i, j)` of channel `c` at position `(y, x)` (zero
            /// in the padding).
            ///
            /// The default gathers from the input with a zero appended to each channel, through an
            /// index built on the host.
            fn unfold(&self, input: View<'_>, window: &SlidingWindow) -> Result<Storage> {
                compose::conv::unfold(self, input, window)
            }
            /// The adjoint of [`Backend::unfold`] (PyTorch's `fold`, col2im): columns
            /// `[N, C * kh * kw, oh * ow]` summed into `[N, C, h, w]`, each entry added where
            /// `unfold` took it from (entries in the padding are dropped).
            ///
            /// The default is the matching `scatter_add`.
            fn fold(&self, input: View<'_>, window: &SlidingWindow) -> Result<Storage> {
                compose::conv::fold(self, input, window)
            }
            /// Per-channel normalisation of `input` read as `[outer, C, inner]` (float), with the
            /// optional per-channel `weight` and `bias` (`[C]`, the input's dtype): the output (the
            /// input's shape), and each channel's mean and biased variance (`[C]`). See
            /// `docs/design.md`, "Normalization", for the formula and the ops built on it.
            ///
            /// The default composes it from `reduce`, `binary` and `unary`.
            fn channel_norm(
                &self,
                input: View<'_>,
                weight: Option<View<'_>>,
                bias: Option<View<'_>>,
                eps: f64,
            ) -> Result<[Storage; 3]> {
                compose::norm::channel_norm(self, input, weight, bias, eps)
            }
            /// The gradients of [`Backend::channel_norm`] for the incoming gradient `grad` (the
            /// input's shape and dtype), given the statistics it returned: the input's gradient,
            /// `sum g` and `sum g * xhat` per channel (the bias's and the weight's gradients).
            ///
            /// The default composes it from `reduce`, `binary` and `unary`.
            fn channel_norm_backward(
                &self,
                input: View<'_>,
                grad: View<'_>,
                mean: View<'_>,
                var: View<'_>,
                weight: Option<View<'_>>,
                eps: f64,
            ) -> Result<[Storage; 3]> {
                compose::norm::channel_norm_backward(self, input, grad, mean, var, weight, eps)
            }
            /// Layer normalisation of float `input` read as `[rows, n]` in row-major order, with
            /// the optional per-element `weight` and `bias` (`n` elements; the input's dtype or,
            /// for a 16-bit input, `f32`): the output (the input's shape and dtype), and each
            /// row's mean and `rstd = 1 / sqrt(var + eps)` (`rows` elements of the input's
            /// compute dtype). See [`crate::ops::layer_norm`].
            ///
            /// The default composes it from `reduce`, `binary`, `unary` and `cast`.
            fn layer_norm(
                &self,
                input: View<'_>,
                n: usize,
                weight: Option<View<'_>>,
                bias: Option<View<'_>>,
                eps: f64,
            ) -> Result<[Storage; 3]> {
                compose::layer_norm::layer_norm(self, input, n, weight, bias, eps)
            }
            /// The gradients of [`Backend::layer_norm`] for the incoming gradient `grad` (the
            /// input's shape and dtype), given the `mean` and `rstd` it returned: the input's
            /// gradient, and `sum_rows(g * xhat)` and `sum_rows(g)` (`n` elements each, the
            /// weight's and the bias's gradients, in the weight's dtype or, without one, the
            /// input's).
            ///
            /// The default composes it from `reduce`, `binary`, `unary` and `cast`.
            fn layer_norm_backward(
                &self,
                input: View<'_>,
                grad: View<'_>,
                n: usize,
                mean: View<'_>,
                rstd: View<'_>,
                weight: Option<View<'_>>,
            ) -> Result<[Storage; 3]> {
                compose::layer_norm::layer_norm_backward(self, input, grad, n, mean, rstd, weight)
            }

            /// Max pooling of float planes `input` (`[N, C, h, w]`) over `windows`: the largest
            /// value of each window (NaN where the window holds one, `-inf` for an empty window) and
            /// its position `i * w + j` in its plane (`i64`, the first maximum, as PyTorch), both
            /// `[N, C, oh, ow]`.
            ///
            /// The default gathers every window (padded with `-inf`) and reduces it.
            fn max_pool2d(&self, input: View<'_>, windows: &PoolWindows) -> Result<(Storage, Storage)> {
                compose::pool::max_pool2d(self, input, windows)
            }
            /// `out[n, c, p] = src[n, c, index[n, c, p]]` over flattened planes: `src` is
            /// `[N, C, h, w]` (float), `index` `[N, C, oh, ow]` (`i64`, each below `h * w`); the
            /// result has `index`'s shape. The adjoint of [`Backend::scatter_planes`].
            ///
            /// The default is a flat `gather`.
            fn gather_planes(&self, src: View<'_>, index: View<'_>) -> Result<Storage> {
                compose::pool::gather_planes(self, src, index)
            }
            /// Zero planes of extent `plane` (`[N, C, h, w]`) with each element of `src`
            /// (`[N, C, oh, ow]`, float) added at the flat position `index` (`i64`, of `src`'s
            /// shape) names in its plane: the gradient of max pooling.
            ///
            /// The default is a flat `scatter_add`.
            fn scatter_planes(&self, src: View<'_>, index: View<'_>, plane: [usize; 2]) -> Result<Storage> {
                compose::pool::scatter_planes(self, src, index, plane)
            }
            /// A separable linear map ([`Resample`]) of float planes `input` (`[N, C, h, w]`):
            /// `[N, C, oh, ow]`. Average pooling, adaptive averages and interpolation are such maps,
            /// and so are their gradients ([`Resample::transpose`]).
            ///
            /// The default multiplies each plane by the two dense matrices.
            fn resample2d(&self, input: View<'_>, map: &Resample) -> Result<Storage> {
                compose::pool::resample2d(self, input, map)
            }

            /// `numel` samples of `dist` in the float `dtype`, drawn from the global generator
            /// ([`crate::random`]) in element order: a backend that draws on its own generator breaks
            /// `manual_seed` reproducibility across devices.
            fn random(&self, numel: usize, dist: Distribution, dtype: DType) -> Result<Storage>;
            /// A random permutation of `0..n` as `i64`, drawn from the global generator.
            fn randperm(&self, n: usize) -> Result<Storage>;
            /// The views, of one dtype and of shapes that agree outside `dim`, joined along `dim`.
            fn cat(&self, srcs: &[View<'_>], dim: usize) -> Result<Storage>;
            /// `Σ|x|^p` over a float view, accumulated in `f64` (`max |x|` for `p = f64::INFINITY`,
            /// NaN if any element is NaN): one tensor's part of a total norm.
            fn power_sum(&self, src: View<'_>, p: f64) -> Result<f64>;
            /// One SGD step ([`SgdStep`]) on a float parameter, in place, in one pass. The gradient
            /// and the momentum buffer (given exactly when `momentum != 0`) are contiguous, of the
            /// parameter's shape and dtype.
            fn sgd_step(
                &self,
                param: Target<'_>,
                grad: View<'_>,
                momentum_buffer: Option<Target<'_>>,
                hp: &SgdStep,
            ) -> Result<()>;
            /// One Adam or AdamW step ([`AdamStep`]) on a float parameter and its state, in place, in
            /// one pass. Every operand is contiguous, of the parameter's shape and dtype.
            fn adam_step(
                &self,
                param: Target<'_>,
                grad: View<'_>,
                state: AdamState<'_>,
                hp: &AdamStep,
            ) -> Result<()>;
            /// One RMSprop step ([`RmsPropStep`]) on a float parameter and its state, in place, in
            /// one pass. Every operand is contiguous, of the parameter's shape and dtype.
            fn rmsprop_step(
                &self,
                param: Target<'_>,
                grad: View<'_>,
                state: RmsPropState<'_>,
                hp: &RmsPropStep,
            ) -> Result<()>;
            /// Gradient unscaling for loss scaling, in one pass over a float view: multiplies the
            /// elements `grad` addresses by `inv_scale` in place (computing in `f32`, or in `f64`
            /// for an `f64` view, and rounding back to the view's dtype; an `inv_scale` of 1 leaves
            /// them as they are) and returns whether any of them was infinite or NaN before
            /// (PyTorch's `_amp_foreach_non_finite_check_and_unscale_` for one tensor).
            ///
            /// The default composes it from `cast`, `binary`, `reduce`, `full` and `copy_inplace`,
            /// with a widened copy of the view and the check's sum read back to the host.
            fn non_finite_check_and_unscale(&self, grad: Target<'_>, inv_scale: f32) -> Result<bool> {
                compose::unscale::non_finite_check_and_unscale(self, grad, inv_scale)
            }
        }
    };
}

/// Turns the methods as written into the bracketed form [`backend_methods!`] hands its
/// callback, one method at a time, and calls the callback with all of them.
#[doc(hidden)]
#[macro_export]
macro_rules! __backend_methods_parse {
    (([$($cb:tt)*] $($extra:tt)*) [$($done:tt)*]) => {
        $($cb)*! { $($extra)* $($done)* }
    };
    ($cb:tt [$($done:tt)*]
        $(#[$m:meta])* fn $name:ident(&$self:ident $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty;
        $($rest:tt)*
    ) => {
        $crate::__backend_methods_parse! {
            $cb [$($done)* { [$(#[$m])*] $name $self ($($arg: $ty),*) ($ret) (;) }] $($rest)*
        }
    };
    ($cb:tt [$($done:tt)*]
        $(#[$m:meta])* fn $name:ident(&$self:ident $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty $body:block
        $($rest:tt)*
    ) => {
        $crate::__backend_methods_parse! {
            $cb [$($done)* { [$(#[$m])*] $name $self ($($arg: $ty),*) ($ret) ($body) }] $($rest)*
        }
    };
}

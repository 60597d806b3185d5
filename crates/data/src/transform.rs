//! Ready-made per-batch transforms for [`DataLoaderBuilder::transform`](crate::DataLoaderBuilder::transform).

use ember_tensor::{DType, Error, Result, Tensor};

/// A transform that turns the `u8` images in field 0 of a batch into `f32` values in
/// `[0, 1]` (divided by 255, like torchvision's `ToTensor`), flattened to
/// `[batch, pixels]` when `flatten` is set (for a multilayer perceptron). Other fields pass
/// through unchanged.
///
/// ```
/// use ember_data::transform::images_to_f32;
/// use ember_tensor::{DType, Tensor};
///
/// let images = Tensor::from_vec(vec![0u8, 51, 255, 102], [1, 2, 2])?;
/// let labels = Tensor::from_vec(vec![3i64], [1])?;
/// let out = images_to_f32(true)(vec![images, labels])?;
/// assert_eq!(out[0].shape(), &[1, 4]);
/// assert_eq!(out[0].to_vec::<f32>()?, vec![0.0, 0.2, 1.0, 0.4]);
/// assert_eq!(out[1].dtype(), DType::I64);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn images_to_f32(flatten: bool) -> impl Fn(Vec<Tensor>) -> Result<Vec<Tensor>> + Send + Sync + Clone + 'static {
    move |mut fields: Vec<Tensor>| {
        const OP: &str = "images_to_f32";
        let images = fields.first_mut().ok_or_else(|| Error::invalid(OP, "the batch has no fields"))?;
        if images.dtype() != DType::U8 {
            return Err(Error::dtype(OP, format!("expected u8 images in field 0, got {}", images.dtype())));
        }
        if flatten && images.rank() < 2 {
            return Err(Error::shape(
                OP,
                format!("cannot flatten images of batch shape {:?}: no dimension after the batch", images.shape()),
            ));
        }
        let mut scaled = images.div_scalar(255.0);
        if flatten {
            scaled = scaled.flatten(1, -1)?;
        }
        *images = scaled;
        Ok(fields)
    }
}

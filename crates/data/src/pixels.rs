//! [`PixelMap`]: how the bytes of an image file become `f32` values while the file is read.

use ember_tensor::{Error, Result};

/// The `f32` value of each of the 256 byte values of an image file, for loading images
/// straight as floats ([`Mnist::load_f32`](crate::Mnist::load_f32),
/// [`idx::parse_images_f32`](crate::idx::parse_images_f32)).
///
/// Converting as the file is decompressed builds the float tensor in one pass: no `u8`
/// copy of the images and no intermediate float tensors, which for MNIST's training set
/// would be 45 MiB and 179 MiB per step of a `to_dtype`, `div_scalar`, `sub_scalar`
/// chain. A table lookup is also cheaper than the arithmetic it replaces.
///
/// ```
/// use ember_data::PixelMap;
/// let unit = PixelMap::unit();
/// assert_eq!((unit.get(0), unit.get(255)), (0.0, 1.0));
/// let centred = PixelMap::from_fn(|b| b as f32 / 127.5 - 1.0);
/// assert_eq!(centred.get(0), -1.0);
/// assert!(PixelMap::standardize(0.5, 0.0).is_err());
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone, PartialEq)]
pub struct PixelMap {
    values: [f32; 256],
}

impl PixelMap {
    /// Each byte `b` to `f(b)`.
    pub fn from_fn(mut f: impl FnMut(u8) -> f32) -> PixelMap {
        let mut values = [0.0; 256];
        for (b, v) in (0..=u8::MAX).zip(values.iter_mut()) {
            *v = f(b);
        }
        PixelMap { values }
    }

    /// `b / 255`, intensities in `[0, 1]` (torchvision's `ToTensor`, and
    /// [`transform::images_to_f32`](crate::transform::images_to_f32)).
    pub fn unit() -> PixelMap {
        PixelMap::from_fn(|b| f32::from(b) / 255.0)
    }

    /// `(b / 255 - mean) / std` (torchvision's `ToTensor` then `Normalize((mean,), (std,))`),
    /// rounded at each step to `f32` exactly as the tensor operations
    /// `to_dtype(F32).div_scalar(255.0).sub_scalar(mean).div_scalar(std)` round, so the
    /// values are bitwise the same. An error when `std` is zero or either is not finite.
    pub fn standardize(mean: f64, std: f64) -> Result<PixelMap> {
        if !mean.is_finite() || !std.is_finite() || std == 0.0 {
            return Err(Error::invalid(
                "PixelMap::standardize",
                format!("the mean and deviation must be finite and the deviation non-zero, got mean {mean}, std {std}"),
            ));
        }
        // Scalars reach f32 kernels as `f32` (`Scalar::to_element`), so round them the same way.
        let (mean, std) = (mean as f32, std as f32);
        Ok(PixelMap::from_fn(|b| (f32::from(b) / 255.0 - mean) / std))
    }

    /// The value of byte `b`.
    pub fn get(&self, b: u8) -> f32 {
        self.values[usize::from(b)]
    }

    /// Writes the value of each byte of `bytes` to the matching slot of `out` (the shorter
    /// of the two decides how many).
    pub(crate) fn map_into(&self, bytes: &[u8], out: &mut [f32]) {
        for (o, &b) in out.iter_mut().zip(bytes) {
            *o = self.values[usize::from(b)];
        }
    }
}

impl std::fmt::Debug for PixelMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PixelMap(0 -> {}, 128 -> {}, 255 -> {})", self.get(0), self.get(128), self.get(255))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_tensor::{DType, Tensor};

    /// The table must equal what the tensor operations compute, bit for bit, so that
    /// loading as floats changes no trained result.
    #[test]
    fn standardize_matches_the_tensor_operations_bitwise() {
        let (mean, std) = (0.1307, 0.3081);
        let bytes: Vec<u8> = (0..=u8::MAX).collect();
        let ops = Tensor::from_vec(bytes, [256])
            .unwrap()
            .to_dtype(DType::F32)
            .div_scalar(255.0)
            .sub_scalar(mean)
            .div_scalar(std)
            .to_vec::<f32>()
            .unwrap();
        let map = PixelMap::standardize(mean, std).unwrap();
        for (b, want) in ops.iter().enumerate() {
            assert_eq!(map.get(b as u8).to_bits(), want.to_bits(), "byte {b}");
        }
        let unit = Tensor::from_vec((0..=u8::MAX).collect::<Vec<u8>>(), [256]).unwrap().div_scalar(255.0);
        let unit = unit.to_vec::<f32>().unwrap();
        assert!((0..=u8::MAX).all(|b| PixelMap::unit().get(b).to_bits() == unit[usize::from(b)].to_bits()));
    }

    #[test]
    fn rejects_degenerate_statistics() {
        for (mean, std) in [(0.0, 0.0), (f64::NAN, 1.0), (0.0, f64::INFINITY)] {
            let e = PixelMap::standardize(mean, std).unwrap_err().to_string();
            assert!(e.contains("PixelMap::standardize"), "{e}");
        }
    }
}

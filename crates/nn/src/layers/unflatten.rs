//! [`Unflatten`]: splits one dimension into several.

use super::activation::stateless_module;
use crate::module::Module;
use ember_autograd::Var;
use ember_tensor::{Error, Result};

/// Splits dimension `dim` into `sizes`, like PyTorch's `nn.Unflatten`; one size may be -1
/// (inferred). Negative `dim` counts from the end.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{Module, Unflatten};
/// use ember_tensor::{DType, Tensor};
/// let x = Var::new(Tensor::zeros([2, 60], DType::F32)?);
/// assert_eq!(Unflatten::new(1, [3, -1, 5]).forward(&x)?.shape().dims(), &[2, 3, 4, 5]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unflatten {
    /// The dimension split.
    pub dim: i64,
    /// The sizes it is split into.
    pub sizes: Vec<i64>,
}

impl Unflatten {
    /// Splits `dim` into `sizes`.
    pub fn new(dim: i64, sizes: impl Into<Vec<i64>>) -> Self {
        Unflatten { dim, sizes: sizes.into() }
    }

    /// The shape `x` of shape `dims` takes.
    fn shape(&self, dims: &[usize]) -> Result<Vec<usize>> {
        let op = "unflatten";
        let rank = dims.len() as i64;
        let d = if self.dim < 0 { self.dim + rank } else { self.dim };
        if d < 0 || d >= rank {
            return Err(Error::invalid(
                op,
                format!("dimension {} out of range for a tensor of shape {dims:?}", self.dim),
            ));
        }
        let d = d as usize;
        let unknown = self.sizes.iter().filter(|&&s| s == -1).count();
        // Checked: hostile sizes (`[2^40, 2^40]`) overflow, and cannot multiply to any extent.
        let known = self.sizes.iter().filter(|&&s| s != -1).try_fold(1i64, |a, &s| a.checked_mul(s));
        let bad = || {
            Error::shape(
                op,
                format!(
                    "Provided sizes {:?} don't multiply up to the size of dim {} ({}) in the input tensor",
                    self.sizes, self.dim, dims[d]
                ),
            )
        };
        let Some(known) =
            known.filter(|_| !self.sizes.is_empty() && unknown <= 1 && self.sizes.iter().all(|&s| s >= -1))
        else {
            return Err(bad());
        };
        let size = dims[d] as i64;
        let fill = if unknown == 1 {
            if known == 0 || size % known != 0 {
                return Err(bad());
            }
            size / known
        } else {
            if known != size {
                return Err(bad());
            }
            0
        };
        let mut out = dims[..d].to_vec();
        out.extend(self.sizes.iter().map(|&s| if s == -1 { fill as usize } else { s as usize }));
        out.extend_from_slice(&dims[d + 1..]);
        Ok(out)
    }
}

/// A shape error from the reshape, named for the layer: sizes that multiply to the
/// dimension can still make a shape beyond ember's element limit (`[2^40, 0, 2^40]`).
fn in_unflatten(e: Error) -> Error {
    match e {
        Error::Shape { msg, .. } => Error::Shape { op: "unflatten", msg },
        other => other,
    }
}

stateless_module!(Unflatten, |self, x| x.reshape(self.shape(x.shape().dims())?).map_err(in_unflatten));

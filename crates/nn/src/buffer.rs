//! [`Buffer`]: a module's non-trainable state.

use ember_tensor::Tensor;
use parking_lot::RwLock;
use std::fmt;

/// A tensor a module keeps besides its parameters, PyTorch's buffer (a batch norm's running
/// statistics): saved in the state dict and moved by
/// [`to_device`](crate::Module::to_device), but not trained.
///
/// The module updates it in place ([`get`](Buffer::get) returns a handle sharing its
/// storage); [`set`](Buffer::set) replaces it through `&self`, as moving to another device
/// does.
///
/// ```
/// use ember_nn::Buffer;
/// use ember_tensor::{DType, Tensor};
/// let running = Buffer::new(Tensor::zeros([3], DType::F32)?);
/// running.get().add_scalar_(1.0)?;
/// assert_eq!(running.get().to_vec::<f32>()?, [1.0, 1.0, 1.0]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct Buffer(RwLock<Tensor>);

impl Buffer {
    /// A buffer holding `tensor`.
    pub fn new(tensor: Tensor) -> Buffer {
        Buffer(RwLock::new(tensor))
    }

    /// A handle to the current tensor, sharing its storage: in-place updates through it
    /// are the buffer's.
    pub fn get(&self) -> Tensor {
        self.0.read().clone()
    }

    /// Replaces the tensor (by one on another device, say).
    pub fn set(&self, tensor: Tensor) {
        *self.0.write() = tensor;
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.get();
        write!(f, "Buffer({}, {}, {})", t.shape(), t.dtype(), t.device())
    }
}

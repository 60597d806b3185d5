//! Memory of a device other than the CPU as the storage layer holds it: a box that only the
//! backend that filled it looks inside, so that storages, and everything above them, need
//! not know any backend's types.

use crate::dtype::DType;
use std::any::Any;
use std::fmt;

/// What a device backend keeps in a [`DeviceStorage`]: its handle to the memory, which
/// answers the questions every layer may ask of a storage.
pub trait DeviceData: Any + Send + Sync + fmt::Debug {
    /// The dtype of the elements.
    fn dtype(&self) -> DType;
    /// Number of elements.
    fn len(&self) -> usize;
    /// Whether there are no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The ordinal of the device holding the memory (`n` in `cuda:n`).
    fn ordinal(&self) -> usize;
}

/// Memory on a device other than the CPU: a backend's [`DeviceData`], which that backend
/// gets back with [`DeviceStorage::downcast_ref`].
///
/// ```
/// use ember_tensor::DType;
/// use ember_tensor::storage::{DeviceData, DeviceStorage};
///
/// #[derive(Debug)]
/// struct Block(Vec<f32>);
///
/// impl DeviceData for Block {
///     fn dtype(&self) -> DType {
///         DType::F32
///     }
///     fn len(&self) -> usize {
///         self.0.len()
///     }
///     fn ordinal(&self) -> usize {
///         0
///     }
/// }
///
/// let s = DeviceStorage::new(Block(vec![1.0, 2.0]));
/// assert_eq!((s.dtype(), s.len()), (DType::F32, 2));
/// assert_eq!(s.downcast_ref::<Block>().map(|b| b.0[1]), Some(2.0));
/// ```
#[derive(Debug)]
pub struct DeviceStorage(Box<dyn DeviceData>);

impl DeviceStorage {
    /// Boxes a backend's handle to its memory.
    pub fn new(data: impl DeviceData) -> Self {
        DeviceStorage(Box::new(data))
    }

    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        self.0.dtype()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ordinal of the device holding the memory.
    pub fn ordinal(&self) -> usize {
        self.0.ordinal()
    }

    /// The backend's handle, if it is a `T`.
    pub fn downcast_ref<T: DeviceData>(&self) -> Option<&T> {
        let any: &dyn Any = &*self.0;
        any.downcast_ref()
    }

    /// The backend's handle, mutably, if it is a `T`.
    pub fn downcast_mut<T: DeviceData>(&mut self) -> Option<&mut T> {
        let any: &mut dyn Any = &mut *self.0;
        any.downcast_mut()
    }
}

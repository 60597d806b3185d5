//! Offloading saved tensors to host memory: PyTorch's
//! `torch.autograd.graph.save_on_cpu(pin_memory)`, built on the
//! [saved-tensor hooks](crate::saved_hooks).
//!
//! Inside [`save_on_cpu`] (or while a [`SaveOnCpuGuard`] lives), every value a recorded
//! node's backward reads is packed as a copy in host memory (`Device::Cpu`), and backward
//! unpacks it by copying it back to the device it came from. A forward on a GPU then keeps
//! its activations on the host between forward and backward: the device values that only
//! the graph holds are dropped once packed (see the saved-tensor hooks' rules on what can
//! go), at the price of a device-to-host copy in forward and a host-to-device copy in
//! backward per saved value. Gradients are the same as without offloading, bit for bit:
//! the copies are exact.
//!
//! Values already on the CPU are not copied: the packed value is the saved tensor itself
//! (a second handle to its storage) and unpacking returns it, so on the CPU `save_on_cpu`
//! changes neither memory nor results.
//!
//! # `pin_memory`
//!
//! PyTorch keeps the packed copies in page-locked memory when asked, so that copying them
//! back does not block. In ember every upload to a GPU of up to 64 MiB already goes through
//! a page-locked staging buffer and does not wait for the copy (see `Tensor::to_device`),
//! so the flag is accepted for PyTorch's signature and changes nothing: the packed copies
//! live in ordinary host memory either way, and unpacking them never blocks the host below
//! that size.
//!
//! [`offloaded`] tells how many tensors (and bytes) the packs keep on the host now.
//!
//! ```
//! use ember_autograd::{Var, save_on_cpu};
//! use ember_tensor::{DType, Tensor};
//! let w = Var::param(Tensor::ones([4, 4], DType::F32)?);
//! let x = Var::new(Tensor::ones([2, 4], DType::F32)?);
//! // On a GPU the activations saved for backward wait on the host; on the CPU nothing moves.
//! let loss = save_on_cpu(false, || -> ember_tensor::Result<Var> { Ok(x.matmul(&w)?.tanh().sum_all()) })?;
//! loss.backward()?;
//! assert_eq!(w.grad().map(|g| g.shape().to_vec()), Some(vec![4, 4]));
//! # Ok::<(), ember_tensor::Error>(())
//! ```

use crate::saved_hooks::SavedTensorsHooksGuard;
use ember_tensor::{Device, Error, Result, Tensor};
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many saved tensors `save_on_cpu` keeps on the host now, and their size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offloaded {
    /// Packed values copied from a device to the host and not freed yet.
    pub tensors: usize,
    /// Their size in bytes.
    pub bytes: usize,
}

static TENSORS: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);

/// The saved tensors that `save_on_cpu` scopes (on every thread) copied to the host and that
/// are still held: they are freed with their node's backward (without `retain_graph`) or
/// when the graph is dropped.
pub fn offloaded() -> Offloaded {
    Offloaded { tensors: TENSORS.load(Ordering::Relaxed), bytes: BYTES.load(Ordering::Relaxed) }
}

/// A saved value as `save_on_cpu` packed it.
enum Packed {
    /// A copy on the host of a value that lives on `device`.
    OnHost(HostCopy),
    /// A value already on the CPU, kept as it is.
    Kept(Tensor),
    /// The copy to the host failed; backward reports it.
    Failed(String),
}

/// A host copy of a device value, counted in [`offloaded`] while it lives.
struct HostCopy {
    tensor: Tensor,
    device: Device,
    bytes: usize,
}

impl HostCopy {
    fn new(tensor: Tensor, device: Device) -> HostCopy {
        let bytes = tensor.numel() * tensor.dtype().size_in_bytes();
        TENSORS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(bytes, Ordering::Relaxed);
        HostCopy { tensor, device, bytes }
    }
}

impl Drop for HostCopy {
    fn drop(&mut self) {
        TENSORS.fetch_sub(1, Ordering::Relaxed);
        BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

fn pack(t: &Tensor) -> Packed {
    let device = t.device();
    if device == Device::Cpu {
        return Packed::Kept(t.clone());
    }
    match t.to_device(Device::Cpu) {
        Ok(host) => Packed::OnHost(HostCopy::new(host, device)),
        Err(e) => Packed::Failed(e.to_string()),
    }
}

fn unpack(p: &Packed) -> Result<Tensor> {
    match p {
        Packed::OnHost(c) => c.tensor.to_device(c.device),
        Packed::Kept(t) => Ok(t.clone()),
        Packed::Failed(msg) => {
            Err(Error::autograd(format!("save_on_cpu: copying a saved tensor to the host failed in forward: {msg}")))
        }
    }
}

/// Keeps the values backward reads on the host until dropped (see the [module docs](self)),
/// then restores the saved-tensor hooks that were active before. Guards nest with each other
/// and with [`saved_tensors_hooks`](crate::saved_tensors_hooks); the innermost applies.
#[must_use = "saved tensors stay where they are once the guard is dropped"]
pub struct SaveOnCpuGuard {
    _hooks: SavedTensorsHooksGuard,
}

impl SaveOnCpuGuard {
    /// Offloads saved tensors on this thread. `pin_memory` is accepted for PyTorch's
    /// signature and changes nothing (see the [module docs](self#pin_memory)).
    pub fn new(pin_memory: bool) -> Self {
        let _ = pin_memory;
        SaveOnCpuGuard { _hooks: SavedTensorsHooksGuard::new(pack, unpack) }
    }
}

/// Runs `f` with the values backward reads offloaded to the host (PyTorch's
/// `with torch.autograd.graph.save_on_cpu(pin_memory):`); see the [module docs](self).
pub fn save_on_cpu<R>(pin_memory: bool, f: impl FnOnce() -> R) -> R {
    let _g = SaveOnCpuGuard::new(pin_memory);
    f()
}

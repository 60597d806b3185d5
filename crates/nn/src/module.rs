//! The [`Module`] trait, the training-mode flag and the file helpers of [`ModuleExt`].

use ember_autograd::{Var, no_grad};
use ember_io::{StateDict, load_safetensors, save_safetensors};
use ember_tensor::{Device, Error, Result, Tensor};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A layer or a network: a function of one `Var` with parameters, like PyTorch's
/// `nn.Module`.
///
/// Modules are used through `&self` (they are `Send + Sync` and can be shared between
/// threads or held in an `Arc`): parameters are `Var` handles, updated in place by
/// optimizers, and the training mode lives in a [`TrainingFlag`].
///
/// Implementors provide [`forward`](Module::forward), [`named_parameters`](Module::named_parameters)
/// and [`set_training`](Module::set_training); containers prefix their children's names and
/// forward `set_training` to them. Everything else has a default.
///
/// ```
/// use ember_nn::{Linear, Module, ReLU, Sequential};
/// let model = Sequential::new().add(Linear::new(4, 8)?).add(ReLU).add(Linear::new(8, 2)?);
/// let names: Vec<String> = model.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
/// assert_eq!(model.num_parameters(), 4 * 8 + 8 + 8 * 2 + 2);
/// model.eval();
/// assert!(!model.is_training());
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub trait Module: Send + Sync {
    /// Applies the module to `x`.
    fn forward(&self, x: &Var) -> Result<Var>;

    /// The trainable parameters with their dotted, PyTorch-compatible names (`weight`,
    /// `bias`; `0.weight` for the first child of a [`Sequential`](crate::Sequential)), in
    /// registration order. A parameter shared by two children appears under both names.
    fn named_parameters(&self) -> Vec<(String, Var)>;

    /// Non-trainable state saved with the parameters (PyTorch's buffers, such as running
    /// statistics), as tensors that share storage with the module's own, so that
    /// [`load_state_dict`](Module::load_state_dict) can write into them. None by default.
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    /// Moves the buffers (those [`named_buffers`](Module::named_buffers) lists) to `device`,
    /// for [`to_device`](Module::to_device). Nothing to do by default; a module that keeps
    /// buffers replaces them here, and a container forwards the call to its children.
    fn buffers_to_device(&self, device: Device) -> Result<()> {
        let _ = device;
        Ok(())
    }

    /// Moves every parameter (with its gradient, if any) and every buffer to `device`, in
    /// place: PyTorch's `model.to(device)`. The parameter `Var`s stay the same handles, so
    /// an optimizer built before or after the move updates the moved values; the optimizer's
    /// state, if it has any yet, does not move (build optimizers after moving, as in
    /// PyTorch).
    ///
    /// ```
    /// use ember_nn::{Linear, Module};
    /// use ember_tensor::Device;
    /// let model = Linear::new(3, 2)?;
    /// model.to_device(Device::Cpu)?;
    /// assert!(model.parameters().iter().all(|p| p.device() == Device::Cpu));
    /// assert!(model.to_device(Device::Cuda(7)).is_err());
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    fn to_device(&self, device: Device) -> Result<()> {
        device.check_available()?;
        for p in self.parameters() {
            if p.device() == device {
                continue;
            }
            let grad = p.grad().map(|g| g.to_device(device)).transpose()?;
            p.set_value(p.value().to_device(device)?)?;
            p.set_grad(grad)?;
        }
        self.buffers_to_device(device)?;
        match self.named_buffers().into_iter().find(|(_, b)| b.device() != device) {
            Some((name, b)) => Err(Error::Device {
                device: device.to_string(),
                msg: format!(
                    "to_device: buffer {name} stayed on {} (the module lists it in named_buffers but does not move it \
                     in buffers_to_device)",
                    b.device()
                ),
            }),
            None => Ok(()),
        }
    }

    /// Switches training mode on or off. Containers forward the call to their children;
    /// modules without a mode (activations) ignore it.
    fn set_training(&self, on: bool);

    /// Whether the module is in training mode (the default for new modules). Modules that
    /// keep no mode, such as activations, always answer `true`.
    fn is_training(&self) -> bool {
        true
    }

    /// Training mode on: dropout drops.
    fn train(&self) {
        self.set_training(true);
    }

    /// Training mode off (evaluation): dropout is the identity.
    fn eval(&self) {
        self.set_training(false);
    }

    /// The distinct parameters, in registration order: a parameter shared by several
    /// children is listed once (as in PyTorch), so that an optimizer updates it once.
    fn parameters(&self) -> Vec<Var> {
        let mut seen = HashSet::new();
        self.named_parameters().into_iter().filter_map(|(_, p)| seen.insert(p.id()).then_some(p)).collect()
    }

    /// The number of scalar values in the distinct parameters.
    fn num_parameters(&self) -> usize {
        self.parameters().iter().map(Var::numel).sum()
    }

    /// Clears the gradient of every parameter.
    fn zero_grad(&self) {
        for p in self.parameters() {
            p.zero_grad();
        }
    }

    /// The parameters and buffers by name, as PyTorch's `state_dict()` names and lays them
    /// out. The tensors share storage with the module: they see later updates.
    fn state_dict(&self) -> StateDict {
        let params = self.named_parameters().into_iter().map(|(n, p)| (n, p.value()));
        params.chain(self.named_buffers()).collect()
    }

    /// Copies `state` into the parameters and buffers, in place and without recording
    /// anything, so that optimizers and other holders of the parameter `Var`s see the new
    /// values.
    ///
    /// Strict, like PyTorch's default: a missing key, an unexpected key, or a shape that
    /// differs from the module's is an error naming every offending key (with both shapes),
    /// and nothing is copied unless everything fits. Values of another dtype are converted
    /// to the module's, as PyTorch's `param.copy_(value)` does (an `f64` checkpoint loads
    /// into an `f32` model), and values on another device are copied to the module's.
    fn load_state_dict(&self, state: &StateDict) -> Result<()> {
        let targets: Vec<(String, Tensor)> =
            self.named_parameters().into_iter().map(|(n, p)| (n, p.value())).chain(self.named_buffers()).collect();
        check_state_fits(&targets, state)?;
        no_grad(|| {
            for (name, dst) in &targets {
                if let Some(src) = state.get(name) {
                    // The module's device wins, as in PyTorch: a checkpoint read on the host
                    // loads into a model on a GPU.
                    dst.copy_(&src.to_device(dst.device())?)?;
                }
            }
            Ok(())
        })
    }
}

/// Checks that `state` has exactly the keys of `targets`, with their shapes.
fn check_state_fits(targets: &[(String, Tensor)], state: &StateDict) -> Result<()> {
    let expected: HashSet<&str> = targets.iter().map(|(n, _)| n.as_str()).collect();
    let mut missing = Vec::new();
    let mut shapes = Vec::new();
    for (name, dst) in targets {
        match state.get(name) {
            None => missing.push(name.as_str()),
            Some(src) if src.shape() != dst.shape() => shapes.push(format!(
                "size mismatch for {name}: the module has shape {:?}, the state dict {:?}",
                dst.shape(),
                src.shape()
            )),
            Some(_) => {}
        }
    }
    let unexpected: Vec<&str> = state.keys().filter(|k| !expected.contains(k)).collect();
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!("missing keys {missing:?}"));
    }
    if !unexpected.is_empty() {
        problems.push(format!("unexpected keys {unexpected:?}"));
    }
    problems.extend(shapes);
    if problems.is_empty() {
        return Ok(());
    }
    let msg = problems.join("; ");
    Err(if !missing.is_empty() || !unexpected.is_empty() {
        Error::invalid("load_state_dict", msg)
    } else {
        Error::shape("load_state_dict", msg)
    })
}

/// Saving and loading a module's [`state_dict`](Module::state_dict) as a safetensors file.
///
/// Implemented for every [`Module`], `dyn Module` included; it is a separate trait only
/// because its methods are generic over the path type.
///
/// ```
/// use ember_nn::{Linear, Module, ModuleExt};
/// let path = std::env::temp_dir().join(format!("ember-nn-doc-{}.safetensors", std::process::id()));
/// let a = Linear::new(3, 2)?;
/// a.save(&path)?;
/// let b = Linear::new(3, 2)?;
/// b.load(&path)?;
/// assert_eq!(a.weight().value().to_vec::<f32>()?, b.weight().value().to_vec::<f32>()?);
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub trait ModuleExt: Module {
    /// Writes [`state_dict`](Module::state_dict) to `path` in the safetensors format, which
    /// PyTorch reads with `safetensors.torch.load_file`.
    fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        save_safetensors(path, &self.state_dict())
    }

    /// Reads a safetensors file (one written by [`save`](ModuleExt::save), or by PyTorch's
    /// `save_file(model.state_dict(), path)`) and loads it with
    /// [`load_state_dict`](Module::load_state_dict). Errors name the file.
    fn load(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let state = load_safetensors(path)?;
        self.load_state_dict(&state).map_err(|e| Error::format(path, format!("does not fit the module: {e}")))
    }
}

impl<M: Module + ?Sized> ModuleExt for M {}

/// A module's training mode, settable through `&self`. New flags are on (training), as in
/// PyTorch. Embed one in a custom module that behaves differently in training.
#[derive(Debug)]
pub struct TrainingFlag(AtomicBool);

impl TrainingFlag {
    /// A flag in training mode.
    pub fn new() -> Self {
        TrainingFlag(AtomicBool::new(true))
    }

    /// Whether training mode is on.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Turns training mode on or off.
    pub fn set(&self, on: bool) {
        self.0.store(on, Ordering::Relaxed);
    }
}

impl Default for TrainingFlag {
    fn default() -> Self {
        Self::new()
    }
}

impl Clone for TrainingFlag {
    fn clone(&self) -> Self {
        TrainingFlag(AtomicBool::new(self.get()))
    }
}

/// Forwards every method, so that boxed and shared modules are modules (and a layer held
/// in an `Arc` can appear in two containers, sharing its parameters).
macro_rules! forward_module {
    ($($ty:ty),*) => {$(
        impl<M: Module + ?Sized> Module for $ty {
            fn forward(&self, x: &Var) -> Result<Var> {
                (**self).forward(x)
            }
            fn named_parameters(&self) -> Vec<(String, Var)> {
                (**self).named_parameters()
            }
            fn named_buffers(&self) -> Vec<(String, Tensor)> {
                (**self).named_buffers()
            }
            fn buffers_to_device(&self, device: Device) -> Result<()> {
                (**self).buffers_to_device(device)
            }
            fn to_device(&self, device: Device) -> Result<()> {
                (**self).to_device(device)
            }
            fn set_training(&self, on: bool) {
                (**self).set_training(on)
            }
            fn is_training(&self) -> bool {
                (**self).is_training()
            }
            fn parameters(&self) -> Vec<Var> {
                (**self).parameters()
            }
            fn state_dict(&self) -> StateDict {
                (**self).state_dict()
            }
            fn load_state_dict(&self, state: &StateDict) -> Result<()> {
                (**self).load_state_dict(state)
            }
        }
    )*};
}

forward_module!(Box<M>, Arc<M>);

//! The [`Module`] trait, the training-mode flag and the file helpers of [`ModuleExt`].

use ember_autograd::{Var, no_grad};
use ember_io::{StateDict, load_safetensors, save_safetensors};
use ember_tensor::{DType, Device, Error, Result, Tensor};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::parts::{Part, Parts};

/// A layer or a network: a function of one `Var` with parameters, like PyTorch's
/// `nn.Module`.
///
/// Modules are used through `&self` (they are `Send + Sync` and can be shared between
/// threads or held in an `Arc`): parameters are `Var` handles, updated in place by
/// optimizers, buffers are [`Buffer`](crate::Buffer)s, and the training mode lives in a [`TrainingFlag`].
///
/// A module provides [`forward`](Module::forward) and [`children`](Module::children), its
/// direct parts (PyTorch's `_modules`, `_parameters`, `_buffers` and `training`): named
/// submodules, its own parameters and buffers, and its training flag. Everything else
/// follows from them by recursion: [`named_parameters`](Module::named_parameters) with
/// PyTorch's dotted names (`encoder.layers.0.linear1.weight`),
/// [`named_buffers`](Module::named_buffers), [`parameters`](Module::parameters),
/// [`train`](Module::train) / [`eval`](Module::eval), [`to_device`](Module::to_device),
/// [`to_dtype`](Module::to_dtype),
/// [`state_dict`](Module::state_dict) / [`load_state_dict`](Module::load_state_dict) and
/// [`named_modules`](Module::named_modules).
///
/// `#[derive(Module)]` writes both methods for a struct (its fields are its parts; see
/// [`macro@crate::Module`]), so that a model is its struct plus an inherent `forward`:
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{Dropout, Linear, Module, Sequential, ReLU};
/// use ember_tensor::Result;
///
/// #[derive(Module)]
/// struct Classifier {
///     encoder: Sequential,
///     dropout: Dropout,
///     head: Linear,
/// }
///
/// impl Classifier {
///     fn forward(&self, x: &Var) -> Result<Var> {
///         self.head.forward(&self.dropout.forward(&self.encoder.forward(x)?)?)
///     }
/// }
///
/// let model = Classifier {
///     encoder: Sequential::new().add(Linear::new(4, 8)?).add(ReLU),
///     dropout: Dropout::new(0.1)?,
///     head: Linear::new(8, 2)?,
/// };
/// let names: Vec<String> = model.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["encoder.0.weight", "encoder.0.bias", "head.weight", "head.bias"]);
/// assert_eq!(model.num_parameters(), 4 * 8 + 8 + 8 * 2 + 2);
/// model.eval(); // every submodule, the Dropout included
/// assert!(!model.is_training() && !model.dropout.is_training());
/// # Ok::<(), ember_tensor::Error>(())
/// ```
///
/// A module whose parts are not plain fields (names computed from a layer count, a list
/// built at run time) implements `children` by hand with [`Parts`]. Modules written before
/// `children` existed, which implement `named_parameters`, `named_buffers`,
/// `buffers_to_device`, `set_training` and `is_training` themselves, keep working: those
/// methods can still be overridden.
pub trait Module: Send + Sync {
    /// Applies the module to `x`.
    fn forward(&self, x: &Var) -> Result<Var>;

    /// The module's direct parts: its submodules, parameters and buffers in order, with
    /// their names, and its training flag. None by default (a module without state, such as
    /// an activation).
    fn children(&self) -> Parts<'_> {
        Parts::new()
    }

    /// The trainable parameters with their dotted, PyTorch-compatible names (`weight`,
    /// `bias`; `0.weight` for the first child of a [`Sequential`](crate::Sequential)), in
    /// the order of the parts, each submodule's under its name. A parameter shared by two
    /// children appears under both names.
    fn named_parameters(&self) -> Vec<(String, Var)> {
        let mut out = Vec::new();
        for (name, part) in self.children().iter() {
            match part {
                Part::Parameter(p) => out.push((name.to_string(), p.clone())),
                Part::Module(m) => {
                    out.extend(m.named_parameters().into_iter().map(|(n, p)| (format!("{name}.{n}"), p)))
                }
                Part::Buffer(_) => {}
            }
        }
        out
    }

    /// Non-trainable state saved with the parameters (PyTorch's buffers, such as running
    /// statistics), as tensors that share storage with the module's own, so that
    /// [`load_state_dict`](Module::load_state_dict) can write into them; named and ordered
    /// as [`named_parameters`](Module::named_parameters).
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for (name, part) in self.children().iter() {
            match part {
                Part::Buffer(b) => out.push((name.to_string(), b.get())),
                Part::Module(m) => out.extend(m.named_buffers().into_iter().map(|(n, b)| (format!("{name}.{n}"), b))),
                Part::Parameter(_) => {}
            }
        }
        out
    }

    /// Moves the buffers (those [`named_buffers`](Module::named_buffers) lists) to `device`,
    /// for [`to_device`](Module::to_device): a module's own buffers all move or none does,
    /// then each submodule's.
    fn buffers_to_device(&self, device: Device) -> Result<()> {
        let parts = self.children();
        let moved = parts.buffers().map(|(_, b)| Ok((b, b.get().to_device(device)?))).collect::<Result<Vec<_>>>()?;
        for (b, t) in moved {
            b.set(t);
        }
        parts.modules().try_for_each(|(_, m)| m.buffers_to_device(device))
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

    /// Converts every floating parameter (with its gradient) and every floating buffer to
    /// the floating `dtype`, in place: PyTorch's `model.to(torch.bfloat16)`, `.half()`,
    /// `.float()`. Integer and mask buffers (batch norm's `num_batches_tracked`) keep their
    /// dtype, as in PyTorch. The parameter `Var`s stay the same handles; an optimizer's
    /// state, if it has any yet, is not converted (build optimizers after converting, as in
    /// PyTorch). A `dtype` that is not floating is an error and changes nothing.
    ///
    /// ```
    /// use ember_nn::{BatchNorm1d, Linear, Module, Sequential};
    /// use ember_tensor::DType;
    /// let model = Sequential::new().add(Linear::new(3, 2)?).add(BatchNorm1d::new(2)?);
    /// model.to_dtype(DType::BF16)?;
    /// assert!(model.parameters().iter().all(|p| p.dtype() == DType::BF16));
    /// let dtypes: Vec<DType> = model.named_buffers().iter().map(|(_, b)| b.dtype()).collect();
    /// assert_eq!(dtypes, [DType::BF16, DType::BF16, DType::I64]); // running stats, counter
    /// assert!(model.to_dtype(DType::I64).is_err());
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    fn to_dtype(&self, dtype: DType) -> Result<()> {
        if !dtype.is_float() {
            return Err(Error::dtype(
                "to_dtype",
                format!("modules convert to a floating dtype (f16, bf16, f32 or f64), not to {dtype}"),
            ));
        }
        for p in self.parameters() {
            if !p.dtype().is_float() || p.dtype() == dtype {
                continue;
            }
            let grad = p.grad().map(|g| g.to_dtype(dtype));
            p.set_value(p.value().to_dtype(dtype))?;
            p.set_grad(grad)?;
        }
        buffers_to_dtype(self, dtype);
        match self.named_buffers().into_iter().find(|(_, b)| b.dtype().is_float() && b.dtype() != dtype) {
            Some((name, b)) => Err(Error::dtype(
                "to_dtype",
                format!(
                    "buffer {name} stayed {} (the module lists it in named_buffers but not among its parts)",
                    b.dtype()
                ),
            )),
            None => Ok(()),
        }
    }

    /// Switches training mode on or off: the module's own flag, then every submodule's.
    fn set_training(&self, on: bool) {
        let parts = self.children();
        if let Some(flag) = parts.training_flag() {
            flag.set(on);
        }
        parts.modules().for_each(|(_, m)| m.set_training(on));
    }

    /// Whether the module is in training mode (the default for new modules): its own flag;
    /// without one, whether any submodule is training. Modules that keep no mode and have
    /// no submodules, such as activations, always answer `true`.
    fn is_training(&self) -> bool {
        let parts = self.children();
        match parts.training_flag() {
            Some(flag) => flag.get(),
            None => parts.modules().next().is_none() || parts.modules().any(|(_, m)| m.is_training()),
        }
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

    /// Freezes the module: every parameter of it and of its submodules stops requiring
    /// grad and drops its gradient ([`Var::freeze`]); buffers are untouched. Gradients
    /// still flow *through* the module to whatever feeds it, and optimizers skip its
    /// parameters, so they stay bit-identical while the rest trains. PyTorch's
    /// `for p in m.parameters(): p.requires_grad_(False)`.
    ///
    /// Fails, changing nothing, if a parameter is not a leaf (a module that lists a
    /// computed `Var` among its parameters).
    ///
    /// Transfer learning: freeze a backbone, train a new head on its features.
    ///
    /// ```
    /// use ember_autograd::{Var, no_grad};
    /// use ember_nn::{Linear, Module, ReLU, Sequential};
    /// use ember_tensor::Tensor;
    ///
    /// #[derive(Module)]
    /// struct Model {
    ///     backbone: Sequential,
    ///     head: Linear,
    /// }
    ///
    /// impl Model {
    ///     fn forward(&self, x: &Var) -> ember_tensor::Result<Var> {
    ///         self.head.forward(&self.backbone.forward(x)?)
    ///     }
    /// }
    ///
    /// let model = Model {
    ///     backbone: Sequential::new().add(Linear::new(4, 8)?).add(ReLU),
    ///     head: Linear::new(8, 3)?,
    /// };
    /// model.backbone.freeze()?;
    /// assert!(model.backbone.is_frozen() && !model.head.is_frozen() && !model.is_frozen());
    /// let snapshot = |m: &dyn Module| -> ember_tensor::Result<Vec<Vec<f32>>> {
    ///     m.parameters().iter().map(|p| p.value().to_vec::<f32>()).collect()
    /// };
    /// let (backbone_before, head_before) = (snapshot(&model.backbone)?, snapshot(&model.head)?);
    ///
    /// let x = Var::new(Tensor::randn([16, 4])?);
    /// let y = Var::new(Tensor::randn([16, 3])?);
    /// for _ in 0..3 {
    ///     model.zero_grad();
    ///     let pred = model.forward(&x)?;
    ///     (&pred - &y)?.square().mean_all().backward()?;
    ///     // Only the head has gradients; plain gradient descent on what requires grad.
    ///     assert!(model.backbone.parameters().iter().all(|p| p.grad().is_none()));
    ///     no_grad(|| -> ember_tensor::Result<()> {
    ///         for p in model.parameters().iter().filter(|p| p.requires_grad()) {
    ///             if let Some(g) = p.grad() {
    ///                 p.value().add_scaled_(&g, -0.1)?;
    ///             }
    ///         }
    ///         Ok(())
    ///     })?;
    /// }
    /// assert_eq!(snapshot(&model.backbone)?, backbone_before);
    /// assert_ne!(snapshot(&model.head)?, head_before);
    /// model.backbone.unfreeze()?; // fine-tune everything from here
    /// assert!(model.parameters().iter().all(|p| p.requires_grad()));
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    fn freeze(&self) -> Result<()> {
        let params = leaf_parameters(self, "freeze")?;
        for p in &params {
            p.freeze()?;
        }
        Ok(())
    }

    /// Undoes [`freeze`](Module::freeze): every parameter of the module and of its
    /// submodules requires grad again ([`Var::unfreeze`]), including one that did not
    /// before the freeze. Optimizers resume its updates from the state it had.
    ///
    /// Fails, changing nothing, if a parameter is not a leaf or not a float.
    fn unfreeze(&self) -> Result<()> {
        let params = leaf_parameters(self, "unfreeze")?;
        if let Some(p) = params.iter().find(|p| !p.dtype().is_float()) {
            return Err(Error::dtype(
                "unfreeze",
                format!("parameter {} is {}; only float parameters can require grad", param_name(self, p), p.dtype()),
            ));
        }
        for p in &params {
            p.unfreeze()?;
        }
        Ok(())
    }

    /// Whether no parameter of the module or of its submodules requires grad: after
    /// [`freeze`](Module::freeze), and also for a module without parameters.
    fn is_frozen(&self) -> bool {
        self.parameters().iter().all(|p| !p.requires_grad())
    }

    /// The module itself (named `""`) and every module below it, depth first in the order
    /// of the parts, with their dotted names; PyTorch's `named_modules()`. A module shared
    /// through an `Arc` appears under each of its names.
    ///
    /// ```
    /// use ember_nn::{Linear, Module, ReLU, Sequential};
    /// let model = Sequential::new().add(Linear::new(2, 3)?).add(ReLU);
    /// let names: Vec<String> = model.named_modules().into_iter().map(|(n, _)| n).collect();
    /// assert_eq!(names, ["", "0", "1"]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    fn named_modules(&self) -> Vec<(String, &dyn Module)>
    where
        Self: Sized,
    {
        let mut out = vec![(String::new(), self as &dyn Module)];
        collect_modules("", self, &mut out);
        out
    }

    /// The modules of [`named_modules`](Module::named_modules), without their names.
    fn modules(&self) -> Vec<&dyn Module>
    where
        Self: Sized,
    {
        self.named_modules().into_iter().map(|(_, m)| m).collect()
    }

    /// The parameters and buffers by name, as PyTorch's `state_dict()` names and lays them
    /// out: part by part, each submodule's entries under its name. The tensors share
    /// storage with the module: they see later updates. (A module that lists no parts but
    /// implements [`named_parameters`](Module::named_parameters) and
    /// [`named_buffers`](Module::named_buffers) itself gives those, parameters first.)
    fn state_dict(&self) -> StateDict {
        let parts = self.children();
        if parts.is_empty() {
            let params = self.named_parameters().into_iter().map(|(n, p)| (n, p.value()));
            return params.chain(self.named_buffers()).collect();
        }
        let mut out = StateDict::new();
        for (name, part) in parts.iter() {
            match part {
                Part::Parameter(p) => {
                    out.insert(name, p.value());
                }
                Part::Buffer(b) => {
                    out.insert(name, b.get());
                }
                Part::Module(m) => out.extend(m.state_dict().with_prefix(name)),
            }
        }
        out
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

/// The distinct parameters of `module`, checked to be leaves (only leaves can change
/// whether they require grad), so that `op` changes all of them or none.
fn leaf_parameters<M: Module + ?Sized>(module: &M, op: &'static str) -> Result<Vec<Var>> {
    let params = module.parameters();
    if let Some(p) = params.iter().find(|p| !p.is_leaf()) {
        return Err(Error::invalid(
            op,
            format!(
                "parameter {} is the result of an operation ({}), not a leaf; only leaves can change requires_grad",
                param_name(module, p),
                p.op_name()
            ),
        ));
    }
    Ok(params)
}

/// The first name `module` gives the parameter `p`, for messages.
fn param_name<M: Module + ?Sized>(module: &M, p: &Var) -> String {
    module.named_parameters().into_iter().find(|(_, q)| q.id() == p.id()).map(|(n, _)| n).unwrap_or_default()
}

/// Converts the floating buffers among `module`'s parts, and its submodules', to `dtype`.
fn buffers_to_dtype<M: Module + ?Sized>(module: &M, dtype: DType) {
    let parts = module.children();
    for (_, b) in parts.buffers() {
        let t = b.get();
        if t.dtype().is_float() && t.dtype() != dtype {
            b.set(t.to_dtype(dtype));
        }
    }
    parts.modules().for_each(|(_, m)| buffers_to_dtype(m, dtype));
}

/// Appends the modules below `module` to `out`, depth first, named under `prefix`.
fn collect_modules<'a>(prefix: &str, module: &'a dyn Module, out: &mut Vec<(String, &'a dyn Module)>) {
    for (name, child) in module.children().modules() {
        let name = if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") };
        out.push((name.clone(), child));
        collect_modules(&name, child, out);
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
            fn children(&self) -> Parts<'_> {
                (**self).children()
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
            fn to_dtype(&self, dtype: DType) -> Result<()> {
                (**self).to_dtype(dtype)
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

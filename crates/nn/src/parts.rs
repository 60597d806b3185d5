//! [`Parts`]: what a module is made of, one level deep (PyTorch's `_modules`,
//! `_parameters`, `_buffers` and `training`), and [`ModuleField`], how a struct field
//! `#[derive(Module)]` lists becomes a part.

use crate::buffer::Buffer;
use crate::module::{Module, TrainingFlag};
use ember_autograd::Var;
use std::borrow::Cow;

/// One part of a module.
#[derive(Clone, Copy)]
pub enum Part<'a> {
    /// A submodule: its parts are named under the part's name (`encoder.norm.weight`).
    Module(&'a dyn Module),
    /// A trainable parameter.
    Parameter(&'a Var),
    /// Non-trainable state saved with the parameters.
    Buffer(&'a Buffer),
}

/// A module's direct parts, in order, with their names, and its training flag: what
/// [`Module::children`] returns and every structural method of [`Module`] walks.
///
/// `#[derive(Module)]` builds it from the fields; a module whose parts are not plain
/// fields builds it by hand:
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{Linear, Module, Parts};
/// use ember_tensor::{Result, Tensor};
///
/// /// A stack of layers named `layer0`, `layer1`, ... with a scale of its own.
/// struct Stack {
///     scale: Var,
///     layers: Vec<Linear>,
/// }
///
/// impl Module for Stack {
///     fn forward(&self, x: &Var) -> Result<Var> {
///         self.layers.iter().try_fold(x.mul(&self.scale)?, |h, l| l.forward(&h))
///     }
///
///     fn children(&self) -> Parts<'_> {
///         let parts = Parts::new().parameter("scale", &self.scale);
///         self.layers.iter().enumerate().fold(parts, |p, (i, l)| p.module(format!("layer{i}"), l))
///     }
/// }
///
/// let stack = Stack { scale: Var::param(Tensor::ones([2], ember_tensor::DType::F32)?), layers: vec![Linear::new(2, 2)?] };
/// let names: Vec<String> = stack.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["scale", "layer0.weight", "layer0.bias"]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct Parts<'a> {
    entries: Vec<(Cow<'a, str>, Part<'a>)>,
    training: Option<&'a TrainingFlag>,
}

impl<'a> Parts<'a> {
    /// No parts (a module without parameters, buffers, submodules or mode).
    pub fn new() -> Parts<'a> {
        Parts::default()
    }

    /// With the submodule `module` named `name`.
    pub fn module(mut self, name: impl Into<Cow<'a, str>>, module: &'a dyn Module) -> Parts<'a> {
        self.entries.push((name.into(), Part::Module(module)));
        self
    }

    /// With the parameter `param` named `name`.
    pub fn parameter(mut self, name: impl Into<Cow<'a, str>>, param: &'a Var) -> Parts<'a> {
        self.entries.push((name.into(), Part::Parameter(param)));
        self
    }

    /// With the buffer `buffer` named `name`.
    pub fn buffer(mut self, name: impl Into<Cow<'a, str>>, buffer: &'a Buffer) -> Parts<'a> {
        self.entries.push((name.into(), Part::Buffer(buffer)));
        self
    }

    /// With the module's own training flag.
    pub fn training(mut self, flag: &'a TrainingFlag) -> Parts<'a> {
        self.training = Some(flag);
        self
    }

    /// With `other`'s parts after these, and its training flag if these have none: a module
    /// lending its parts to the one that wraps it (`#[module(flatten)]`).
    pub fn merge(mut self, other: Parts<'a>) -> Parts<'a> {
        self.entries.extend(other.entries);
        self.training = self.training.or(other.training);
        self
    }

    /// The parts, in order, with their names.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Part<'a>)> + '_ {
        self.entries.iter().map(|(n, p)| (n.as_ref(), *p))
    }

    /// The submodules, in order, with their names.
    pub fn modules(&self) -> impl Iterator<Item = (&str, &'a dyn Module)> + '_ {
        self.iter().filter_map(|(n, p)| if let Part::Module(m) = p { Some((n, m)) } else { None })
    }

    /// The module's own parameters, in order, with their names.
    pub fn parameters(&self) -> impl Iterator<Item = (&str, &'a Var)> + '_ {
        self.iter().filter_map(|(n, p)| if let Part::Parameter(v) = p { Some((n, v)) } else { None })
    }

    /// The module's own buffers, in order, with their names.
    pub fn buffers(&self) -> impl Iterator<Item = (&str, &'a Buffer)> + '_ {
        self.iter().filter_map(|(n, p)| if let Part::Buffer(b) = p { Some((n, b)) } else { None })
    }

    /// The module's own training flag, if it has one.
    pub fn training_flag(&self) -> Option<&'a TrainingFlag> {
        self.training
    }

    /// Whether there is nothing: no part and no flag.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.training.is_none()
    }
}

/// A struct field that `#[derive(Module)]` can list as parts: a submodule, a parameter
/// (`Var`), a [`Buffer`], the [`TrainingFlag`], or an `Option` or `Vec` of those (see the
/// derive's documentation). Implement it for a field type of your own that holds parts.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a module field",
    label = "not a module, `Var`, `Buffer` or `TrainingFlag` (nor an `Option` or `Vec` of them)",
    note = "mark fields that are not part of the module `#[module(skip)]`"
)]
pub trait ModuleField {
    /// `parts` with this field's parts added under `name`.
    fn add_to<'a>(&'a self, name: &'static str, parts: Parts<'a>) -> Parts<'a>;
}

impl<M: Module> ModuleField for M {
    fn add_to<'a>(&'a self, name: &'static str, parts: Parts<'a>) -> Parts<'a> {
        parts.module(name, self)
    }
}

impl ModuleField for Var {
    fn add_to<'a>(&'a self, name: &'static str, parts: Parts<'a>) -> Parts<'a> {
        parts.parameter(name, self)
    }
}

impl ModuleField for Buffer {
    fn add_to<'a>(&'a self, name: &'static str, parts: Parts<'a>) -> Parts<'a> {
        parts.buffer(name, self)
    }
}

impl ModuleField for TrainingFlag {
    fn add_to<'a>(&'a self, _name: &'static str, parts: Parts<'a>) -> Parts<'a> {
        parts.training(self)
    }
}

/// A part when present: PyTorch registers `None` for an absent bias or submodule.
impl<F: ModuleField> ModuleField for Option<F> {
    fn add_to<'a>(&'a self, name: &'static str, parts: Parts<'a>) -> Parts<'a> {
        match self {
            Some(f) => f.add_to(name, parts),
            None => parts,
        }
    }
}

/// Submodules `name.0`, `name.1`, ... (PyTorch's `ModuleList`).
impl<M: Module> ModuleField for Vec<M> {
    fn add_to<'a>(&'a self, name: &'static str, parts: Parts<'a>) -> Parts<'a> {
        self.iter().enumerate().fold(parts, |p, (i, m)| p.module(format!("{name}.{i}"), m))
    }
}

/// Parameters `name.0`, `name.1`, ... (PyTorch's `ParameterList`).
impl ModuleField for Vec<Var> {
    fn add_to<'a>(&'a self, name: &'static str, parts: Parts<'a>) -> Parts<'a> {
        self.iter().enumerate().fold(parts, |p, (i, v)| p.parameter(format!("{name}.{i}"), v))
    }
}

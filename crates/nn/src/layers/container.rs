//! [`Sequential`]: modules applied one after another.

use crate::module::{Module, TrainingFlag};
use crate::parts::Parts;
use ember_autograd::Var;
use ember_tensor::Result;
use std::fmt;

/// Modules applied in order, each to the previous one's output; PyTorch's `nn.Sequential`.
///
/// Children are named by their index, so parameters are `0.weight`, `2.bias` and so on,
/// exactly as in PyTorch (nested containers give `1.0.weight`). Build it with the chained
/// [`add`](Sequential::add), or use it as a list ([`push`](Sequential::push),
/// [`get`](Sequential::get), [`len`](Sequential::len), iteration).
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{Dropout, Linear, Module, ReLU, Sequential};
/// use ember_tensor::Tensor;
/// let mut model = Sequential::new().add(Linear::new(784, 256)?).add(ReLU).add(Dropout::new(0.1)?);
/// model.push(Linear::new(256, 10)?);
/// assert_eq!(model.len(), 4);
/// let y = model.forward(&Var::new(Tensor::randn([32, 784])?))?;
/// assert_eq!(y.shape().dims(), &[32, 10]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Default)]
pub struct Sequential {
    children: Vec<Box<dyn Module>>,
    training: TrainingFlag,
}

impl Sequential {
    /// An empty container (its forward is the identity).
    pub fn new() -> Self {
        Self::default()
    }

    /// The container with `module` appended (builder style).
    // Not `std::ops::Add`: this consumes a module, not another container, and reads as the
    // builder step it is (`Sequential::new().add(..).add(..)`).
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, module: impl Module + 'static) -> Self {
        self.push(module);
        self
    }

    /// Appends `module`.
    pub fn push(&mut self, module: impl Module + 'static) {
        self.push_boxed(Box::new(module));
    }

    /// Appends an already boxed module (without boxing it again).
    /// Like PyTorch, this leaves the module's training mode as it is.
    pub fn push_boxed(&mut self, module: Box<dyn Module>) {
        self.children.push(module);
    }

    /// The child at `index`.
    pub fn get(&self, index: usize) -> Option<&dyn Module> {
        self.children.get(index).map(|m| m.as_ref())
    }

    /// The number of children.
    pub fn len(&self) -> usize {
        self.children.len()
    }

    /// Whether there are no children.
    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// The children, in order.
    pub fn iter(&self) -> Children<'_> {
        Children(self.children.iter())
    }
}

impl Module for Sequential {
    fn forward(&self, x: &Var) -> Result<Var> {
        let mut h = x.clone();
        for m in &self.children {
            h = m.forward(&h)?;
        }
        Ok(h)
    }

    /// The children, named by their index, and the container's own training flag.
    fn children(&self) -> Parts<'_> {
        let parts = Parts::new().training(&self.training);
        self.children.iter().enumerate().fold(parts, |p, (i, m)| p.module(i.to_string(), m.as_ref()))
    }
}

impl FromIterator<Box<dyn Module>> for Sequential {
    fn from_iter<I: IntoIterator<Item = Box<dyn Module>>>(iter: I) -> Self {
        let mut s = Sequential::new();
        for m in iter {
            s.push_boxed(m);
        }
        s
    }
}

impl<'a> IntoIterator for &'a Sequential {
    type Item = &'a dyn Module;
    type IntoIter = Children<'a>;
    fn into_iter(self) -> Children<'a> {
        self.iter()
    }
}

/// The children of a [`Sequential`], in order.
pub struct Children<'a>(std::slice::Iter<'a, Box<dyn Module>>);

impl<'a> Iterator for Children<'a> {
    type Item = &'a dyn Module;
    fn next(&mut self) -> Option<&'a dyn Module> {
        self.0.next().map(|m| m.as_ref())
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for Children<'_> {}

impl fmt::Debug for Sequential {
    /// The number of children and the mode; layers with a `Debug` of their own are best
    /// printed one by one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sequential").field("len", &self.children.len()).field("training", &self.training.get()).finish()
    }
}

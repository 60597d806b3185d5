//! [`checkpoint_sequential`]: a model of modules applied in order, checkpointed in
//! segments (PyTorch's `torch.utils.checkpoint.checkpoint_sequential`).

use crate::layers::Sequential;
use crate::module::Module;
use ember_autograd::Var;
use ember_tensor::{Error, Result};
use std::ops::Range;
use std::sync::Arc;

/// Modules applied one after another, each to the previous one's output: what
/// [`checkpoint_sequential`] splits into segments. Implemented for [`Sequential`] and for
/// lists of modules (`Vec<Box<dyn Module>>`, `[Arc<dyn Module>]`, `Vec<Linear>`, ...).
pub trait ModuleSequence: Send + Sync + 'static {
    /// The number of modules.
    fn module_count(&self) -> usize;
    /// The module at `index`, if there is one.
    fn module_at(&self, index: usize) -> Option<&dyn Module>;
}

impl ModuleSequence for Sequential {
    fn module_count(&self) -> usize {
        self.len()
    }
    fn module_at(&self, index: usize) -> Option<&dyn Module> {
        self.get(index)
    }
}

impl<M: Module + 'static> ModuleSequence for [M] {
    fn module_count(&self) -> usize {
        self.len()
    }
    fn module_at(&self, index: usize) -> Option<&dyn Module> {
        self.get(index).map(|m| m as &dyn Module)
    }
}

impl<M: Module + 'static> ModuleSequence for Vec<M> {
    fn module_count(&self) -> usize {
        self.len()
    }
    fn module_at(&self, index: usize) -> Option<&dyn Module> {
        self.get(index).map(|m| m as &dyn Module)
    }
}

/// Runs `modules` on `input` in `segments` consecutive chunks, checkpointing every chunk
/// but the last ([`checkpoint`](ember_autograd::checkpoint()): its intermediate values are not kept, and backward runs it
/// again); PyTorch's `checkpoint_sequential(functions, segments, input)`. Gives the same
/// value and gradients as running the modules one after another, `create_graph` included
/// (a gradient penalty through the model), and dropout draws the same masks (the random
/// generator is replayed).
///
/// As in PyTorch, each of the first `segments - 1` chunks holds `count / segments` modules
/// and the last chunk, which runs without a checkpoint (backward would need its values at
/// once), holds the rest. The modules are taken through an `Arc` because backward runs the
/// checkpointed chunks again after this call returns. They are run again in the mode they
/// are in then: switch between `train()` and `eval()` only after backward.
///
/// `segments` must be between 1 and the number of modules; otherwise the error names both.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{checkpoint_sequential, Linear, Module, ReLU, Sequential};
/// use ember_tensor::{manual_seed, Tensor};
/// use std::sync::Arc;
///
/// manual_seed(0);
/// let model = Arc::new(
///     Sequential::new().add(Linear::new(8, 16)?).add(ReLU).add(Linear::new(16, 16)?).add(ReLU).add(Linear::new(16, 2)?),
/// );
/// let x = Var::new(Tensor::randn([4, 8])?);
/// let y = checkpoint_sequential(&model, 2, &x)?; // modules 0-1 checkpointed, 2-4 as usual
/// assert_eq!(y.value().to_vec::<f32>()?, model.forward(&x)?.value().to_vec::<f32>()?);
/// y.sum_all().backward()?;
/// assert!(model.parameters().iter().all(|p| p.grad().is_some()));
/// assert!(checkpoint_sequential(&model, 6, &x).is_err()); // 6 segments of 5 modules
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn checkpoint_sequential<S: ModuleSequence + ?Sized>(
    modules: &Arc<S>,
    segments: usize,
    input: &Var,
) -> Result<Var> {
    let count = modules.module_count();
    if segments == 0 || segments > count {
        return Err(Error::invalid(
            "checkpoint_sequential",
            format!("segments must be between 1 and the number of modules ({count}), got {segments}"),
        ));
    }
    let size = count / segments;
    let mut h = input.clone();
    for s in 0..segments - 1 {
        let (modules, range) = (modules.clone(), s * size..(s + 1) * size);
        h = h.checkpoint(move |h| run_modules(&*modules, range.clone(), h))?;
    }
    run_modules(&**modules, (segments - 1) * size..count, &h)
}

/// The modules in `range` applied to `x` one after another.
fn run_modules<S: ModuleSequence + ?Sized>(modules: &S, range: Range<usize>, x: &Var) -> Result<Var> {
    let mut h = x.clone();
    for i in range {
        let m = modules.module_at(i).ok_or_else(|| {
            Error::invalid(
                "checkpoint_sequential",
                format!("module {i} is gone: the sequence has {} modules now", modules.module_count()),
            )
        })?;
        h = m.forward(&h)?;
    }
    Ok(h)
}

//! The operands of `Backend` methods: storages with the layouts through which a kernel
//! reads them ([`View`]) or writes them ([`Target`]), and the state an optimizer step
//! updates beside its parameter.

use crate::layout::Layout;
use crate::storage::Storage;

/// A storage with the layout through which an operation reads it.
pub type View<'a> = (&'a Storage, &'a Layout);

/// A storage updated in place, with the layout through which the update addresses it.
pub type Target<'a> = (&'a mut Storage, &'a Layout);

/// The state tensors [`AdamStep`](crate::ops::optim::AdamStep) updates.
#[derive(Debug)]
pub struct AdamState<'a> {
    /// Running average of the gradient.
    pub exp_avg: Target<'a>,
    /// Running average of the squared gradient.
    pub exp_avg_sq: Target<'a>,
    /// Running maximum of `exp_avg_sq`: present exactly when `amsgrad` is on.
    pub max_exp_avg_sq: Option<Target<'a>>,
}

/// The state tensors [`RmsPropStep`](crate::ops::optim::RmsPropStep) updates.
#[derive(Debug)]
pub struct RmsPropState<'a> {
    /// Running average of the squared gradient.
    pub square_avg: Target<'a>,
    /// Running average of the gradient: present exactly when `centered` is on.
    pub grad_avg: Option<Target<'a>>,
    /// Momentum buffer: present exactly when `momentum > 0`.
    pub momentum_buffer: Option<Target<'a>>,
}

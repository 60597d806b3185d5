//! The checks of gradient unscaling ([`Backend::non_finite_check_and_unscale`]).
//!
//! [`Backend::non_finite_check_and_unscale`]: crate::backend::Backend::non_finite_check_and_unscale

use crate::layout::Layout;
use crate::storage::Storage;
use crate::{Error, Result};
use std::borrow::Cow;

/// The name gradient unscaling reports errors under.
pub(crate) const OP: &str = "non_finite_check_and_unscale_";

/// The layout to unscale a gradient through ([`super::view`]), after checking that it is
/// float.
pub(crate) fn check<'l>(s: &Storage, l: &'l Layout) -> Result<Cow<'l, Layout>> {
    if !s.dtype().is_float() {
        return Err(Error::dtype(OP, format!("gradients to unscale must be float, got {}", s.dtype())));
    }
    super::view(OP, s, l)
}

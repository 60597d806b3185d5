//! The kernels as the default compositions (`compose`) see them: every [`Backend`] method,
//! without the defaults, implemented for every backend by calling its own. Written against
//! this trait rather than [`Backend`], the compositions do not depend on the trait whose
//! default bodies they are.
//!
//! [`Backend`]: super::Backend

use super::signature::*;

/// The trait from the method list, every method required.
macro_rules! define_kernels {
    ($({ [$(#[$m:meta])*] $name:ident $self:ident ($($arg:ident: $ty:ty),*) ($ret:ty) ($($body:tt)*) })*) => {
        /// Every [`Backend`](super::Backend) method, as the default compositions call it.
        // All of them, so that a composition may call any; some are called by none yet.
        #[allow(dead_code)]
        pub(crate) trait Kernels {
            $(
                $(#[$m])*
                fn $name(&self $(, $arg: $ty)*) -> $ret;
            )*
        }
    };
}

crate::backend_methods!([define_kernels]);

//! Backends that hand their kernels to another backend, generated from the method list
//! ([`delegate_backend!`](crate::delegate_backend)).
//!
//! A delegating backend implements [`Delegate`]: which backend computes, and how its own
//! storages relate to that backend's (the emulated `cuda:0` keeps host storages in device
//! storages; a test composite shares the CPU backend's). The macro then writes every
//! [`Backend`] method as: each argument converted for the inner backend ([`Unwrap`]), the
//! inner backend's method called, and the result converted back ([`Wrap`]). The conversions
//! are traits on the argument and result types, so one rule serves every method, and a
//! method added to the trait is forwarded with the others.

use super::Backend;
use super::signature::*;

/// A backend whose kernels are another backend's. [`delegate_backend!`](crate::delegate_backend)
/// implements [`Backend`] for it.
///
/// The defaults describe a backend that shares the inner backend's storages and device;
/// a backend that disguises the inner backend's storages as its own overrides the
/// conversions.
pub trait Delegate: Send + Sync + 'static {
    /// The backend that computes.
    type Inner: Backend + ?Sized;

    /// The backend that computes.
    fn inner(&self) -> &Self::Inner;

    /// The device this backend computes on, as [`Backend::device`] reports it.
    fn outer_device(&self) -> Device {
        self.inner().device()
    }

    /// The storage the inner backend reads for a storage this backend was given, or an
    /// error naming the kernel `op` when the storage is not one of this backend's.
    fn inner_storage<'a>(&self, op: &'static str, s: &'a Storage) -> Result<&'a Storage> {
        let _ = op;
        Ok(s)
    }

    /// [`Delegate::inner_storage`] for a storage written in place.
    fn inner_storage_mut<'a>(&self, op: &'static str, s: &'a mut Storage) -> Result<&'a mut Storage> {
        let _ = op;
        Ok(s)
    }

    /// This backend's storage for a storage the inner backend made.
    fn outer_storage(&self, s: Storage) -> Storage {
        s
    }
}

/// An argument of a [`Backend`] method converted for the inner backend of a [`Delegate`].
pub trait Unwrap: Sized {
    /// What the inner backend is handed (borrowed from it, see [`Lend`]).
    type Inner;

    /// The argument in the inner backend's terms; an error naming the kernel `op` when it
    /// holds a storage that is not the delegating backend's.
    fn inner<D: Delegate + ?Sized>(self, d: &D, op: &'static str) -> Result<Self::Inner>;

    /// The name of the kernel, for an argument that says which one it is (an op kind, a
    /// loss); the first such argument names the kernel in errors, else the method's name.
    fn label(&self) -> Option<&'static str> {
        None
    }
}

/// A converted argument as the inner backend's method takes it: itself, except an owned
/// list of views, which it lends as a slice (method-call autoref picks `&T`'s impl for it).
pub trait Lend {
    /// The argument as passed.
    type Arg;

    /// The argument as passed.
    fn lend(self) -> Self::Arg;
}

/// A result of the inner backend converted back for the delegating backend's caller.
pub trait Wrap: Sized {
    /// The result in the delegating backend's terms.
    fn outer<D: Delegate + ?Sized>(self, d: &D) -> Self;
}

/// Arguments passed through unchanged; `label` names the kernel for those that say which
/// one it is.
macro_rules! plain {
    ($($t:ty $(=> |$v:ident| $label:expr)?),* $(,)?) => {$(
        impl Unwrap for $t {
            type Inner = $t;
            fn inner<D: Delegate + ?Sized>(self, _: &D, _: &'static str) -> Result<$t> {
                Ok(self)
            }
            $(fn label(&self) -> Option<&'static str> {
                let $v = self;
                Some($label)
            })?
        }
    )*};
}

plain!(
    UnaryOp => |op| op.name(),
    BinaryOp => |op| op.name(),
    CmpOp => |op| op.name(),
    ReduceOp => |op| op.name(),
    DType, Scalar, Distribution, CpuStorage,
    usize, bool, i64, f32, f64, (usize, usize), [usize; 2],
);

/// Borrowed arguments passed through unchanged.
macro_rules! plain_ref {
    ($($t:ty $(=> |$v:ident| $label:expr)?),* $(,)?) => {$(
        impl<'a> Unwrap for &'a $t {
            type Inner = &'a $t;
            fn inner<D: Delegate + ?Sized>(self, _: &D, _: &'static str) -> Result<&'a $t> {
                Ok(self)
            }
            $(fn label(&self) -> Option<&'static str> {
                let $v = self;
                Some($label)
            })?
        }
    )*};
}

plain_ref!(
    ClassLoss => |loss| loss.name(),
    Attention => |_spec| crate::ops::attention::OP,
    Layout, ConvGeometry, SlidingWindow, PoolWindows, Resample, LstmRun,
    SgdStep, AdamStep, RmsPropStep, [usize],
);

impl<'a> Unwrap for View<'a> {
    type Inner = View<'a>;
    fn inner<D: Delegate + ?Sized>(self, d: &D, op: &'static str) -> Result<View<'a>> {
        Ok((d.inner_storage(op, self.0)?, self.1))
    }
}

impl<'a> Unwrap for Option<View<'a>> {
    type Inner = Option<View<'a>>;
    fn inner<D: Delegate + ?Sized>(self, d: &D, op: &'static str) -> Result<Option<View<'a>>> {
        self.map(|v| v.inner(d, op)).transpose()
    }
}

impl<'a, const N: usize> Unwrap for [View<'a>; N] {
    type Inner = [View<'a>; N];
    fn inner<D: Delegate + ?Sized>(self, d: &D, op: &'static str) -> Result<[View<'a>; N]> {
        let mut out = self;
        for v in &mut out {
            *v = Unwrap::inner(*v, d, op)?;
        }
        Ok(out)
    }
}

impl<'a, const N: usize> Unwrap for [&'a Layout; N] {
    type Inner = [&'a Layout; N];
    fn inner<D: Delegate + ?Sized>(self, _: &D, _: &'static str) -> Result<[&'a Layout; N]> {
        Ok(self)
    }
}

impl<'a> Unwrap for &'a [View<'a>] {
    type Inner = Vec<View<'a>>;
    fn inner<D: Delegate + ?Sized>(self, d: &D, op: &'static str) -> Result<Vec<View<'a>>> {
        self.iter().map(|&v| v.inner(d, op)).collect()
    }
}

impl<'a> Unwrap for &'a mut Storage {
    type Inner = &'a mut Storage;
    fn inner<D: Delegate + ?Sized>(self, d: &D, op: &'static str) -> Result<&'a mut Storage> {
        d.inner_storage_mut(op, self)
    }
}

impl<'a> Unwrap for Target<'a> {
    type Inner = Target<'a>;
    fn inner<D: Delegate + ?Sized>(self, d: &D, op: &'static str) -> Result<Target<'a>> {
        Ok((d.inner_storage_mut(op, self.0)?, self.1))
    }
}

impl<'a> Unwrap for Option<Target<'a>> {
    type Inner = Option<Target<'a>>;
    fn inner<D: Delegate + ?Sized>(self, d: &D, op: &'static str) -> Result<Option<Target<'a>>> {
        self.map(|t| t.inner(d, op)).transpose()
    }
}

impl<'a> Unwrap for AdamState<'a> {
    type Inner = AdamState<'a>;
    fn inner<D: Delegate + ?Sized>(self, d: &D, op: &'static str) -> Result<AdamState<'a>> {
        Ok(AdamState {
            exp_avg: self.exp_avg.inner(d, op)?,
            exp_avg_sq: self.exp_avg_sq.inner(d, op)?,
            max_exp_avg_sq: self.max_exp_avg_sq.inner(d, op)?,
        })
    }
}

impl<'a> Unwrap for RmsPropState<'a> {
    type Inner = RmsPropState<'a>;
    fn inner<D: Delegate + ?Sized>(self, d: &D, op: &'static str) -> Result<RmsPropState<'a>> {
        Ok(RmsPropState {
            square_avg: self.square_avg.inner(d, op)?,
            grad_avg: self.grad_avg.inner(d, op)?,
            momentum_buffer: self.momentum_buffer.inner(d, op)?,
        })
    }
}

/// Converted arguments passed by value.
macro_rules! lend_by_value {
    ($($t:ty),* $(,)?) => {$(
        impl Lend for $t {
            type Arg = $t;
            fn lend(self) -> $t {
                self
            }
        }
    )*};
}

lend_by_value!(UnaryOp, BinaryOp, CmpOp, ReduceOp, DType, Scalar, Distribution, CpuStorage, usize, bool, i64, f32, f64);

impl<'a> Lend for AdamState<'a> {
    type Arg = AdamState<'a>;
    fn lend(self) -> AdamState<'a> {
        self
    }
}

impl<'a> Lend for RmsPropState<'a> {
    type Arg = RmsPropState<'a>;
    fn lend(self) -> RmsPropState<'a> {
        self
    }
}

impl<A, B> Lend for (A, B) {
    type Arg = (A, B);
    fn lend(self) -> (A, B) {
        self
    }
}

impl<T, const N: usize> Lend for [T; N] {
    type Arg = [T; N];
    fn lend(self) -> [T; N] {
        self
    }
}

impl<T> Lend for Option<T> {
    type Arg = Option<T>;
    fn lend(self) -> Option<T> {
        self
    }
}

impl<'a, T: ?Sized> Lend for &'a T {
    type Arg = &'a T;
    fn lend(self) -> &'a T {
        self
    }
}

impl<'a, T: ?Sized> Lend for &'a mut T {
    type Arg = &'a mut T;
    fn lend(self) -> &'a mut T {
        self
    }
}

/// Results passed back unchanged.
macro_rules! unchanged {
    ($($t:ty),* $(,)?) => {$(
        impl Wrap for $t {
            fn outer<D: Delegate + ?Sized>(self, _: &D) -> $t {
                self
            }
        }
    )*};
}

unchanged!((), bool, f64, CpuStorage, Option<DeviceMemory>);

impl Wrap for Device {
    fn outer<D: Delegate + ?Sized>(self, d: &D) -> Device {
        d.outer_device()
    }
}

impl Wrap for Storage {
    fn outer<D: Delegate + ?Sized>(self, d: &D) -> Storage {
        d.outer_storage(self)
    }
}

impl<T: Wrap> Wrap for Result<T> {
    fn outer<D: Delegate + ?Sized>(self, d: &D) -> Result<T> {
        self.map(|v| v.outer(d))
    }
}

impl<A: Wrap, B: Wrap> Wrap for (A, B) {
    fn outer<D: Delegate + ?Sized>(self, d: &D) -> (A, B) {
        (self.0.outer(d), self.1.outer(d))
    }
}

impl<T: Wrap, const N: usize> Wrap for [T; N] {
    fn outer<D: Delegate + ?Sized>(self, d: &D) -> [T; N] {
        self.map(|v| v.outer(d))
    }
}

/// Implements [`Backend`] for a [`Delegate`] by handing each method to its inner backend:
/// `delegate_backend!(all for T)` forwards every method (the type then behaves as its inner
/// backend does, defaults included), `delegate_backend!(required for T)` only the methods
/// without a default body, so that the type computes the heavy kernels with the trait's
/// compositions (a test of those compositions against the inner backend's own kernels).
///
/// ```
/// use ember_tensor::backend::cpu::CpuBackend;
/// use ember_tensor::backend::{Backend, Delegate};
/// use ember_tensor::layout::Layout;
/// use ember_tensor::{DType, Shape};
///
/// /// The CPU backend without its fused kernels.
/// struct Composed;
///
/// impl Delegate for Composed {
///     type Inner = CpuBackend;
///     fn inner(&self) -> &CpuBackend {
///         &CpuBackend
///     }
/// }
///
/// ember_tensor::delegate_backend!(required for Composed);
///
/// let x = CpuBackend.full(3, 1.0.into(), DType::F32)?;
/// let layout = Layout::contiguous(Shape::from([3]));
/// // `softmax` composed from `reduce`, `binary` and `unary`, which are the CPU backend's.
/// let p = Composed.softmax((&x, &layout), 0, false)?;
/// let p = Composed.download((&p, &layout))?;
/// assert_eq!(p.as_slice::<f32>(), Some(&[1.0 / 3.0; 3][..]));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[macro_export]
macro_rules! delegate_backend {
    ($mode:ident for $ty:ty) => {
        $crate::backend_methods!([$crate::__delegate_backend] $mode ($ty));
    };
}

/// The callback of [`delegate_backend!`]: the impl, and one method per entry of the list.
#[doc(hidden)]
#[macro_export]
macro_rules! __delegate_backend {
    ($mode:ident ($ty:ty) $({
        [$(#[$m:meta])*] $name:ident $self:ident ($($arg:ident: $aty:ty),*) ($ret:ty) ($($body:tt)*)
    })*) => {
        const _: () = {
            use $crate::backend::signature::*;
            impl $crate::backend::Backend for $ty {
                $($crate::__delegate_backend!(@method $mode $name ($($arg: $aty),*) ($ret) ($($body)*));)*
            }
        };
    };
    // `required` keeps the trait's default bodies.
    (@method required $name:ident ($($arg:ident: $aty:ty),*) ($ret:ty) ($body:block)) => {};
    (@method required $name:ident ($($arg:ident: $aty:ty),*) ($ret:ty) (;)) => {
        $crate::__delegate_backend!(@forward $name ($($arg: $aty),*) ($ret));
    };
    (@method all $name:ident ($($arg:ident: $aty:ty),*) ($ret:ty) ($($body:tt)*)) => {
        $crate::__delegate_backend!(@forward $name ($($arg: $aty),*) ($ret));
    };
    (@forward $name:ident ($($arg:ident: $aty:ty),*) ($ret:ty)) => {
        fn $name(&self $(, $arg: $aty)*) -> $ret {
            #[allow(unused_imports)]
            use $crate::backend::delegate::{Lend as _, Unwrap, Wrap};
            let _op: &'static str = None$(.or(Unwrap::label(&$arg)))*.unwrap_or(stringify!($name));
            Wrap::outer(
                $crate::backend::Delegate::inner(self).$name($(Unwrap::inner($arg, self, _op)?.lend()),*),
                self,
            )
        }
    };
}

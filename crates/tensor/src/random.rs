//! The global random generator.
//!
//! All random tensors (and, in the higher crates, weight initialisation, dropout masks and
//! data shuffling) draw from one PCG-64 generator. [`manual_seed`] resets it, so a program
//! that seeds once at the start produces the same numbers on every run and every machine.
//! Without a call to `manual_seed` the generator starts from a fixed default seed, so runs
//! are reproducible by default, as in PyTorch.

use parking_lot::{Mutex, MutexGuard};
use rand::SeedableRng;
use rand_pcg::Pcg64;

/// The seed the generator starts from when [`manual_seed`] is never called.
pub const DEFAULT_SEED: u64 = 67_280_421_310_721;

static GENERATOR: Mutex<Option<Pcg64>> = Mutex::new(None);

/// Resets the global generator to `seed`.
///
/// ```
/// use ember_tensor::{manual_seed, Tensor};
/// manual_seed(7);
/// let a = Tensor::rand([3])?.to_vec::<f32>()?;
/// manual_seed(7);
/// let b = Tensor::rand([3])?.to_vec::<f32>()?;
/// assert_eq!(a, b);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn manual_seed(seed: u64) {
    *lock() = Some(Pcg64::seed_from_u64(seed));
}

fn lock() -> MutexGuard<'static, Option<Pcg64>> {
    GENERATOR.lock()
}

/// Runs `f` with exclusive use of the global generator.
pub fn with_rng<R>(f: impl FnOnce(&mut Pcg64) -> R) -> R {
    let mut g = lock();
    let rng = g.get_or_insert_with(|| Pcg64::seed_from_u64(DEFAULT_SEED));
    f(rng)
}

/// A new generator seeded from the global one: for work that needs its own stream (a data
/// loader's shuffling, say) while staying reproducible under `manual_seed`.
pub fn fork_rng() -> Pcg64 {
    with_rng(Pcg64::from_rng)
}

/// A distribution of random tensor elements, as [`crate::backend::Backend::random`] takes it.
/// The bounds and moments are validated by the tensor constructors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distribution {
    /// Uniform on `[low, high)` with PyTorch's `uniform_` rounding: the bounds are taken in
    /// the element type, and no sample equals `high` (a draw that rounds up to it becomes
    /// the largest value below it); `low == high` gives `low`.
    Uniform {
        /// Lower bound, included.
        low: f64,
        /// Upper bound, excluded (unless equal to `low`).
        high: f64,
    },
    /// Normal with mean `mean` and standard deviation `std`.
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std: f64,
    },
}

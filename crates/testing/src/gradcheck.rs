//! First- and second-order gradient checks for op test suites: seeded inputs that are the
//! same on every run, inputs stored non-contiguously, and [`check_both`], which checks an
//! op's backward and its backward's backward in one call.

use ember_autograd::{Var, enable_grad, grad, gradcheck};
use ember_tensor::{DType, Result, Tensor, manual_seed};
use parking_lot::{Mutex, MutexGuard};

/// Tests run on several threads but draw from ember's one global generator: the lock makes
/// every input the same on every run.
static RNG: Mutex<()> = Mutex::new(());

/// Runs `draw` with the global generator seeded with `seed`, and no other test drawing
/// meanwhile.
pub fn seeded<R>(seed: u64, draw: impl FnOnce() -> R) -> R {
    let _guard = RNG.lock();
    manual_seed(seed);
    draw()
}

/// Seeds the global generator with `seed` and keeps every other test from drawing until the
/// returned guard drops: for a test whose whole body draws (layer initialisation, `randn`,
/// dropout), taken first so that the guard drops after everything else. Not reentrant: the
/// holder must not call [`seeded`] or [`normal`].
pub fn seed_guard(seed: u64) -> MutexGuard<'static, ()> {
    let guard = RNG.lock();
    manual_seed(seed);
    guard
}

/// Standard normal `f64` values of `shape`, drawn after seeding the global generator with
/// `seed`.
pub fn normal(seed: u64, shape: &[usize]) -> Tensor {
    seeded(seed, || Tensor::normal(shape, 0.0, 1.0, DType::F64).expect("normal values of a valid shape"))
}

/// The same values stored with dimensions `a` and `b` swapped, read through a transpose:
/// a non-contiguous input with the original's shape and values.
pub fn stored_swapped(t: &Tensor, a: usize, b: usize) -> Tensor {
    let swap = |t: &Tensor| t.transpose(a, b).expect("dimensions within the tensor's rank");
    swap(&swap(t).contiguous())
}

/// The same values stored with the last two dimensions swapped, read through a transpose.
pub fn transposed(t: &Tensor) -> Tensor {
    let r = t.rank();
    stored_swapped(t, r - 2, r - 1)
}

/// Gradcheck of `f` at `inputs` (f64; eps 1e-6, atol 1e-7, rtol 1e-5); panics with `name`
/// and the mismatch.
#[track_caller]
pub fn check(name: &str, f: impl Fn(&[Var]) -> Result<Var>, inputs: &[Tensor]) {
    if let Err(e) = gradcheck(f, inputs, 1e-6, 1e-7, 1e-5) {
        panic!("{name}: {e}");
    }
}

/// The gradient of `sum(op(xs) * w)` with respect to every `xs`, flattened and joined,
/// with `create_graph`: its gradcheck checks `op`'s backward's backward.
pub fn first_derivative(xs: &[Var], w: &Var, op: &impl Fn(&[Var]) -> Result<Var>) -> Result<Var> {
    enable_grad(|| {
        // In gradcheck's numerical pass the inputs are constants: make them parameters so
        // that there is a graph to differentiate.
        let xs: Vec<Var> =
            xs.iter().map(|x| if x.requires_grad() { x.clone() } else { Var::param(x.value()) }).collect();
        let y = op(&xs)?;
        let refs: Vec<&Var> = xs.iter().collect();
        let grads = grad(&[&y], &refs, &[w], false, true)?;
        let flat: Vec<Var> = grads
            .into_iter()
            .zip(&xs)
            .map(|(g, x)| g.unwrap_or_else(|| Var::new(x.value().zeros_like())).flatten_all())
            .collect();
        Var::cat(&flat.iter().collect::<Vec<_>>(), 0)
    })
}

/// First- and second-order gradcheck of `op` at `xs`; the second order weighs `op`'s output
/// with normal values drawn with `seed`.
#[track_caller]
pub fn check_both(name: &str, op: impl Fn(&[Var]) -> Result<Var>, xs: &[Tensor], seed: u64) {
    check(name, &op, xs);
    let vars: Vec<Var> = xs.iter().map(|t| Var::new(t.clone())).collect();
    let out = op(&vars).expect("the op at the checked inputs").shape();
    let mut inputs = xs.to_vec();
    inputs.push(normal(seed, out.dims()));
    let n = xs.len();
    check(&format!("second order: {name}"), |v| first_derivative(&v[..n], &v[n], &op), &inputs);
}

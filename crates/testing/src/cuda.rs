//! The harness of the CUDA parity suites: the same computation on the CPU and on
//! `Device::Cuda(0)`, the results downloaded and compared.
//!
//! A suite starts each test with [`require_cuda!`](crate::require_cuda), which returns early
//! (after one line saying why) where no device is there; without the `cuda` feature the
//! emulated device stands in, so the suites run everywhere. Inputs come from [`mix`], a hash
//! of a seed and a position rather than the global generator, so that tests running in
//! parallel cannot change them. A [`Parity`] gathers every mismatch of one test and fails
//! once listing them all: a device run is short and rare, so one run must say everything
//! that is wrong.
//!
//! ```
//! use ember_testing::cuda::{Parity, Tol, uniform};
//! use ember_tensor::{Result, Tensor};
//!
//! fn sums_agree() {
//!     ember_testing::require_cuda!();
//!     let mut p = Parity::new("sums_agree");
//!     let tol = Tol::new((1e-4, 1e-5), (1e-12, 1e-11));
//!     p.check("sum of 100 values", tol, |d| -> Result<Vec<Tensor>> {
//!         let x = Tensor::from_vec(uniform(7, 100), [100])?.to_device(d)?;
//!         Ok(vec![x.sum_all()])
//!     });
//!     p.finish();
//! }
//! sums_agree();
//! ```

use ember_tensor::{DType, Device, Result, Tensor};
use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The device under test by default.
pub const CUDA: Device = Device::Cuda(0);

/// The device under test: `cuda:0`, or the device `EMBER_PARITY_DEVICE` names
/// (`EMBER_PARITY_DEVICE=torch-cpu` runs the suites against the LibTorch backend).
pub fn device() -> Device {
    std::env::var("EMBER_PARITY_DEVICE").ok().and_then(|d| d.parse().ok()).unwrap_or(CUDA)
}
/// The reference.
pub const CPU: Device = Device::Cpu;

/// Whether the device is there; otherwise prints the one line `<suite>: skipped, no CUDA
/// device: <why>`. Without the `cuda` feature, the emulated device stands in for a GPU.
pub fn available(suite: &str) -> bool {
    Device::emulate_cuda();
    match device().check_available() {
        Ok(()) => true,
        Err(e) => {
            println!("{suite}: skipped, no {} device: {e}", device());
            false
        }
    }
}

/// Returns from the enclosing test, after one line naming the test binary, where there is
/// no CUDA device (see [`cuda::available`](crate::cuda::available)).
#[macro_export]
macro_rules! require_cuda {
    () => {
        if !$crate::cuda::available(env!("CARGO_CRATE_NAME")) {
            return;
        }
    };
}

/// How close a device result must be to the CPU's: `|dev - cpu| <= abs + rel * |cpu|`, per
/// float dtype, as `(abs, rel)`. Integer and `u8` results are always compared exactly. NaN
/// must meet NaN and an infinity the same infinity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tol {
    /// `(abs, rel)` for `f32` results.
    pub f32: (f64, f64),
    /// `(abs, rel)` for `f64` results.
    pub f64: (f64, f64),
}

impl Tol {
    /// The same bits on both devices.
    pub const EXACT: Tol = Tol::new((0.0, 0.0), (0.0, 0.0));

    /// `(abs, rel)` for `f32` and for `f64` results.
    pub const fn new(f32: (f64, f64), f64: (f64, f64)) -> Tol {
        Tol { f32, f64 }
    }

    /// `(abs, rel)` for results of `dtype` (zero for integers).
    pub fn for_dtype(self, dtype: DType) -> (f64, f64) {
        match dtype {
            DType::F32 => self.f32,
            DType::F64 => self.f64,
            _ => (0.0, 0.0),
        }
    }
}

/// SplitMix64 of a seed and a position.
pub fn mix(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_mul(0xD1B5_4A32_D192_ED03).wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `n` values uniform in `[-2.5, 2.5)`, from `seed`.
pub fn uniform(seed: u64, n: usize) -> Vec<f64> {
    (0..n).map(|i| (mix(seed, i as u64) >> 11) as f64 / (1u64 << 53) as f64 * 5.0 - 2.5).collect()
}

/// Exact `i64` data of `shape` on `dev`; an error if `values` does not fill `shape`.
pub fn ints(values: &[i64], shape: &[usize], dev: Device) -> Result<Tensor> {
    Tensor::from_vec(values.to_vec(), shape)?.to_device(dev)
}

/// How a [`Parity`] names the results of one check in its messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ResultNames {
    /// `what` alone for a single result, `what [result i]` for several.
    Numbered,
    /// `what [value]` for the first, `what [gradient i]` for the others.
    ValueThenGradients,
}

/// Gathers the mismatches of one test and fails once, listing them all.
pub struct Parity {
    test: &'static str,
    names: ResultNames,
    checked: usize,
    failures: Vec<String>,
    /// Cases that failed on both devices (printed, so that a case that errors by mistake
    /// instead of computing shows up in the log).
    both_failed: Vec<String>,
}

impl Parity {
    /// The comparisons of test `test`, whose checks return any list of results.
    pub fn new(test: &'static str) -> Parity {
        Parity::named(test, ResultNames::Numbered)
    }

    /// The comparisons of test `test`, whose checks return a value followed by gradients.
    pub fn of_gradients(test: &'static str) -> Parity {
        Parity::named(test, ResultNames::ValueThenGradients)
    }

    fn named(test: &'static str, names: ResultNames) -> Parity {
        Parity { test, names, checked: 0, failures: Vec::new(), both_failed: Vec::new() }
    }

    /// Computes `f` on both devices and compares every returned tensor; `what` names the
    /// op and its inputs in failure messages. An op that fails on one device must fail on
    /// the other.
    pub fn check(&mut self, what: impl AsRef<str>, tol: Tol, f: impl Fn(Device) -> Result<Vec<Tensor>>) {
        self.checked += 1;
        let what = what.as_ref();
        let cpu = run_on(CPU, &f);
        let dev = run_on(device(), &f);
        match (cpu, dev) {
            (Err(e), Err(_)) => self.both_failed.push(format!("{what}: {e}")),
            (Ok(_), Err(e)) => self.failures.push(format!("{what}: the CPU computes it, the device fails: {e}")),
            (Err(e), Ok(_)) => self.failures.push(format!("{what}: the CPU fails ({e}), the device computes it")),
            (Ok(c), Ok(d)) => {
                if c.len() != d.len() {
                    self.failures.push(format!("{what}: {} results on the CPU, {} on the device", c.len(), d.len()));
                    return;
                }
                let single = c.len() == 1;
                for (i, (c, d)) in c.iter().zip(&d).enumerate() {
                    if let Err(msg) = compare(c, d, tol) {
                        let label = match self.names {
                            ResultNames::Numbered if single => what.to_string(),
                            ResultNames::Numbered => format!("{what} [result {i}]"),
                            ResultNames::ValueThenGradients if i == 0 => format!("{what} [value]"),
                            ResultNames::ValueThenGradients => format!("{what} [gradient {i}]"),
                        };
                        self.failures.push(format!("{label}: {msg}"));
                    }
                }
            }
        }
    }

    /// Expects `f` to fail on both devices.
    pub fn check_error(&mut self, what: impl AsRef<str>, f: impl Fn(Device) -> Result<Vec<Tensor>>) {
        self.checked += 1;
        let what = what.as_ref();
        for dev in [CPU, device()] {
            if let Ok(v) = run_on(dev, &f) {
                // A device may report a bad index late, when the results are read: that
                // counts as the error.
                let surfaced = dev.synchronize().is_err() || v.iter().any(|t| t.to_device(CPU).is_err());
                if !surfaced {
                    self.failures.push(format!("{what}: expected an error on {dev}, got {} results", v.len()));
                }
            }
        }
    }

    /// Expects `f` to return an error on the device, not results and not a panic; the CPU
    /// does not run it (for what only the device side can get wrong, such as mixing
    /// devices).
    pub fn check_device_error(&mut self, what: impl AsRef<str>, f: impl Fn(Device) -> Result<Vec<Tensor>>) {
        self.checked += 1;
        let what = what.as_ref();
        match run_on(device(), &f) {
            Ok(_) => self.failures.push(format!("{what}: no error")),
            Err(e) if e.contains("panicked") => self.failures.push(format!("{what} panicked: {e}")),
            Err(_) => {}
        }
    }

    /// Fails listing every mismatch (the first 200), or prints how many comparisons agree
    /// and the cases that failed on both devices. Fails too when nothing was compared.
    pub fn finish(self) {
        assert!(self.checked > 0, "{}: nothing was compared", self.test);
        if !self.failures.is_empty() {
            let mut msg = format!("{}: {} of {} comparisons differ:\n", self.test, self.failures.len(), self.checked);
            for f in self.failures.iter().take(200) {
                let _ = writeln!(msg, "  {f}");
            }
            if self.failures.len() > 200 {
                let _ = writeln!(msg, "  ... and {} more", self.failures.len() - 200);
            }
            panic!("{msg}");
        }
        println!(
            "{}: {} comparisons agree ({} of them errors on both devices)",
            self.test,
            self.checked,
            self.both_failed.len()
        );
        for e in &self.both_failed {
            println!("  error on both: {e}");
        }
    }
}

/// Runs `f` on `dev`, turning a panic into an error: a kernel that panics on one device and
/// errors on the other still counts as failing on both.
fn run_on(dev: Device, f: &dyn Fn(Device) -> Result<Vec<Tensor>>) -> std::result::Result<Vec<Tensor>, String> {
    match catch_unwind(AssertUnwindSafe(|| f(dev))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(p) => Err(format!(
            "panicked: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

/// Compares a CPU result with a device result: device, dtype, shape, then the values.
fn compare(cpu: &Tensor, dev: &Tensor, tol: Tol) -> std::result::Result<(), String> {
    if cpu.device() != CPU {
        return Err(format!("the CPU result is on {}", cpu.device()));
    }
    if dev.device() != device() {
        return Err(format!("the device result is on {}, expected {}", dev.device(), device()));
    }
    if cpu.dtype() != dev.dtype() {
        return Err(format!("dtype {} on the CPU, {} on the device", cpu.dtype(), dev.dtype()));
    }
    if cpu.shape() != dev.shape() {
        return Err(format!("shape {} on the CPU, {} on the device", cpu.shape(), dev.shape()));
    }
    let back = dev.to_device(CPU).map_err(|e| format!("download failed: {e}"))?;
    let read = |e: ember_tensor::Error| format!("cannot read the result: {e}");
    match cpu.dtype() {
        DType::U8 => exact(&cpu.to_vec::<u8>().map_err(read)?, &back.to_vec::<u8>().map_err(read)?),
        DType::I64 => exact(&cpu.to_vec::<i64>().map_err(read)?, &back.to_vec::<i64>().map_err(read)?),
        dt => close(&cpu.to_vec_f64().map_err(read)?, &back.to_vec_f64().map_err(read)?, tol.for_dtype(dt)),
    }
}

/// Integer results: every element the same.
fn exact<T: PartialEq + std::fmt::Debug>(c: &[T], d: &[T]) -> std::result::Result<(), String> {
    let bad: Vec<usize> = (0..c.len()).filter(|&i| c[i] != d[i]).collect();
    match bad.first() {
        None => Ok(()),
        Some(&i) => Err(format!(
            "{} of {} elements differ; first at {i}: cpu {:?}, device {:?}",
            bad.len(),
            c.len(),
            c[i],
            d[i]
        )),
    }
}

/// Float results: every element within `abs + rel * |cpu|`; reports the worst.
fn close(c: &[f64], d: &[f64], (abs, rel): (f64, f64)) -> std::result::Result<(), String> {
    let mut bad = 0;
    let mut worst: Option<(usize, f64)> = None;
    for i in 0..c.len() {
        let (x, y) = (c[i], d[i]);
        let ok = if x.is_nan() || y.is_nan() {
            x.is_nan() && y.is_nan()
        } else if x.is_infinite() || y.is_infinite() {
            x == y
        } else {
            (x - y).abs() <= abs + rel * x.abs()
        };
        if !ok {
            bad += 1;
            let excess = if (x - y).is_nan() { f64::INFINITY } else { (x - y).abs() };
            if worst.is_none_or(|(_, e)| excess > e) {
                worst = Some((i, excess));
            }
        }
    }
    match worst {
        None => Ok(()),
        Some((i, e)) => Err(format!(
            "{bad} of {} elements beyond abs {abs:e} + rel {rel:e}; worst at {i}: cpu {}, device {} (difference {e:e})",
            c.len(),
            c[i],
            d[i]
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_compare_exactly_and_floats_within_the_tolerance() {
        let on_cpu = |v: Vec<f64>| Tensor::from_vec(v, [3]).unwrap();
        let tol = Tol::new((0.0, 0.0), (1e-3, 0.0));
        assert_eq!(close(&[1.0, f64::NAN, 2.0], &[1.0005, f64::NAN, 2.0], tol.f64), Ok(()));
        let err = close(&[1.0, 2.0, 3.0], &[1.0, 2.5, 3.1], tol.f64).unwrap_err();
        assert!(err.starts_with("2 of 3 elements beyond") && err.contains("worst at 1"), "{err}");
        let err = exact(&[1i64, 2, 3], &[1, 2, 4]).unwrap_err();
        assert!(err.contains("first at 2: cpu 3, device 4"), "{err}");
        // Both results on the CPU: the device side is not where it should be.
        let err = compare(&on_cpu(vec![1.0; 3]), &on_cpu(vec![1.0; 3]), tol).unwrap_err();
        assert!(err.contains("the device result is on cpu"), "{err}");
    }

    #[test]
    fn uniform_values_are_fixed_by_the_seed() {
        let a = uniform(3, 1000);
        assert_eq!(a, uniform(3, 1000));
        assert_ne!(a, uniform(4, 1000));
        assert!(a.iter().all(|v| (-2.5..2.5).contains(v)));
    }
}

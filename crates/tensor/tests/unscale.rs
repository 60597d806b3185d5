//! The fused gradient-unscaling kernel (`Backend::non_finite_check_and_unscale`, the CPU
//! backend's) against the trait's default composition, bit for bit, on contiguous and
//! strided views of `f32` and `f64` storages with infinities and NaNs in chosen places, and
//! against the rule itself: every element multiplied once by the `f32` inverse scale (in
//! `f64` for `f64`), the flag set exactly when the view held a non-finite element, the
//! storage outside the view untouched. Also the tensor-level entry point's checks.

use ember_tensor::backend::cpu::CpuBackend;
use ember_tensor::backend::{Backend, Delegate};
use ember_tensor::{DType, Tensor, threading};

/// The CPU backend without its own kernels for the methods that have a default body.
struct Composed;

impl Delegate for Composed {
    type Inner = CpuBackend;
    fn inner(&self) -> &CpuBackend {
        &CpuBackend
    }
}

ember_tensor::delegate_backend!(required for Composed);

/// Values in [-4, 4) from a fixed sequence.
fn data(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0
        })
        .collect()
}

/// A view of a fresh storage: the whole storage's values and how to take the view of it.
struct Case {
    name: &'static str,
    storage_len: usize,
    view: fn(&Tensor) -> Tensor,
}

fn cases() -> Vec<Case> {
    vec![
        Case { name: "contiguous", storage_len: 24, view: |t| t.reshape([4, 6]).unwrap() },
        Case { name: "transposed", storage_len: 24, view: |t| t.reshape([4, 6]).unwrap().transpose(0, 1).unwrap() },
        Case {
            name: "narrowed columns",
            storage_len: 24,
            view: |t| t.reshape([4, 6]).unwrap().narrow(1, 1, 3).unwrap(),
        },
        Case {
            name: "transposed and narrowed",
            storage_len: 30,
            view: |t| t.reshape([5, 6]).unwrap().transpose(0, 1).unwrap().narrow(0, 2, 3).unwrap(),
        },
        Case { name: "offset slice", storage_len: 24, view: |t| t.narrow(0, 5, 11).unwrap() },
        Case {
            name: "0-d",
            storage_len: 3,
            view: |t| t.narrow(0, 1, 1).unwrap().reshape(Vec::<usize>::new()).unwrap(),
        },
        Case { name: "empty", storage_len: 6, view: |t| t.reshape([2, 3]).unwrap().narrow(1, 3, 0).unwrap() },
        // Large enough for the worker threads to split it.
        Case { name: "large", storage_len: 200_003, view: |t| t.narrow(0, 1, 200_001).unwrap() },
        Case {
            name: "large strided",
            storage_len: 200_000,
            view: |t| t.reshape([400, 500]).unwrap().transpose(0, 1).unwrap(),
        },
    ]
}

/// Runs the kernel of `backend` on a copy of `base` viewed as the case says; returns the
/// flag and the whole storage afterwards, as `f64` bits.
fn run(backend: &dyn Backend, base: &Tensor, case: &Case, inv_scale: f32) -> (bool, Vec<u64>) {
    let t = base.copy();
    let v = (case.view)(&t);
    let found = {
        let mut s = v.storage().write();
        backend.non_finite_check_and_unscale((&mut s, v.layout()), inv_scale).unwrap()
    };
    (found, t.to_vec_f64().unwrap().into_iter().map(f64::to_bits).collect())
}

/// The rule, on the host: which storage elements the view reaches, and each one's result.
fn expected(base: &Tensor, case: &Case, inv_scale: f32) -> (bool, Vec<f64>) {
    let marks = Tensor::from_vec((0..base.numel()).map(|i| i as f64).collect(), [base.numel()]).unwrap();
    let reached: Vec<usize> = (case.view)(&marks).to_vec_f64().unwrap().into_iter().map(|i| i as usize).collect();
    let mut out = base.to_vec_f64().unwrap();
    let f32s = base.dtype() == DType::F32;
    // The kernels flush subnormal results to zero unless told not to.
    let flush = threading::flush_denormal();
    let mut found = false;
    for &i in &reached {
        found |= !out[i].is_finite();
        // On the test's own thread, in IEEE arithmetic: the f64 product is exact for f32.
        let product = out[i] * f64::from(inv_scale);
        out[i] = if f32s {
            let v = product as f32;
            f64::from(if flush && v.is_subnormal() { 0.0f32.copysign(v) } else { v })
        } else if flush && product.is_subnormal() {
            0.0f64.copysign(product)
        } else {
            product
        };
    }
    (found, out)
}

fn same(a: &[u64], b: &[f64]) -> bool {
    a.iter().zip(b).all(|(&x, &y)| x == y.to_bits() || (f64::from_bits(x).is_nan() && y.is_nan()))
}

#[test]
fn fused_kernel_matches_the_composition_and_the_rule() {
    // Where the non-finite values go, as storage indices (some inside every view, some not).
    let placements: [&[(usize, f64)]; 5] = [
        &[],
        &[(7, f64::INFINITY)],
        &[(8, f64::NEG_INFINITY), (2, f64::NAN)],
        &[(0, f64::NAN)],
        &[(199_999, f64::INFINITY)],
    ];
    // The last is subnormal in f32: the inverse of a scale of 3 * 2^126.
    let inv_scales =
        [0.125f32, (1.0f64 / 3.0) as f32, 1.0, (1.0f64 / 65536.0) as f32, (1.0 / (3.0 * 2f64.powi(126))) as f32];
    let mut checked = 0;
    for dtype in [DType::F32, DType::F64] {
        for case in cases() {
            for (p, placement) in placements.iter().enumerate() {
                let mut vals = data(case.storage_len, p as u64 + 1);
                for &(i, v) in placement.iter() {
                    if i < vals.len() {
                        vals[i] = v;
                    }
                }
                let base = Tensor::from_vec(vals, [case.storage_len]).unwrap().to_dtype(dtype);
                for &inv in &inv_scales {
                    let what = format!("{dtype} {} placement {p} inv {inv}", case.name);
                    let fused = run(&CpuBackend, &base, &case, inv);
                    let composed = run(&Composed, &base, &case, inv);
                    assert_eq!(fused, composed, "{what}: the fused kernel and the composition differ");
                    let (found, want) = expected(&base, &case, inv);
                    assert_eq!(fused.0, found, "{what}: the flag");
                    assert!(same(&fused.1, &want), "{what}: the values");
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 2 * 9 * 5 * 5);
}

#[test]
fn the_tensor_method_writes_through_views_and_bumps_the_version() {
    let base = Tensor::from_vec(vec![4.0f32, 8.0, f32::NAN, 16.0, 32.0, 64.0], [2, 3]).unwrap();
    let col = base.narrow(1, 1, 1).unwrap();
    let before = base.version();
    assert!(!col.non_finite_check_and_unscale_(0.25).unwrap());
    assert!(base.version() > before);
    let v = base.to_vec::<f32>().unwrap();
    assert_eq!((v[0], v[1], v[3], v[4]), (4.0, 2.0, 16.0, 8.0));
    assert!(v[2].is_nan());
    assert!(base.non_finite_check_and_unscale_(1.0).unwrap(), "the NaN outside the column is found now");
}

#[test]
fn the_tensor_method_refuses_what_it_cannot_unscale() {
    let ints = Tensor::from_vec(vec![1i64, 2], [2]).unwrap();
    let err = ints.non_finite_check_and_unscale_(0.5).unwrap_err().to_string();
    assert!(err.contains("non_finite_check_and_unscale_") && err.contains("i64"), "{err}");
    let broadcast = Tensor::from_vec(vec![1.0f32], [1]).unwrap().expand([4]).unwrap();
    let err = broadcast.non_finite_check_and_unscale_(0.5).unwrap_err().to_string();
    assert!(err.contains("broadcast"), "{err}");
    assert_eq!(broadcast.to_vec::<f32>().unwrap(), vec![1.0; 4]);
}

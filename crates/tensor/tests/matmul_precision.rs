//! The `f32` matrix product precision setting (PyTorch's `set_float32_matmul_precision`):
//! its values, its error, and what it changes on `cuda:0`.
//!
//! The setting is global to the process, so this file is its own test binary with a single
//! test: no other test can run products while it changes the setting.

use ember_tensor::{
    DType, MatmulPrecision, Result, Tensor, float32_matmul_precision, matmul_precision, set_float32_matmul_precision,
};
use ember_testing::cuda::{Parity, Tol, uniform};

/// A `[rows, cols]` `f32` matrix from `seed` on `dev`, O(1) values.
fn matrix(seed: u64, rows: usize, cols: usize, dev: ember_tensor::Device) -> Result<Tensor> {
    Tensor::from_vec(uniform(seed, rows * cols).iter().map(|&v| v as f32).collect::<Vec<_>>(), [rows, cols])?
        .to_device(dev)
}

#[test]
fn the_setting_round_trips_refuses_unknown_names_and_allows_tf32_on_the_device() {
    // The default is PyTorch's.
    assert_eq!(float32_matmul_precision(), "highest");
    assert_eq!(matmul_precision(), MatmulPrecision::Highest);
    for name in ["high", "medium", "highest"] {
        set_float32_matmul_precision(name).unwrap();
        assert_eq!(float32_matmul_precision(), name);
    }
    assert!(!MatmulPrecision::Highest.allows_reduced());
    assert!(MatmulPrecision::High.allows_reduced() && MatmulPrecision::Medium.allows_reduced());

    // An unknown name (PyTorch's spellings only, case included) is an error naming the op
    // and the accepted names, and leaves the setting as it was.
    set_float32_matmul_precision("high").unwrap();
    for bad in ["fast", "HIGH", "", "tf32"] {
        let msg = set_float32_matmul_precision(bad).unwrap_err().to_string();
        for part in ["set_float32_matmul_precision", "\"highest\"", "\"high\"", "\"medium\""] {
            assert!(msg.contains(part), "{bad:?}: {msg}");
        }
        assert!(msg.contains(&format!("{bad:?}")), "{bad:?}: {msg}");
        assert_eq!(float32_matmul_precision(), "high");
    }
    set_float32_matmul_precision("highest").unwrap();

    // On the device (the emulated one without the `cuda` feature, whose products are the
    // CPU's): "highest" keeps the FP32 bound of the parity suite; "high" may use TF32,
    // whose operands keep 10 mantissa bits: with 150 O(1) terms a result moves by about
    // sqrt(150) * 2^-11 * |term|, a few hundredths at most.
    ember_testing::require_cuda!();
    let fp32 = Tol::new((1e-3, 1e-4), (1e-11, 1e-11));
    let tf32 = Tol::new((1e-1, 1e-2), (1e-11, 1e-11));
    let mut p = Parity::new("matmul_precision");
    for (name, tol) in [("highest", fp32), ("high", tf32), ("medium", tf32)] {
        set_float32_matmul_precision(name).unwrap();
        p.check(format!("f32 matmul [64, 150] @ [150, 80] at {name:?}"), tol, |d| {
            let (a, b) = (matrix(1, 64, 150, d)?, matrix(2, 150, 80, d)?);
            Ok(vec![a.matmul(&b)?, a.matmul(&b.transpose(0, 1)?.contiguous().transpose(0, 1)?)?])
        });
        // f64 products never change.
        p.check(format!("f64 matmul at {name:?}"), fp32, |d| {
            let (a, b) = (matrix(3, 16, 30, d)?.to_dtype(DType::F64), matrix(4, 30, 8, d)?.to_dtype(DType::F64));
            Ok(vec![a.matmul(&b)?])
        });
    }
    set_float32_matmul_precision("highest").unwrap();
    p.finish();
}

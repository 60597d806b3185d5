//! Anomaly mode: a NaN produced by a backward names the operation and where its forward was
//! created, when that forward ran in anomaly mode.

use ember_autograd::{AnomalyGuard, Var, detect_anomaly, is_anomaly_enabled};
use ember_tensor::Tensor;

#[test]
fn the_error_names_the_operation_and_its_creation_site() {
    let x = Var::param(Tensor::from_vec(vec![0.0f64, 1.0], [2]).unwrap());
    let err = detect_anomaly(|| x.sqrt().sum_all().backward()).unwrap_err().to_string();
    assert!(err.contains("function 'sqrt'") && (err.contains("nan") || err.contains("inf")), "{err}");
    assert!(err.contains("Forward created at:") && !err.contains("not recorded"), "{err}");
    // The site is the forward's backtrace: it passes through the `Var` method that made the
    // node. (Frames of the test itself may be inlined away in builds without debug info.)
    assert!(err.contains("::sqrt"), "{err}");
}

#[test]
fn a_forward_outside_anomaly_mode_has_no_site() {
    let x = Var::param(Tensor::from_vec(vec![0.0f64], [1]).unwrap());
    let y = x.sqrt().sum_all();
    let err = detect_anomaly(|| y.backward()).unwrap_err().to_string();
    assert!(err.contains("not recorded"), "{err}");
}

#[test]
fn guards_nest_and_restore() {
    assert!(!is_anomaly_enabled());
    {
        let _outer = AnomalyGuard::new();
        {
            let _inner = AnomalyGuard::new();
            assert!(is_anomaly_enabled());
        }
        assert!(is_anomaly_enabled());
    }
    assert!(!is_anomaly_enabled());
    // Outside anomaly mode a NaN gradient is not an error.
    let x = Var::param(Tensor::from_vec(vec![0.0f64], [1]).unwrap());
    x.sqrt().sum_all().backward().unwrap();
    assert!(x.grad().unwrap().to_vec::<f64>().unwrap()[0].is_infinite());
}

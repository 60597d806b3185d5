//! The process-wide switch of Winograd convolutions (`set_conv_winograd`) and its
//! environment variable, in a test binary of its own: the setting is global and the
//! variable read once per process, so this binary has one test.

use ember_tensor::{ConvArgs, ConvTransposeArgs, DType, Tensor, conv_winograd, manual_seed, set_conv_winograd};

/// The forward pass and the transposed convolution (the input gradient) of a 3x3, padding-1
/// `f32` convolution whose shape Winograd takes.
fn run(x: &Tensor, y: &Tensor, w: &Tensor, b: &Tensor) -> [Vec<f32>; 2] {
    let forward = x.conv2d(w, Some(b), &ConvArgs::default().padding(1)).unwrap();
    let transposed = y.conv_transpose2d(w, None, &ConvTransposeArgs::default().padding(1)).unwrap();
    [forward.to_vec::<f32>().unwrap(), transposed.to_vec::<f32>().unwrap()]
}

#[test]
fn the_switch_selects_the_algorithm() {
    // SAFETY: this binary's only test, so no other thread reads or writes the environment.
    unsafe { std::env::set_var("EMBER_CONV_WINOGRAD", "0") };
    assert!(!conv_winograd(), "EMBER_CONV_WINOGRAD=0 leaves Winograd on");
    manual_seed(7);
    let x = Tensor::randn([2, 32, 21, 18]).unwrap();
    let y = Tensor::randn([2, 24, 21, 18]).unwrap();
    let w = Tensor::randn([24, 32, 3, 3]).unwrap();
    let b = Tensor::randn([24]).unwrap();
    assert_eq!(x.dtype(), DType::F32);

    let off = run(&x, &y, &w, &b);
    set_conv_winograd(true);
    assert!(conv_winograd());
    let on = run(&x, &y, &w, &b);
    // A strided input (its planes stored transposed) gives the same bits.
    let strided = x.transpose(2, 3).unwrap().contiguous().transpose(2, 3).unwrap();
    assert!(!strided.is_contiguous());
    assert_eq!(run(&strided, &y, &w, &b), on);
    set_conv_winograd(false);
    let off_again = run(&x, &y, &w, &b);

    // Off is one algorithm, bit for bit, whatever ran in between; on is another, agreeing
    // to rounding: each output sums up to 288 products of normal values, whose magnitudes
    // add up to about 180, and 2e-3 is about 1e-5 of that.
    assert_eq!(off, off_again);
    for (a, b) in off.iter().zip(&on) {
        assert_ne!(a, b, "Winograd did not run");
        for (&p, &q) in a.iter().zip(b) {
            assert!((p - q).abs() <= 2e-3, "{p} vs {q}");
        }
    }
}

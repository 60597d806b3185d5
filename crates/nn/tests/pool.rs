//! The pooling layers, `Upsample` and `Unflatten`: shapes (batched, unbatched, 1-d),
//! training and evaluation alike, no parameters, values on small inputs, and errors that
//! name the operation and the shapes.

use ember_autograd::Var;
use ember_nn::functional as F;
use ember_nn::{
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool2d, AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d, Module,
    Unflatten, Upsample,
};
use ember_tensor::ops::pool::{AvgPoolArgs, InterpolateArgs, InterpolateMode, MaxPoolArgs};
use ember_tensor::{DType, Tensor};

fn input(shape: &[usize]) -> Var {
    let n: usize = shape.iter().product();
    Var::new(Tensor::from_vec((0..n).map(|v| ((v * 7) % 11) as f32 - 5.0).collect(), shape).unwrap())
}

fn dims(m: &dyn Module, x: &Var) -> Vec<usize> {
    m.forward(x).unwrap().shape().dims().to_vec()
}

#[test]
fn layers_give_pytorch_shapes() {
    let x = input(&[2, 3, 24, 24]);
    assert_eq!(dims(&MaxPool2d::new(2), &x), [2, 3, 12, 12]);
    assert_eq!(dims(&MaxPool2d::new(3).stride(2).padding(1).ceil_mode(true), &x), [2, 3, 13, 13]);
    assert_eq!(dims(&MaxPool2d::new(2).dilation(2).stride(1), &x), [2, 3, 22, 22]);
    assert_eq!(dims(&AvgPool2d::new([2, 4]).stride([2, 3]), &x), [2, 3, 12, 7]);
    assert_eq!(dims(&AdaptiveAvgPool2d::new([5, 7]), &x), [2, 3, 5, 7]);
    assert_eq!(dims(&AdaptiveMaxPool2d::new(1), &x), [2, 3, 1, 1]);
    assert_eq!(dims(&Upsample::scale_factor(2.0), &x), [2, 3, 48, 48]);
    assert_eq!(dims(&Upsample::size([5, 9]).mode(InterpolateMode::Bilinear), &x), [2, 3, 5, 9]);
    // Unbatched inputs keep their rank.
    let u = input(&[3, 8, 8]);
    assert_eq!(dims(&MaxPool2d::new(2), &u), [3, 4, 4]);
    assert_eq!(dims(&AvgPool2d::new(2), &u), [3, 4, 4]);
    assert_eq!(dims(&AdaptiveAvgPool2d::new(3), &u), [3, 3, 3]);
    // 1-d.
    let s = input(&[2, 4, 10]);
    assert_eq!(dims(&MaxPool1d::new(3).stride(2), &s), [2, 4, 4]);
    assert_eq!(dims(&AvgPool1d::new(2).padding(1), &s), [2, 4, 6]);
    assert_eq!(dims(&AdaptiveAvgPool1d::new(3), &s), [2, 4, 3]);
    assert_eq!(dims(&MaxPool1d::new(2), &input(&[4, 10])), [4, 5]);
    assert_eq!(dims(&Upsample::scale_factor(1.5).mode(InterpolateMode::Linear), &s), [2, 4, 15]);
    // An empty batch is allowed.
    assert_eq!(dims(&MaxPool2d::new(2), &input(&[0, 3, 4, 4])), [0, 3, 2, 2]);
}

#[test]
fn layers_hold_nothing_and_ignore_the_mode() {
    let x = input(&[2, 2, 6, 6]);
    let layers: Vec<Box<dyn Module>> = vec![
        Box::new(MaxPool2d::new(2)),
        Box::new(AvgPool2d::new(3).stride(1).padding(1)),
        Box::new(AdaptiveAvgPool2d::new(4)),
        Box::new(AdaptiveMaxPool2d::new([2, 3])),
        Box::new(Upsample::scale_factor(2.0).mode(InterpolateMode::Bilinear).align_corners(true)),
        Box::new(Unflatten::new(-1, [2, 3])),
    ];
    for m in &layers {
        assert!(m.parameters().is_empty() && m.state_dict().is_empty());
        m.train();
        let a = m.forward(&x).unwrap().value().to_vec::<f32>().unwrap();
        m.eval();
        let b = m.forward(&x).unwrap().value().to_vec::<f32>().unwrap();
        assert_eq!(a, b);
    }
}

#[test]
fn small_values_match_hand_computation() {
    let x = Var::new(Tensor::from_vec(vec![1.0f64, 5.0, 2.0, 0.0, 3.0, 4.0, 8.0, 6.0, 7.0], [1, 1, 3, 3]).unwrap());
    // 2x2 windows, stride 1.
    let (y, i) = MaxPool2d::new(2).stride(1).forward_with_indices(&x).unwrap();
    assert_eq!(y.value().to_vec::<f64>().unwrap(), vec![5.0, 5.0, 8.0, 7.0]);
    assert_eq!(i.to_vec::<i64>().unwrap(), vec![1, 1, 6, 8]);
    let a = AvgPool2d::new(2).stride(1).forward(&x).unwrap();
    assert_eq!(a.value().to_vec::<f64>().unwrap(), vec![2.25, 3.5, 4.25, 5.0]);
    // Adaptive 3 -> 2 windows overlap: rows 0..2 and 1..3.
    let m = AdaptiveMaxPool2d::new(2).forward(&x).unwrap();
    assert_eq!(m.value().to_vec::<f64>().unwrap(), vec![5.0, 5.0, 8.0, 7.0]);
    // Nearest x2 repeats each element in a 2x2 block.
    let up = F::interpolate(&x, &InterpolateArgs::scale_factor([2.0])).unwrap();
    let v = up.value().to_vec::<f64>().unwrap();
    assert_eq!((v[0], v[1], v[6], v[7], v[2]), (1.0, 1.0, 1.0, 1.0, 5.0));
}

#[test]
fn unflatten_splits_a_dimension() {
    let x = input(&[2, 12, 5]);
    assert_eq!(dims(&Unflatten::new(1, [3, 4]), &x), [2, 3, 4, 5]);
    assert_eq!(dims(&Unflatten::new(1, [-1, 2, 2]), &x), [2, 3, 2, 2, 5]);
    assert_eq!(dims(&Unflatten::new(-1, [5, 1]), &x), [2, 12, 5, 1]);
    let err = Unflatten::new(1, [5, 2]).forward(&x).unwrap_err().to_string();
    assert!(err.contains("unflatten") && err.contains("[5, 2]") && err.contains("(12)"), "{err}");
    assert!(Unflatten::new(1, [-1, -1]).forward(&x).is_err());
    assert!(Unflatten::new(3, [1]).forward(&x).unwrap_err().to_string().contains("out of range"));
}

#[test]
fn bad_arguments_are_errors_naming_the_op() {
    let x = input(&[1, 1, 4, 4]);
    let err = |r: ember_tensor::Result<Var>| r.unwrap_err().to_string();
    let e = err(F::max_pool2d(&x, &MaxPoolArgs::new(3).padding(2)));
    assert!(e.contains("max_pool2d") && e.contains("padding should be at most half of effective kernel size"), "{e}");
    let e = err(F::max_pool2d(&x, &MaxPoolArgs::new(5)));
    assert!(e.contains("max_pool2d") && e.contains("(1x4x4)") && e.contains("too small"), "{e}");
    let e = err(F::max_pool2d(&x, &MaxPoolArgs::new(2).stride(0)));
    assert!(e.contains("stride"), "{e}");
    let e = err(F::max_pool2d(&input(&[4, 4]), &MaxPoolArgs::new(2)));
    assert!(e.contains("max_pool2d") && e.contains("[4, 4]"), "{e}");
    let e = err(F::max_pool1d(&input(&[1, 1, 2]), &MaxPoolArgs::new(3)));
    assert!(e.contains("max_pool1d") && e.contains("(1x1x2)"), "{e}");
    let e = err(F::avg_pool2d(&x, &AvgPoolArgs::new(2).divisor_override(0)));
    assert!(e.contains("avg_pool2d") && e.contains("divisor"), "{e}");
    let e = err(F::avg_pool2d(&x, &AvgPoolArgs::new(3).padding(2)));
    assert!(e.contains("avg_pool2d") && e.contains("at most half"), "{e}");
    let e = err(F::adaptive_avg_pool2d(&input(&[1, 1, 0, 4]), 2));
    assert!(e.contains("adaptive_avg_pool2d") && e.contains("[1, 1, 0, 4]"), "{e}");
    let e = err(F::interpolate(&x, &InterpolateArgs::default()));
    assert!(e.contains("interpolate") && e.contains("either size or scale_factor"), "{e}");
    let e = err(F::interpolate(&x, &InterpolateArgs::size([2]).align_corners(true)));
    assert!(e.contains("align_corners"), "{e}");
    let e = err(F::interpolate(&input(&[1, 1, 4]), &InterpolateArgs::size([2]).mode(InterpolateMode::Bilinear)));
    assert!(e.contains("bilinear mode needs 4D input"), "{e}");
    let e = err(F::interpolate(&x, &InterpolateArgs::scale_factor([0.1])));
    assert!(e.contains("greater than 0") && e.contains("H: 4, W: 4"), "{e}");
    let e = err(F::max_pool2d(&Var::new(Tensor::zeros([1, 1, 4, 4], DType::I64).unwrap()), &MaxPoolArgs::new(2)));
    assert!(e.contains("float"), "{e}");
}

/// A named operation on a `Var`.
type NamedOp = (&'static str, Box<dyn Fn(&Var) -> Var>);

#[test]
fn f32_and_f64_agree() {
    let x64 = Var::new(Tensor::randn([3, 2, 9, 7]).unwrap().to_dtype(DType::F64));
    let x32 = Var::new(x64.value().to_dtype(DType::F32));
    let ops: Vec<NamedOp> = vec![
        ("max", Box::new(|x: &Var| F::max_pool2d(x, &MaxPoolArgs::new(3).stride(2).ceil_mode(true)).unwrap())),
        ("avg", Box::new(|x: &Var| F::avg_pool2d(x, &AvgPoolArgs::new(2).padding(1)).unwrap())),
        ("adaptive", Box::new(|x: &Var| F::adaptive_avg_pool2d(x, [4, 3]).unwrap())),
        (
            "bilinear",
            Box::new(|x: &Var| {
                F::interpolate(x, &InterpolateArgs::size([13, 5]).mode(InterpolateMode::Bilinear)).unwrap()
            }),
        ),
    ];
    for (name, op) in ops {
        let a = op(&x64).value().to_vec::<f64>().unwrap();
        let b = op(&x32).value().to_dtype(DType::F64).to_vec::<f64>().unwrap();
        for (p, q) in a.iter().zip(&b) {
            assert!((p - q).abs() < 1e-5, "{name}: {p} vs {q}");
        }
    }
}

#[test]
fn two_by_two_max_pool_follows_pytorch_on_ties_nan_and_infinities() {
    // The 2x2 stride-2 pool has a loop of its own for unit column strides; a transposed view
    // takes the general loop. Both must pick the same value and index: the first of equal
    // maxima, and a NaN wherever one occurs (the last one in the window).
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    #[rustfmt::skip]
    let rows: Vec<f32> = vec![
        1.0, 1.0,   nan, 2.0,   -inf, -inf,   3.0, 0.0,
        1.0, 0.5,   4.0, nan,   -inf, -inf,   0.0, 3.0,
        nan, nan,   inf, 5.0,   2.0, 7.0,     -1.0, -1.0,
        0.0, 1.0,   inf, inf,   7.0, 2.0,     -1.0, -2.0,
    ];
    let x = Tensor::from_vec(rows.clone(), [1, 1, 4, 8]).unwrap();
    // The same values behind a transposed view: column stride 4.
    let stored: Vec<f32> = (0..32).map(|k| rows[(k % 4) * 8 + k / 4]).collect();
    let t = Tensor::from_vec(stored, [1, 1, 8, 4]).unwrap().transpose(2, 3).unwrap();
    let args = MaxPoolArgs::new(2);
    let (fast, fast_at) = F::max_pool2d_with_indices(&Var::new(x), &args).unwrap();
    let (general, general_at) = F::max_pool2d_with_indices(&Var::new(t), &args).unwrap();
    let bits = |v: &Var| v.value().to_vec::<f32>().unwrap().iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&fast), bits(&general));
    assert_eq!(fast_at.to_vec::<i64>().unwrap(), general_at.to_vec::<i64>().unwrap());
    let at = fast_at.to_vec::<i64>().unwrap();
    // Ties keep the first; NaN wins (the later one); -inf everywhere keeps tap 0; inf ties.
    assert_eq!(at, [0, 11, 4, 6, 17, 18, 21, 22]);
}

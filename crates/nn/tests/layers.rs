//! Layers: forward shapes and values, parameters and their names, train/eval, errors.

mod common;

use common::{assert_close, t32, t64, values};
use ember_autograd::Var;
use ember_nn::{
    Dropout, Flatten, GELU, Identity, LeakyReLU, Linear, LinearOptions, LogSoftmax, Module, ReLU, Sequential, SiLU,
    Sigmoid, Softmax, Tanh, dropout,
};
use ember_tensor::{DType, Error, Tensor};
use std::sync::Arc;

fn small_linear() -> Linear {
    // W = [[1, 2], [3, 4], [5, 6]], b = [0.5, -0.5, 1].
    Linear::from_parts(t64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]), Some(t64(&[0.5, -0.5, 1.0], &[3]))).unwrap()
}

#[test]
fn linear_computes_x_wt_plus_b() {
    let layer = small_linear();
    let y = layer.forward(&Var::new(t64(&[1.0, -1.0, 2.0, 0.0], &[2, 2]))).unwrap();
    assert_eq!(y.shape().dims(), &[2, 3]);
    assert_eq!(values(&y), vec![-0.5, -1.5, 0.0, 2.5, 5.5, 11.0]);
}

#[test]
fn linear_takes_any_leading_dimensions() {
    let layer = small_linear();
    let one = layer.forward(&Var::new(t64(&[1.0, -1.0], &[2]))).unwrap();
    assert_eq!(one.shape().dims(), &[3]);
    assert_eq!(values(&one), vec![-0.5, -1.5, 0.0]);
    let x = Tensor::normal([4, 5, 2], 0.0, 1.0, DType::F64).unwrap();
    let y = layer.forward(&Var::new(x.clone())).unwrap();
    assert_eq!(y.shape().dims(), &[4, 5, 3]);
    // Row by row, the batched result is the 2-d one.
    let flat = layer.forward(&Var::new(x.reshape([20, 2]).unwrap())).unwrap();
    assert_close(&values(&y), &values(&flat), 1e-12);
}

#[test]
fn linear_parameters_are_named_like_pytorch() {
    let layer = Linear::new(4, 3).unwrap();
    let named = layer.named_parameters();
    assert_eq!(named.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["weight", "bias"]);
    assert_eq!(named[0].1.shape().dims(), &[3, 4]);
    assert_eq!(named[1].1.shape().dims(), &[3]);
    assert!(named.iter().all(|(_, p)| p.requires_grad() && p.is_leaf() && p.dtype() == DType::F32));
    assert_eq!(layer.num_parameters(), 15);
    assert_eq!((layer.in_features(), layer.out_features()), (4, 3));
    assert_eq!(format!("{layer:?}"), "Linear(in_features=4, out_features=3, bias=true)");

    let no_bias = Linear::with_options(4, 3, LinearOptions { bias: false, dtype: DType::F64 }).unwrap();
    assert!(no_bias.bias().is_none());
    assert_eq!(no_bias.named_parameters().len(), 1);
    assert_eq!(no_bias.weight().dtype(), DType::F64);
}

#[test]
fn linear_init_stays_within_pytorch_bounds() {
    let layer = Linear::new(64, 48).unwrap();
    let bound = 1.0 / 8.0;
    let w = values(layer.weight());
    let b = values(layer.bias().unwrap());
    assert!(w.iter().chain(&b).all(|v| v.abs() <= bound));
    // Uniform over the whole range, not a narrower one: the extremes come close to the bound
    // and the mean is near 0 (3072 draws: the standard error of the mean is ~0.0013).
    let max = w.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(max > 0.99 * bound, "largest |w| {max}");
    let mean = w.iter().sum::<f64>() / w.len() as f64;
    assert!(mean.abs() < 0.01, "mean {mean}");
}

#[test]
fn linear_rejects_bad_inputs_and_parts() {
    let layer = Linear::new(3, 2).unwrap();
    let e = layer.forward(&Var::new(Tensor::zeros([4, 5], DType::F32).unwrap())).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }));
    assert!(e.to_string().contains("[.., 3]") && e.to_string().contains("[4, 5]"), "{e}");
    let e = layer.forward(&Var::new(Tensor::scalar(1.0f32))).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
    let e = layer.forward(&Var::new(Tensor::zeros([4, 3], DType::F64).unwrap())).unwrap_err();
    assert!(matches!(e, Error::DType { .. }) && e.to_string().contains("f64"), "{e}");

    let w = Tensor::zeros([2, 3], DType::F32).unwrap();
    assert!(Linear::from_parts(Tensor::zeros([6], DType::F32).unwrap(), None).is_err());
    assert!(Linear::from_parts(w.clone(), Some(Tensor::zeros([3], DType::F32).unwrap())).is_err());
    assert!(Linear::from_parts(w.clone(), Some(Tensor::zeros([2], DType::F64).unwrap())).is_err());
    assert!(Linear::from_parts(Tensor::zeros([2, 3], DType::I64).unwrap(), None).is_err());
    assert!(Linear::with_options(3, 2, LinearOptions { bias: true, dtype: DType::U8 }).is_err());

    // A weight replaced after construction by one that is not a matrix: an error, not a panic.
    let layer = Linear::new(3, 2).unwrap();
    layer.weight().set_value(Tensor::zeros([6], DType::F32).unwrap()).unwrap();
    let e = layer.forward(&Var::new(Tensor::zeros([4, 3], DType::F32).unwrap())).unwrap_err();
    assert!(e.to_string().contains("[out, in]") && e.to_string().contains("[6]"), "{e}");
    assert_eq!(format!("{layer:?}"), "Linear(in_features=0, out_features=6, bias=true)");
}

#[test]
fn linear_over_shared_vars_ties_weights() {
    let w = Var::param(t64(&[1.0, 2.0, 3.0, 4.0], &[2, 2]));
    let a = Linear::from_params(w.clone(), None).unwrap();
    let b = Linear::from_params(w.clone(), None).unwrap();
    let x = Var::new(t64(&[1.0, 1.0], &[1, 2]));
    let loss = a.forward(&x).unwrap().add(&b.forward(&x).unwrap()).unwrap().sum_all();
    loss.backward().unwrap();
    // Both uses accumulate into the one weight: d/dW of 2 * sum(x W^T) is 2 for each entry.
    assert_eq!(w.grad().unwrap().to_vec::<f64>().unwrap(), vec![2.0; 4]);
}

#[test]
fn activations_compute_pytorch_formulas() {
    let xs = [-2.0, -0.5, 0.0, 1.0, 3.0];
    let x = Var::new(t64(&xs, &[5]));
    let run = |m: &dyn Module| values(&m.forward(&x).unwrap());
    let map = |f: fn(f64) -> f64| xs.iter().map(|&v| f(v)).collect::<Vec<_>>();
    let sigmoid = |v: f64| 1.0 / (1.0 + (-v).exp());
    assert_eq!(run(&ReLU), vec![0.0, 0.0, 0.0, 1.0, 3.0]);
    assert_close(&run(&LeakyReLU::new(0.1)), &[-0.2, -0.05, 0.0, 1.0, 3.0], 1e-15);
    assert_eq!(LeakyReLU::default().negative_slope, 0.01);
    assert_close(&run(&Sigmoid), &map(sigmoid), 1e-15);
    assert_close(&run(&SiLU), &map(|v| v / (1.0 + (-v).exp())), 1e-15);
    assert_close(&run(&Tanh), &map(f64::tanh), 1e-15);
    // Exact GELU at the points where Phi is tabulated: Phi(-2) = 0.022750131948179, Phi(-0.5)
    // = 0.308537538725987, Phi(1) = 0.841344746068543, Phi(3) = 0.998650101968370.
    let phi = [0.022750131948179, 0.308537538725987, 0.5, 0.841344746068543, 0.998650101968370];
    let gelu: Vec<f64> = xs.iter().zip(phi).map(|(x, p)| x * p).collect();
    assert_close(&run(&GELU::new()), &gelu, 1e-12);
    let gelu_tanh =
        map(|v| 0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh()));
    assert_close(&run(&GELU::tanh()), &gelu_tanh, 1e-12);
    assert_eq!(GELU::default(), GELU::new());
}

#[test]
fn softmax_layers_normalise_along_their_dim() {
    let x = Var::new(t64(&[1.0, 2.0, 3.0, 0.0, 0.0, 0.0], &[2, 3]));
    let s = values(&Softmax::new(-1).forward(&x).unwrap());
    let z = 1f64.exp() + 2f64.exp() + 3f64.exp();
    let expected = [1f64.exp() / z, 2f64.exp() / z, 3f64.exp() / z, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0];
    assert_close(&s, &expected, 1e-15);
    let ls = values(&LogSoftmax::new(1).forward(&x).unwrap());
    assert_close(&ls, &expected.map(f64::ln), 1e-14);
    // Along dimension 0, columns sum to one.
    let cols = values(&Softmax::new(0).forward(&x).unwrap());
    assert_close(&[cols[0] + cols[3], cols[1] + cols[4], cols[2] + cols[5]], &[1.0; 3], 1e-15);
    assert!(Softmax::new(2).forward(&x).is_err());
}

#[test]
fn flatten_and_identity() {
    let x = Var::new(Tensor::zeros([2, 3, 4], DType::F32).unwrap());
    assert_eq!(Flatten::new().forward(&x).unwrap().shape().dims(), &[2, 12]);
    assert_eq!(Flatten::default(), Flatten::new());
    assert_eq!(Flatten::with_dims(0, 1).forward(&x).unwrap().shape().dims(), &[6, 4]);
    assert_eq!(Flatten::with_dims(0, -1).forward(&x).unwrap().shape().dims(), &[24]);
    assert_eq!(Flatten::with_dims(-2, -1).forward(&x).unwrap().shape().dims(), &[2, 12]);
    let v = Var::new(t32(&[1.0, 2.0, 3.0, 4.0], &[2, 2]));
    assert_eq!(values(&Flatten::new().forward(&v).unwrap()), vec![1.0, 2.0, 3.0, 4.0]);
    // A 1-d input has no dimension 1, as in PyTorch.
    assert!(Flatten::new().forward(&Var::new(Tensor::zeros([3], DType::F32).unwrap())).is_err());
    assert!(Identity.forward(&x).unwrap().same_node(&x));
    assert!(Identity.named_parameters().is_empty());
}

#[test]
fn sequential_chains_and_names_children_by_index() {
    let model = Sequential::new().add(small_linear()).add(ReLU).add(Linear::new(3, 1).unwrap().to_f64());
    let y = model.forward(&Var::new(t64(&[1.0, -1.0], &[1, 2]))).unwrap();
    assert_eq!(y.shape().dims(), &[1, 1]);
    let names: Vec<String> = model.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);

    let nested = Sequential::new()
        .add(Linear::new(2, 2).unwrap())
        .add(Sequential::new().add(ReLU).add(Linear::new(2, 1).unwrap()));
    let names: Vec<String> = nested.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight", "0.bias", "1.1.weight", "1.1.bias"]);
}

/// Converts a freshly made f32 layer to f64 for tests that feed f64 inputs.
trait ToF64 {
    fn to_f64(self) -> Linear;
}

impl ToF64 for Linear {
    fn to_f64(self) -> Linear {
        let w = self.weight().value().to_dtype(DType::F64);
        let b = self.bias().map(|b| b.value().to_dtype(DType::F64));
        Linear::from_parts(w, b).unwrap()
    }
}

#[test]
fn sequential_is_a_list() {
    let empty = Sequential::new();
    assert!(empty.is_empty());
    let x = Var::new(t32(&[1.0, 2.0], &[2]));
    assert!(empty.forward(&x).unwrap().same_node(&x));

    let mut model = Sequential::new();
    model.push(Linear::new(2, 4).unwrap());
    model.push_boxed(Box::new(Tanh));
    assert_eq!(model.len(), 2);
    assert_eq!(model.get(0).unwrap().named_parameters().len(), 2);
    assert!(model.get(1).unwrap().named_parameters().is_empty());
    assert!(model.get(2).is_none());
    assert_eq!(model.iter().count(), 2);
    assert_eq!((&model).into_iter().map(|m| m.num_parameters()).collect::<Vec<_>>(), vec![12, 0]);

    let layers: Vec<Box<dyn Module>> = vec![Box::new(Linear::new(2, 3).unwrap()), Box::new(ReLU)];
    let collected: Sequential = layers.into_iter().collect();
    assert_eq!(collected.len(), 2);
    assert_eq!(collected.forward(&x).unwrap().shape().dims(), &[3]);
}

#[test]
fn sequential_errors_come_from_the_failing_layer() {
    let model = Sequential::new().add(Linear::new(4, 3).unwrap()).add(Linear::new(2, 1).unwrap());
    let e = model.forward(&Var::new(Tensor::zeros([1, 4], DType::F32).unwrap())).unwrap_err();
    assert!(e.to_string().contains("in_features=2"), "{e}");
}

#[test]
fn shared_layers_are_counted_once() {
    let shared = Arc::new(Linear::new(3, 3).unwrap());
    let model = Sequential::new().add(shared.clone()).add(ReLU).add(shared.clone());
    assert_eq!(model.named_parameters().len(), 4);
    assert_eq!(model.parameters().len(), 2);
    assert_eq!(model.num_parameters(), 12);
    assert!(model.parameters()[0].same_node(shared.weight()));
    assert_eq!(model.state_dict().len(), 4);
}

#[test]
fn zero_grad_clears_every_parameter() {
    let model = Sequential::new().add(Linear::new(3, 4).unwrap()).add(SiLU).add(Linear::new(4, 2).unwrap());
    let loss = model.forward(&Var::new(Tensor::randn([5, 3]).unwrap())).unwrap().square().sum_all();
    loss.backward().unwrap();
    assert!(model.parameters().iter().all(|p| p.grad().is_some()));
    model.zero_grad();
    assert!(model.parameters().iter().all(|p| p.grad().is_none()));
}

#[test]
fn train_and_eval_reach_every_child() {
    let inner = Sequential::new().add(Dropout::new(0.5).unwrap());
    let model = Sequential::new().add(Linear::new(2, 2).unwrap()).add(inner).add(ReLU);
    assert!(model.is_training());
    model.eval();
    assert!(!model.is_training());
    // Every child with a mode follows, nested containers included; ReLU keeps no mode.
    let inner = model.get(1).unwrap();
    assert!(!model.get(0).unwrap().is_training() && !inner.is_training());
    assert!(ReLU.is_training());
    let h = Var::new(Tensor::ones([100, 2], DType::F32).unwrap());
    assert!(inner.forward(&h).unwrap().same_node(&h), "dropout must be the identity in eval");
    model.train();
    assert!(model.get(0).unwrap().is_training() && model.get(1).unwrap().is_training());
}

#[test]
fn dropout_zeroes_and_rescales_in_training() {
    let p = 0.3;
    let drop = Dropout::new(p).unwrap();
    assert_eq!(drop.p(), p);
    let x = Var::param(Tensor::ones([20_000], DType::F32).unwrap());
    let y = drop.forward(&x).unwrap();
    let scale = (1.0 / (1.0 - p)) as f32;
    let ys = y.value().to_vec::<f32>().unwrap();
    assert!(ys.iter().all(|&v| v == 0.0 || (v - scale).abs() < 1e-6));
    let dropped = ys.iter().filter(|&&v| v == 0.0).count() as f64 / ys.len() as f64;
    // 20000 draws: the standard deviation of the fraction is 0.0032.
    assert!((dropped - p).abs() < 0.02, "dropped fraction {dropped}");
    // The gradient is the mask itself.
    y.sum_all().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), ys);
}

#[test]
fn dropout_is_the_identity_in_eval_and_at_p_zero() {
    let x = Var::new(Tensor::randn([50]).unwrap());
    let drop = Dropout::new(0.9).unwrap();
    drop.eval();
    assert!(!drop.is_training());
    assert!(drop.forward(&x).unwrap().same_node(&x));
    assert!(Dropout::new(0.0).unwrap().forward(&x).unwrap().same_node(&x));
    assert!(dropout(&x, 0.5, false).unwrap().same_node(&x));
    // p = 1 drops everything (no infinite scale).
    assert!(values(&dropout(&x, 1.0, true).unwrap()).iter().all(|&v| v == 0.0));
}

#[test]
fn dropout_mask_is_a_constant_reused_on_recomputation() {
    let x = Var::param(Tensor::ones([1000], DType::F64).unwrap());
    let y = dropout(&x, 0.5, true).unwrap();
    let mask = values(&y);
    let inputs = y.inputs().unwrap();
    assert!(inputs[1].is_leaf() && !inputs[1].requires_grad());
    // Recomputing after the input changes reuses the mask instead of drawing a new one.
    x.set_value(Tensor::full([1000], 3.0, DType::F64).unwrap()).unwrap();
    let again = y.forward().unwrap().to_vec::<f64>().unwrap();
    assert_eq!(again, mask.iter().map(|m| 3.0 * m).collect::<Vec<_>>());
}

#[test]
fn dropout_rejects_bad_probabilities_and_integer_inputs() {
    for p in [-0.1, 1.5, f64::NAN] {
        let e = Dropout::new(p).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    }
    let ints = Var::new(Tensor::from_vec(vec![1i64, 2], [2]).unwrap());
    assert!(matches!(dropout(&ints, 0.5, true), Err(Error::DType { .. })));
}

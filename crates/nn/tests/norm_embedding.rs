//! LayerNorm and Embedding: values, parameters and their names, PyTorch's init and repr,
//! the padding row, and errors. Gradients are in gradcheck.rs, PyTorch parity in
//! parity_nn.rs.

mod common;

use common::{assert_close, idx, t32, t64, values};
use ember_autograd::Var;
use ember_nn::{Embedding, EmbeddingOptions, LayerNorm, LayerNormOptions, Module, layer_norm};
use ember_tensor::{DType, Error, Tensor};

#[test]
fn layer_norm_normalises_the_trailing_dimensions() {
    let _rng = ember_testing::gradcheck::seed_guard(10);
    let norm = LayerNorm::with_options(&[4], LayerNormOptions { dtype: DType::F64, ..Default::default() }).unwrap();
    let x = Var::new(t64(&[1.0, 2.0, 3.0, 4.0, 10.0, 10.0, 10.0, 14.0], &[2, 4]));
    // Row 1: mean 2.5, biased variance 1.25; row 2: mean 11, variance 3.
    let s1 = (1.25f64 + 1e-5).sqrt();
    let s2 = (3.0f64 + 1e-5).sqrt();
    let want = [-1.5 / s1, -0.5 / s1, 0.5 / s1, 1.5 / s1, -1.0 / s2, -1.0 / s2, -1.0 / s2, 3.0 / s2];
    assert_close(&values(&norm.forward(&x).unwrap()), &want, 1e-12);

    // The affine part scales and shifts each element.
    norm.weight().unwrap().set_value(t64(&[1.0, 2.0, 3.0, 4.0], &[4])).unwrap();
    norm.bias().unwrap().set_value(t64(&[0.0, 0.0, 0.0, 1.0], &[4])).unwrap();
    let y = values(&norm.forward(&x).unwrap());
    let scaled: Vec<f64> =
        want.iter().enumerate().map(|(i, v)| v * [1.0, 2.0, 3.0, 4.0][i % 4] + [0.0, 0.0, 0.0, 1.0][i % 4]).collect();
    assert_close(&y, &scaled, 1e-12);

    // Over two trailing dimensions, each [2, 2] block is normalised on its own.
    let x = Var::new(t64(&[1.0, 2.0, 3.0, 4.0, 10.0, 10.0, 10.0, 14.0], &[2, 2, 2]));
    let y = values(&layer_norm(&x, &[2, 2], None, None, 1e-5).unwrap());
    assert_close(&y, &want, 1e-12);
}

#[test]
fn layer_norm_parameters_init_and_repr_follow_pytorch() {
    let _rng = ember_testing::gradcheck::seed_guard(11);
    let norm = LayerNorm::new(&[3]).unwrap();
    assert_eq!(norm.state_dict().keys().collect::<Vec<_>>(), ["weight", "bias"]);
    assert_eq!(norm.weight().unwrap().value().to_vec::<f32>().unwrap(), vec![1.0; 3]);
    assert_eq!(norm.bias().unwrap().value().to_vec::<f32>().unwrap(), vec![0.0; 3]);
    assert_eq!(format!("{norm:?}"), "LayerNorm((3,), eps=1e-5, elementwise_affine=true)");

    let plain = LayerNorm::with_options(
        &[2, 3],
        LayerNormOptions { eps: 1e-3, elementwise_affine: false, ..Default::default() },
    )
    .unwrap();
    assert!(plain.parameters().is_empty());
    assert_eq!(format!("{plain:?}"), "LayerNorm((2, 3), eps=1e-3, elementwise_affine=false)");
    let no_bias = LayerNorm::with_options(&[3], LayerNormOptions { bias: false, ..Default::default() }).unwrap();
    assert_eq!(no_bias.state_dict().keys().collect::<Vec<_>>(), ["weight"]);

    // A constant row has zero variance: eps keeps the output finite (zeros).
    let x = Var::new(t32(&[5.0, 5.0, 5.0], &[1, 3]));
    assert_eq!(norm.forward(&x).unwrap().value().to_vec::<f32>().unwrap(), vec![0.0; 3]);
}

#[test]
fn layer_norm_rejects_bad_shapes_and_options() {
    let _rng = ember_testing::gradcheck::seed_guard(12);
    let norm = LayerNorm::new(&[4]).unwrap();
    let wrong = norm.forward(&Var::new(Tensor::zeros([2, 3], DType::F32).unwrap())).unwrap_err();
    assert!(matches!(wrong, Error::Shape { .. }), "{wrong}");
    assert!(wrong.to_string().contains("LayerNorm") && wrong.to_string().contains("[2, 3]"), "{wrong}");
    let ints = norm.forward(&Var::new(Tensor::zeros([4], DType::I64).unwrap())).unwrap_err();
    assert!(matches!(ints, Error::DType { .. }), "{ints}");
    let f64_input = norm.forward(&Var::new(Tensor::zeros([4], DType::F64).unwrap())).unwrap_err();
    assert!(f64_input.to_string().contains("the input is f64 but the weight is f32"), "{f64_input}");
    assert!(LayerNorm::new(&[]).is_err());
    assert!(LayerNorm::new(&[3, 0]).is_err());
    assert!(LayerNorm::with_options(&[3], LayerNormOptions { eps: -1.0, ..Default::default() }).is_err());
    assert!(LayerNorm::with_options(&[3], LayerNormOptions { dtype: DType::I64, ..Default::default() }).is_err());
    let x = Var::new(Tensor::zeros([2, 4], DType::F64).unwrap());
    let bad_weight = Var::new(Tensor::ones([3], DType::F64).unwrap());
    assert!(layer_norm(&x, &[4], Some(&bad_weight), None, 1e-5).is_err());
}

#[test]
fn embedding_looks_up_rows_for_any_index_shape() {
    let weight = t64(&[0.0, 0.5, 1.0, 1.5, 2.0, 2.5], &[3, 2]);
    let emb = Embedding::from_params(Var::param(weight), None).unwrap();
    assert_eq!((emb.num_embeddings(), emb.embedding_dim()), (3, 2));
    let out = emb.forward(&Var::new(idx(&[2, 0, 1, 2], &[2, 2]))).unwrap();
    assert_eq!(out.shape().dims(), &[2, 2, 2]);
    assert_eq!(values(&out), vec![2.0, 2.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
    // A 0-d index gives one vector; an empty index gives an empty result.
    let one = emb.forward(&Var::new(Tensor::scalar(1i64))).unwrap();
    assert_eq!(one.shape().dims(), &[2]);
    let none = emb.forward(&Var::new(idx(&[], &[0]))).unwrap();
    assert_eq!(none.shape().dims(), &[0, 2]);
}

#[test]
fn embedding_gradients_accumulate_per_row_and_skip_the_padding_row() {
    let weight = Var::param(t64(&[1.0, 1.0, 2.0, 2.0, 3.0, 3.0], &[3, 2]));
    let emb = Embedding::from_params(weight.clone(), Some(1)).unwrap();
    let out = emb.forward(&Var::new(idx(&[0, 1, 0, 2, 1], &[5]))).unwrap();
    // The padding row is looked up with its value (it was not zeroed: from_params keeps it).
    assert_eq!(values(&out), vec![1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 3.0, 3.0, 2.0, 2.0]);
    let scale = Var::new(t64(&[1.0, 10.0, 100.0, 1000.0, 10000.0], &[5, 1]));
    out.mul(&scale).unwrap().sum_all().backward().unwrap();
    assert_eq!(weight.grad().unwrap().to_vec::<f64>().unwrap(), vec![101.0, 101.0, 0.0, 0.0, 1000.0, 1000.0]);
}

#[test]
fn embedding_init_repr_and_padding_row_follow_pytorch() {
    let _rng = ember_testing::gradcheck::seed_guard(3);
    let emb =
        Embedding::with_options(1000, 8, EmbeddingOptions { padding_idx: Some(7), ..Default::default() }).unwrap();
    assert_eq!(emb.state_dict().keys().collect::<Vec<_>>(), ["weight"]);
    assert_eq!(format!("{emb:?}"), "Embedding(1000, 8, padding_idx=7)");
    assert_eq!(format!("{:?}", Embedding::new(4, 2).unwrap()), "Embedding(4, 2)");
    let w = emb.weight().value().to_vec::<f32>().unwrap();
    assert_eq!(&w[56..64], &[0.0; 8]);
    // N(0, 1) draws: mean near 0, variance near 1 over 7,992 values.
    let rest: Vec<f64> = w.iter().enumerate().filter(|(i, _)| i / 8 != 7).map(|(_, &v)| v as f64).collect();
    let mean = rest.iter().sum::<f64>() / rest.len() as f64;
    let var = rest.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / rest.len() as f64;
    assert!(mean.abs() < 0.05 && (var - 1.0).abs() < 0.06, "mean {mean}, variance {var}");
}

#[test]
fn embedding_rejects_bad_indices_and_parts() {
    let _rng = ember_testing::gradcheck::seed_guard(13);
    let emb = Embedding::new(4, 2).unwrap();
    let floats = emb.forward(&Var::new(t32(&[1.0], &[1]))).unwrap_err();
    assert!(matches!(floats, Error::DType { .. }) && floats.to_string().contains("i64"), "{floats}");
    let out_of_range = emb.forward(&Var::new(idx(&[1, 4], &[2]))).unwrap_err();
    assert!(out_of_range.to_string().contains('4'), "{out_of_range}");
    assert!(emb.forward(&Var::new(idx(&[-1], &[1]))).is_err());
    let bad_padding = Embedding::with_options(4, 2, EmbeddingOptions { padding_idx: Some(4), ..Default::default() });
    assert!(bad_padding.unwrap_err().to_string().contains("padding_idx 4"));
    assert!(Embedding::with_options(4, 2, EmbeddingOptions { dtype: DType::U8, ..Default::default() }).is_err());
    assert!(Embedding::from_params(Var::param(Tensor::zeros([4], DType::F32).unwrap()), None).is_err());
}

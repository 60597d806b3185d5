//! Randomness under `manual_seed`: initial weights and dropout masks.
//!
//! The generator is global and tests run on parallel threads, so every test here holds
//! `SEEDED` while it seeds and draws; this binary has no other random draws.

mod common;

use common::values;
use ember_autograd::Var;
use ember_nn::{Dropout, Linear, Module, ReLU, Sequential};
use ember_tensor::{DType, Tensor, manual_seed};
use parking_lot::Mutex;

static SEEDED: Mutex<()> = Mutex::new(());

fn all_values(m: &dyn Module) -> Vec<Vec<f64>> {
    m.parameters().iter().map(values).collect()
}

#[test]
fn linear_draws_weight_then_bias_from_the_global_generator() {
    let _g = SEEDED.lock();
    manual_seed(3);
    let layer = Linear::new(5, 3).unwrap();
    manual_seed(3);
    let bound = 1.0 / 5f64.sqrt();
    let w = Tensor::uniform([3, 5], -bound, bound, DType::F32).unwrap();
    let b = Tensor::uniform([3], -bound, bound, DType::F32).unwrap();
    assert_eq!(layer.weight().value().to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap());
    assert_eq!(layer.bias().unwrap().value().to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
}

#[test]
fn models_are_reproducible_under_manual_seed() {
    let _g = SEEDED.lock();
    let build = || Sequential::new().add(Linear::new(6, 8).unwrap()).add(ReLU).add(Linear::new(8, 2).unwrap());
    manual_seed(42);
    let a = build();
    manual_seed(42);
    let b = build();
    manual_seed(43);
    let c = build();
    assert_eq!(all_values(&a), all_values(&b));
    assert_ne!(all_values(&a), all_values(&c));
}

#[test]
fn dropout_masks_are_reproducible_under_manual_seed() {
    let _g = SEEDED.lock();
    let drop = Dropout::new(0.4).unwrap();
    let x = Var::new(Tensor::ones([256], DType::F32).unwrap());
    manual_seed(9);
    let first = values(&drop.forward(&x).unwrap());
    let second = values(&drop.forward(&x).unwrap());
    manual_seed(9);
    let again = values(&drop.forward(&x).unwrap());
    assert_eq!(first, again);
    assert_ne!(first, second, "each call draws a fresh mask");
}

#[test]
fn multihead_attention_draws_in_pytorchs_order() {
    let _g = SEEDED.lock();
    let options = ember_nn::MultiheadAttentionOptions { add_bias_kv: true, ..Default::default() };
    manual_seed(5);
    let mha = ember_nn::MultiheadAttention::with_options(4, 2, options).unwrap();
    // out_proj's Linear (weight, then a bias that is zeroed), in_proj (Xavier), bias_k, bias_v.
    manual_seed(5);
    let out_w = Tensor::uniform([4, 4], -0.5, 0.5, DType::F32).unwrap();
    Tensor::uniform([4], -0.5, 0.5, DType::F32).unwrap();
    let bound = (6.0f64 / 16.0).sqrt();
    let in_w = Tensor::uniform([12, 4], -bound, bound, DType::F32).unwrap();
    let bias_k = Tensor::normal([1, 1, 4], 0.0, (2.0f64 / 8.0).sqrt(), DType::F32).unwrap();
    let get = |t: &Tensor| t.to_vec::<f32>().unwrap();
    assert_eq!(get(&mha.out_proj().weight().value()), get(&out_w));
    assert_eq!(get(&mha.in_proj_weight().unwrap().value()), get(&in_w));
    assert_eq!(get(&mha.bias_kv().unwrap().0.value()), get(&bias_k));
    assert!(get(&mha.out_proj().bias().unwrap().value()).iter().all(|&v| v == 0.0));
}

//! Gradients of `MultiheadAttention` and the Transformer layers against `f64` central
//! differences, to first and second order, with respect to every input: self- and
//! cross-attention, boolean and float masks of every shape, `kdim`/`vdim`, `bias_kv`, zero
//! attention, returned weights (per head and averaged), unbatched and non-contiguous inputs,
//! and one encoder and one decoder layer of each norm placement. (The parameters' gradients
//! are checked against PyTorch's in `parity_transformer.rs`.)

use ember_autograd::Var;
use ember_nn::{
    DecoderMasks, EncoderMasks, MultiheadAttention, MultiheadAttentionArgs, MultiheadAttentionOptions,
    TransformerActivation, TransformerDecoderLayer, TransformerEncoderLayer, TransformerLayerOptions,
    generate_square_subsequent_mask,
};
use ember_tensor::{DType, Result, Tensor};
use ember_testing::gradcheck::{check_both, normal, seeded, stored_swapped};

/// Every result joined into one vector, so that one gradcheck covers them all.
fn joined(parts: &[&Var]) -> Result<Var> {
    let flat: Vec<Var> = parts.iter().map(|v| v.flatten_all()).collect();
    Var::cat(&flat.iter().collect::<Vec<_>>(), 0)
}

fn u8_mask(values: &[u8], shape: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape).expect("mask")
}

#[test]
fn self_attention_with_padding_float_mask_and_weights_per_head() {
    let mha = seeded(1, || {
        MultiheadAttention::with_options(4, 2, MultiheadAttentionOptions { dtype: DType::F64, ..Default::default() })
    })
    .unwrap();
    // [seq 3, batch 2, 4], stored batch-major.
    let x = stored_swapped(&normal(2, &[3, 2, 4]), 0, 1);
    let kpm = u8_mask(&[0, 0, 0, 0, 0, 1], &[2, 3]);
    let attn = normal(3, &[3, 3]);
    let f = |v: &[Var]| {
        let args = MultiheadAttentionArgs {
            key_padding_mask: Some(&kpm),
            attn_mask: Some(&attn),
            average_attn_weights: false,
            ..Default::default()
        };
        let out = mha.forward_with(&v[0], &v[0], &v[0], &args)?;
        joined(&[&out.output, &out.weights.expect("weights")])
    };
    check_both("self-attention", f, &[x], 4);
}

#[test]
fn cross_attention_with_kdim_vdim_bias_kv_zero_attn_and_3d_bool_mask() {
    let options = MultiheadAttentionOptions {
        kdim: Some(3),
        vdim: Some(5),
        add_bias_kv: true,
        add_zero_attn: true,
        batch_first: true,
        dtype: DType::F64,
        ..Default::default()
    };
    let mha = seeded(10, || MultiheadAttention::with_options(4, 2, options)).unwrap();
    let (q, k, v) = (normal(11, &[2, 3, 4]), normal(12, &[2, 2, 3]), normal(13, &[2, 2, 5]));
    // [batch * heads, target, source]: each head of each sequence hides one key somewhere.
    let mask = u8_mask(&[1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 0], &[4, 3, 2]);
    let f = |x: &[Var]| {
        let args = MultiheadAttentionArgs { attn_mask: Some(&mask), ..Default::default() };
        let out = mha.forward_with(&x[0], &x[1], &x[2], &args)?;
        joined(&[&out.output, &out.weights.expect("weights")])
    };
    check_both("cross-attention", f, &[q, k, v], 14);
}

#[test]
fn unbatched_attention_with_a_causal_mask() {
    let mha = seeded(20, || {
        MultiheadAttention::with_options(4, 1, MultiheadAttentionOptions { dtype: DType::F64, ..Default::default() })
    })
    .unwrap();
    let causal = generate_square_subsequent_mask(3, DType::F64).unwrap();
    let f = |v: &[Var]| {
        let args = MultiheadAttentionArgs { attn_mask: Some(&causal), is_causal: true, ..Default::default() };
        let out = mha.forward_with(&v[0], &v[1], &v[1], &args)?;
        joined(&[&out.output, &out.weights.expect("weights")])
    };
    check_both("unbatched attention", f, &[normal(21, &[3, 4]), normal(22, &[3, 4])], 23);
}

fn layer_options(norm_first: bool, activation: TransformerActivation, batch_first: bool) -> TransformerLayerOptions {
    TransformerLayerOptions {
        dim_feedforward: 6,
        dropout: 0.0,
        activation,
        batch_first,
        norm_first,
        dtype: DType::F64,
        ..Default::default()
    }
}

#[test]
fn encoder_layers_with_masks() {
    for (k, (norm_first, activation, batch_first)) in
        [(false, TransformerActivation::ReLU, false), (true, TransformerActivation::GELU, true)].into_iter().enumerate()
    {
        let seed = 30 + 10 * k as u64;
        let o = layer_options(norm_first, activation, batch_first);
        let layer = seeded(seed, || TransformerEncoderLayer::with_options(4, 2, o)).unwrap();
        // Three steps of two sequences, stored in the other layout.
        let shape: &[usize] = if batch_first { &[2, 3, 4] } else { &[3, 2, 4] };
        let src = stored_swapped(&normal(seed + 1, shape), 0, 1);
        let kpm = u8_mask(&[0, 0, 1, 0, 0, 0], &[2, 3]);
        let causal = generate_square_subsequent_mask(3, DType::F64).unwrap();
        let f = |v: &[Var]| {
            let masks = EncoderMasks { src_mask: Some(&causal), src_key_padding_mask: Some(&kpm), is_causal: true };
            layer.forward_with(&v[0], &masks)
        };
        check_both(&format!("encoder layer norm_first={norm_first}"), f, &[src], seed + 2);
    }
}

#[test]
fn decoder_layers_with_masks() {
    for (k, norm_first) in [false, true].into_iter().enumerate() {
        let seed = 60 + 10 * k as u64;
        let layer = seeded(seed, || {
            TransformerDecoderLayer::with_options(4, 2, layer_options(norm_first, TransformerActivation::GELU, false))
        })
        .unwrap();
        let (tgt, memory) = (normal(seed + 1, &[3, 2, 4]), stored_swapped(&normal(seed + 2, &[2, 2, 4]), 0, 2));
        let causal = generate_square_subsequent_mask(3, DType::F64).unwrap();
        let mem_kpm = u8_mask(&[0, 0, 0, 1], &[2, 2]);
        let f = |v: &[Var]| {
            let masks = DecoderMasks {
                tgt_mask: Some(&causal),
                memory_key_padding_mask: Some(&mem_kpm),
                tgt_is_causal: true,
                ..Default::default()
            };
            layer.forward_with(&v[0], &v[1], &masks)
        };
        check_both(&format!("decoder layer norm_first={norm_first}"), f, &[tgt, memory], seed + 3);
    }
}

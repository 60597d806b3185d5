//! `MultiheadAttention` and the Transformer layers: shapes and layouts, unbatched inputs,
//! returned weights, mask conventions, parameter names, initialisation, copies, training
//! mode and errors.

use ember_autograd::{Var, no_grad};
use ember_nn::{
    DecoderMasks, EncoderMasks, LayerNorm, Module, MultiheadAttention, MultiheadAttentionArgs,
    MultiheadAttentionOptions, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
    TransformerEncoderLayer, TransformerLayerOptions, generate_square_subsequent_mask,
};
use ember_tensor::{DType, Result, Tensor};

fn names(m: &dyn Module) -> Vec<String> {
    m.named_parameters().into_iter().map(|(n, _)| n).collect()
}

fn values(v: &Var) -> Vec<f32> {
    v.value().to_vec::<f32>().expect("f32")
}

fn close(a: &[f32], b: &[f32], tol: f32) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol)
}

fn err_text<T: std::fmt::Debug>(r: Result<T>) -> String {
    r.expect_err("an error").to_string()
}

#[test]
fn multihead_attention_names_shapes_and_init_match_pytorch() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(0);
    let mha = MultiheadAttention::new(8, 2)?;
    assert_eq!(names(&mha), ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]);
    let sd = mha.state_dict();
    assert_eq!(sd.get("in_proj_weight").map(|t| t.shape().dims().to_vec()), Some(vec![24, 8]));
    // Xavier-uniform over fan_in 8 + fan_out 24; zero biases.
    let bound = (6.0f32 / 32.0).sqrt();
    let w = values(mha.in_proj_weight().expect("packed"));
    assert!(w.iter().all(|v| v.abs() <= bound) && w.iter().any(|v| v.abs() > bound / 2.0));
    assert!(values(mha.in_proj_bias().expect("bias")).iter().all(|&v| v == 0.0));
    assert!(values(mha.out_proj().bias().expect("bias")).iter().all(|&v| v == 0.0));
    assert_eq!(
        format!("{mha:?}"),
        "MultiheadAttention(\n  (out_proj): Linear(in_features=8, out_features=8, bias=true)\n)"
    );

    let o = MultiheadAttentionOptions {
        kdim: Some(3),
        vdim: Some(5),
        add_bias_kv: true,
        bias: false,
        ..Default::default()
    };
    let sep = MultiheadAttention::with_options(8, 4, o)?;
    assert_eq!(names(&sep), ["q_proj_weight", "k_proj_weight", "v_proj_weight", "bias_k", "bias_v", "out_proj.weight"]);
    let (_, k, v) = sep.q_proj_weight().expect("separate");
    assert_eq!((k.shape().dims(), v.shape().dims()), (&[8, 3][..], &[8, 5][..]));
    assert_eq!(sep.bias_kv().map(|(k, _)| k.shape().dims().to_vec()), Some(vec![1, 1, 8]));
    assert_eq!(sep.head_dim(), 2);
    Ok(())
}

#[test]
fn layouts_and_unbatched_inputs_agree() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(1);
    let seq_first = MultiheadAttention::new(8, 2)?;
    let batch_first =
        MultiheadAttention::with_options(8, 2, MultiheadAttentionOptions { batch_first: true, ..Default::default() })?;
    batch_first.load_state_dict(&seq_first.state_dict())?;
    let x = Tensor::randn([5, 3, 8])?; // [seq, batch, embed]
    let (q, kv) = (Var::new(x.clone()), Var::new(Tensor::randn([4, 3, 8])?));
    let a = seq_first.forward_with(&q, &kv, &kv, &MultiheadAttentionArgs::default())?;
    assert_eq!(a.output.shape().dims(), &[5, 3, 8]);
    assert_eq!(a.weights.as_ref().map(|w| w.shape().dims().to_vec()), Some(vec![3, 5, 4]));

    let qb = Var::new(x.transpose(0, 1)?.contiguous());
    let kvb = Var::new(kv.value().transpose(0, 1)?.contiguous());
    let b = batch_first.forward_with(&qb, &kvb, &kvb, &MultiheadAttentionArgs::default())?;
    assert!(close(&values(&b.output.transpose(0, 1)?), &values(&a.output), 1e-5));

    // An unbatched call is the batched call of one sequence.
    let one = |v: &Var| v.select(1, 2);
    let u = seq_first.forward_with(&one(&q)?, &one(&kv)?, &one(&kv)?, &MultiheadAttentionArgs::default())?;
    assert_eq!(u.output.shape().dims(), &[5, 8]);
    assert_eq!(u.weights.as_ref().map(|w| w.shape().dims().to_vec()), Some(vec![5, 4]));
    assert!(close(&values(&u.output), &values(&one(&a.output)?), 1e-5));
    Ok(())
}

#[test]
fn averaged_weights_are_the_mean_of_the_heads_and_rows_sum_to_one() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(2);
    let mha = MultiheadAttention::new(8, 4)?;
    let x = Var::new(Tensor::randn([6, 2, 8])?);
    let per_head = MultiheadAttentionArgs { average_attn_weights: false, ..Default::default() };
    let heads = mha.forward_with(&x, &x, &x, &per_head)?.weights.expect("weights");
    assert_eq!(heads.shape().dims(), &[2, 4, 6, 6]);
    let avg = mha.forward_with(&x, &x, &x, &MultiheadAttentionArgs::default())?.weights.expect("weights");
    assert!(close(&values(&avg), &values(&heads.mean(1, false)?), 1e-6));
    assert!(values(&avg.sum(-1, false)?).iter().all(|s| (s - 1.0).abs() < 1e-5));
    let none = MultiheadAttentionArgs { need_weights: false, ..Default::default() };
    let out = mha.forward_with(&x, &x, &x, &none)?;
    assert!(out.weights.is_none());
    assert!(close(&values(&out.output), &values(&mha.forward(&x)?), 0.0));
    Ok(())
}

#[test]
fn bool_masks_hide_where_true_like_float_minus_infinity() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(3);
    let mha = MultiheadAttention::new(4, 2)?;
    let x = Var::new(Tensor::randn([3, 2, 4])?);
    let hide = Tensor::from_vec(vec![0u8, 1, 0, 0, 0, 1, 0, 0, 0], [3, 3])?;
    let float = Tensor::zeros([3, 3], DType::F32)?.masked_fill(&hide, f64::NEG_INFINITY)?;
    let run = |m: &Tensor| {
        let args = MultiheadAttentionArgs { attn_mask: Some(m), ..Default::default() };
        mha.forward_with(&x, &x, &x, &args)
    };
    let (b, f) = (run(&hide)?, run(&float)?);
    assert!(close(&values(&b.output), &values(&f.output), 0.0));
    let w = values(&b.weights.expect("weights"));
    // Query 0 may not see key 1, query 1 not key 2.
    for batch in 0..2 {
        assert_eq!(w[batch * 9 + 1], 0.0);
        assert_eq!(w[batch * 9 + 3 + 2], 0.0);
    }
    // Key padding: sequence 1's last key is padding.
    let pad = Tensor::from_vec(vec![0u8, 0, 0, 0, 0, 1], [2, 3])?;
    let args = MultiheadAttentionArgs { key_padding_mask: Some(&pad), ..Default::default() };
    let w = values(&mha.forward_with(&x, &x, &x, &args)?.weights.expect("weights"));
    assert!((0..3).all(|q| w[9 + q * 3 + 2] == 0.0) && w[2] > 0.0);
    Ok(())
}

#[test]
fn causal_mask_helper_matches_pytorch() -> Result<()> {
    let m = generate_square_subsequent_mask(4, DType::F64)?.to_vec::<f64>()?;
    for i in 0..4 {
        for j in 0..4 {
            assert_eq!(m[i * 4 + j], if j > i { f64::NEG_INFINITY } else { 0.0 });
        }
    }
    assert!(generate_square_subsequent_mask(2, DType::I64).is_err());
    Ok(())
}

#[test]
fn bad_configurations_shapes_and_masks_are_errors_naming_them() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(7);
    assert!(err_text(MultiheadAttention::new(10, 3)).contains("divisible"));
    assert!(err_text(MultiheadAttention::new(0, 1)).contains("positive"));
    let bad_p = MultiheadAttentionOptions { dropout: 1.5, ..Default::default() };
    assert!(err_text(MultiheadAttention::with_options(4, 2, bad_p)).contains("dropout"));

    let mha = MultiheadAttention::new(4, 2)?;
    let x = Var::new(Tensor::randn([3, 2, 4])?);
    let args = MultiheadAttentionArgs::default();
    let wrong = Var::new(Tensor::randn([3, 2, 5])?);
    let e = err_text(mha.forward_with(&wrong, &wrong, &wrong, &args));
    assert!(e.contains("MultiheadAttention") && e.contains("[3, 2, 5]"), "{e}");
    let flat = Var::new(Tensor::randn([3, 4])?);
    assert!(err_text(mha.forward_with(&x, &flat, &flat, &args)).contains("3-D"));
    let other_batch = Var::new(Tensor::randn([3, 1, 4])?);
    assert!(err_text(mha.forward_with(&x, &other_batch, &other_batch, &args)).contains("batch"));
    let f64_input = Var::new(Tensor::randn([3, 2, 4])?.to_dtype(DType::F64));
    assert!(err_text(mha.forward_with(&f64_input, &f64_input, &f64_input, &args)).contains("f64"));

    let m = Tensor::zeros([3, 2], DType::F32)?;
    let e = err_text(mha.forward_with(&x, &x, &x, &mask(&m)));
    assert!(e.contains("attn_mask") && e.contains("[3, 3]") && e.contains("[3, 2]"), "{e}");
    let m = Tensor::zeros([2, 3, 3], DType::U8)?;
    assert!(err_text(mha.forward_with(&x, &x, &x, &mask(&m))).contains("[batch * heads, target, source]"));
    let m = Tensor::zeros([3, 3], DType::I64)?;
    assert!(err_text(mha.forward_with(&x, &x, &x, &mask(&m))).contains("bool (u8) or float"));
    let pad = Tensor::zeros([3, 2], DType::U8)?;
    let args = MultiheadAttentionArgs { key_padding_mask: Some(&pad), ..Default::default() };
    assert!(err_text(mha.forward_with(&x, &x, &x, &args)).contains("key_padding_mask"));
    let args = MultiheadAttentionArgs { is_causal: true, ..Default::default() };
    assert!(err_text(mha.forward_with(&x, &x, &x, &args)).contains("is_causal"));
    Ok(())
}

fn mask(m: &Tensor) -> MultiheadAttentionArgs<'_> {
    MultiheadAttentionArgs { attn_mask: Some(m), ..Default::default() }
}

#[test]
fn dropout_acts_in_training_only() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(4);
    let mha = MultiheadAttention::with_options(4, 2, MultiheadAttentionOptions { dropout: 0.5, ..Default::default() })?;
    let x = Var::new(Tensor::randn([6, 2, 4])?);
    let w = values(&mha.forward_with(&x, &x, &x, &MultiheadAttentionArgs::default())?.weights.expect("w"));
    assert!(w.contains(&0.0), "some probabilities are dropped in training");
    mha.eval();
    let a = values(&mha.forward(&x)?);
    assert!(close(&a, &values(&mha.forward(&x)?), 0.0));
    let w = values(&mha.forward_with(&x, &x, &x, &MultiheadAttentionArgs::default())?.weights.expect("w"));
    assert!(w.iter().all(|&p| p > 0.0));
    Ok(())
}

fn small() -> TransformerLayerOptions {
    TransformerLayerOptions { dim_feedforward: 12, dropout: 0.0, ..Default::default() }
}

#[test]
fn transformer_layers_have_pytorch_names_and_independent_copies() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(5);
    let layer = TransformerEncoderLayer::with_options(8, 2, small())?;
    assert_eq!(
        names(&layer),
        [
            "self_attn.in_proj_weight",
            "self_attn.in_proj_bias",
            "self_attn.out_proj.weight",
            "self_attn.out_proj.bias",
            "linear1.weight",
            "linear1.bias",
            "linear2.weight",
            "linear2.bias",
            "norm1.weight",
            "norm1.bias",
            "norm2.weight",
            "norm2.bias"
        ]
    );
    let encoder = TransformerEncoder::new(layer, 3, Some(LayerNorm::new(&[8])?))?;
    let n = names(&encoder);
    assert_eq!(n.len(), 3 * 12 + 2);
    assert_eq!((n[12].as_str(), n[37].as_str()), ("layers.1.self_attn.in_proj_weight", "norm.bias"));
    // Copies start equal and own their parameters, as PyTorch's deepcopy clones do.
    let w = |i: usize| encoder.layers()[i].linear1().weight().clone();
    assert_eq!(values(&w(0)), values(&w(2)));
    assert!(!w(0).same_node(&w(2)));
    no_grad(|| w(0).value().mul_scalar_(2.0))?;
    assert_ne!(values(&w(0)), values(&w(2)));
    assert_eq!(encoder.parameters().len(), 38);

    let decoder_layer = TransformerDecoderLayer::with_options(8, 2, small())?;
    let dn = names(&decoder_layer);
    assert_eq!(dn.len(), 18);
    assert_eq!((dn[4].as_str(), dn[17].as_str()), ("multihead_attn.in_proj_weight", "norm3.bias"));
    let decoder = TransformerDecoder::new(decoder_layer, 2, None)?;
    assert_eq!(names(&decoder)[18], "layers.1.self_attn.in_proj_weight");
    assert!(err_text(decoder.forward(&Var::new(Tensor::randn([3, 2, 8])?))).contains("memory"));
    assert!(err_text(TransformerEncoder::new(TransformerEncoderLayer::new(8, 2)?, 0, None)).contains("num_layers"));
    assert!(err_text(TransformerEncoderLayer::new(8, 3)).contains("nhead"));
    Ok(())
}

#[test]
fn transformer_layers_run_batched_unbatched_and_batch_first() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(6);
    let layer = TransformerEncoderLayer::with_options(8, 2, small())?;
    let bf = TransformerEncoderLayer::with_options(8, 2, TransformerLayerOptions { batch_first: true, ..small() })?;
    bf.load_state_dict(&layer.state_dict())?;
    let x = Var::new(Tensor::randn([5, 3, 8])?);
    let y = layer.forward(&x)?;
    assert_eq!(y.shape().dims(), &[5, 3, 8]);
    let yb = bf.forward(&x.transpose(0, 1)?)?;
    assert!(close(&values(&yb.transpose(0, 1)?), &values(&y), 1e-5));
    let u = layer.forward(&x.select(1, 0)?)?;
    assert!(close(&values(&u), &values(&y.select(1, 0)?), 1e-5));

    // Causal self-attention: changing a later step leaves the earlier outputs alone.
    let causal = generate_square_subsequent_mask(5, DType::F32)?;
    let masks = EncoderMasks { src_mask: Some(&causal), is_causal: true, ..Default::default() };
    let a = layer.forward_with(&x, &masks)?;
    let x2 = Var::new(x.value().copy());
    no_grad(|| x2.value().narrow(0, 4, 1)?.mul_scalar_(-3.0))?;
    let b = layer.forward_with(&x2, &masks)?;
    let first4 = |v: &Var| values(&v.narrow(0, 0, 4).expect("narrow"));
    assert!(close(&first4(&a), &first4(&b), 1e-6));
    assert!(!close(&values(&a), &values(&b), 1e-3));

    let dec = TransformerDecoderLayer::with_options(8, 2, TransformerLayerOptions { norm_first: true, ..small() })?;
    let memory = Var::new(Tensor::randn([7, 3, 8])?);
    let pad = Tensor::zeros([3, 7], DType::U8)?;
    let masks = DecoderMasks { tgt_mask: Some(&causal), memory_key_padding_mask: Some(&pad), ..Default::default() };
    assert_eq!(dec.forward_with(&x, &memory, &masks)?.shape().dims(), &[5, 3, 8]);
    Ok(())
}

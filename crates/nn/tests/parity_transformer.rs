//! PyTorch parity of `MultiheadAttention` and the Transformer layers: PyTorch's parameters
//! loaded into the ember modules must give PyTorch's outputs, attention weights, loss and
//! the gradient of every parameter and input, with boolean and float masks of every kind.
//!
//! The fixture `tools/parity/fixtures/transformer.safetensors` is written by
//! `tools/parity/transformer.py` (float64; see its docstring for the key layout).

use ember_autograd::Var;
use ember_nn::{
    DecoderMasks, EncoderMasks, LayerNorm, LayerNormOptions, Module, MultiheadAttention, MultiheadAttentionArgs,
    MultiheadAttentionOptions, StateDict, TransformerActivation, TransformerDecoderLayer, TransformerEncoder,
    TransformerEncoderLayer, TransformerLayerOptions, load_safetensors,
};
use ember_tensor::{DType, Result, Tensor};
use std::collections::BTreeMap;
use std::path::PathBuf;

const D: usize = 16;
const H: usize = 2;

/// One scenario's tensors, by kind (`param`, `input`, `expected`, `grad`) and name.
struct Scenario {
    name: &'static str,
    kinds: BTreeMap<String, StateDict>,
    failures: Vec<String>,
    compared: usize,
}

impl Scenario {
    fn load(name: &'static str) -> Result<Scenario> {
        let path =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/parity/fixtures/transformer.safetensors");
        let all = load_safetensors(path)?;
        let mut kinds: BTreeMap<String, StateDict> = BTreeMap::new();
        for (key, t) in all.iter() {
            let Some(rest) = key.strip_prefix(name).and_then(|r| r.strip_prefix('.')) else { continue };
            let Some((kind, field)) = rest.split_once('.') else { continue };
            kinds.entry(kind.to_string()).or_default().insert(field, t.clone());
        }
        assert!(!kinds.is_empty(), "no tensors for scenario {name}");
        Ok(Scenario { name, kinds, failures: Vec::new(), compared: 0 })
    }

    fn get(&self, kind: &str, field: &str) -> Tensor {
        match self.kinds.get(kind).and_then(|k| k.get(field)) {
            Some(t) => t.clone(),
            None => panic!("{}: the fixture has no {kind}.{field}", self.name),
        }
    }

    fn params(&self) -> &StateDict {
        &self.kinds["param"]
    }

    /// A leaf for the float input `field`.
    fn input(&self, field: &str) -> Var {
        Var::param(self.get("input", field))
    }

    /// Checks `actual` against `kind.field` within `1e-10 + 1e-9 |expected|`.
    fn check(&mut self, kind: &str, field: &str, actual: &Tensor) {
        self.compared += 1;
        let want = self.get(kind, field);
        let key = format!("{}.{kind}.{field}", self.name);
        if want.shape() != actual.shape() {
            self.failures.push(format!("{key}: shape {:?} but PyTorch's is {:?}", actual.shape(), want.shape()));
            return;
        }
        let a = actual.to_vec::<f64>().expect("f64");
        let w = want.to_vec::<f64>().expect("f64");
        let worst = a.iter().zip(&w).map(|(x, y)| (x - y).abs() - 1e-9 * y.abs()).fold(0.0, f64::max);
        let nan = a.iter().zip(&w).any(|(x, y)| x.is_nan() != y.is_nan());
        if worst > 1e-10 || nan {
            self.failures.push(format!("{key}: off by {worst:e} beyond the tolerance (NaN mismatch: {nan})"));
        }
    }

    /// The loss of `output` (and `weights`), backpropagated; checks outputs, loss and the
    /// gradients of `module`'s parameters and of `inputs`, then that every fixture tensor
    /// was used.
    fn finish(mut self, module: &dyn Module, output: &Var, weights: Option<&Var>, inputs: &[(&str, &Var)]) {
        let mut loss = output.mul(&Var::new(self.get("input", "loss_weights"))).expect("mul").sum_all();
        if let Some(w) = weights {
            let ww = Var::new(self.get("input", "weights_loss_weights"));
            loss = loss.add(&w.mul(&ww).expect("mul").sum_all()).expect("add");
            self.check("expected", "weights", &w.value());
        }
        loss.backward().expect("backward");
        self.check("expected", "output", &output.value());
        self.check("expected", "loss", &loss.value());
        for (name, p) in module.named_parameters() {
            let g = p.grad().unwrap_or_else(|| p.value().zeros_like());
            self.check("grad", &name, &g);
        }
        for (name, x) in inputs {
            let g = x.grad().unwrap_or_else(|| x.value().zeros_like());
            self.check("grad", name, &g);
        }
        let in_fixture: usize = ["expected", "grad"].iter().map(|k| self.kinds.get(*k).map_or(0, StateDict::len)).sum();
        assert_eq!(self.compared, in_fixture, "{}: not every expected tensor was compared", self.name);
        assert_eq!(self.params().len(), module.named_parameters().len(), "{}: parameter count", self.name);
        assert!(self.failures.is_empty(), "{} mismatches:\n{}", self.failures.len(), self.failures.join("\n"));
    }
}

fn layer_options(norm_first: bool, activation: TransformerActivation, batch_first: bool) -> TransformerLayerOptions {
    TransformerLayerOptions {
        dim_feedforward: 32,
        dropout: 0.0,
        activation,
        batch_first,
        norm_first,
        dtype: DType::F64,
        ..Default::default()
    }
}

#[test]
fn self_attention_with_padding_and_float_mask_matches_pytorch() -> Result<()> {
    let s = Scenario::load("mha")?;
    let mha =
        MultiheadAttention::with_options(D, H, MultiheadAttentionOptions { dtype: DType::F64, ..Default::default() })?;
    mha.load_state_dict(s.params())?;
    let x = s.input("query");
    let (kpm, attn) = (s.get("input", "key_padding_mask"), s.get("input", "attn_mask"));
    let args = MultiheadAttentionArgs {
        key_padding_mask: Some(&kpm),
        attn_mask: Some(&attn),
        average_attn_weights: false,
        ..Default::default()
    };
    let out = mha.forward_with(&x, &x, &x, &args)?;
    s.finish(&mha, &out.output, out.weights.as_ref(), &[("query", &x)]);
    Ok(())
}

#[test]
fn cross_attention_with_kdim_vdim_bias_kv_and_zero_attn_matches_pytorch() -> Result<()> {
    let s = Scenario::load("mha_kv")?;
    let options = MultiheadAttentionOptions {
        kdim: Some(6),
        vdim: Some(7),
        add_bias_kv: true,
        add_zero_attn: true,
        batch_first: true,
        dtype: DType::F64,
        ..Default::default()
    };
    let mha = MultiheadAttention::with_options(D, H, options)?;
    mha.load_state_dict(s.params())?;
    let (q, k, v) = (s.input("query"), s.input("key"), s.input("value"));
    let (kpm, attn) = (s.get("input", "key_padding_mask"), s.get("input", "attn_mask"));
    let args = MultiheadAttentionArgs { key_padding_mask: Some(&kpm), attn_mask: Some(&attn), ..Default::default() };
    let out = mha.forward_with(&q, &k, &v, &args)?;
    s.finish(&mha, &out.output, out.weights.as_ref(), &[("query", &q), ("key", &k), ("value", &v)]);
    Ok(())
}

#[test]
fn two_layer_post_norm_encoder_with_causal_mask_matches_pytorch() -> Result<()> {
    let s = Scenario::load("encoder_post")?;
    let layer = TransformerEncoderLayer::with_options(D, H, layer_options(false, TransformerActivation::ReLU, false))?;
    let encoder = TransformerEncoder::new(layer, 2, None)?;
    encoder.load_state_dict(s.params())?;
    let src = s.input("src");
    let (mask, kpm) = (s.get("input", "src_mask"), s.get("input", "src_key_padding_mask"));
    let masks = EncoderMasks { src_mask: Some(&mask), src_key_padding_mask: Some(&kpm), is_causal: true };
    let y = encoder.forward_with(&src, &masks)?;
    s.finish(&encoder, &y, None, &[("src", &src)]);
    Ok(())
}

#[test]
fn two_layer_pre_norm_gelu_encoder_with_final_norm_matches_pytorch() -> Result<()> {
    let s = Scenario::load("encoder_pre_gelu")?;
    let layer = TransformerEncoderLayer::with_options(D, H, layer_options(true, TransformerActivation::GELU, true))?;
    let norm = LayerNorm::with_options(&[D], LayerNormOptions { dtype: DType::F64, ..Default::default() })?;
    let encoder = TransformerEncoder::new(layer, 2, Some(norm))?;
    encoder.load_state_dict(s.params())?;
    let src = s.input("src");
    let (mask, kpm) = (s.get("input", "src_mask"), s.get("input", "src_key_padding_mask"));
    let masks = EncoderMasks { src_mask: Some(&mask), src_key_padding_mask: Some(&kpm), is_causal: false };
    let y = encoder.forward_with(&src, &masks)?;
    s.finish(&encoder, &y, None, &[("src", &src)]);
    Ok(())
}

#[test]
fn decoder_layer_with_causal_and_padding_masks_matches_pytorch() -> Result<()> {
    let s = Scenario::load("decoder")?;
    let layer = TransformerDecoderLayer::with_options(D, H, layer_options(false, TransformerActivation::ReLU, false))?;
    layer.load_state_dict(s.params())?;
    let (tgt, memory) = (s.input("tgt"), s.input("memory"));
    let (tgt_mask, tgt_kpm, mem_kpm) =
        (s.get("input", "tgt_mask"), s.get("input", "tgt_key_padding_mask"), s.get("input", "memory_key_padding_mask"));
    let masks = DecoderMasks {
        tgt_mask: Some(&tgt_mask),
        tgt_key_padding_mask: Some(&tgt_kpm),
        memory_key_padding_mask: Some(&mem_kpm),
        tgt_is_causal: true,
        ..Default::default()
    };
    let y = layer.forward_with(&tgt, &memory, &masks)?;
    s.finish(&layer, &y, None, &[("tgt", &tgt), ("memory", &memory)]);
    Ok(())
}

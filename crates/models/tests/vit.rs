//! Hugging Face ViT against transformers: `ViTForImageClassification` (f32, prefixed keys,
//! classifier) and `ViTModel` (bf16 checkpoint, no qkv bias, pooler, 2 channels), logits
//! and hidden states; errors naming the file and the key; a save / load round trip; the
//! gradient of the whole encoder. Fixtures: `tools/parity/model_fixtures/vit.py`.

mod encoders_common;

use ember_autograd::{Var, gradcheck};
use ember_io::LoadOptions;
use ember_models::vit::{ViTConfig, ViTForImageClassification, ViTModel};
use ember_nn::Module;
use ember_tensor::{DType, Tensor};
use encoders_common::*;

#[test]
fn image_classification_logits_match_transformers() {
    let dir = fixture("vit/cls");
    let want = expected(&dir);
    let x = Var::new(want.get("pixel_values").unwrap().clone());
    let model = ViTForImageClassification::from_pretrained(&dir).unwrap();
    assert_close("vit logits", &model.forward(&x).unwrap().value(), want.get("logits").unwrap(), 1e-4);
    let hidden = model.vit().forward_with(&x).unwrap().last_hidden_state;
    assert_close("vit hidden", &hidden.value(), want.get("last_hidden_state").unwrap(), 1e-4);
    // The encoder alone, from the same checkpoint.
    let vit = ViTModel::from_pretrained(&dir).unwrap();
    assert_close("vit encoder", &vit.forward(&x).unwrap().value(), want.get("last_hidden_state").unwrap(), 1e-4);
}

#[test]
fn a_bf16_checkpoint_loads_converted_and_native() {
    let dir = fixture("vit/base");
    let want = expected(&dir);
    let x = Var::new(want.get("pixel_values").unwrap().clone());
    let model = ViTModel::from_pretrained_with(&dir, &LoadOptions::default().dtype(DType::F32)).unwrap();
    let out = model.forward_with(&x).unwrap();
    assert_close("bf16->f32 hidden", &out.last_hidden_state.value(), want.get("last_hidden_state").unwrap(), 1e-4);
    assert_close("bf16->f32 pooled", &out.pooler_output.unwrap().value(), want.get("pooler_output").unwrap(), 1e-4);

    let native = ViTModel::from_pretrained(&dir).unwrap();
    assert_eq!(native.dtype(), DType::BF16);
    let out = native.forward_with(&x.to_dtype(DType::BF16)).unwrap();
    assert_eq!(out.last_hidden_state.dtype(), DType::BF16);
    assert_close(
        "native bf16 hidden",
        &out.last_hidden_state.value().to_dtype(DType::F32),
        want.get("last_hidden_state").unwrap(),
        0.1,
    );
}

#[test]
fn key_and_shape_errors_name_the_file() {
    let dir = copy_dir(&fixture("vit/cls"), "vit-keys");
    let file = dir.join("model.safetensors");
    edit_safetensors(&file, |s| *s = renamed(s, "vit.layernorm.weight", "vit.layer_norm.weight"));
    let err = ViTForImageClassification::from_pretrained(&dir).err().unwrap().to_string();
    assert!(err.contains("vit.layernorm.weight") && err.contains("vit.layer_norm.weight"), "{err}");
    assert!(err.contains(&dir.display().to_string()), "{err}");

    let dir = copy_dir(&fixture("vit/cls"), "vit-shape");
    edit_safetensors(&dir.join("model.safetensors"), |s| {
        s.insert("vit.embeddings.position_embeddings", Tensor::zeros([1, 16, 30], DType::F32).unwrap());
    });
    let err = ViTForImageClassification::from_pretrained(&dir).err().unwrap().to_string();
    assert!(err.contains("vit.embeddings.position_embeddings") && err.contains(&dir.display().to_string()), "{err}");

    // The bf16 checkpoint has no qkv biases: a model that expects them fails by name.
    let dir = copy_dir(&fixture("vit/base"), "vit-bias");
    let config =
        std::fs::read_to_string(dir.join("config.json")).unwrap().replace("\"qkv_bias\": false", "\"qkv_bias\": true");
    std::fs::write(dir.join("config.json"), config).unwrap();
    let err = ViTModel::from_pretrained(&dir).err().unwrap().to_string();
    assert!(err.contains("encoder.layer.0.attention.attention.query.bias"), "{err}");
}

#[test]
fn a_wrong_image_size_is_an_error_naming_the_shapes() {
    let model = ViTForImageClassification::from_pretrained(&fixture("vit/cls")).unwrap();
    let err = model.forward(&Var::new(Tensor::zeros([1, 3, 32, 32], DType::F32).unwrap())).err().unwrap().to_string();
    assert!(err.contains("[1, 3, 32, 32]") && err.contains("16"), "{err}");
}

#[test]
fn save_pretrained_round_trips() {
    let src = fixture("vit/cls");
    let want = expected(&src);
    let x = Var::new(want.get("pixel_values").unwrap().clone());
    let dir = scratch("vit-save");
    ViTForImageClassification::from_pretrained(&src).unwrap().save_pretrained(&dir).unwrap();
    let back = ViTForImageClassification::from_pretrained(&dir).unwrap();
    assert_close("reloaded logits", &back.forward(&x).unwrap().value(), want.get("logits").unwrap(), 1e-4);
}

#[test]
fn the_encoder_passes_gradcheck() {
    ember_tensor::manual_seed(5);
    let config = ViTConfig {
        hidden_size: 6,
        num_hidden_layers: 1,
        num_attention_heads: 3,
        intermediate_size: 5,
        image_size: 4,
        patch_size: 2,
        num_channels: 2,
        layer_norm_eps: 1e-5,
        ..Default::default()
    };
    let model = ViTModel::new(&config, true).unwrap();
    model.eval();
    model.to_dtype(DType::F64).unwrap();
    let x = Tensor::normal([1, 2, 4, 4], 0.0, 1.0, DType::F64).unwrap();
    gradcheck(
        |v| model.forward_with(&v[0])?.pooler_output.ok_or_else(|| ember_tensor::Error::invalid("test", "no pooler")),
        &[x],
        1e-6,
        1e-6,
        1e-4,
    )
    .unwrap();
}

#[test]
fn an_unsupported_pooler_is_refused_by_name() {
    let dir = copy_dir(&fixture("vit/base"), "vit-pooler");
    let config = std::fs::read_to_string(dir.join("config.json"))
        .unwrap()
        .replace("\"pooler_act\": \"tanh\"", "\"pooler_act\": \"relu\"");
    assert!(config.contains("\"relu\""), "the fixture's config names its pooler_act");
    std::fs::write(dir.join("config.json"), config).unwrap();
    let err = ViTModel::from_pretrained(&dir).err().unwrap().to_string();
    assert!(err.contains("pooler_act") && err.contains("relu"), "{err}");
}

//! `ember-nn`: modules, layers, losses and model files, on top of `ember-autograd`.
//!
//! # What is where
//!
//! - [`Module`] (`module.rs`): the layer trait: `forward` and `children`, the module's
//!   parts, from which follow named parameters with PyTorch's dotted names, train/eval mode
//!   through `&self`, `to_device`, `state_dict` / `load_state_dict`. [`ModuleExt`] adds
//!   `save(path)` / `load(path)`. [`Parts`] and [`ModuleField`] (`parts.rs`) describe the
//!   parts, [`Buffer`] (`buffer.rs`) holds non-trainable state, and
//!   [`#[derive(Module)]`](macro@Module) (from `ember-derive`) writes `children` from a
//!   struct's fields.
//! - [`StateDict`]: named tensors in order; [`save_safetensors`] and [`load_safetensors`]
//!   read and write them in the safetensors format, so models move between ember and
//!   PyTorch (`safetensors.torch.save_file` / `load_file`); [`load_pt`] and [`save_pt`] (and
//!   [`pt`]) read and write `torch.save` checkpoints. All of them live in `ember-io` and are
//!   re-exported here.
//! - Layers (`layers/`): [`Linear`], [`Conv1d`], [`Conv2d`], [`ConvTranspose2d`] (and
//!   [`ConvTranspose1d`]), [`Embedding`], [`LayerNorm`], [`Sequential`],
//!   [`Flatten`], [`Unflatten`], [`Identity`], [`Dropout`], the pools ([`MaxPool2d`],
//!   [`AvgPool2d`], [`AdaptiveAvgPool2d`], ... in `layers/pool.rs`), [`Upsample`], and the
//!   activations [`ReLU`], [`LeakyReLU`],
//!   [`GELU`], [`SiLU`], [`Sigmoid`], [`Tanh`], [`Softmax`], [`LogSoftmax`].
//! - Recurrent layers (`layers/rnn/`): [`RNN`], [`LSTM`], [`GRU`] (multi-layer,
//!   bidirectional, variable lengths) and the cells [`RNNCell`], [`LSTMCell`], [`GRUCell`].
//! - Attention (`layers/attention/`): [`MultiheadAttention`] and
//!   [`generate_square_subsequent_mask`]; grouped-query attention
//!   ([`functional::grouped_query_attention`], `layers/grouped_attention.rs`), rotary
//!   position embeddings ([`RotaryEmbedding`], [`RopeScaling`], [`apply_rotary`],
//!   `layers/rotary.rs`) and the LLaMA feed-forward block [`SwiGlu`] (`layers/swiglu.rs`); Transformer layers (`layers/transformer/`):
//!   [`TransformerEncoderLayer`], [`TransformerEncoder`], [`TransformerDecoderLayer`],
//!   [`TransformerDecoder`].
//! - Losses (`loss/`): [`mse_loss`], [`l1_loss`], [`huber_loss`], [`cross_entropy`],
//!   [`nll_loss`], [`binary_cross_entropy`], [`binary_cross_entropy_with_logits`], each with
//!   a [`Reduction`] and, where there are more options, an options struct with `Default`;
//!   and the same as [`Loss`] objects ([`CrossEntropyLoss`], [`MSELoss`], ...).
//! - [`checkpoint_sequential`]: a [`Sequential`] (or list of modules) run in checkpointed
//!   segments, trading compute for activation memory.
//! - [`init`]: PyTorch's initialisation formulas, drawn from the global generator.
//! - [`functional`]: the functional forms in one place (`use ember_nn::functional as F`).
//! - Target networks (`target_update.rs`): [`hard_update`] and [`soft_update`] copy or
//!   Polyak-average one module into another of the same architecture.
//!
//! Randomness (initial weights, dropout masks) comes from ember's single global generator:
//! `ember_tensor::manual_seed(s)` makes a run reproducible.
//!
//! # Example
//!
//! ```
//! use ember_autograd::{no_grad, Var};
//! use ember_nn::{cross_entropy, CrossEntropyOptions, Dropout, Linear, Module, ReLU, Sequential};
//! use ember_tensor::{manual_seed, Tensor};
//!
//! manual_seed(0);
//! let model = Sequential::new()
//!     .add(Linear::new(4, 16)?)
//!     .add(ReLU)
//!     .add(Dropout::new(0.1)?)
//!     .add(Linear::new(16, 3)?);
//!
//! let x = Var::new(Tensor::randn([8, 4])?);
//! let y = Tensor::from_vec(vec![0i64, 1, 2, 0, 1, 2, 0, 1], [8])?;
//!
//! // One step of plain gradient descent.
//! let loss = cross_entropy(&model.forward(&x)?, &y, CrossEntropyOptions::default())?;
//! model.zero_grad();
//! loss.backward()?;
//! no_grad(|| -> ember_tensor::Result<()> {
//!     for p in model.parameters() {
//!         if let Some(g) = p.grad() {
//!             p.value().add_scaled_(&g, -0.1)?;
//!         }
//!     }
//!     Ok(())
//! })?;
//!
//! model.eval(); // dropout off
//! let logits = model.forward(&x)?;
//! assert_eq!(logits.shape().dims(), &[8, 3]);
//! assert_eq!(model.state_dict().keys().collect::<Vec<_>>(), ["0.weight", "0.bias", "3.weight", "3.bias"]);
//! # Ok::<(), ember_tensor::Error>(())
//! ```

#![warn(missing_docs)]

// `#[derive(Module)]` names this crate `::ember_nn`, inside it too.
extern crate self as ember_nn;

mod buffer;
mod checkpoint_sequential;
pub mod init;
mod layers;
mod loss;
mod module;
mod parts;
mod target_update;

pub use buffer::Buffer;
pub use checkpoint_sequential::{ModuleSequence, checkpoint_sequential};
pub use ember_derive::Module;

/// The example in `#[derive(Module)]`'s documentation (in ember-derive, whose own doctests
/// do not run), compiled and run as a doctest here.
#[cfg(doctest)]
#[doc = include_str!("../../derive/example.md")]
pub struct DeriveExampleDoctest;
pub use layers::{
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool2d, AvgPool1d, AvgPool2d, BatchNorm, BatchNorm1d, BatchNorm2d,
    BatchNormOptions, CellOptions, Dropout2d, GRU, GRUCell, GroupNorm, GroupNormOptions, InstanceNorm2d,
    InstanceNormOptions, LSTM, LSTMCell, LstmOutput, LstmState, MaxPool1d, MaxPool2d, Nonlinearity, RMSNorm,
    RMSNormOptions, RNN, RNNCell, RnnOptions, RnnOutput, Unflatten, Upsample, batch_norm, dropout2d, group_norm,
    instance_norm, rms_norm,
};
pub use layers::{
    Children, Conv, Conv1d, Conv1dOptions, Conv2d, Conv2dOptions, ConvOptions, ConvTranspose, ConvTranspose1d,
    ConvTranspose1dOptions, ConvTranspose2d, ConvTranspose2dOptions, ConvTransposeOptions, Dropout, Embedding,
    EmbeddingOptions, Flatten, GELU, GeluApproximation, Identity, LayerNorm, LayerNormOptions, LeakyReLU, Linear,
    LinearOptions, LogSoftmax, ReLU, Sequential, SiLU, Sigmoid, Softmax, Tanh, conv_transpose1d, conv_transpose2d,
    conv1d, conv2d, dropout, embedding, fold, layer_norm, unfold,
};
pub use layers::{
    DecoderMasks, EncoderMasks, MultiheadAttention, MultiheadAttentionArgs, MultiheadAttentionOptions,
    MultiheadAttentionOutput, TransformerActivation, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
    TransformerEncoderLayer, TransformerLayerOptions, generate_square_subsequent_mask,
};
pub use layers::{RopeScaling, RotaryEmbedding, SwiGlu, apply_rotary};
pub use loss::{
    BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, CrossEntropyOptions, DEFAULT_IGNORE_INDEX, HuberLoss, HuberOptions,
    L1Loss, Loss, MSELoss, NLLLoss, NllOptions, Reduction, binary_cross_entropy, binary_cross_entropy_with_logits,
    cross_entropy, huber_loss, l1_loss, mse_loss, nll_loss,
};
pub use module::{Module, ModuleExt, TrainingFlag};
pub use parts::{ModuleField, Part, Parts};
pub use target_update::{hard_update, soft_update};

// The model and checkpoint files live in `ember-io`; these keep their ember-nn paths.
pub use ember_io::pt;
pub use ember_io::{
    StateDict, load_pt, load_safetensors, load_safetensors_with_metadata, save_pt, save_safetensors,
    save_safetensors_with_metadata,
};

/// The functional forms of the layers and losses, for `use ember_nn::functional as F`.
/// Activations are methods of `Var` (`x.relu()`, `x.softmax(-1)`). The convolutions' argument
/// types (`ConvArgs`, `ConvTransposeArgs`, `Padding`, `UnfoldArgs`) are re-exported here.
pub mod functional {
    pub use crate::layers::{SdpaArgs, apply_rotary, grouped_query_attention, scaled_dot_product_attention};
    pub use crate::layers::{
        adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_max_pool2d, adaptive_max_pool2d_with_indices, avg_pool1d,
        avg_pool2d, interpolate, max_pool1d, max_pool1d_with_indices, max_pool2d, max_pool2d_with_indices,
    };
    pub use crate::layers::{batch_norm, dropout2d, group_norm, instance_norm, rms_norm};
    pub use crate::layers::{
        conv_transpose1d, conv_transpose2d, conv1d, conv2d, dropout, embedding, fold, layer_norm, unfold,
    };
    pub use crate::loss::{
        binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, huber_loss, l1_loss, mse_loss, nll_loss,
    };
    pub use ember_tensor::ops::pool::{AvgPoolArgs, InterpolateArgs, InterpolateMode, MaxPoolArgs};
    pub use ember_tensor::{ConvArgs, ConvTransposeArgs, Padding, Spatial, UnfoldArgs};
}

/// The traits, for `use ember_nn::prelude::*` (the `Module` trait without its derive).
pub mod prelude {
    pub use crate::Loss;
    pub use crate::module::{Module, ModuleExt};
}

/// What the code `#[derive(Module)]` writes names, under one path.
#[doc(hidden)]
pub mod __private {
    pub use ember_autograd::Var;
    pub use ember_tensor::Result;
}

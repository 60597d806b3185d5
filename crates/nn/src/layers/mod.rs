//! The layers, one file per concern.

mod activation;
mod attention;
mod batch_norm;
mod container;
mod conv;
mod conv_transpose;
mod dropout;
mod embedding;
mod flatten;
mod fold;
mod group_norm;
mod identity;
mod instance_norm;
mod linear;
mod norm;
mod param_alloc;
mod pool;
mod rms_norm;
mod rnn;
mod sdpa;
mod transformer;
mod unflatten;
mod upsample;

/// A layer's `weight` and `bias` under PyTorch's names, leaving out the absent ones (no bias,
/// or no affine parameters).
fn weight_and_bias(
    weight: Option<&ember_autograd::Var>,
    bias: Option<&ember_autograd::Var>,
) -> Vec<(String, ember_autograd::Var)> {
    [("weight", weight), ("bias", bias)]
        .into_iter()
        .filter_map(|(n, p)| p.map(|p| (n.to_string(), p.clone())))
        .collect()
}

pub use activation::{GELU, GeluApproximation, LeakyReLU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Tanh};
pub use attention::{
    MultiheadAttention, MultiheadAttentionArgs, MultiheadAttentionOptions, MultiheadAttentionOutput,
    generate_square_subsequent_mask,
};
pub use batch_norm::{BatchNorm, BatchNorm1d, BatchNorm2d, BatchNormOptions, batch_norm};
pub use container::{Children, Sequential};
pub use conv::{Conv, Conv1d, Conv1dOptions, Conv2d, Conv2dOptions, ConvOptions, conv1d, conv2d};
pub use conv_transpose::{
    ConvTranspose, ConvTranspose1d, ConvTranspose1dOptions, ConvTranspose2d, ConvTranspose2dOptions,
    ConvTransposeOptions, conv_transpose1d, conv_transpose2d,
};
pub use dropout::{Dropout, Dropout2d, dropout, dropout2d};
pub use embedding::{Embedding, EmbeddingOptions, embedding};
pub use flatten::Flatten;
pub use fold::{fold, unfold};
pub use group_norm::{GroupNorm, GroupNormOptions, group_norm};
pub use identity::Identity;
pub use instance_norm::{InstanceNorm2d, InstanceNormOptions, instance_norm};
pub use linear::{Linear, LinearOptions};
pub use norm::{LayerNorm, LayerNormOptions, layer_norm};
pub use pool::{
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool2d, AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d,
    adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_max_pool2d, adaptive_max_pool2d_with_indices, avg_pool1d,
    avg_pool2d, max_pool1d, max_pool1d_with_indices, max_pool2d, max_pool2d_with_indices,
};
pub use rms_norm::{RMSNorm, RMSNormOptions, rms_norm};
pub use rnn::{
    CellOptions, GRU, GRUCell, LSTM, LSTMCell, LstmOutput, LstmState, Nonlinearity, RNN, RNNCell, RnnOptions, RnnOutput,
};
pub use sdpa::{SdpaArgs, scaled_dot_product_attention};
pub use transformer::{
    DecoderMasks, EncoderMasks, TransformerActivation, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
    TransformerEncoderLayer, TransformerLayerOptions,
};
pub use unflatten::Unflatten;
pub use upsample::{Upsample, interpolate};

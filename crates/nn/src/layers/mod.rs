//! The layers, one file per concern.

mod activation;
mod arg_builders;
mod attention;
mod container;
mod conv;
mod conv_transpose;
mod dropout;
mod embedding;
mod flatten;
mod fold;
mod grouped_attention;
mod identity;
mod linear;
mod norm;
mod param_alloc;
mod pool;
mod rnn;
mod rotary;
mod sdpa;
mod swiglu;
mod transformer;
mod unflatten;
mod upsample;

pub use activation::{GELU, GeluApproximation, LeakyReLU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Tanh};
pub use attention::{
    MultiheadAttention, MultiheadAttentionArgs, MultiheadAttentionOptions, MultiheadAttentionOutput,
    generate_square_subsequent_mask,
};
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
pub use grouped_attention::grouped_query_attention;
pub use identity::Identity;
pub use linear::{Linear, LinearOptions};
pub use norm::{
    BatchNorm, BatchNorm1d, BatchNorm2d, BatchNormOptions, GroupNorm, GroupNormOptions, InstanceNorm2d,
    InstanceNormOptions, LayerNorm, LayerNormOptions, RMSNorm, RMSNormOptions, batch_norm, group_norm, instance_norm,
    layer_norm, rms_norm,
};
pub use pool::{
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool2d, AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d,
    adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_max_pool2d, adaptive_max_pool2d_with_indices, avg_pool1d,
    avg_pool2d, max_pool1d, max_pool1d_with_indices, max_pool2d, max_pool2d_with_indices,
};
pub use rnn::{
    CellOptions, GRU, GRUCell, LSTM, LSTMCell, LstmOutput, LstmState, Nonlinearity, RNN, RNNCell, RnnOptions, RnnOutput,
};
pub use rotary::{RopeScaling, RotaryEmbedding, apply_rotary};
pub use sdpa::{SdpaArgs, scaled_dot_product_attention};
pub use swiglu::SwiGlu;
pub use transformer::{
    DecoderMasks, EncoderMasks, TransformerActivation, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
    TransformerEncoderLayer, TransformerLayerOptions,
};
pub use unflatten::Unflatten;
pub use upsample::{Upsample, interpolate};

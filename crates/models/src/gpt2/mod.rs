//! GPT-2 (transformers' `GPT2LMHeadModel` and `GPT2Model` checkpoints): the
//! [configuration](Gpt2Config), the [model](Gpt2LmHeadModel) with its
//! [`CausalLm`](crate::generation::CausalLm) implementation, and the mapping between
//! checkpoint and ember key names.

mod activation;
mod attention;
mod block;
mod config;
mod load;
mod model;

pub use activation::Activation;
pub use attention::Gpt2Attention;
pub use block::{Gpt2Block, Gpt2Mlp};
pub use config::Gpt2Config;
pub use load::{from_hf_state, to_hf_state};
pub use model::{Gpt2LmHeadModel, Gpt2Model};

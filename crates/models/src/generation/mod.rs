//! Generation for decoder language models: the interface a model implements
//! ([`CausalLm`]), its [`KvCache`], the masks and position ids of a step, and the decoding
//! loop ([`generate`], configured by [`GenerationConfig`], sampling with [`Sampler`]).

mod cache;
mod config;
mod generate;
mod mask;
mod sampler;

pub use cache::KvCache;
pub use config::GenerationConfig;
pub use generate::generate;
pub use mask::{decoder_mask, position_ids};
pub use sampler::{Sampler, process_logits};

use ember_autograd::Var;
use ember_tensor::{Result, Tensor};

/// The inputs of one forward step of a decoder that keeps a [`KvCache`].
#[derive(Clone, Copy, Debug)]
pub struct DecoderInput<'a> {
    /// Token ids of the new positions, `[batch, new]` of `i64`. [`generate`] builds the
    /// step's tensors on the host; a model moves them to its own device.
    pub input_ids: &'a Tensor,
    /// Absolute positions of the new tokens, `[batch, new]` of `i64` (see
    /// [`position_ids`]; they differ between rows when prompts are left-padded).
    pub position_ids: &'a Tensor,
    /// The Hugging Face `attention_mask` over the cached and new positions,
    /// `[batch, past + new]` (1 = a real token, 0 = padding); `None` when nothing is padded.
    pub attention_mask: Option<&'a Tensor>,
}

/// A decoder language model that generation can drive: one forward step over new positions,
/// reading and extending a [`KvCache`].
pub trait CausalLm: Send + Sync {
    /// The logits of the new positions, `[batch, new, vocab]`, after appending their keys
    /// and values to `cache`.
    fn forward_cached(&self, input: &DecoderInput<'_>, cache: &mut KvCache) -> Result<Var>;

    /// The logits of the last `logits_to_keep` new positions only, `[batch,
    /// logits_to_keep.min(new), vocab]` (transformers' `logits_to_keep`; 0 keeps every
    /// position), after appending every new position's keys and values to `cache`.
    /// [`generate`] keeps one, so that a prompt's forward does not run the vocabulary-wide
    /// head over positions whose logits nobody reads.
    ///
    /// The default narrows [`forward_cached`](Self::forward_cached)'s logits; a model
    /// overrides it to narrow its hidden states before the head instead.
    fn forward_cached_keep(&self, input: &DecoderInput<'_>, cache: &mut KvCache, logits_to_keep: usize) -> Result<Var> {
        keep_last(&self.forward_cached(input, cache)?, logits_to_keep)
    }

    /// An empty cache with one slot per attention layer.
    fn new_cache(&self) -> KvCache;

    /// The size of the vocabulary (the last dimension of the logits).
    fn vocab_size(&self) -> usize;

    /// The longest sequence the model's positions allow (`n_positions`,
    /// `max_position_embeddings`), if it has such a limit.
    fn max_positions(&self) -> Option<usize>;
}

/// The last `keep` positions (dimension 1) of `[batch, positions, ...]` states, all of them
/// when `keep` is 0 or at least the number of positions.
pub(crate) fn keep_last(states: &Var, keep: usize) -> Result<Var> {
    let positions = states.shape().dims().get(1).copied().unwrap_or(0);
    if keep == 0 || keep >= positions {
        return Ok(states.clone());
    }
    states.narrow(1, positions - keep, keep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_last_narrows_to_the_last_positions_or_keeps_all() {
        let states = Var::new(Tensor::from_vec((0..12).map(|v| v as f32).collect::<Vec<_>>(), [2, 3, 2]).unwrap());
        let last = keep_last(&states, 1).unwrap().value();
        assert_eq!(last.shape().dims(), &[2, 1, 2]);
        assert_eq!(last.contiguous().to_vec::<f32>().unwrap(), vec![4.0, 5.0, 10.0, 11.0]);
        let two = keep_last(&states, 2).unwrap().value();
        assert_eq!(two.contiguous().to_vec::<f32>().unwrap(), vec![2.0, 3.0, 4.0, 5.0, 8.0, 9.0, 10.0, 11.0]);
        for keep in [0, 3, 7] {
            assert_eq!(keep_last(&states, keep).unwrap().shape().dims(), &[2, 3, 2]);
        }
    }
}

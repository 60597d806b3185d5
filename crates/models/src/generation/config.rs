//! [`GenerationConfig`]: how [`generate`](super::generate) decodes, transformers'
//! `GenerationConfig` with the fields ember supports.

use ember_tensor::{Error, Result};

/// How [`generate`](super::generate) picks tokens and when it stops; the fields and
/// defaults of transformers' `GenerationConfig` that ember supports.
///
/// ```
/// use ember_models::generation::GenerationConfig;
/// let greedy = GenerationConfig::greedy(32);
/// assert!(!greedy.do_sample);
/// let sampled = GenerationConfig { temperature: 0.8, top_p: Some(0.95), ..GenerationConfig::sampling(64, 1234) };
/// assert!(sampled.do_sample && sampled.seed == 1234);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct GenerationConfig {
    /// The most tokens generated per prompt (default 20).
    pub max_new_tokens: usize,
    /// Sample from the processed distribution (`true`) or take its most likely token
    /// (`false`, the default, greedy decoding).
    pub do_sample: bool,
    /// Divides the logits before sampling; below 1 sharpens, above 1 flattens (default 1;
    /// must be positive). Ignored by greedy decoding.
    pub temperature: f64,
    /// Keep only the `k` most likely tokens when sampling (`None` or 0: all; default `None`).
    pub top_k: Option<usize>,
    /// Keep the smallest set of most likely tokens whose probability reaches `p` when
    /// sampling (`None` or 1: all; default `None`; must lie in `[0, 1]`).
    pub top_p: Option<f64>,
    /// Penalises tokens already in the sequence: positive logits are divided by it,
    /// negative ones multiplied (default 1, none; must be positive). Applies to greedy
    /// decoding too.
    pub repetition_penalty: f64,
    /// Tokens that end a row's generation (transformers' `eos_token_id`); the stop token
    /// itself is part of the output. Default none.
    pub stop_tokens: Vec<u32>,
    /// The seed of the sampler's own random stream (default 0).
    pub seed: u64,
    /// The token written into left padding and into rows that have stopped while others
    /// continue (default 0). The attention mask hides it, so any valid id will do.
    pub pad_token_id: u32,
}

impl Default for GenerationConfig {
    fn default() -> Self {
        GenerationConfig {
            max_new_tokens: 20,
            do_sample: false,
            temperature: 1.0,
            top_k: None,
            top_p: None,
            repetition_penalty: 1.0,
            stop_tokens: Vec::new(),
            seed: 0,
            pad_token_id: 0,
        }
    }
}

impl GenerationConfig {
    /// Greedy decoding of at most `max_new_tokens` tokens.
    pub fn greedy(max_new_tokens: usize) -> GenerationConfig {
        GenerationConfig { max_new_tokens, ..Default::default() }
    }

    /// Sampling (temperature 1, no top-k or top-p until set) of at most `max_new_tokens`
    /// tokens from the random stream `seed`.
    pub fn sampling(max_new_tokens: usize, seed: u64) -> GenerationConfig {
        GenerationConfig { max_new_tokens, do_sample: true, seed, ..Default::default() }
    }

    /// Checks the numeric fields: a temperature and repetition penalty that are positive
    /// and finite, a top-p in `[0, 1]`.
    pub fn validate(&self) -> Result<()> {
        const OP: &str = "GenerationConfig";
        if !(self.temperature > 0.0 && self.temperature.is_finite()) {
            return Err(Error::invalid(OP, format!("temperature must be positive, got {}", self.temperature)));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return Err(Error::invalid(
                OP,
                format!("repetition_penalty must be positive, got {}", self.repetition_penalty),
            ));
        }
        if let Some(p) = self.top_p.filter(|p| !(0.0..=1.0).contains(p)) {
            return Err(Error::invalid(OP, format!("top_p must lie in [0, 1], got {p}")));
        }
        Ok(())
    }
}

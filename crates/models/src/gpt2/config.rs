//! [`Gpt2Config`]: the `config.json` of a GPT-2 checkpoint, with transformers' defaults.

use serde::{Deserialize, Serialize};

/// The configuration of a GPT-2 model: the fields of transformers' `GPT2Config` that shape
/// the network, with its defaults for absent fields (GPT-2 small's sizes). Fields ember
/// does not read are kept as they were, so that saving a model writes them back.
///
/// ```
/// use ember_models::gpt2::Gpt2Config;
/// let config: Gpt2Config = serde_json::from_str(r#"{"n_embd": 48, "n_head": 3, "n_layer": 2}"#)?;
/// assert_eq!(config.head_dim(), 16);
/// assert_eq!(config.vocab_size, 50257);
/// assert_eq!(config.inner_dim(), 192);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Gpt2Config {
    /// The size of the vocabulary (50257).
    pub vocab_size: usize,
    /// The number of positions the learned position embedding holds (1024).
    pub n_positions: usize,
    /// The width of the residual stream (768).
    pub n_embd: usize,
    /// The number of blocks (12).
    pub n_layer: usize,
    /// The number of attention heads; must divide `n_embd` (12).
    pub n_head: usize,
    /// The hidden width of the MLP; `None` is `4 * n_embd`.
    pub n_inner: Option<usize>,
    /// The MLP's activation: `gelu_new` (the tanh approximation, the default),
    /// `gelu_pytorch_tanh`, `gelu`, `relu`, `silu`/`swish` or `tanh`.
    pub activation_function: String,
    /// Dropout after the MLP and the attention's output projection (0.1).
    pub resid_pdrop: f64,
    /// Dropout on the summed embeddings (0.1).
    pub embd_pdrop: f64,
    /// Dropout on the attention weights (0.1).
    pub attn_pdrop: f64,
    /// The layer norms' epsilon (1e-5).
    pub layer_norm_epsilon: f64,
    /// The standard deviation of the initial weights (0.02).
    pub initializer_range: f64,
    /// Scale attention scores by `1 / sqrt(head_dim)` (true).
    pub scale_attn_weights: bool,
    /// Also scale layer `i`'s scores by `1 / (i + 1)` (false).
    pub scale_attn_by_inverse_layer_idx: bool,
    /// Upcast attention to f32 (false); ember's attention accumulates in f32 anyway.
    pub reorder_and_upcast_attn: bool,
    /// The output projection is the token embedding (true).
    pub tie_word_embeddings: bool,
    /// The beginning-of-text token (50256).
    pub bos_token_id: Option<u32>,
    /// The end-of-text token (50256).
    pub eos_token_id: Option<u32>,
    /// `"gpt2"`.
    pub model_type: String,
    /// The other fields of the file, written back unchanged on saving.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Default for Gpt2Config {
    fn default() -> Self {
        Gpt2Config {
            vocab_size: 50257,
            n_positions: 1024,
            n_embd: 768,
            n_layer: 12,
            n_head: 12,
            n_inner: None,
            activation_function: "gelu_new".into(),
            resid_pdrop: 0.1,
            embd_pdrop: 0.1,
            attn_pdrop: 0.1,
            layer_norm_epsilon: 1e-5,
            initializer_range: 0.02,
            scale_attn_weights: true,
            scale_attn_by_inverse_layer_idx: false,
            reorder_and_upcast_attn: false,
            tie_word_embeddings: true,
            bos_token_id: Some(50256),
            eos_token_id: Some(50256),
            model_type: "gpt2".into(),
            extra: serde_json::Map::new(),
        }
    }
}

impl Gpt2Config {
    /// The width of one attention head, `n_embd / n_head`.
    pub fn head_dim(&self) -> usize {
        self.n_embd / self.n_head.max(1)
    }

    /// The hidden width of the MLP.
    pub fn inner_dim(&self) -> usize {
        self.n_inner.unwrap_or(4 * self.n_embd)
    }
}

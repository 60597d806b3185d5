//! A character-level causal Transformer language model, the model and data of
//! `cargo run --release --example char_lm`.
//!
//! The corpus is plain text (the shipped one: four plays of Shakespeare in
//! `data/shakespeare`, see its README for origin and licence). Its characters are the
//! vocabulary; the last tenth is held out for validation. The model embeds each character,
//! adds a learned position embedding, runs a pre-norm [`TransformerEncoder`] under the
//! causal mask (position `t` sees positions `<= t` only) and predicts the next character
//! at every position. Its validation loss is compared with the corpus's unigram entropy:
//! the loss of the best model that ignores context.
//!
//! ```no_run
//! use ember::char_lm::{CharModel, Corpus, ModelConfig};
//! let corpus = Corpus::load("data/shakespeare")?;
//! let model = CharModel::new(corpus.vocab_size(), &ModelConfig::default())?;
//! let text = model.sample(&corpus, "ROMEO.", 100, 0.8)?;
//! # Ok::<(), ember::Error>(())
//! ```

use crate::data::checksum::{Checksums, SUMS_FILE};
use crate::nn::{
    Embedding, LayerNorm, Linear, Module, TransformerActivation, TransformerEncoder, TransformerEncoderLayer,
    TransformerLayerOptions, functional as F, generate_square_subsequent_mask,
};
use crate::{DType, Error, Result, Tensor, Var};
use std::path::Path;

/// A text and its character vocabulary, split into training and validation tokens.
pub struct Corpus {
    chars: Vec<char>,
    train: Vec<i64>,
    valid: Vec<i64>,
    unigram_entropy: f64,
}

impl Corpus {
    /// Reads every `.txt` file of `dir` in name order (verified against its `SHA256SUMS`
    /// when there is one) as one text; see [`Corpus::from_text`].
    pub fn load(dir: impl AsRef<Path>) -> Result<Corpus> {
        let dir = dir.as_ref();
        let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
        let mut files = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| Error::io(dir, e))?.path();
            if path.extension().is_some_and(|e| e == "txt") {
                files.push(path);
            }
        }
        files.sort();
        if files.is_empty() {
            return Err(Error::invalid("char_lm", format!("no .txt files in {}", dir.display())));
        }
        let sums = dir.join(SUMS_FILE);
        let sums = if sums.exists() { Some(Checksums::read(&sums)?) } else { None };
        let mut text = String::new();
        for path in files {
            let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
            if let Some(sums) = &sums {
                sums.verify(&path, &bytes)?;
            }
            let part = String::from_utf8(bytes)
                .map_err(|e| Error::invalid("char_lm", format!("{} is not UTF-8: {e}", path.display())))?;
            text.push_str(&part);
        }
        Corpus::from_text(&text)
    }

    /// The vocabulary (the text's distinct characters, sorted) and the tokens: the first
    /// nine tenths for training, the rest for validation.
    pub fn from_text(text: &str) -> Result<Corpus> {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        let tokens: Vec<i64> = text.chars().map(|c| chars.binary_search(&c).map_or(0, |i| i as i64)).collect();
        if tokens.len() < 20 {
            return Err(Error::invalid(
                "char_lm",
                format!("a corpus needs at least 20 characters, got {}", tokens.len()),
            ));
        }
        let split = tokens.len() * 9 / 10;
        let mut counts = vec![0usize; chars.len()];
        for &t in &tokens[..split] {
            counts[t as usize] += 1;
        }
        let n = split as f64;
        let unigram_entropy = counts.iter().filter(|&&c| c > 0).map(|&c| -(c as f64 / n) * (c as f64 / n).ln()).sum();
        Ok(Corpus { chars, train: tokens[..split].to_vec(), valid: tokens[split..].to_vec(), unigram_entropy })
    }

    /// The number of distinct characters.
    pub fn vocab_size(&self) -> usize {
        self.chars.len()
    }

    /// The training tokens.
    pub fn train(&self) -> &[i64] {
        &self.train
    }

    /// The validation tokens.
    pub fn valid(&self) -> &[i64] {
        &self.valid
    }

    /// The entropy, in nats per character, of the training text's character frequencies:
    /// the cross-entropy of the best model that ignores context.
    pub fn unigram_entropy(&self) -> f64 {
        self.unigram_entropy
    }

    /// The tokens of `text`; characters outside the vocabulary are an error.
    pub fn encode(&self, text: &str) -> Result<Vec<i64>> {
        text.chars()
            .map(|c| {
                self.chars.binary_search(&c).map(|i| i as i64).map_err(|_| {
                    Error::invalid("char_lm", format!("the character {c:?} is not in the corpus's vocabulary"))
                })
            })
            .collect()
    }

    /// The text of `tokens`.
    pub fn decode(&self, tokens: &[i64]) -> String {
        tokens.iter().filter_map(|&t| self.chars.get(t as usize)).collect()
    }
}

/// Inputs and next-character targets for windows of `len` tokens of `tokens` starting at
/// `starts`: two `[starts.len(), len]` i64 tensors.
pub fn windows(tokens: &[i64], starts: &[usize], len: usize) -> Result<(Tensor, Tensor)> {
    let (mut x, mut y) = (Vec::with_capacity(starts.len() * len), Vec::with_capacity(starts.len() * len));
    for &s in starts {
        if s + len >= tokens.len() {
            return Err(Error::invalid(
                "char_lm",
                format!("a window of {len} at {s} needs {} tokens, there are {}", s + len + 1, tokens.len()),
            ));
        }
        x.extend_from_slice(&tokens[s..s + len]);
        y.extend_from_slice(&tokens[s + 1..s + len + 1]);
    }
    Ok((Tensor::from_vec(x, [starts.len(), len])?, Tensor::from_vec(y, [starts.len(), len])?))
}

/// `count` random window starts for windows of `len` in `tokens`, from the global generator.
pub fn random_starts(tokens: &[i64], len: usize, count: usize) -> Result<Vec<usize>> {
    let room = tokens.len().saturating_sub(len + 1);
    if room == 0 {
        return Err(Error::invalid("char_lm", format!("{} tokens hold no window of {len}", tokens.len())));
    }
    let u = Tensor::rand([count])?.to_dtype(DType::F64).to_vec::<f64>()?;
    Ok(u.iter().map(|&u| ((u * room as f64) as usize).min(room - 1)).collect())
}

/// The model's size.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// Width of the embeddings and of every layer.
    pub d_model: usize,
    /// Attention heads per layer.
    pub heads: usize,
    /// Encoder layers.
    pub layers: usize,
    /// The longest context (positions with an embedding).
    pub context: usize,
    /// Dropout inside the layers (training only).
    pub dropout: f64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig { d_model: 128, heads: 4, layers: 3, context: 64, dropout: 0.1 }
    }
}

/// The character model: token and position embeddings, a causal pre-norm Transformer
/// encoder with GELU, a final layer norm and a linear map to next-character logits.
#[derive(Module)]
pub struct CharModel {
    embed: Embedding,
    pos: Var,
    encoder: TransformerEncoder,
    head: Linear,
    #[module(skip)]
    context: usize,
}

impl CharModel {
    /// A model for `vocab` characters with PyTorch's default initialisation for its layers
    /// and `N(0, 0.02^2)` position embeddings, from the global generator.
    pub fn new(vocab: usize, config: &ModelConfig) -> Result<CharModel> {
        let embed = Embedding::new(vocab, config.d_model)?;
        let pos = Var::param(Tensor::normal([config.context, config.d_model], 0.0, 0.02, DType::F32)?);
        let options = TransformerLayerOptions {
            dim_feedforward: 4 * config.d_model,
            dropout: config.dropout,
            activation: TransformerActivation::GELU,
            batch_first: true,
            norm_first: true,
            ..Default::default()
        };
        let layer = TransformerEncoderLayer::with_options(config.d_model, config.heads, options)?;
        let encoder = TransformerEncoder::new(layer, config.layers, Some(LayerNorm::new(&[config.d_model])?))?;
        let head = Linear::new(config.d_model, vocab)?;
        Ok(CharModel { embed, pos, encoder, head, context: config.context })
    }

    /// The mean cross-entropy (nats per character) of predicting `targets` from `inputs`,
    /// both `[batch, len]` token tensors (moved to the model's device).
    pub fn loss(&self, inputs: &Tensor, targets: &Tensor) -> Result<Var> {
        let device = self.pos.device();
        let logits = self.forward(&Var::new(inputs.to_device(device)?))?;
        let vocab = logits.shape()[2];
        let n = targets.numel();
        F::cross_entropy(&logits.reshape([n, vocab])?, targets.to_device(device)?.reshape([n])?, Default::default())
    }

    /// The mean loss over the validation text cut into consecutive windows of the model's
    /// context (at most `max_windows` of them), without recording gradients.
    pub fn validation_loss(&self, corpus: &Corpus, max_windows: usize) -> Result<f64> {
        let _guard = crate::autograd::NoGradGuard::new();
        let training = self.is_training();
        self.set_training(false);
        let len = self.context;
        let starts: Vec<usize> =
            (0..).map(|k| k * len).take_while(|&s| s + len < corpus.valid().len()).take(max_windows).collect();
        let mut total = 0.0;
        for chunk in starts.chunks(64) {
            let (x, y) = windows(corpus.valid(), chunk, len)?;
            total += self.loss(&x, &y)?.value().to_dtype(DType::F64).to_vec::<f64>()?[0] * chunk.len() as f64;
        }
        self.set_training(training);
        if starts.is_empty() {
            return Err(Error::invalid("char_lm", "the validation text is shorter than one window"));
        }
        Ok(total / starts.len() as f64)
    }

    /// `count` characters continuing `prompt` (at least one character of the vocabulary),
    /// drawn one at a time from the model's distribution at `temperature` (the global
    /// generator makes it reproducible), the context cut to the model's last positions.
    pub fn sample(&self, corpus: &Corpus, prompt: &str, count: usize, temperature: f64) -> Result<String> {
        if temperature.is_nan() || temperature <= 0.0 {
            return Err(Error::invalid("char_lm", format!("the temperature must be positive, got {temperature}")));
        }
        let mut tokens = corpus.encode(prompt)?;
        if tokens.is_empty() {
            return Err(Error::invalid("char_lm", "the prompt is empty"));
        }
        let _guard = crate::autograd::NoGradGuard::new();
        let training = self.is_training();
        self.set_training(false);
        let start = tokens.len();
        for _ in 0..count {
            let window = &tokens[tokens.len().saturating_sub(self.context)..];
            let x = Tensor::from_vec(window.to_vec(), [1, window.len()])?.to_device(self.pos.device())?;
            // Under autocast the logits can be 16-bit; the distribution is taken in f32.
            let logits = self.forward(&Var::new(x))?.select(1, window.len() - 1)?.to_dtype(DType::F32);
            let probs =
                logits.mul_scalar(1.0 / temperature).softmax(-1)?.value().to_dtype(DType::F64).to_vec::<f64>()?;
            let u = Tensor::rand([1])?.to_dtype(DType::F64).to_vec::<f64>()?[0];
            let mut acc = 0.0;
            let mut next = probs.len() - 1;
            for (i, p) in probs.iter().enumerate() {
                acc += p;
                if u < acc {
                    next = i;
                    break;
                }
            }
            tokens.push(next as i64);
        }
        self.set_training(training);
        Ok(corpus.decode(&tokens[start..]))
    }

    /// Next-character logits `[batch, len, vocab]` for tokens `[batch, len]`, `len` at most
    /// the context.
    fn forward(&self, tokens: &Var) -> Result<Var> {
        let dims = tokens.shape().dims().to_vec();
        let [_, len] = dims[..] else {
            return Err(Error::shape("char_lm", format!("expected tokens [batch, len], got {dims:?}")));
        };
        if len == 0 || len > self.context {
            return Err(Error::shape("char_lm", format!("sequences of 1 to {} tokens, got {len}", self.context)));
        }
        let x = self.embed.forward(tokens)?.add(&self.pos.narrow(0, 0, len)?)?;
        let mask = generate_square_subsequent_mask(len, x.dtype())?.to_device(x.device())?;
        let masks = crate::nn::EncoderMasks { src_mask: Some(&mask), src_key_padding_mask: None, is_causal: true };
        self.head.forward(&self.encoder.forward_with(&x, &masks)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vocabulary_round_trips_and_the_entropy_is_the_frequencies() -> Result<()> {
        let corpus = Corpus::from_text("abababababababababababababababab")?;
        assert_eq!(corpus.vocab_size(), 2);
        assert_eq!(corpus.decode(&corpus.encode("abba")?), "abba");
        assert!(corpus.encode("abc").is_err());
        // Nine tenths of 32 characters: 28, half a and half b.
        assert_eq!(corpus.train().len(), 28);
        assert!((corpus.unigram_entropy() - std::f64::consts::LN_2).abs() < 1e-12);
        let (x, y) = windows(corpus.train(), &[0, 3], 4)?;
        assert_eq!(x.to_vec::<i64>()?, [0, 1, 0, 1, 1, 0, 1, 0]);
        assert_eq!(y.to_vec::<i64>()?, [1, 0, 1, 0, 0, 1, 0, 1]);
        assert!(windows(corpus.train(), &[25], 4).is_err());
        Ok(())
    }
}

//! A character-level LSTM language model trained with truncated backpropagation through
//! time (TBPTT), behind `cargo run --release --example tbptt` and the test
//! `tests/tbptt_smoke.rs`.
//!
//! The text (a [`Corpus`](crate::char_lm::Corpus), shared with
//! [`char_lm`](crate::char_lm)) is cut into `batch` parallel [`Streams`], one contiguous
//! stretch each, and every stream is read in consecutive chunks of `bptt` steps. The LSTM's state `(h, c)` at the end of one chunk is the
//! initial state of the next, so the model sees each stream as one long sequence; but the
//! state is [`detach`](Var::detach)ed at every chunk boundary ([`Hidden::detach`]), so a
//! chunk's backward stops at its first step instead of running back to the start of the
//! text. A chunk's gradient is therefore exactly the gradient of a fresh graph that starts
//! from the previous chunk's final state given as a constant.
//!
//! ```no_run
//! use ember::char_lm::Corpus;
//! use ember::nn::Module;
//! use ember::optim::{Adam, AdamConfig};
//! use ember::tbptt::{LstmLm, ModelConfig, Streams};
//! let corpus = Corpus::load("data/shakespeare")?;
//! let model = LstmLm::new(corpus.vocab_size(), &ModelConfig::default())?;
//! let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 2e-3, ..Default::default() })?;
//! let streams = Streams::new(corpus.train(), 32)?;
//! let mut state = None;
//! for k in 0..streams.num_chunks(64) {
//!     let (x, y) = streams.chunk(k, 64)?;
//!     let (loss, next) = model.train_chunk(&mut opt, &x, &y, state.as_ref(), Some(1.0))?;
//!     state = Some(next); // already detached
//! }
//! let valid = model.evaluate(corpus.valid(), 32, 64, None)?;
//! # Ok::<(), ember::Error>(())
//! ```

use crate::autograd::NoGradGuard;
use crate::char_lm::windows;
use crate::nn::{Embedding, LSTM, Linear, Module, RnnOptions, functional as F};
use crate::optim::{Optimizer, clip_grad_norm_};
use crate::{Error, Result, Tensor, Var};

/// The token sequence cut into `batch` parallel streams of equal length (the tail that
/// does not divide evenly is dropped), each read in consecutive chunks.
#[derive(Clone, Copy, Debug)]
pub struct Streams<'a> {
    tokens: &'a [i64],
    batch: usize,
    steps: usize,
}

impl<'a> Streams<'a> {
    /// `batch` streams over `tokens`: stream `b` is `tokens[b * L..(b + 1) * L]` with
    /// `L = tokens.len() / batch`, which must be at least 2 (one input and its target).
    pub fn new(tokens: &'a [i64], batch: usize) -> Result<Streams<'a>> {
        if batch == 0 {
            return Err(Error::invalid("tbptt", "the number of streams must be positive"));
        }
        let steps = tokens.len() / batch;
        if steps < 2 {
            return Err(Error::invalid(
                "tbptt",
                format!("{} tokens make {batch} streams of {steps} tokens; each needs at least 2", tokens.len()),
            ));
        }
        Ok(Streams { tokens, batch, steps })
    }

    /// The number of parallel streams.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// The tokens of each stream.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// How many chunks of at most `bptt` inputs each stream gives: every token but the
    /// last is an input, its successor the target.
    pub fn num_chunks(&self, bptt: usize) -> usize {
        (self.steps - 1).div_ceil(bptt.max(1))
    }

    /// Chunk `k`: inputs and next-token targets `[batch, T]` (i64), row `b` from stream
    /// `b`'s steps `k * bptt ..`, with `T = bptt` except for a shorter last chunk. Chunk
    /// `k + 1` continues exactly where chunk `k` stops.
    pub fn chunk(&self, k: usize, bptt: usize) -> Result<(Tensor, Tensor)> {
        let chunks = self.num_chunks(bptt);
        if bptt == 0 || k >= chunks {
            return Err(Error::invalid(
                "tbptt",
                format!("chunk {k} of bptt {bptt}: streams of {} tokens have {chunks} chunks", self.steps),
            ));
        }
        let offset = k * bptt;
        let len = bptt.min(self.steps - 1 - offset);
        let starts: Vec<usize> = (0..self.batch).map(|b| b * self.steps + offset).collect();
        windows(self.tokens, &starts, len)
    }
}

/// The LSTM's state between chunks: PyTorch's `(h, c)`, each `[layers, batch, hidden]`.
#[derive(Clone)]
pub struct Hidden {
    /// The hidden state of every layer.
    pub h: Var,
    /// The cell state of every layer.
    pub c: Var,
}

impl Hidden {
    /// The same values cut from the graph that computed them ([`Var::detach`]): what
    /// carries the state across a chunk boundary without carrying the backward across it.
    pub fn detach(&self) -> Hidden {
        Hidden { h: self.h.detach(), c: self.c.detach() }
    }
}

/// The model's size.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// Width of the character embeddings.
    pub embed: usize,
    /// Hidden size of every LSTM layer.
    pub hidden: usize,
    /// Stacked LSTM layers.
    pub layers: usize,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig { embed: 64, hidden: 256, layers: 1 }
    }
}

/// The language model: an embedding, a (stacked) LSTM and a linear map from its output to
/// next-character logits.
#[derive(Module)]
pub struct LstmLm {
    embed: Embedding,
    lstm: LSTM,
    head: Linear,
}

impl LstmLm {
    /// A model for `vocab` characters with PyTorch's default initialisation, from the
    /// global generator.
    pub fn new(vocab: usize, config: &ModelConfig) -> Result<LstmLm> {
        let options = RnnOptions::default().num_layers(config.layers).batch_first(true);
        Ok(LstmLm {
            embed: Embedding::new(vocab, config.embed)?,
            lstm: LSTM::with_options(config.embed, config.hidden, options)?,
            head: Linear::new(config.hidden, vocab)?,
        })
    }

    /// Next-character logits `[batch, T, vocab]` for `[batch, T]` i64 tokens from a zero
    /// state (what `Module::forward` gives).
    fn forward(&self, tokens: &Var) -> Result<Var> {
        Ok(self.forward_embedded(&self.embed.forward(tokens)?, None)?.0)
    }

    /// The embedded tokens: `[batch, T, embed]` for `[batch, T]` i64 tokens.
    pub fn embed(&self, tokens: &Tensor) -> Result<Var> {
        self.embed.forward(&Var::new(tokens.clone()))
    }

    /// Next-character logits `[batch, T, vocab]` for embedded inputs `[batch, T, embed]`,
    /// from `state` (zeros when `None`), and the state after the last step, still attached
    /// to the graph.
    pub fn forward_embedded(&self, x: &Var, state: Option<&Hidden>) -> Result<(Var, Hidden)> {
        let out = self.lstm.run(x, state.map(|s| (&s.h, &s.c)))?;
        Ok((self.head.forward(&out.output)?, Hidden { h: out.h_n, c: out.c_n }))
    }

    /// The mean cross-entropy (nats per character) of predicting `targets` from `inputs`
    /// (both `[batch, T]`), starting from `state`, and the state after the chunk, still
    /// attached to the graph.
    pub fn chunk_loss(&self, inputs: &Tensor, targets: &Tensor, state: Option<&Hidden>) -> Result<(Var, Hidden)> {
        self.loss_of_embedded(&self.embed(inputs)?, targets, state)
    }

    /// [`chunk_loss`](LstmLm::chunk_loss) on inputs already embedded.
    pub fn loss_of_embedded(&self, x: &Var, targets: &Tensor, state: Option<&Hidden>) -> Result<(Var, Hidden)> {
        let (logits, next) = self.forward_embedded(x, state)?;
        let dims = logits.shape().dims().to_vec();
        if targets.shape() != &dims[..2] {
            return Err(Error::shape(
                "tbptt",
                format!("targets of shape {:?} for inputs of shape {:?}", targets.shape(), &dims[..2]),
            ));
        }
        let n = dims[0] * dims[1];
        let loss = F::cross_entropy(&logits.reshape([n, dims[2]])?, targets.reshape([n])?, Default::default())?;
        Ok((loss, next))
    }

    /// One TBPTT step: the chunk's loss from `state`, its backward (which stops at the
    /// chunk's first step, `state` being detached), gradient clipping to a total norm of
    /// `clip` when given, and an optimizer step. Returns the loss and the chunk's final
    /// state, detached: the next chunk's initial state.
    pub fn train_chunk(
        &self,
        opt: &mut dyn Optimizer,
        inputs: &Tensor,
        targets: &Tensor,
        state: Option<&Hidden>,
        clip: Option<f64>,
    ) -> Result<(f64, Hidden)> {
        opt.zero_grad();
        let (loss, next) = self.chunk_loss(inputs, targets, state)?;
        loss.backward()?;
        if let Some(max_norm) = clip {
            clip_grad_norm_(opt.params(), max_norm, 2.0)?;
        }
        opt.step()?;
        Ok((loss.item()?, next.detach()))
    }

    /// The mean loss per character over `tokens` read as `batch` streams in chunks of
    /// `bptt`, the state carried from chunk to chunk as in training; the first
    /// `max_chunks` chunks only when given. No graph is recorded.
    pub fn evaluate(&self, tokens: &[i64], batch: usize, bptt: usize, max_chunks: Option<usize>) -> Result<f64> {
        let _no_grad = NoGradGuard::new();
        let streams = Streams::new(tokens, batch)?;
        let chunks = streams.num_chunks(bptt).min(max_chunks.unwrap_or(usize::MAX));
        let (mut total, mut count) = (0.0, 0usize);
        let mut state: Option<Hidden> = None;
        for k in 0..chunks {
            let (x, y) = streams.chunk(k, bptt)?;
            let (loss, next) = self.chunk_loss(&x, &y, state.as_ref())?;
            total += loss.item()? * y.numel() as f64;
            count += y.numel();
            state = Some(next);
        }
        if count == 0 {
            return Err(Error::invalid("tbptt", format!("{} tokens hold no chunk", tokens.len())));
        }
        Ok(total / count as f64)
    }
}

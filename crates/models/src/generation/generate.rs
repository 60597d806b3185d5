//! [`generate`]: the decoding loop over a [`CausalLm`] with its [`KvCache`], batched over
//! left-padded prompts, streaming each token through a callback.

use super::config::GenerationConfig;
use super::sampler::{Sampler, argmax, process_logits};
use super::{CausalLm, DecoderInput, position_ids};
use ember_autograd::no_grad;
use ember_tensor::{DType, Error, Result, Tensor};
use std::ops::ControlFlow;

/// Generates continuations of `prompts` (token ids, of any lengths) with `model`, and
/// returns each row's new tokens (a stop token included, padding not).
///
/// Prompts run together as one batch: shorter ones are left-padded with
/// `config.pad_token_id`, hidden by the attention mask and given position ids that skip
/// the padding, so that each row's continuation is the one it gets alone. The prompt goes
/// through the model once, then each step feeds one token per row through the model's
/// [`KvCache`](super::KvCache). Logits are processed in transformers' order (repetition penalty,
/// temperature, top-k, top-p; see [`process_logits`]), and sampling draws from a random
/// stream seeded by `config.seed` alone.
///
/// `on_token(row, token)` sees every token as soon as it is chosen (for streaming);
/// returning [`ControlFlow::Break`] ends the whole generation after that step. A row stops
/// at one of `config.stop_tokens`; generation ends when every row has stopped or after
/// `config.max_new_tokens` steps.
///
/// ```no_run
/// use ember_models::generation::{generate, GenerationConfig};
/// use ember_models::gpt2::Gpt2LmHeadModel;
/// use std::ops::ControlFlow;
/// let model = Gpt2LmHeadModel::from_pretrained("data/models/gpt2-shakespeare".as_ref())?;
/// let out = generate(&model, &[vec![10, 20, 30]], &GenerationConfig::greedy(16), |_row, token| {
///     print!("{token} ");
///     ControlFlow::Continue(())
/// })?;
/// assert!(out[0].len() <= 16);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
///
/// Errors: no prompts, an empty prompt, a token outside the vocabulary, prompts plus
/// `max_new_tokens` longer than the model's positions, an invalid configuration, and the
/// model's own errors.
pub fn generate(
    model: &dyn CausalLm,
    prompts: &[Vec<u32>],
    config: &GenerationConfig,
    mut on_token: impl FnMut(usize, u32) -> ControlFlow<()>,
) -> Result<Vec<Vec<u32>>> {
    const OP: &str = "generate";
    config.validate()?;
    let vocab = model.vocab_size();
    check_prompts(OP, prompts, vocab, config)?;
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    // The last token is chosen but never fed back, so it needs no position of its own.
    if let Some(limit) = model.max_positions().filter(|&l| longest + config.max_new_tokens > l + 1) {
        return Err(Error::invalid(
            OP,
            format!(
                "a prompt of {longest} tokens plus max_new_tokens {} exceeds the model's {limit} positions",
                config.max_new_tokens
            ),
        ));
    }
    let batch = prompts.len();
    let padded = prompts.iter().any(|p| p.len() != longest);
    // The Hugging Face attention mask over every position so far, kept on the host: it
    // grows by one column per step.
    let mut keep: Vec<Vec<i64>> =
        prompts.iter().map(|p| (0..longest).map(|j| i64::from(j >= longest - p.len())).collect()).collect();
    let mut ids: Vec<i64> = Vec::with_capacity(batch * longest);
    for p in prompts {
        ids.extend(std::iter::repeat_n(i64::from(config.pad_token_id), longest - p.len()));
        ids.extend(p.iter().map(|&t| i64::from(t)));
    }
    let mut input = Tensor::from_vec(ids, [batch, longest])?;
    let mut history: Vec<Vec<u32>> = prompts.to_vec();
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); batch];
    let mut done = vec![false; batch];
    let mut sampler = Sampler::new(config.seed);
    let mut cache = model.new_cache();
    let mut scores = vec![0f32; vocab];
    for _ in 0..config.max_new_tokens {
        let past = cache.seq_len();
        let new = input.shape().dims()[1];
        let mask = if padded { Some(mask_tensor(&keep)?) } else { None };
        let positions = position_ids(mask.as_ref(), batch, past, new)?;
        // The step's inputs are built on the host; the model moves them to its device.
        let step = DecoderInput { input_ids: &input, position_ids: &positions, attention_mask: mask.as_ref() };
        let logits = no_grad(|| model.forward_cached_keep(&step, &mut cache, 1))?.value();
        check_logits(OP, &logits, batch, 1, vocab)?;
        let last = logits.select(1, 0)?;
        let tokens = pick(&last, &history, config, &mut sampler, &mut scores)?;
        let mut next = Vec::with_capacity(batch);
        let mut stop = false;
        for (row, token) in tokens.into_iter().enumerate() {
            if done[row] {
                next.push(i64::from(config.pad_token_id));
            } else {
                out[row].push(token);
                history[row].push(token);
                next.push(i64::from(token));
                done[row] = config.stop_tokens.contains(&token);
                stop |= on_token(row, token).is_break();
            }
            keep[row].push(1);
        }
        if stop || done.iter().all(|&d| d) {
            break;
        }
        input = Tensor::from_vec(next, [batch, 1])?;
    }
    Ok(out)
}

/// Refuses an empty batch, empty prompts and tokens outside the vocabulary.
fn check_prompts(op: &'static str, prompts: &[Vec<u32>], vocab: usize, config: &GenerationConfig) -> Result<()> {
    if prompts.is_empty() {
        return Err(Error::invalid(op, "no prompts to continue"));
    }
    for (row, p) in prompts.iter().enumerate() {
        if p.is_empty() {
            return Err(Error::invalid(op, format!("prompt {row} is empty")));
        }
        if let Some(t) = p.iter().find(|&&t| t as usize >= vocab) {
            return Err(Error::index(op, format!("token {t} of prompt {row} is outside a vocabulary of {vocab}")));
        }
    }
    if config.pad_token_id as usize >= vocab {
        return Err(Error::index(
            op,
            format!("pad_token_id {} is outside a vocabulary of {vocab}", config.pad_token_id),
        ));
    }
    Ok(())
}

/// The attention mask `[batch, positions]` of `i64` from its host rows.
fn mask_tensor(keep: &[Vec<i64>]) -> Result<Tensor> {
    let cols = keep.first().map_or(0, Vec::len);
    Tensor::from_vec(keep.concat(), [keep.len(), cols])
}

/// Checks that the model returned `[batch, kept, vocab]` logits.
fn check_logits(op: &'static str, logits: &Tensor, batch: usize, kept: usize, vocab: usize) -> Result<()> {
    if logits.shape().dims() != [batch, kept, vocab] {
        return Err(Error::shape(
            op,
            format!("the model returned logits {:?}, expected [{batch}, {kept}, {vocab}]", logits.shape().dims()),
        ));
    }
    Ok(())
}

/// The next token of every row from the last position's logits `[batch, vocab]`. Plain
/// greedy decoding takes the argmax where the logits are, so that only the tokens travel;
/// anything else processes each row on the host.
fn pick(
    last: &Tensor,
    history: &[Vec<u32>],
    config: &GenerationConfig,
    sampler: &mut Sampler,
    scores: &mut [f32],
) -> Result<Vec<u32>> {
    if !config.do_sample && config.repetition_penalty == 1.0 {
        let best = last.argmax(1, false)?.to_dtype(DType::I64).to_vec::<i64>()?;
        return Ok(best.into_iter().map(|t| t as u32).collect());
    }
    let rows = last.to_dtype(DType::F32).to_vec::<f32>()?;
    let vocab = scores.len();
    let mut tokens = Vec::with_capacity(history.len());
    for (row, seen) in rows.chunks(vocab).zip(history) {
        scores.copy_from_slice(row);
        process_logits(scores, seen, config)?;
        tokens.push(if config.do_sample { sampler.sample(scores)? } else { argmax(scores) });
    }
    Ok(tokens)
}

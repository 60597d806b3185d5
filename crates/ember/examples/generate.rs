//! Continues a prompt with a causal language model checkpoint (GPT-2 layout), streaming
//! the text as it is generated, then prints the generation speed.
//!
//! ```text
//! cargo run --release --features models --example generate -- [--model data/models/gpt2-shakespeare]
//!     [--prompt "ROMEO:"] [--max-new-tokens 120] [--greedy] [--temperature 0.8] [--top-k 40]
//!     [--top-p 0.95] [--repetition-penalty 1.0] [--seed 0]
//! ```
//!
//! The directory holds `config.json`, the weights and `tokenizer.json`, as transformers'
//! `save_pretrained` writes them (or the `finetune_lm` example). Tokens per second count
//! the generated tokens over the time from the prompt's forward pass to the last token.

use clap::Parser;
use ember::Result;
use ember::models::generation::{GenerationConfig, generate};
use ember::models::gpt2::Gpt2LmHeadModel;
use ember::models::tokenizer::Tokenizer;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::Instant;

/// Continue a prompt with a GPT-2 checkpoint.
#[derive(Parser)]
struct Args {
    /// The checkpoint directory (config.json, weights, tokenizer.json).
    #[arg(long, default_value = "data/models/gpt2-shakespeare")]
    model: PathBuf,
    /// The text to continue.
    #[arg(long, default_value = "ROMEO:")]
    prompt: String,
    /// The most tokens to generate.
    #[arg(long, default_value_t = 120)]
    max_new_tokens: usize,
    /// Take the most likely token at each step instead of sampling.
    #[arg(long)]
    greedy: bool,
    /// Sampling temperature (below 1: more conservative).
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Sample among the k most likely tokens only.
    #[arg(long)]
    top_k: Option<usize>,
    /// Sample among the most likely tokens whose probability reaches p.
    #[arg(long)]
    top_p: Option<f64>,
    /// Penalise tokens already in the text (1: none).
    #[arg(long, default_value_t = 1.0)]
    repetition_penalty: f64,
    /// The sampler's seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let model = Gpt2LmHeadModel::from_pretrained(&args.model)?;
    let tokenizer = Tokenizer::from_dir(&args.model)?;
    let prompt = tokenizer.encode(&args.prompt, false)?;
    let stop_tokens = model.config().eos_token_id.into_iter().collect();
    let config = GenerationConfig {
        max_new_tokens: args.max_new_tokens,
        do_sample: !args.greedy,
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        repetition_penalty: args.repetition_penalty,
        stop_tokens,
        seed: args.seed,
        pad_token_id: 0,
    };
    print!("{}", args.prompt);
    std::io::stdout().flush().ok();
    let mut generated = Vec::new();
    let mut printed = 0;
    let start = Instant::now();
    generate(&model, &[prompt], &config, |_, token| {
        generated.push(token);
        // Byte-level BPE tokens may split a character: print the new part of the decoded
        // text once it is whole.
        if let Ok(text) = tokenizer.decode(&generated, true)
            && !text.ends_with('\u{FFFD}')
            && let Some(fresh) = text.get(printed..).filter(|f| !f.is_empty())
        {
            print!("{fresh}");
            std::io::stdout().flush().ok();
            printed = text.len();
        }
        ControlFlow::Continue(())
    })?;
    let seconds = start.elapsed().as_secs_f64();
    println!();
    eprintln!(
        "{} tokens in {seconds:.2} s: {:.1} tokens/s ({})",
        generated.len(),
        generated.len() as f64 / seconds,
        args.model.display()
    );
    Ok(())
}

//! Fine-tunes a causal language model checkpoint (GPT-2 layout) on a text, with AdamW on
//! random windows, and saves it back in the same layout (transformers loads the result).
//! With `--init-config` it trains a fresh model of that configuration instead, which is
//! how `tools/models/train_small_gpt2.sh` makes the shipped `data/models/gpt2-shakespeare`.
//!
//! ```text
//! cargo run --release --features models --example finetune_lm -- --model DIR --text FILE_OR_DIR
//!     --out DIR [--steps 200] [--batch-size 8] [--context 64] [--lr 3e-4] [--weight-decay 0.01]
//!     [--tokenizer FILE] [--init-config FILE] [--seed 0] [--log-every 20]
//! ```
//!
//! The text is tokenised with the checkpoint's `tokenizer.json` (or `--tokenizer`); its
//! last tenth is held out, and the held-out loss (nats per token) is printed before and
//! after training. `--text` may name a directory: its `.txt` files, in name order.

use clap::Parser;
use ember::models::gpt2::{Gpt2Config, Gpt2LmHeadModel};
use ember::models::tokenizer::{TOKENIZER_FILE, Tokenizer};
use ember::nn::{CrossEntropyOptions, Module, cross_entropy};
use ember::optim::{AdamW, AdamWConfig, Optimizer};
use ember::{DType, Error, Result, Tensor, no_grad};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Fine-tune a GPT-2 checkpoint on a text file and save it back.
#[derive(Parser)]
struct Args {
    /// The checkpoint directory to start from (config.json, weights, tokenizer.json).
    #[arg(long, required_unless_present = "init_config")]
    model: Option<PathBuf>,
    /// Start from a fresh model of this config.json instead of a checkpoint.
    #[arg(long)]
    init_config: Option<PathBuf>,
    /// The tokenizer.json (default: the checkpoint's).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// The text to train on: a file, or a directory of .txt files.
    #[arg(long)]
    text: PathBuf,
    /// Where to write the fine-tuned checkpoint.
    #[arg(long)]
    out: PathBuf,
    /// AdamW steps.
    #[arg(long, default_value_t = 200)]
    steps: usize,
    /// Windows per step.
    #[arg(long, default_value_t = 8)]
    batch_size: usize,
    /// Tokens per window.
    #[arg(long, default_value_t = 64)]
    context: usize,
    /// AdamW's learning rate.
    #[arg(long, default_value_t = 3e-4)]
    lr: f64,
    /// AdamW's decoupled weight decay.
    #[arg(long, default_value_t = 0.01)]
    weight_decay: f64,
    /// Seeds the model's initialisation (with --init-config) and the windows.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print the training loss every this many steps.
    #[arg(long, default_value_t = 20)]
    log_every: usize,
}

/// Held-out windows per evaluation.
const EVAL_WINDOWS: usize = 32;

fn main() -> Result<()> {
    let args = Args::parse();
    ember::manual_seed(args.seed);
    let (model, tokenizer_path) = match (&args.init_config, &args.model) {
        (Some(config), _) => {
            let text = std::fs::read_to_string(config).map_err(|e| Error::io(config, e))?;
            let config: Gpt2Config = ember::models::checkpoint::parse_config(&text, config)?;
            (Gpt2LmHeadModel::new(config, DType::F32)?, args.tokenizer.clone())
        }
        (None, Some(dir)) => (
            Gpt2LmHeadModel::from_pretrained(dir)?,
            Some(args.tokenizer.clone().unwrap_or_else(|| dir.join(TOKENIZER_FILE))),
        ),
        (None, None) => return Err(Error::invalid("finetune_lm", "give --model or --init-config")),
    };
    let tokenizer_path =
        tokenizer_path.ok_or_else(|| Error::invalid("finetune_lm", "--init-config needs --tokenizer"))?;
    let tokenizer = Tokenizer::from_file(&tokenizer_path)?;
    let ids = tokenizer.encode(&read_text(&args.text)?, false)?;
    let context = args.context.min(model.config().n_positions);
    let split = ids.len() * 9 / 10;
    let (train, valid) = ids.split_at(split);
    if train.len() <= context || valid.len() <= context {
        return Err(Error::invalid(
            "finetune_lm",
            format!("{} tokens are too few for windows of {context}", ids.len()),
        ));
    }
    println!(
        "{} parameters, {} training and {} held-out tokens, vocabulary {}",
        model.parameters().iter().map(|p| p.numel()).sum::<usize>(),
        train.len(),
        valid.len(),
        tokenizer.vocab_size()
    );
    let mut windows = Windows::new(args.seed);
    println!("held-out loss before: {:.4}", held_out_loss(&model, valid, context, &mut Windows::new(1))?);
    let mut optimizer = AdamW::new(
        model.parameters(),
        AdamWConfig { lr: args.lr, weight_decay: args.weight_decay, ..Default::default() },
    )?;
    model.train();
    let start = Instant::now();
    for step in 1..=args.steps {
        let (inputs, targets) = windows.batch(train, args.batch_size, context)?;
        let loss = loss(&model, &inputs, &targets)?;
        optimizer.zero_grad();
        loss.backward()?;
        optimizer.step()?;
        if step % args.log_every == 0 || step == args.steps {
            println!("step {step:5}  loss {:.4}  ({:.1} s)", loss.item()?, start.elapsed().as_secs_f64());
        }
    }
    model.eval();
    println!("held-out loss after: {:.4}", held_out_loss(&model, valid, context, &mut Windows::new(1))?);
    model.save_pretrained(&args.out)?;
    let copied = args.out.join(TOKENIZER_FILE);
    if copied != tokenizer_path {
        std::fs::copy(&tokenizer_path, &copied).map_err(|e| Error::io(&copied, e))?;
    }
    println!("saved to {}", args.out.display());
    Ok(())
}

/// The text of a file, or of a directory's `.txt` files in name order.
fn read_text(path: &Path) -> Result<String> {
    if !path.is_dir() {
        return std::fs::read_to_string(path).map_err(|e| Error::io(path, e));
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| Error::io(path, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    let mut text = String::new();
    for f in files {
        text.push_str(&std::fs::read_to_string(&f).map_err(|e| Error::io(&f, e))?);
    }
    Ok(text)
}

/// The mean next-token cross-entropy of `inputs` against `targets` (`[batch, context]`).
fn loss(model: &Gpt2LmHeadModel, inputs: &Tensor, targets: &Tensor) -> Result<ember::Var> {
    let logits = model.forward(inputs, None)?;
    let vocab = model.config().vocab_size;
    cross_entropy(&logits.reshape([-1, vocab as i64])?, &targets.reshape([-1])?, CrossEntropyOptions::default())
}

/// The loss over `EVAL_WINDOWS` windows of the held-out tokens.
fn held_out_loss(model: &Gpt2LmHeadModel, valid: &[u32], context: usize, windows: &mut Windows) -> Result<f64> {
    let (inputs, targets) = windows.batch(valid, EVAL_WINDOWS, context)?;
    no_grad(|| loss(model, &inputs, &targets))?.item()
}

/// Random training windows from a stream of its own (SplitMix64), so that `--seed`
/// fixes them.
struct Windows {
    state: u64,
}

impl Windows {
    fn new(seed: u64) -> Windows {
        Windows { state: seed ^ 0x5DEE_CE66_D1CE_4E5B }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `batch` windows of `context + 1` tokens: the inputs and the targets shifted by one.
    fn batch(&mut self, ids: &[u32], batch: usize, context: usize) -> Result<(Tensor, Tensor)> {
        let mut inputs = Vec::with_capacity(batch * context);
        let mut targets = Vec::with_capacity(batch * context);
        for _ in 0..batch {
            let start = (self.next() % (ids.len() - context) as u64) as usize;
            let w = &ids[start..=start + context];
            inputs.extend(w[..context].iter().map(|&t| i64::from(t)));
            targets.extend(w[1..].iter().map(|&t| i64::from(t)));
        }
        Ok((Tensor::from_vec(inputs, [batch, context])?, Tensor::from_vec(targets, [batch, context])?))
    }
}

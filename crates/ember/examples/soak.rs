//! Soak test: trains the quick-start MLP (784-256-128-10) with Adam for many steps in each
//! variant of [`ember::soak`] (plain, retain_graph, hooks added and removed every step,
//! checkpointing, saved-tensor hooks) and reports how resident memory grew after warm-up.
//!
//! ```text
//! cargo run --release --example soak -- [--steps 10000] [--warmup 1000] [--batch 64]
//!     [--variant plain|retain_graph|hooks|checkpoint|saved_tensor_hooks|all]
//! ```
//!
//! Output, tab-separated: `variant  steps  baseline_MiB  peak_after_warmup_MiB  end_MiB
//! growth_%  final_loss`.

use clap::Parser;
use ember::soak::{Config, Variant, run};

#[derive(Parser)]
#[command(about = "Resident-memory growth over a long training run")]
struct Args {
    /// Optimizer steps per variant.
    #[arg(long, default_value_t = 10_000)]
    steps: usize,
    /// Steps before the baseline sample.
    #[arg(long, default_value_t = 1_000)]
    warmup: usize,
    /// Samples per batch.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// One variant, or `all`.
    #[arg(long, default_value = "all")]
    variant: String,
}

fn main() -> ember::Result<()> {
    let args = Args::parse();
    let variants: Vec<Variant> = if args.variant == "all" {
        Variant::ALL.to_vec()
    } else {
        match Variant::ALL.into_iter().find(|v| v.name() == args.variant) {
            Some(v) => vec![v],
            None => return Err(ember::Error::invalid("soak", format!("no variant {:?}", args.variant))),
        }
    };
    ember::manual_seed(0);
    println!("variant\tsteps\tbaseline_MiB\tpeak_after_warmup_MiB\tend_MiB\tgrowth_%\tfinal_loss");
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    for variant in variants {
        let config = Config { variant, steps: args.steps, warmup: args.warmup, batch: args.batch, sample_every: 100 };
        let r = run(&config)?;
        println!(
            "{}\t{}\t{:.1}\t{:.1}\t{:.1}\t{:.2}\t{:.4}",
            variant.name(),
            args.steps,
            mib(r.baseline),
            mib(r.peak_after_warmup),
            mib(r.end),
            r.growth_percent(),
            r.final_loss
        );
    }
    Ok(())
}

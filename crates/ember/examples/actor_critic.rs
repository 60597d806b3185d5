//! Advantage actor-critic on CartPole-v1 ([`ember::actor_critic`], environment in
//! [`ember::cartpole`]): a shared trunk with policy and value heads, n-step value targets
//! bootstrapped from `detach()`ed values, normalised advantages, an entropy bonus and
//! gradient clipping. Training stops once the greedy policy averages at least 475 over 100
//! evaluation episodes (the task counts as solved there).
//!
//! ```text
//! cargo run --release --example actor_critic -- [--envs 16] [--horizon 16] [--lr 1e-3]
//!     [--gamma 0.99] [--entropy 0.01] [--max-updates 3000] [--eval-every 50]
//!     [--print-every 100] [--out runs/actor_critic] [--seed 0]
//! ```
//!
//! The policy and value losses are **summed** and backpropagated once rather than
//! backpropagated separately with `retain_graph`: both reach the shared trunk, one
//! optimizer updates all parameters with one learning rate, so the two ways give the same
//! gradients (the multitask example checks this) and the sum saves a second pass through
//! the trunk. The module documentation of `ember::actor_critic` says more.
//!
//! It prints the mean return of the last `--print-every` training episodes every that many
//! episodes and the greedy evaluation every `--eval-every` updates, and draws the returns
//! to `<out>/actor_critic_returns.svg`.

mod common;

use clap::Parser;
use common::cli::Common;
use common::plot::save_returns;
use ember::actor_critic::{self, ActorCritic, Config};
use std::time::Instant;

/// Solve CartPole-v1 with an advantage actor-critic.
#[derive(Parser)]
struct Args {
    /// Environments run side by side.
    #[arg(long, default_value_t = Config::default().envs)]
    envs: usize,
    /// Steps per environment between updates (n-step returns).
    #[arg(long, default_value_t = Config::default().horizon)]
    horizon: usize,
    /// Adam's learning rate.
    #[arg(long, default_value_t = Config::default().lr)]
    lr: f64,
    /// The discount factor.
    #[arg(long, default_value_t = Config::default().gamma)]
    gamma: f64,
    /// The entropy bonus' weight.
    #[arg(long, default_value_t = Config::default().entropy_weight)]
    entropy: f64,
    /// The most updates before giving up.
    #[arg(long, default_value_t = Config::default().max_updates)]
    max_updates: usize,
    /// Evaluate the greedy policy (100 episodes) every this many updates.
    #[arg(long, default_value_t = Config::default().eval_every)]
    eval_every: usize,
    /// Print the mean training return every this many finished episodes (and after
    /// every evaluation).
    #[arg(long, default_value_t = 100)]
    print_every: usize,
    #[command(flatten)]
    common: Common,
}

fn main() -> ember::Result<()> {
    let args = Args::parse();
    if args.print_every == 0 {
        return Err(ember::Error::invalid("actor_critic", "--print-every must be positive"));
    }
    let out = args.common.start("actor_critic")?;
    let config = Config {
        envs: args.envs,
        horizon: args.horizon,
        lr: args.lr,
        gamma: args.gamma,
        entropy_weight: args.entropy,
        max_updates: args.max_updates,
        eval_every: args.eval_every,
        seed: args.common.seed,
        ..Config::default()
    };
    let model = ActorCritic::new(config.hidden)?;
    println!(
        "A2C on CartPole-v1: trunk 4-{h} (ReLU), policy {h}-2, value {h}-1; {} envs x {} steps per update, gamma {}, \
         Adam lr {}, entropy {}, value weight {}, grad norm <= {}",
        config.envs,
        config.horizon,
        config.gamma,
        config.lr,
        config.entropy_weight,
        config.value_weight,
        config.max_grad_norm,
        h = config.hidden
    );
    println!(
        "update   env steps  episodes  mean return (last {})  greedy eval ({} episodes)",
        args.print_every, config.eval_episodes
    );
    let started = Instant::now();
    let mut printed = 0;
    let report = actor_critic::train(&model, &config, |r, evaluated| {
        let episodes = r.episode_returns.len();
        if episodes < printed + args.print_every && !evaluated {
            return;
        }
        let recent = &r.episode_returns[episodes.saturating_sub(args.print_every)..];
        let mean = recent.iter().map(|e| e.1).sum::<f64>() / recent.len().max(1) as f64;
        let steps = r.updates * config.envs * config.horizon;
        let eval = match r.evaluations.last() {
            Some(&(update, score)) if evaluated && update == r.updates => format!("{score:.1}"),
            _ => String::new(),
        };
        println!("{:>6} {:>11} {:>9} {:>23.1} {:>12}", r.updates, steps, episodes, mean, eval);
        printed = episodes - episodes % args.print_every.max(1);
    })?;
    let secs = started.elapsed().as_secs_f64();
    let last = report.evaluations.last().map_or(0.0, |e| e.1);
    println!(
        "{} after {} updates in {secs:.1} s: greedy mean return {last:.1} over {} episodes (target {})",
        if report.solved { "solved" } else { "not solved" },
        report.updates,
        config.eval_episodes,
        config.target
    );

    let per_update = (config.envs * config.horizon) as f64;
    let episodes: Vec<(f64, f64)> = report.episode_returns.iter().map(|&(s, r)| (s as f64, r)).collect();
    let evals: Vec<(f64, f64)> = report.evaluations.iter().map(|&(u, r)| (u as f64 * per_update, r)).collect();
    let path = out.join("actor_critic_returns.svg");
    save_returns(&path, "CartPole-v1 returns", episodes, evals, config.target, report.updates as f64 * per_update)?;
    println!("wrote {}", path.display());
    if !report.solved {
        return Err(ember::Error::invalid("actor_critic", format!("not solved: greedy mean return {last:.1}")));
    }
    Ok(())
}

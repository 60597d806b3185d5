//! PPO-clip on CartPole-v1 ([`ember::ppo`], environment in [`ember::cartpole`]): separate
//! actor and critic networks, each with its own Adam, rollouts collected under `no_grad`,
//! GAE(lambda) advantages normalised per minibatch, several epochs of minibatch updates,
//! an entropy bonus and gradient clipping. Training stops once the greedy policy averages
//! at least 475 over 100 evaluation episodes.
//!
//! ```text
//! cargo run --release --example ppo -- [--envs 8] [--horizon 64] [--epochs 10]
//!     [--minibatch 128] [--actor-lr 1e-3] [--critic-lr 1e-3] [--entropy 0.01]
//!     [--shared-backbone] [--max-updates 300] [--eval-every 5] [--out runs/ppo] [--seed 0]
//! ```
//!
//! With `--shared-backbone` one trunk feeds a policy head and a value head; the actor loss
//! is backpropagated with `retain_graph = true`, then the critic loss through the same
//! trunk graph; the actor's optimizer owns the trunk. The example then prints the largest
//! difference between those trunk gradients and the ones of one backward of the summed
//! loss (measured on the first minibatch of every update), and fails if it exceeds 1e-6.
//!
//! It prints the mean return of the training episodes and the greedy evaluation every
//! `--eval-every` updates, and draws the returns to `<out>/ppo_returns.svg`.

mod common;

use clap::Parser;
use common::cli::Common;
use common::plot::save_returns;
use ember::ppo::{self, Agent, Config};
use std::time::Instant;

/// Solve CartPole-v1 with PPO and separate actor and critic networks.
#[derive(Parser)]
struct Args {
    /// Environments run side by side.
    #[arg(long, default_value_t = Config::default().envs)]
    envs: usize,
    /// Steps per environment in a rollout.
    #[arg(long, default_value_t = Config::default().horizon)]
    horizon: usize,
    /// Passes over each rollout.
    #[arg(long, default_value_t = Config::default().epochs)]
    epochs: usize,
    /// Steps per minibatch.
    #[arg(long, default_value_t = Config::default().minibatch)]
    minibatch: usize,
    /// The actor's learning rate (the trunk's with --shared-backbone).
    #[arg(long, default_value_t = Config::default().actor_lr)]
    actor_lr: f64,
    /// The critic's learning rate.
    #[arg(long, default_value_t = Config::default().critic_lr)]
    critic_lr: f64,
    /// The entropy bonus' weight.
    #[arg(long, default_value_t = Config::default().entropy_weight)]
    entropy: f64,
    /// One trunk with a policy head and a value head instead of two networks.
    #[arg(long)]
    shared_backbone: bool,
    /// The most updates (rollouts) before giving up.
    #[arg(long, default_value_t = Config::default().max_updates)]
    max_updates: usize,
    /// Evaluate the greedy policy (100 episodes) every this many updates.
    #[arg(long, default_value_t = Config::default().eval_every)]
    eval_every: usize,
    #[command(flatten)]
    common: Common,
}

fn main() -> ember::Result<()> {
    let args = Args::parse();
    let out = args.common.start("ppo")?;
    let config = Config {
        envs: args.envs,
        horizon: args.horizon,
        epochs: args.epochs,
        minibatch: args.minibatch,
        actor_lr: args.actor_lr,
        critic_lr: args.critic_lr,
        entropy_weight: args.entropy,
        shared_backbone: args.shared_backbone,
        max_updates: args.max_updates,
        eval_every: args.eval_every,
        seed: args.common.seed,
        ..Config::default()
    };
    let agent = Agent::new(&config)?;
    let nets = if config.shared_backbone {
        format!(
            "trunk 4-{h}-{h} (tanh) with policy head {h}-2 and value head {h}-1; the actor's Adam (lr {}) owns the \
             trunk and the policy head, the critic's (lr {}) the value head",
            config.actor_lr,
            config.critic_lr,
            h = config.hidden
        )
    } else {
        format!(
            "actor 4-{h}-{h}-2, critic 4-{h}-{h}-1 (tanh), Adam lr {} and {}",
            config.actor_lr,
            config.critic_lr,
            h = config.hidden
        )
    };
    println!(
        "PPO-clip on CartPole-v1: {nets}; {} envs x {} steps per rollout, {} epochs of minibatches of {}, clip {}, \
         gamma {}, GAE lambda {}, value weight {}, entropy {}, grad norm <= {} per optimizer",
        config.envs,
        config.horizon,
        config.epochs,
        config.minibatch,
        config.clip,
        config.gamma,
        config.lambda,
        config.value_weight,
        config.entropy_weight,
        config.max_grad_norm
    );
    println!(
        "update  env steps  episodes  mean return (since last line)  greedy eval ({} episodes)",
        config.eval_episodes
    );
    let started = Instant::now();
    let mut shown = 0;
    let report = ppo::train(&agent, &config, |r, evaluated| {
        if !evaluated {
            return;
        }
        let recent = &r.episode_returns[shown..];
        let mean = recent.iter().map(|e| e.1).sum::<f64>() / recent.len().max(1) as f64;
        shown = r.episode_returns.len();
        let eval = r.evaluations.last().map_or(0.0, |e| e.1);
        println!("{:>6} {:>10} {:>9} {:>30.1} {:>12.1}", r.updates, r.steps, shown, mean, eval);
    })?;
    let secs = started.elapsed().as_secs_f64();
    let last = report.evaluations.last().map_or(0.0, |e| e.1);
    println!(
        "{} after {} updates ({} minibatch steps), {} env steps, {} episodes in {secs:.1} s: greedy mean return \
         {last:.1} over {} episodes (target {})",
        if report.solved { "solved" } else { "not solved" },
        report.updates,
        report.minibatch_steps,
        report.steps,
        report.episode_returns.len(),
        config.eval_episodes,
        config.target
    );
    let largest = report.shared_gaps.iter().map(|g| g.largest_difference).fold(0.0, f64::max);
    let scale = report.shared_gaps.iter().map(|g| g.largest_gradient).fold(0.0, f64::max);
    if !report.shared_gaps.is_empty() {
        println!(
            "shared trunk: two backwards (retain_graph) against one backward of the summed loss, on the first \
             minibatch of each of the {} updates: largest |difference| {largest:.3e} (largest |gradient| {scale:.3e})",
            report.shared_gaps.len()
        );
    }

    let per_update = (config.envs * config.horizon) as f64;
    let episodes: Vec<(f64, f64)> = report.episode_returns.iter().map(|&(s, r)| (s as f64, r)).collect();
    let evals: Vec<(f64, f64)> = report.evaluations.iter().map(|&(u, r)| (u as f64 * per_update, r)).collect();
    let path = out.join("ppo_returns.svg");
    save_returns(&path, "CartPole-v1 returns (PPO)", episodes, evals, config.target, report.steps as f64)?;
    println!("wrote {}", path.display());
    if !report.solved {
        return Err(ember::Error::invalid("ppo", format!("not solved: greedy mean return {last:.1}")));
    }
    if largest > 1e-6 {
        return Err(ember::Error::invalid("ppo", format!("the trunk gradients differ by {largest:e} > 1e-6")));
    }
    Ok(())
}

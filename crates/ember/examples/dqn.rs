//! Deep Q-learning on CartPole-v1 ([`ember::dqn`], environment in [`ember::cartpole`]):
//! a replay buffer, epsilon-greedy exploration, Double-DQN TD targets computed under
//! `no_grad` from a target network, the Huber loss and gradient clipping. The target network
//! is a hard copy of the online one every `--target-every` steps, or with `--soft-update TAU`
//! a Polyak average `tau * online + (1 - tau) * target` after every gradient step
//! (`ember::nn::hard_update` / `soft_update`, which also keep the target's parameters from
//! ever requiring grad). Training stops once the greedy policy averages at least 475 over
//! 100 evaluation episodes.
//!
//! ```text
//! cargo run --release --example dqn -- [--lr 5e-4] [--batch 64] [--target-every 500]
//!     [--soft-update TAU] [--no-double] [--max-steps 100000] [--eval-every 1000]
//!     [--print-every 20] [--out runs/dqn] [--seed 0]
//! ```
//!
//! It prints the mean return of the last `--print-every` training episodes every that many
//! episodes and the greedy evaluation every `--eval-every` steps, and draws the returns to
//! `<out>/dqn_returns.svg`.

mod common;

use clap::Parser;
use common::cli::Common;
use common::plot::save_returns;
use ember::dqn::{self, Config, TargetUpdate};
use std::time::Instant;

/// Solve CartPole-v1 with DQN and a target network.
#[derive(Parser)]
struct Args {
    /// Adam's learning rate.
    #[arg(long, default_value_t = Config::default().lr)]
    lr: f64,
    /// Transitions per gradient step.
    #[arg(long, default_value_t = Config::default().batch)]
    batch: usize,
    /// Hard-copy the online network into the target network every this many steps.
    #[arg(long, default_value_t = 500)]
    target_every: usize,
    /// Instead of hard copies, Polyak-average the target towards the online network with
    /// this tau after every gradient step.
    #[arg(long)]
    soft_update: Option<f64>,
    /// Plain DQN targets (the target network's own max) instead of Double DQN.
    #[arg(long)]
    no_double: bool,
    /// The most environment steps before giving up.
    #[arg(long, default_value_t = Config::default().max_steps)]
    max_steps: usize,
    /// Evaluate the greedy policy (100 episodes) every this many environment steps.
    #[arg(long, default_value_t = Config::default().eval_every)]
    eval_every: usize,
    /// Print the mean training return every this many finished episodes (and after every
    /// evaluation).
    #[arg(long, default_value_t = 20)]
    print_every: usize,
    #[command(flatten)]
    common: Common,
}

fn main() -> ember::Result<()> {
    let args = Args::parse();
    if args.print_every == 0 {
        return Err(ember::Error::invalid("dqn", "--print-every must be positive"));
    }
    let out = args.common.start("dqn")?;
    let config = Config {
        lr: args.lr,
        batch: args.batch,
        target_update: match args.soft_update {
            Some(tau) => TargetUpdate::Soft(tau),
            None => TargetUpdate::Hard(args.target_every),
        },
        double: !args.no_double,
        max_steps: args.max_steps,
        eval_every: args.eval_every,
        seed: args.common.seed,
        ..Config::default()
    };
    let online = dqn::q_network(config.hidden)?;
    let target = dqn::q_network(config.hidden)?;
    let follow = match config.target_update {
        TargetUpdate::Hard(every) => format!("hard copy every {every} steps"),
        TargetUpdate::Soft(tau) => format!("soft update tau {tau}"),
    };
    println!(
        "{} on CartPole-v1: Q-network 4-{h}-{h}-2 (ReLU), target network by {follow}; replay {} transitions, batch {}, \
         learning starts after {} steps, gamma {}, Adam lr {}, epsilon {} -> {} over {} steps, Huber loss, grad norm <= {}",
        if config.double { "Double DQN" } else { "DQN" },
        config.buffer,
        config.batch,
        config.learning_starts,
        config.gamma,
        config.lr,
        config.eps_start,
        config.eps_end,
        config.eps_steps,
        config.max_grad_norm,
        h = config.hidden
    );
    println!(
        "env steps  updates  episodes  epsilon  mean return (last {})  greedy eval ({} episodes)",
        args.print_every, config.eval_episodes
    );
    let started = Instant::now();
    let mut printed = 0;
    let report = dqn::train(&online, &target, &config, |r, evaluated| {
        let episodes = r.episode_returns.len();
        if episodes < printed + args.print_every && !evaluated {
            return;
        }
        let recent = &r.episode_returns[episodes.saturating_sub(args.print_every)..];
        let mean = recent.iter().map(|e| e.1).sum::<f64>() / recent.len().max(1) as f64;
        let eval = match r.evaluations.last() {
            Some(&(step, score)) if evaluated && step == r.steps => format!("{score:.1}"),
            _ => String::new(),
        };
        let eps = dqn::epsilon(&config, r.steps);
        println!("{:>9} {:>8} {:>9} {:>8.3} {:>23.1} {:>12}", r.steps, r.updates, episodes, eps, mean, eval);
        printed = episodes - episodes % args.print_every;
    })?;
    let secs = started.elapsed().as_secs_f64();
    let last = report.evaluations.last().map_or(0.0, |e| e.1);
    println!(
        "{} after {} env steps, {} updates, {} episodes, {} target updates in {secs:.1} s: greedy mean return {last:.1} \
         over {} episodes (target {})",
        if report.solved { "solved" } else { "not solved" },
        report.steps,
        report.updates,
        report.episode_returns.len(),
        report.target_updates,
        config.eval_episodes,
        config.target
    );

    let episodes: Vec<(f64, f64)> = report.episode_returns.iter().map(|&(s, r)| (s as f64, r)).collect();
    let evals: Vec<(f64, f64)> = report.evaluations.iter().map(|&(s, r)| (s as f64, r)).collect();
    let path = out.join("dqn_returns.svg");
    save_returns(&path, "CartPole-v1 returns (DQN)", episodes, evals, config.target, report.steps as f64)?;
    println!("wrote {}", path.display());
    if !report.solved {
        return Err(ember::Error::invalid("dqn", format!("not solved: greedy mean return {last:.1}")));
    }
    Ok(())
}

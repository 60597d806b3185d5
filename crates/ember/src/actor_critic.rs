//! Advantage actor-critic (A2C) on [`CartPole`], behind
//! `cargo run --release --example actor_critic` and the test `tests/actor_critic_smoke.rs`.
//!
//! One network with a shared trunk and two heads: the policy (logits of the two actions)
//! and the value (the expected discounted return from a state). Training runs `envs`
//! environments side by side for `horizon` steps, sampling actions from the policy without
//! recording a graph, then makes one update from the batch of transitions:
//!
//! - the **value target** of each step is its n-step return: the rewards up to the end of
//!   the rollout plus the discounted value of the state there (none after a failure; after
//!   the 500-step cut-off, the value of the last state). The bootstrap values come from the
//!   same forward pass as the values being trained, taken with `detach()`: the target is a
//!   constant, so the critic moves its prediction towards the target and not the target
//!   towards its prediction;
//! - the **advantage** is the target minus the detached value, normalised over the batch;
//!   the policy loss is `-mean(log pi(a|s) * advantage)`, with an entropy bonus that keeps
//!   the policy from collapsing early;
//! - the **losses are summed** (`policy + value_weight * value - entropy_weight * entropy`)
//!   and backpropagated once. Both heads' losses reach the shared trunk; backpropagating
//!   them separately would need `retain_graph = true` on the first backward (the second
//!   runs through the same trunk graph) and would give the same accumulated gradients (the
//!   multitask example checks this to 1e-6), but it costs a second pass through the trunk
//!   and buys nothing here, since one optimizer with one learning rate updates everything.
//!   Separate passes pay off when the two losses go to different optimizers or must be
//!   inspected or clipped on their own.
//!
//! Gradients are clipped to a global norm before each Adam step.

use crate::autograd::{Var, no_grad};
use crate::cartpole::{ACTIONS, CartPole, STATE, evaluate_policy, states_tensor};
use crate::nn::{Linear, Module, ReLU, Sequential};
use crate::optim::{Adam, AdamConfig, Optimizer, clip_grad_norm_};
use crate::tensor::{Error, Result, Tensor};

/// The settings of [`train`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Environments run side by side.
    pub envs: usize,
    /// Steps per environment between updates (the n of the n-step returns).
    pub horizon: usize,
    /// The discount factor.
    pub gamma: f64,
    /// Adam's learning rate.
    pub lr: f64,
    /// The weight of the value loss in the summed loss.
    pub value_weight: f64,
    /// The weight of the entropy bonus.
    pub entropy_weight: f64,
    /// The largest global gradient norm (gradients are scaled down beyond it).
    pub max_grad_norm: f64,
    /// The trunk's width.
    pub hidden: usize,
    /// The most updates before giving up.
    pub max_updates: usize,
    /// Evaluate (greedy, [`Config::eval_episodes`] episodes) every this many updates.
    pub eval_every: usize,
    /// Episodes per evaluation.
    pub eval_episodes: usize,
    /// The mean evaluation return that counts as solved (stops training).
    pub target: f64,
    /// Seed of the weights (ember's global generator) and of the environments.
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            envs: 16,
            horizon: 16,
            gamma: 0.99,
            lr: 1e-3,
            value_weight: 0.5,
            entropy_weight: 0.01,
            max_grad_norm: 0.5,
            hidden: 128,
            max_updates: 3000,
            eval_every: 50,
            eval_episodes: 100,
            target: 475.0,
            seed: 0,
        }
    }
}

/// The network: a shared trunk (`4-hidden`, ReLU) with a policy head (`hidden-2`) and a
/// value head (`hidden-1`).
pub struct ActorCritic {
    trunk: Sequential,
    policy: Linear,
    value: Linear,
}

impl ActorCritic {
    /// A fresh network, initialised from ember's global generator.
    pub fn new(hidden: usize) -> Result<ActorCritic> {
        let trunk = Sequential::new().add(Linear::new(STATE, hidden)?).add(ReLU);
        Ok(ActorCritic { trunk, policy: Linear::new(hidden, ACTIONS)?, value: Linear::new(hidden, 1)? })
    }

    /// Action logits `[N, 2]` and values `[N]` for states `[N, 4]`.
    pub fn forward(&self, states: &Var) -> Result<(Var, Var)> {
        let h = self.trunk.forward(states)?;
        let n = states.shape().dims()[0];
        Ok((self.policy.forward(&h)?, self.value.forward(&h)?.reshape([n])?))
    }

    /// All parameters: trunk, policy head, value head.
    pub fn parameters(&self) -> Vec<Var> {
        let mut p = self.trunk.parameters();
        p.extend(self.policy.parameters());
        p.extend(self.value.parameters());
        p
    }
}

/// The action probabilities of each state, computed without recording.
fn probabilities(model: &ActorCritic, states: &[[f64; STATE]]) -> Result<Vec<f32>> {
    let x = Var::new(states_tensor(states)?);
    no_grad(|| model.forward(&x)?.0.softmax(1))?.value().to_vec::<f32>()
}

/// The mean return of the greedy policy (the likelier action at every step) over
/// `episodes` episodes, run side by side; environment `i` is seeded `seed + i`.
pub fn evaluate(model: &ActorCritic, episodes: usize, seed: u64) -> Result<f64> {
    evaluate_policy(episodes, seed, |states| {
        let p = probabilities(model, states)?;
        Ok(p.chunks_exact(ACTIONS).map(|q| usize::from(q[1] > q[0])).collect())
    })
}

/// The seed of the first evaluation environment for a run seeded `seed` (the training
/// environments are `1000 * seed + i`; these lie far beyond them).
pub fn evaluation_seed(seed: u64) -> u64 {
    seed.wrapping_mul(1000).wrapping_add(1_000_000)
}

/// What happened during [`train`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// `(environment steps so far, return)` of every finished training episode.
    pub episode_returns: Vec<(usize, f64)>,
    /// `(update, mean greedy evaluation return)` of every evaluation.
    pub evaluations: Vec<(usize, f64)>,
    /// Updates made.
    pub updates: usize,
    /// Whether an evaluation reached [`Config::target`].
    pub solved: bool,
}

/// Trains `model` with A2C as `config` says, until an evaluation reaches the target or
/// `max_updates` updates are made; `on_update(report, evaluated)` runs after every update,
/// `evaluated` telling whether an evaluation just ran.
pub fn train(model: &ActorCritic, config: &Config, mut on_update: impl FnMut(&Report, bool)) -> Result<Report> {
    let c = *config;
    if c.envs == 0 || c.horizon == 0 || c.eval_every == 0 || c.eval_episodes == 0 {
        return Err(Error::invalid("actor_critic::train", format!("sizes must be positive, got {c:?}")));
    }
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: c.lr, ..Default::default() })?;
    let mut envs: Vec<CartPole> =
        (0..c.envs as u64).map(|i| CartPole::new(c.seed.wrapping_mul(1000).wrapping_add(i))).collect();
    let mut states: Vec<[f64; STATE]> = envs.iter_mut().map(CartPole::reset).collect();
    let mut running = vec![0.0; c.envs];
    let mut report = Report::default();
    let mut env_steps = 0usize;
    let (n, e) = (c.horizon, c.envs);
    for update in 1..=c.max_updates {
        // Rollout: rows t * e + i of each buffer belong to step t of environment i.
        let mut visited = Vec::with_capacity((n + 1) * e);
        let mut actions = Vec::with_capacity(n * e);
        let mut rewards = Vec::with_capacity(n * e);
        // 0: goes on, 1: failed (no future), 2: cut off at the step limit (bootstrap
        // from the state where it stopped, an extra row after the last states).
        let mut ends = Vec::with_capacity(n * e);
        let mut cut_off = Vec::new();
        for _ in 0..n {
            let p = probabilities(model, &states)?;
            for (i, env) in envs.iter_mut().enumerate() {
                let action = usize::from(env.rng().uniform() < f64::from(p[2 * i + 1]));
                let step = env.step(action);
                visited.push(states[i]);
                actions.push(action as i64);
                rewards.push(step.reward);
                running[i] += step.reward;
                env_steps += 1;
                if step.terminated || step.truncated {
                    report.episode_returns.push((env_steps, running[i]));
                    running[i] = 0.0;
                    if step.truncated {
                        cut_off.push(step.state);
                    }
                    ends.push(if step.terminated { 1u8 } else { 2 });
                    states[i] = env.reset();
                } else {
                    ends.push(0);
                    states[i] = step.state;
                }
            }
        }
        visited.extend_from_slice(&states);
        visited.extend_from_slice(&cut_off);

        // One forward over every visited state, the bootstrap states included.
        let (logits, values) = model.forward(&Var::new(states_tensor(&visited)?))?;
        let bootstrap = values.detach().value().to_vec::<f32>()?;
        let mut targets = vec![0f32; n * e];
        for i in 0..e {
            let mut ret = f64::from(bootstrap[n * e + i]);
            for t in (0..n).rev() {
                let k = t * e + i;
                ret = match ends[k] {
                    1 => rewards[k],
                    2 => rewards[k] + c.gamma * f64::from(bootstrap[cut_index(&ends, k, e, n)]),
                    _ => rewards[k] + c.gamma * ret,
                };
                targets[k] = ret as f32;
            }
        }
        let rows = n * e;
        let targets = Tensor::from_vec(targets, [rows])?;
        let values = values.narrow(0, 0, rows)?;
        let advantages = (&targets - &values.detach().value())?;
        let mean = advantages.mean_all().item()?;
        let std = advantages.std_all(true).item()?;
        let advantages = advantages.sub_scalar(mean).div_scalar(std + 1e-8);

        let log_probs = logits.narrow(0, 0, rows)?.log_softmax(1)?;
        let index = Tensor::from_vec(actions, [rows, 1])?;
        let chosen = log_probs.gather(1, &index)?.reshape([rows])?;
        let policy_loss = (&chosen * &advantages)?.mean_all().neg();
        let value_loss = (&values - &targets)?.square().mean_all();
        let entropy = (&log_probs.exp() * &log_probs)?.sum(1, false)?.mean_all().neg();
        let loss = ((&policy_loss + &value_loss.mul_scalar(c.value_weight))? - entropy.mul_scalar(c.entropy_weight))?;
        opt.zero_grad();
        loss.backward()?;
        clip_grad_norm_(&model.parameters(), c.max_grad_norm, 2.0)?;
        opt.step()?;
        report.updates = update;

        let evaluated = update % c.eval_every == 0 || update == c.max_updates;
        if evaluated {
            let score = evaluate(model, c.eval_episodes, evaluation_seed(c.seed))?;
            report.evaluations.push((update, score));
            report.solved = score >= c.target;
        }
        on_update(&report, evaluated);
        if report.solved {
            break;
        }
    }
    Ok(report)
}

/// The row of the bootstrap state of the cut-off episode that ended at row `k`: cut-off
/// states follow the `(n + 1) * e` visited and last states in the order the episodes
/// ended, which is row order.
fn cut_index(ends: &[u8], k: usize, e: usize, n: usize) -> usize {
    (n + 1) * e + ends[..k].iter().filter(|&&end| end == 2).count()
}

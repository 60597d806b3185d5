//! Proximal policy optimisation (PPO-clip) on [`CartPole`] with separate actor and critic
//! networks, each with its own optimizer, behind `cargo run --release --example ppo` and
//! the test `tests/ppo_smoke.rs`.
//!
//! Each update starts with a **rollout**: [`Config::envs`] environments run side by side for
//! [`Config::horizon`] steps, sampling actions from the policy under [`no_grad`]. The
//! rollout keeps the log-probabilities of the sampled actions and the critic's values as
//! constants without a graph ([`Rollout`]): they are the "old" policy and the baseline, and
//! the losses must not differentiate through them. From the rewards and values follow the
//! advantages by **GAE(lambda)** ([`gae`]) and the critic's targets, `advantage + value`.
//!
//! Then [`Config::epochs`] passes over the rollout in shuffled minibatches of
//! [`Config::minibatch`] steps, each with its advantages **normalised** to mean 0 and
//! standard deviation 1, and two losses ([`losses`]):
//!
//! - the **actor** maximises the clipped surrogate `mean(min(r * A, clip(r, 1 - eps,
//!   1 + eps) * A))` with `r = pi(a|s) / pi_old(a|s)` ([`clipped_objective`]), plus an
//!   **entropy bonus**;
//! - the **critic** regresses the values on the GAE returns (mean squared error, weighted
//!   by [`Config::value_weight`]).
//!
//! Each loss is backpropagated on its own and each optimizer (Adam, its own learning rate)
//! steps its own network, after clipping that network's gradient norm.
//!
//! **`shared_backbone`**: one trunk feeds a policy head and a value head ([`Agent::shared`]).
//! Both losses then reach the trunk, so the actor's is backpropagated with
//! `retain_graph = true` (the critic's backward runs through the same trunk graph again)
//! and the trunk's gradients are the sum of the two contributions, the same as one backward
//! of `actor + critic` up to rounding ([`shared_gradient_gap`] measures it: the two add the
//! same terms in another order, so they differ by float32 rounding of the gradients' size). The **actor's
//! optimizer owns the trunk** (with the policy head); the critic's optimizer owns the value
//! head only. So the trunk moves once per step, by the actor's learning rate, along the
//! gradient of both losses, as with one optimizer over a summed loss; and the value head
//! keeps its own learning rate.

use crate::autograd::{Var, no_grad};
use crate::cartpole::{ACTIONS, CartPole, Rng, STATE, evaluate_policy, states_tensor};
use crate::nn::{Linear, Module, Sequential, Tanh};
use crate::optim::{Adam, AdamConfig, Optimizer, clip_grad_norm_};
use crate::tensor::{Error, Result, Tensor};

/// The settings of [`train`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Environments run side by side.
    pub envs: usize,
    /// Steps per environment in a rollout.
    pub horizon: usize,
    /// Passes over each rollout.
    pub epochs: usize,
    /// Steps per minibatch.
    pub minibatch: usize,
    /// The discount factor.
    pub gamma: f64,
    /// GAE's lambda.
    pub lambda: f64,
    /// The factor applied to the rewards before the advantages and the critic's targets
    /// are computed (the reported returns are unscaled). It keeps the values near 1 rather
    /// than near 100, so that with a shared trunk the value loss's gradient does not drown
    /// the policy's; the advantages are normalised anyway, so the policy does not see it.
    pub reward_scale: f64,
    /// The clip range `eps` of the probability ratio.
    pub clip: f64,
    /// The actor's Adam learning rate (in the shared mode, the trunk's too).
    pub actor_lr: f64,
    /// The critic's Adam learning rate.
    pub critic_lr: f64,
    /// The weight of the value loss.
    pub value_weight: f64,
    /// The weight of the entropy bonus.
    pub entropy_weight: f64,
    /// The largest global gradient norm of each optimizer's parameters.
    pub max_grad_norm: f64,
    /// The width of the hidden layers.
    pub hidden: usize,
    /// One trunk with a policy head and a value head instead of two networks.
    pub shared_backbone: bool,
    /// The most updates (rollouts) before giving up.
    pub max_updates: usize,
    /// Evaluate the greedy policy every this many updates.
    pub eval_every: usize,
    /// Episodes per evaluation.
    pub eval_episodes: usize,
    /// The mean evaluation return that counts as solved (stops training).
    pub target: f64,
    /// Seed of the environments, the sampled actions and the minibatches (the caller seeds
    /// ember's global generator, which draws the weights).
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            envs: 8,
            horizon: 64,
            epochs: 10,
            minibatch: 128,
            gamma: 0.99,
            lambda: 0.95,
            reward_scale: 0.01,
            clip: 0.2,
            actor_lr: 1e-3,
            critic_lr: 1e-3,
            value_weight: 0.5,
            entropy_weight: 0.01,
            max_grad_norm: 0.5,
            hidden: 64,
            shared_backbone: false,
            max_updates: 300,
            eval_every: 5,
            eval_episodes: 100,
            target: 475.0,
            seed: 0,
        }
    }
}

enum Nets {
    Separate { actor: Sequential, critic: Sequential },
    Shared { trunk: Sequential, policy: Linear, value: Linear },
}

/// The policy and the value function: two networks, or one trunk with two heads.
pub struct Agent {
    nets: Nets,
}

fn mlp(hidden: usize) -> Result<Sequential> {
    Ok(Sequential::new().add(Linear::new(STATE, hidden)?).add(Tanh).add(Linear::new(hidden, hidden)?).add(Tanh))
}

impl Agent {
    /// An actor `4-hidden-hidden-2` and a critic `4-hidden-hidden-1` (tanh), initialised
    /// from ember's global generator.
    pub fn separate(hidden: usize) -> Result<Agent> {
        let actor = mlp(hidden)?.add(Linear::new(hidden, ACTIONS)?);
        let critic = mlp(hidden)?.add(Linear::new(hidden, 1)?);
        Ok(Agent { nets: Nets::Separate { actor, critic } })
    }

    /// A trunk `4-hidden-hidden` (tanh) with a policy head `hidden-2` and a value head
    /// `hidden-1`.
    pub fn shared(hidden: usize) -> Result<Agent> {
        let (policy, value) = (Linear::new(hidden, ACTIONS)?, Linear::new(hidden, 1)?);
        Ok(Agent { nets: Nets::Shared { trunk: mlp(hidden)?, policy, value } })
    }

    /// The agent [`Config::shared_backbone`] asks for.
    pub fn new(config: &Config) -> Result<Agent> {
        if config.shared_backbone { Agent::shared(config.hidden) } else { Agent::separate(config.hidden) }
    }

    /// Whether the policy and the value share a trunk.
    pub fn is_shared(&self) -> bool {
        matches!(self.nets, Nets::Shared { .. })
    }

    /// Action logits `[N, 2]` and values `[N]` for states `[N, 4]`.
    pub fn forward(&self, states: &Var) -> Result<(Var, Var)> {
        let n = states.shape().dims()[0];
        match &self.nets {
            Nets::Separate { actor, critic } => Ok((actor.forward(states)?, critic.forward(states)?.reshape([n])?)),
            Nets::Shared { trunk, policy, value } => {
                let h = trunk.forward(states)?;
                Ok((policy.forward(&h)?, value.forward(&h)?.reshape([n])?))
            }
        }
    }

    /// The parameters the actor's optimizer updates: the actor network, or the trunk and
    /// the policy head.
    pub fn actor_parameters(&self) -> Vec<Var> {
        match &self.nets {
            Nets::Separate { actor, .. } => actor.parameters(),
            Nets::Shared { trunk, policy, .. } => [trunk.parameters(), policy.parameters()].concat(),
        }
    }

    /// The parameters the critic's optimizer updates: the critic network, or the value
    /// head.
    pub fn critic_parameters(&self) -> Vec<Var> {
        match &self.nets {
            Nets::Separate { critic, .. } => critic.parameters(),
            Nets::Shared { value, .. } => value.parameters(),
        }
    }

    /// The trunk's parameters, which both losses reach (none without a shared trunk).
    pub fn trunk_parameters(&self) -> Vec<Var> {
        match &self.nets {
            Nets::Separate { .. } => Vec::new(),
            Nets::Shared { trunk, .. } => trunk.parameters(),
        }
    }

    /// Clears every parameter's gradient.
    pub fn zero_grad(&self) {
        self.actor_parameters().iter().chain(&self.critic_parameters()).for_each(Var::zero_grad);
    }
}

/// The actor's and the critic's optimizers.
pub struct Optimizers {
    /// Adam over [`Agent::actor_parameters`].
    pub actor: Adam,
    /// Adam over [`Agent::critic_parameters`].
    pub critic: Adam,
}

impl Optimizers {
    /// One Adam per network with the learning rates of `config`.
    pub fn new(agent: &Agent, config: &Config) -> Result<Optimizers> {
        Ok(Optimizers {
            actor: Adam::new(agent.actor_parameters(), AdamConfig { lr: config.actor_lr, ..Default::default() })?,
            critic: Adam::new(agent.critic_parameters(), AdamConfig { lr: config.critic_lr, ..Default::default() })?,
        })
    }
}

/// The advantages of a rollout by generalised advantage estimation: with
/// `delta_k = r_k + gamma * next_values_k - values_k`,
/// `A_k = delta_k + gamma * lambda * A_{k'}`, where `k'` is the same environment's next
/// step, and no `A_{k'}` term where the episode ended at `k` or the rollout does.
///
/// Rows are laid out `t * envs + i` (step `t` of environment `i`). `next_values` holds the
/// value of the state after each step: 0 after a failure, the value of the last state
/// after the 500-step cut-off (the episode goes on beyond the limit in expectation), the
/// value of the next state otherwise. `ends` marks steps after which the environment was
/// reset (failure or cut-off). The critic's targets are `A_k + values_k`.
pub fn gae(
    rewards: &[f64],
    values: &[f64],
    next_values: &[f64],
    ends: &[bool],
    envs: usize,
    gamma: f64,
    lambda: f64,
) -> Result<Vec<f64>> {
    let n = rewards.len();
    if envs == 0 || !n.is_multiple_of(envs) || values.len() != n || next_values.len() != n || ends.len() != n {
        return Err(Error::invalid(
            "ppo::gae",
            format!(
                "{n} rewards, {} values, {} next values and {} ends for {envs} environments",
                values.len(),
                next_values.len(),
                ends.len()
            ),
        ));
    }
    let mut advantages = vec![0.0; n];
    for i in 0..envs {
        let mut next = 0.0;
        for k in (i..n).step_by(envs).rev() {
            let delta = rewards[k] + gamma * next_values[k] - values[k];
            let carried = if ends[k] { 0.0 } else { gamma * lambda * next };
            advantages[k] = delta + carried;
            next = advantages[k];
        }
    }
    Ok(advantages)
}

/// One rollout's data, rows `t * envs + i`.
pub struct Rollout {
    /// `[N, 4]` states.
    pub states: Tensor,
    /// `[N]` sampled actions (`i64`).
    pub actions: Tensor,
    /// `[N]` log-probabilities of the sampled actions under the policy that sampled them,
    /// computed under `no_grad`: no graph.
    pub log_probs: Var,
    /// `[N]` the critic's values of the states, computed under `no_grad`: no graph.
    pub values: Var,
    /// `[N]` GAE advantages (not normalised).
    pub advantages: Tensor,
    /// `[N]` the critic's targets, advantages plus values.
    pub returns: Tensor,
}

/// Environments run side by side, with their running episode returns.
pub struct Envs {
    envs: Vec<CartPole>,
    states: Vec<[f64; STATE]>,
    running: Vec<f64>,
    steps: usize,
}

impl Envs {
    /// `count` environments, environment `i` seeded `1000 * seed + i`, reset.
    pub fn new(count: usize, seed: u64) -> Envs {
        let mut envs: Vec<CartPole> =
            (0..count as u64).map(|i| CartPole::new(seed.wrapping_mul(1000).wrapping_add(i))).collect();
        let states = envs.iter_mut().map(CartPole::reset).collect();
        Envs { envs, states, running: vec![0.0; count], steps: 0 }
    }

    /// Environment steps taken so far, all environments together.
    pub fn steps(&self) -> usize {
        self.steps
    }
}

/// Log-probabilities `[N, 2]` and values `[N]` of some states, without recording.
fn policy_and_values(agent: &Agent, states: &[[f64; STATE]]) -> Result<(Var, Var)> {
    let x = Var::new(states_tensor(states)?);
    no_grad(|| {
        let (logits, values) = agent.forward(&x)?;
        Ok((logits.log_softmax(1)?, values))
    })
}

/// Runs every environment [`Config::horizon`] steps with actions sampled from the policy
/// under `no_grad`, then computes the advantages from the rewards times
/// [`Config::reward_scale`]; finished episodes' `(steps so far, return)` go to
/// `episode_returns`.
pub fn collect(
    agent: &Agent,
    envs: &mut Envs,
    config: &Config,
    episode_returns: &mut Vec<(usize, f64)>,
) -> Result<Rollout> {
    let (horizon, e) = (config.horizon, envs.envs.len());
    let mut visited = Vec::with_capacity(horizon * e);
    let mut actions = Vec::with_capacity(horizon * e);
    let mut log_probs = Vec::with_capacity(horizon);
    let mut values = Vec::with_capacity(horizon);
    let mut rewards = Vec::with_capacity(horizon * e);
    let mut ends = Vec::with_capacity(horizon * e);
    // The value after each step where it is not the next row's: (row, value).
    let mut next_fixed: Vec<(usize, f64)> = Vec::new();
    for _ in 0..horizon {
        let (log_p, v) = policy_and_values(agent, &envs.states)?;
        let p = log_p.value().exp().to_vec::<f32>()?;
        let mut chosen = Vec::with_capacity(e);
        let mut cut_off = Vec::new();
        for (i, env) in envs.envs.iter_mut().enumerate() {
            let action = usize::from(env.rng().uniform() < f64::from(p[ACTIONS * i + 1]));
            let step = env.step(action);
            let row = visited.len();
            visited.push(envs.states[i]);
            actions.push(action as i64);
            chosen.push(action as i64);
            rewards.push(step.reward * config.reward_scale);
            envs.running[i] += step.reward;
            envs.steps += 1;
            let ended = step.terminated || step.truncated;
            ends.push(ended);
            if ended {
                episode_returns.push((envs.steps, envs.running[i]));
                envs.running[i] = 0.0;
                if step.terminated {
                    next_fixed.push((row, 0.0));
                } else {
                    cut_off.push((row, step.state));
                }
                envs.states[i] = env.reset();
            } else {
                envs.states[i] = step.state;
            }
        }
        if !cut_off.is_empty() {
            let last: Vec<[f64; STATE]> = cut_off.iter().map(|c| c.1).collect();
            let v_last = policy_and_values(agent, &last)?.1.value().to_vec_f64()?;
            next_fixed.extend(cut_off.iter().map(|c| c.0).zip(v_last));
        }
        let index = Tensor::from_vec(chosen, [e, 1])?;
        // No `no_grad` needed here: `log_p` was computed without recording, so nothing
        // below it records either, and the rollout carries no graph because of that one
        // `no_grad` alone (which the smoke test checks).
        log_probs.push(log_p.gather(1, &index)?.reshape([e])?);
        values.push(v);
    }
    let cat = |v: &[Var]| Var::cat(&v.iter().collect::<Vec<_>>(), 0);
    let (log_probs, values) = (cat(&log_probs)?, cat(&values)?);
    let v = values.value().to_vec_f64()?;
    let last = policy_and_values(agent, &envs.states)?.1.value().to_vec_f64()?;
    let n = horizon * e;
    let mut next_values: Vec<f64> = (0..n).map(|k| if k + e < n { v[k + e] } else { last[k + e - n] }).collect();
    for (row, value) in next_fixed {
        next_values[row] = value;
    }
    let advantages = gae(&rewards, &v, &next_values, &ends, e, config.gamma, config.lambda)?;
    let returns: Vec<f32> = advantages.iter().zip(&v).map(|(a, v)| (a + v) as f32).collect();
    Ok(Rollout {
        states: states_tensor(&visited)?,
        actions: Tensor::from_vec(actions, [n])?,
        log_probs,
        values,
        advantages: Tensor::from_vec(advantages.iter().map(|&a| a as f32).collect::<Vec<_>>(), [n])?,
        returns: Tensor::from_vec(returns, [n])?,
    })
}

/// The clipped surrogate objective `mean(min(r * A, clip(r, 1 - clip, 1 + clip) * A))` with
/// `r = exp(new_log_probs - old_log_probs)`, to be maximised: where the ratio has moved
/// beyond the clip range in the advantage's direction, the minimum picks the clipped,
/// constant term and the gradient stops pushing further.
pub fn clipped_objective(new_log_probs: &Var, old_log_probs: &Tensor, advantages: &Tensor, clip: f64) -> Result<Var> {
    let ratio = (new_log_probs - old_log_probs)?.exp();
    let unclipped = (&ratio * advantages)?;
    let clipped = (&ratio.clamp(Some(1.0 - clip), Some(1.0 + clip)) * advantages)?;
    Ok(Var::stack(&[&unclipped, &clipped], 1)?.min(1, false)?.mean_all())
}

/// The two losses of a minibatch.
pub struct Losses {
    /// `-(clipped objective) - entropy_weight * entropy`.
    pub actor: Var,
    /// `value_weight * mean((value - return)^2)`.
    pub critic: Var,
    /// The policy's mean entropy.
    pub entropy: f64,
}

/// The losses on the rows `rows` (`i64` indices) of a rollout, with the advantages
/// normalised over those rows.
pub fn losses(agent: &Agent, rollout: &Rollout, rows: &Tensor, config: &Config) -> Result<Losses> {
    let pick = |t: &Tensor| t.index_select(0, rows);
    let n = rows.numel();
    let (logits, values) = agent.forward(&Var::new(pick(&rollout.states)?))?;
    let log_p = logits.log_softmax(1)?;
    let new_log_probs = log_p.gather(1, &pick(&rollout.actions)?.reshape([n, 1])?)?.reshape([n])?;
    let adv = pick(&rollout.advantages)?;
    let (mean, std) = (adv.mean_all().item()?, if n > 1 { adv.std_all(true).item()? } else { 0.0 });
    let adv = adv.sub_scalar(mean).div_scalar(std + 1e-8);
    let objective = clipped_objective(&new_log_probs, &pick(&rollout.log_probs.value())?, &adv, config.clip)?;
    let entropy = (&log_p.exp() * &log_p)?.sum(1, false)?.mean_all().neg();
    let actor = (objective.neg() - entropy.mul_scalar(config.entropy_weight))?;
    let critic = (&values - &pick(&rollout.returns)?)?.square().mean_all().mul_scalar(config.value_weight);
    Ok(Losses { actor, critic, entropy: entropy.item()? })
}

/// Backpropagates the two losses one after the other (the actor's with `retain_graph`
/// when the trunk is shared, so that the critic's backward can run through it again).
fn backward_both(agent: &Agent, l: &Losses) -> Result<()> {
    l.actor.backward_with(None, agent.is_shared())?;
    l.critic.backward()
}

/// One optimisation step of each optimizer on the rows `rows` of a rollout.
pub fn train_step(
    agent: &Agent,
    opts: &mut Optimizers,
    rollout: &Rollout,
    rows: &Tensor,
    config: &Config,
) -> Result<Losses> {
    let l = losses(agent, rollout, rows, config)?;
    opts.actor.zero_grad();
    opts.critic.zero_grad();
    backward_both(agent, &l)?;
    clip_grad_norm_(opts.actor.params(), config.max_grad_norm, 2.0)?;
    clip_grad_norm_(opts.critic.params(), config.max_grad_norm, 2.0)?;
    opts.actor.step()?;
    opts.critic.step()?;
    Ok(l)
}

/// How far apart the trunk's gradients from the two losses backpropagated one after the
/// other and from one backward of their sum are.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GradientGap {
    /// The largest absolute difference, over every trunk parameter's elements.
    pub largest_difference: f64,
    /// The largest absolute trunk gradient of the summed backward: the scale of the
    /// rounding that separates the two (they add the same terms in another order).
    pub largest_gradient: f64,
}

/// Compares the trunk's gradients from the two losses backpropagated one after the other
/// (as training does, the actor's with `retain_graph`) with those of one backward of
/// `actor + critic`, on the rows `rows` of a rollout. Needs a shared trunk; leaves the
/// summed pass's gradients in place.
pub fn shared_gradient_gap(agent: &Agent, rollout: &Rollout, rows: &Tensor, config: &Config) -> Result<GradientGap> {
    if !agent.is_shared() {
        return Err(Error::invalid("ppo::shared_gradient_gap", "the agent has no shared trunk"));
    }
    let trunk_grads = || -> Result<Vec<Vec<f64>>> {
        agent
            .trunk_parameters()
            .iter()
            .map(|p| {
                p.grad().ok_or_else(|| Error::autograd("ppo: a trunk parameter received no gradient"))?.to_vec_f64()
            })
            .collect()
    };
    agent.zero_grad();
    backward_both(agent, &losses(agent, rollout, rows, config)?)?;
    let separate = trunk_grads()?;
    agent.zero_grad();
    let l = losses(agent, rollout, rows, config)?;
    (&l.actor + &l.critic)?.backward()?;
    let summed = trunk_grads()?;
    let mut gap = GradientGap::default();
    for (a, b) in separate.iter().zip(&summed) {
        for (u, v) in a.iter().zip(b) {
            gap.largest_difference = gap.largest_difference.max((u - v).abs());
            gap.largest_gradient = gap.largest_gradient.max(v.abs());
        }
    }
    Ok(gap)
}

/// A random permutation of `0..n` (Fisher-Yates).
fn permutation(n: usize, rng: &mut Rng) -> Vec<i64> {
    let mut p: Vec<i64> = (0..n as i64).collect();
    for i in (1..n).rev() {
        p.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    p
}

/// The greedy actions (the likelier one) of the policy for some states, without recording.
pub fn greedy_actions(agent: &Agent, states: &[[f64; STATE]]) -> Result<Vec<usize>> {
    let best = policy_and_values(agent, states)?.0.value().argmax(1, false)?;
    Ok(best.to_vec::<i64>()?.into_iter().map(|a| a as usize).collect())
}

/// The mean return of the greedy policy over `episodes` episodes, environment `i` seeded
/// `seed + i`.
pub fn evaluate(agent: &Agent, episodes: usize, seed: u64) -> Result<f64> {
    evaluate_policy(episodes, seed, |states| greedy_actions(agent, states))
}

/// The seed of the first evaluation environment for a run seeded `seed`, far from the
/// training environments' `1000 * seed + i`.
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
    /// Updates (rollouts) made.
    pub updates: usize,
    /// Minibatch steps made.
    pub minibatch_steps: usize,
    /// Environment steps taken.
    pub steps: usize,
    /// With a shared trunk, the [`shared_gradient_gap`] on the first minibatch of every
    /// update (empty without).
    pub shared_gaps: Vec<GradientGap>,
    /// Whether an evaluation reached [`Config::target`].
    pub solved: bool,
}

/// Trains `agent` with PPO as `config` says until an evaluation reaches the target or
/// `max_updates` updates are made; `on_update(report, evaluated)` runs after every update,
/// `evaluated` telling whether an evaluation just ran.
pub fn train(agent: &Agent, config: &Config, mut on_update: impl FnMut(&Report, bool)) -> Result<Report> {
    let c = *config;
    if c.envs == 0 || c.horizon == 0 || c.epochs == 0 || c.minibatch == 0 || c.eval_every == 0 || c.eval_episodes == 0 {
        return Err(Error::invalid("ppo::train", format!("sizes must be positive, got {c:?}")));
    }
    let mut opts = Optimizers::new(agent, &c)?;
    let mut envs = Envs::new(c.envs, c.seed);
    let mut rng = Rng::new(c.seed.wrapping_mul(1000).wrapping_add(999));
    let mut report = Report::default();
    let n = c.envs * c.horizon;
    for update in 1..=c.max_updates {
        let rollout = collect(agent, &mut envs, &c, &mut report.episode_returns)?;
        report.steps = envs.steps();
        for epoch in 0..c.epochs {
            let order = permutation(n, &mut rng);
            for (b, chunk) in order.chunks(c.minibatch).enumerate() {
                let rows = Tensor::from_vec(chunk.to_vec(), [chunk.len()])?;
                if agent.is_shared() && epoch == 0 && b == 0 {
                    report.shared_gaps.push(shared_gradient_gap(agent, &rollout, &rows, &c)?);
                }
                train_step(agent, &mut opts, &rollout, &rows, &c)?;
                report.minibatch_steps += 1;
            }
        }
        report.updates = update;
        let evaluated = update % c.eval_every == 0 || update == c.max_updates;
        if evaluated {
            let score = evaluate(agent, c.eval_episodes, evaluation_seed(c.seed))?;
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

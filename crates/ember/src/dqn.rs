//! Deep Q-learning (DQN) on [`CartPole`] with a replay buffer and a target network, behind
//! `cargo run --release --example dqn` and the test `tests/dqn_smoke.rs`.
//!
//! The online network `Q(s, ·)` (`4-hidden-hidden-2`, ReLU) estimates the discounted return
//! of each action. The agent acts epsilon-greedily (epsilon falls linearly from
//! [`Config::eps_start`] to [`Config::eps_end`]), stores every transition in a
//! [`ReplayBuffer`], and after [`Config::learning_starts`] steps makes one gradient step
//! every [`Config::train_every`] steps on a uniformly sampled minibatch:
//!
//! - the **TD targets** `r + gamma * Q_target(s', a*)` (just `r` after a failure; the
//!   500-step cut-off is not a failure, so it bootstraps) come from the **target network**, a
//!   second copy of the network, and are computed under [`no_grad`]: they are constants of
//!   the loss, so the online network moves its estimate towards them and not the other way
//!   round ([`td_targets`]). This is **Double DQN**: the online network picks `a*` (its
//!   argmax at `s'`) and the target network values it, which curbs the overestimation of
//!   taking the max of noisy estimates; [`Config::double`] off uses the target's own max;
//! - the loss is the **Huber loss** between `Q_online(s, a)` and the targets (quadratic
//!   near zero, linear beyond 1, so rare large TD errors do not blow up the gradient), and
//!   the gradient is clipped to a global norm before each Adam step;
//! - the target network follows the online one by a **hard copy** every
//!   [`TargetUpdate::Hard`] steps or by a **soft (Polyak) update**
//!   `target = tau * online + (1 - tau) * target` after every gradient step
//!   ([`TargetUpdate::Soft`]), through [`crate::nn::hard_update`] and
//!   [`crate::nn::soft_update`]. Both freeze the target's parameters: they never require
//!   grad, so even a forgotten `no_grad` could not leave gradients in them.
//!
//! Training stops once the greedy policy (the argmax action) averages
//! [`Config::target`] over [`Config::eval_episodes`] evaluation episodes.

use crate::autograd::{Var, no_grad};
use crate::cartpole::{ACTIONS, CartPole, Rng, STATE, evaluate_policy, states_tensor};
use crate::nn::{HuberOptions, Linear, Module, ReLU, Sequential, hard_update, huber_loss, soft_update};
use crate::optim::{Adam, AdamConfig, Optimizer, clip_grad_norm_};
use crate::tensor::{Error, Result, Tensor};

/// How the target network follows the online network.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TargetUpdate {
    /// A hard copy every this many environment steps.
    Hard(usize),
    /// Polyak averaging with this `tau` after every gradient step.
    Soft(f64),
}

/// The settings of [`train`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// The width of both hidden layers.
    pub hidden: usize,
    /// Adam's learning rate.
    pub lr: f64,
    /// The discount factor.
    pub gamma: f64,
    /// Transitions per gradient step.
    pub batch: usize,
    /// The replay buffer's capacity (the oldest transitions go first).
    pub buffer: usize,
    /// Environment steps before the first gradient step (the buffer fills with the random
    /// policy's experience meanwhile).
    pub learning_starts: usize,
    /// Environment steps per gradient step.
    pub train_every: usize,
    /// How the target network follows the online one.
    pub target_update: TargetUpdate,
    /// Double DQN: the online network picks the next action, the target network values it.
    pub double: bool,
    /// Epsilon at the start.
    pub eps_start: f64,
    /// Epsilon after [`Config::eps_steps`] steps, and from then on.
    pub eps_end: f64,
    /// Environment steps over which epsilon falls linearly.
    pub eps_steps: usize,
    /// The largest global gradient norm.
    pub max_grad_norm: f64,
    /// The most environment steps before giving up.
    pub max_steps: usize,
    /// Evaluate the greedy policy every this many environment steps.
    pub eval_every: usize,
    /// Episodes per evaluation.
    pub eval_episodes: usize,
    /// The mean evaluation return that counts as solved (stops training).
    pub target: f64,
    /// Seed of the environment, of exploration and of sampling (the caller seeds ember's
    /// global generator, which draws the weights).
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            hidden: 128,
            lr: 5e-4,
            gamma: 0.99,
            batch: 64,
            buffer: 50_000,
            learning_starts: 1000,
            train_every: 1,
            target_update: TargetUpdate::Hard(500),
            double: true,
            eps_start: 1.0,
            eps_end: 0.02,
            eps_steps: 10_000,
            max_grad_norm: 10.0,
            max_steps: 100_000,
            eval_every: 1000,
            eval_episodes: 100,
            target: 475.0,
            seed: 0,
        }
    }
}

/// A Q-network `4-hidden-hidden-2` with ReLU, initialised from ember's global generator:
/// build two, the online network and its target.
pub fn q_network(hidden: usize) -> Result<Sequential> {
    Ok(Sequential::new()
        .add(Linear::new(STATE, hidden)?)
        .add(ReLU)
        .add(Linear::new(hidden, hidden)?)
        .add(ReLU)
        .add(Linear::new(hidden, ACTIONS)?))
}

/// One stored transition.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transition {
    /// The state the action was taken in.
    pub state: [f64; STATE],
    /// The action.
    pub action: usize,
    /// The reward.
    pub reward: f64,
    /// The state after the action.
    pub next: [f64; STATE],
    /// The episode failed here: no future after `next`.
    pub terminated: bool,
}

/// A minibatch of transitions as tensors.
pub struct Batch {
    /// `[B, 4]` states.
    pub states: Tensor,
    /// `[B, 1]` actions (`i64`, for `gather`).
    pub actions: Tensor,
    /// `[B]` rewards.
    pub rewards: Tensor,
    /// `[B, 4]` next states.
    pub next: Tensor,
    /// `[B]` 1 where the episode failed, else 0.
    pub terminated: Tensor,
}

/// A fixed-capacity ring of transitions: once full, each new transition replaces the
/// oldest.
#[derive(Clone, Debug)]
pub struct ReplayBuffer {
    items: Vec<Transition>,
    capacity: usize,
    next: usize,
}

impl ReplayBuffer {
    /// An empty buffer holding at most `capacity` transitions.
    pub fn new(capacity: usize) -> Result<ReplayBuffer> {
        if capacity == 0 {
            return Err(Error::invalid("ReplayBuffer::new", "capacity must be positive"));
        }
        Ok(ReplayBuffer { items: Vec::with_capacity(capacity.min(1 << 20)), capacity, next: 0 })
    }

    /// Stores a transition, replacing the oldest when full.
    pub fn push(&mut self, t: Transition) {
        if self.items.len() < self.capacity {
            self.items.push(t);
        } else {
            self.items[self.next] = t;
        }
        self.next = (self.next + 1) % self.capacity;
    }

    /// The number of transitions stored.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing is stored yet.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether `t` is stored.
    pub fn contains(&self, t: &Transition) -> bool {
        self.items.contains(t)
    }

    /// `size` transitions drawn uniformly with replacement (as Stable-Baselines3 does).
    pub fn sample(&self, size: usize, rng: &mut Rng) -> Result<Vec<Transition>> {
        if self.items.is_empty() {
            return Err(Error::invalid("ReplayBuffer::sample", "the buffer is empty"));
        }
        Ok((0..size).map(|_| self.items[(rng.next_u64() % self.items.len() as u64) as usize]).collect())
    }

    /// [`sample`](ReplayBuffer::sample) as tensors.
    pub fn sample_batch(&self, size: usize, rng: &mut Rng) -> Result<Batch> {
        batch_of(&self.sample(size, rng)?)
    }
}

/// Transitions as tensors.
pub fn batch_of(ts: &[Transition]) -> Result<Batch> {
    let n = ts.len();
    let states: Vec<[f64; STATE]> = ts.iter().map(|t| t.state).collect();
    let next: Vec<[f64; STATE]> = ts.iter().map(|t| t.next).collect();
    Ok(Batch {
        states: states_tensor(&states)?,
        actions: Tensor::from_vec(ts.iter().map(|t| t.action as i64).collect::<Vec<_>>(), [n, 1])?,
        rewards: Tensor::from_vec(ts.iter().map(|t| t.reward as f32).collect::<Vec<_>>(), [n])?,
        next: states_tensor(&next)?,
        terminated: Tensor::from_vec(ts.iter().map(|t| f32::from(u8::from(t.terminated))).collect::<Vec<_>>(), [n])?,
    })
}

/// The TD targets `r + gamma * (1 - terminated) * Q_target(s', a*)` of a batch, computed
/// under [`no_grad`] so that they carry no graph, with `a*` the online network's argmax
/// when `double` (Double DQN) and the target network's own otherwise.
pub fn td_targets(online: &dyn Module, target: &dyn Module, batch: &Batch, gamma: f64, double: bool) -> Result<Var> {
    let n = batch.rewards.numel();
    no_grad(|| {
        let next = Var::new(batch.next.clone());
        let q_next = target.forward(&next)?;
        let best = if double {
            let choice = online.forward(&next)?.value().argmax(1, true)?;
            q_next.gather(1, &choice)?.reshape([n])?
        } else {
            q_next.max(1, false)?
        };
        let alive = batch.terminated.neg().add_scalar(1.0);
        &(&best * &alive)?.mul_scalar(gamma) + &batch.rewards
    })
}

/// One gradient step on a batch: the Huber loss between `Q_online(s, a)` and the TD
/// targets, clipped to `max_grad_norm`. Returns the loss.
pub fn train_step(
    online: &dyn Module,
    target: &dyn Module,
    opt: &mut dyn Optimizer,
    batch: &Batch,
    config: &Config,
) -> Result<f64> {
    let targets = td_targets(online, target, batch, config.gamma, config.double)?;
    let q = online.forward(&Var::new(batch.states.clone()))?;
    let chosen = q.gather(1, &batch.actions)?.reshape([batch.rewards.numel()])?;
    let loss = huber_loss(&chosen, &targets, HuberOptions::default())?;
    opt.zero_grad();
    loss.backward()?;
    clip_grad_norm_(&online.parameters(), config.max_grad_norm, 2.0)?;
    opt.step()?;
    loss.item()
}

/// The greedy actions (argmax Q) of a network for some states, without recording.
pub fn greedy_actions(q: &dyn Module, states: &[[f64; STATE]]) -> Result<Vec<usize>> {
    let x = Var::new(states_tensor(states)?);
    let best = no_grad(|| q.forward(&x))?.value().argmax(1, false)?;
    Ok(best.to_vec::<i64>()?.into_iter().map(|a| a as usize).collect())
}

/// The mean return of the greedy policy of `q` over `episodes` episodes, environment `i`
/// seeded `seed + i`.
pub fn evaluate(q: &dyn Module, episodes: usize, seed: u64) -> Result<f64> {
    evaluate_policy(episodes, seed, |states| greedy_actions(q, states))
}

/// Epsilon after `step` environment steps.
pub fn epsilon(config: &Config, step: usize) -> f64 {
    let f = (step as f64 / config.eps_steps.max(1) as f64).min(1.0);
    config.eps_start + f * (config.eps_end - config.eps_start)
}

/// What happened during [`train`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// `(environment steps so far, return)` of every finished training episode.
    pub episode_returns: Vec<(usize, f64)>,
    /// `(environment steps, mean greedy evaluation return)` of every evaluation.
    pub evaluations: Vec<(usize, f64)>,
    /// Environment steps taken.
    pub steps: usize,
    /// Gradient steps made.
    pub updates: usize,
    /// Hard copies (or soft updates) of the target network made.
    pub target_updates: usize,
    /// Whether an evaluation reached [`Config::target`].
    pub solved: bool,
}

/// Trains `online` with DQN as `config` says, `target` following it, until an evaluation
/// reaches the target or `max_steps` environment steps are taken. `target` starts as a
/// hard copy of `online`. `on_step(report, evaluated)` runs after every environment step,
/// `evaluated` telling whether an evaluation just ran.
pub fn train(
    online: &dyn Module,
    target: &dyn Module,
    config: &Config,
    mut on_step: impl FnMut(&Report, bool),
) -> Result<Report> {
    let c = *config;
    if c.batch == 0 || c.train_every == 0 || c.eval_every == 0 || c.eval_episodes == 0 {
        return Err(Error::invalid("dqn::train", format!("sizes must be positive, got {c:?}")));
    }
    match c.target_update {
        TargetUpdate::Hard(0) => return Err(Error::invalid("dqn::train", "the hard-copy period must be positive")),
        TargetUpdate::Soft(tau) if !(0.0..=1.0).contains(&tau) => {
            return Err(Error::invalid("dqn::train", format!("the soft-update tau must lie in [0, 1], got {tau}")));
        }
        _ => {}
    }
    let mut buffer = ReplayBuffer::new(c.buffer)?;
    hard_update(target, online)?;
    let mut opt = Adam::new(online.parameters(), AdamConfig { lr: c.lr, ..Default::default() })?;
    let mut env = CartPole::new(c.seed.wrapping_mul(1000));
    let mut rng = Rng::new(c.seed.wrapping_mul(1000).wrapping_add(999));
    let mut state = env.reset();
    let mut running = 0.0;
    let mut report = Report::default();
    for step in 1..=c.max_steps {
        let action = if rng.uniform() < epsilon(&c, step - 1) {
            (rng.next_u64() % ACTIONS as u64) as usize
        } else {
            greedy_actions(online, &[state])?[0]
        };
        let s = env.step(action);
        buffer.push(Transition { state, action, reward: s.reward, next: s.state, terminated: s.terminated });
        running += s.reward;
        state = s.state;
        if s.terminated || s.truncated {
            report.episode_returns.push((step, running));
            running = 0.0;
            state = env.reset();
        }
        report.steps = step;

        if step > c.learning_starts && step % c.train_every == 0 {
            let batch = buffer.sample_batch(c.batch, &mut rng)?;
            train_step(online, target, &mut opt, &batch, &c)?;
            report.updates += 1;
            if let TargetUpdate::Soft(tau) = c.target_update {
                soft_update(target, online, tau)?;
                report.target_updates += 1;
            }
        }
        if let TargetUpdate::Hard(every) = c.target_update
            && step % every == 0
        {
            hard_update(target, online)?;
            report.target_updates += 1;
        }

        let evaluated = step % c.eval_every == 0 || step == c.max_steps;
        if evaluated {
            let score = evaluate(online, c.eval_episodes, evaluation_seed(c.seed))?;
            report.evaluations.push((step, score));
            report.solved = score >= c.target;
        }
        on_step(&report, evaluated);
        if report.solved {
            break;
        }
    }
    Ok(report)
}

/// The seed of the first evaluation environment for a run seeded `seed`, far from the
/// training environment's `1000 * seed`.
pub fn evaluation_seed(seed: u64) -> u64 {
    seed.wrapping_mul(1000).wrapping_add(1_000_000)
}

//! The classic cart-pole balancing task (Gym's `CartPole-v1`), in pure Rust and seeded,
//! for the actor-critic, DQN and PPO examples ([`crate::actor_critic`], [`crate::dqn`],
//! [`crate::ppo`]).
//!
//! A pole is hinged on a cart moving along a track; each step pushes the cart left
//! (action 0) or right (action 1) with a force of 10 N, and earns a reward of 1. The
//! episode ends when the pole leans more than 12 degrees from upright or the cart leaves
//! the track (`|x| > 2.4`) — *terminated* — or after 500 steps — *truncated*, a time
//! limit rather than a failure. The dynamics are Barto, Sutton and Anderson's (1983),
//! integrated with explicit Euler steps of 0.02 s exactly as Gym does, and the start state
//! is uniform in `[-0.05, 0.05]` for all four variables.
//!
//! ```
//! use ember::cartpole::CartPole;
//! let mut env = CartPole::new(7);
//! let mut state = env.reset();
//! let mut total = 0.0;
//! loop {
//!     // Push towards the side the pole leans to.
//!     let step = env.step(usize::from(state[2] > 0.0));
//!     total += step.reward;
//!     state = step.state;
//!     if step.terminated || step.truncated {
//!         break;
//!     }
//! }
//! assert!(total >= 10.0);
//! ```

/// The number of state variables: cart position, cart velocity, pole angle, pole angular
/// velocity.
pub const STATE: usize = 4;
/// The number of actions: push left, push right.
pub const ACTIONS: usize = 2;
/// The step limit of `CartPole-v1`.
pub const MAX_STEPS: usize = 500;

const GRAVITY: f64 = 9.8;
const CART_MASS: f64 = 1.0;
const POLE_MASS: f64 = 0.1;
const TOTAL_MASS: f64 = CART_MASS + POLE_MASS;
/// Half the pole's length.
const LENGTH: f64 = 0.5;
const POLE_MASS_LENGTH: f64 = POLE_MASS * LENGTH;
const FORCE: f64 = 10.0;
const TAU: f64 = 0.02;
/// 12 degrees in radians, as Gym writes it.
const ANGLE_LIMIT: f64 = 12.0 * 2.0 * std::f64::consts::PI / 360.0;
const POSITION_LIMIT: f64 = 2.4;

/// A small seeded generator (SplitMix64) for start states and sampled actions, so that
/// episodes depend only on their seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform draw from `[0, 1)`.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What one [`CartPole::step`] gives back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    /// The state after the step.
    pub state: [f64; STATE],
    /// The reward: 1 for every step, the last one included.
    pub reward: f64,
    /// The pole fell or the cart left the track: the episode failed and has no future.
    pub terminated: bool,
    /// The step limit was reached: the episode was cut off, its future is not zero.
    pub truncated: bool,
}

/// One cart-pole environment with its own generator.
#[derive(Clone, Debug)]
pub struct CartPole {
    state: [f64; STATE],
    steps: usize,
    rng: Rng,
}

impl CartPole {
    /// An environment seeded with `seed`; call [`CartPole::reset`] before stepping.
    pub fn new(seed: u64) -> CartPole {
        CartPole { state: [0.0; STATE], steps: 0, rng: Rng::new(seed) }
    }

    /// Starts an episode: each state variable uniform in `[-0.05, 0.05]`.
    pub fn reset(&mut self) -> [f64; STATE] {
        for v in &mut self.state {
            *v = 0.1 * self.rng.uniform() - 0.05;
        }
        self.steps = 0;
        self.state
    }

    /// The current state.
    pub fn state(&self) -> [f64; STATE] {
        self.state
    }

    /// The environment's generator (also used to sample the agent's actions, so that one
    /// seed fixes a whole episode).
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// Pushes the cart left (`action == 0`) or right (any other action) for 0.02 s.
    pub fn step(&mut self, action: usize) -> Step {
        let [x, x_dot, theta, theta_dot] = self.state;
        let force = if action == 0 { -FORCE } else { FORCE };
        let (sin, cos) = theta.sin_cos();
        let temp = (force + POLE_MASS_LENGTH * theta_dot * theta_dot * sin) / TOTAL_MASS;
        let theta_acc = (GRAVITY * sin - cos * temp) / (LENGTH * (4.0 / 3.0 - POLE_MASS * cos * cos / TOTAL_MASS));
        let x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos / TOTAL_MASS;
        self.state = [x + TAU * x_dot, x_dot + TAU * x_acc, theta + TAU * theta_dot, theta_dot + TAU * theta_acc];
        self.steps += 1;
        let terminated = self.state[0].abs() > POSITION_LIMIT || self.state[2].abs() > ANGLE_LIMIT;
        Step { state: self.state, reward: 1.0, terminated, truncated: !terminated && self.steps >= MAX_STEPS }
    }
}

/// The mean return of a deterministic policy over `episodes` episodes run side by side,
/// environment `i` seeded `seed + i`: `policy` gets the states of the episodes still
/// running and answers one action for each. The evaluation of the DQN and PPO examples.
///
/// ```
/// use ember::cartpole::evaluate_policy;
/// // The lean-following controller: push towards where the pole is falling.
/// let score = evaluate_policy(10, 3, |states| Ok(states.iter().map(|s| usize::from(s[2] + 0.5 * s[3] > 0.0)).collect()))?;
/// assert!(score > 100.0, "{score}");
/// # Ok::<(), ember::Error>(())
/// ```
pub fn evaluate_policy(
    episodes: usize,
    seed: u64,
    mut policy: impl FnMut(&[[f64; STATE]]) -> crate::Result<Vec<usize>>,
) -> crate::Result<f64> {
    let mut envs: Vec<CartPole> = (0..episodes as u64).map(|i| CartPole::new(seed.wrapping_add(i))).collect();
    let mut states: Vec<[f64; STATE]> = envs.iter_mut().map(CartPole::reset).collect();
    let mut alive: Vec<usize> = (0..episodes).collect();
    let mut returns = vec![0.0; episodes];
    while !alive.is_empty() {
        let live: Vec<[f64; STATE]> = alive.iter().map(|&i| states[i]).collect();
        let actions = policy(&live)?;
        if actions.len() != live.len() {
            return Err(crate::Error::invalid(
                "cartpole::evaluate_policy",
                format!("the policy answered {} actions for {} states", actions.len(), live.len()),
            ));
        }
        let mut still = Vec::with_capacity(alive.len());
        for (&i, &action) in alive.iter().zip(&actions) {
            let step = envs[i].step(action);
            returns[i] += step.reward;
            states[i] = step.state;
            if !(step.terminated || step.truncated) {
                still.push(i);
            }
        }
        alive = still;
    }
    Ok(returns.iter().sum::<f64>() / episodes.max(1) as f64)
}

/// States `[N, 4]` as an `f32` tensor, the networks' input.
pub fn states_tensor(states: &[[f64; STATE]]) -> crate::Result<crate::Tensor> {
    let flat: Vec<f32> = states.iter().flat_map(|s| s.iter().map(|&v| v as f32)).collect();
    crate::Tensor::from_vec(flat, [states.len(), STATE])
}

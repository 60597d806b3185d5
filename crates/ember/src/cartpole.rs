//! The classic cart-pole balancing task (Gym's `CartPole-v1`), in pure Rust and seeded,
//! for the actor-critic example ([`crate::actor_critic`]).
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

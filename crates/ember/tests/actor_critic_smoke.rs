//! The actor-critic example's CI check: the CartPole environment follows the task's rules
//! (seeded starts, failure beyond 12 degrees or 2.4 units, cut-off at 500 steps), and A2C
//! with the default settings solves it: the greedy policy averages at least 475 over 100
//! evaluation episodes.

use ember::actor_critic::{self, ActorCritic, Config};
use ember::cartpole::{CartPole, MAX_STEPS};
use ember::{Result, manual_seed};

#[test]
fn cartpole_starts_seeded_fails_by_the_rules_and_stops_at_500_steps() {
    let (mut a, mut b) = (CartPole::new(3), CartPole::new(3));
    let start = a.reset();
    assert_eq!(start, b.reset(), "same seed, same start");
    assert!(start.iter().all(|v| v.abs() <= 0.05));
    assert_ne!(start, CartPole::new(4).reset());

    // Always pushing left: the pole falls to the right within a few dozen steps.
    let mut steps = 0;
    let last = loop {
        let s = a.step(0);
        steps += 1;
        if s.terminated || s.truncated {
            break s;
        }
    };
    assert!(last.terminated && !last.truncated && steps < 100, "{steps} steps, {last:?}");
    let limit = 12f64.to_radians();
    assert!(last.state[2].abs() > limit || last.state[0].abs() > 2.4, "{last:?}");

    // A hand controller that pushes towards the lean, corrected by the angular velocity,
    // balances until the time limit cuts the episode off.
    let mut state = b.reset();
    for step in 1..=MAX_STEPS {
        let s = b.step(usize::from(state[2] + 0.5 * state[3] > 0.0));
        assert!(!s.terminated, "the controller failed at step {step}: {s:?}");
        assert_eq!(s.truncated, step == MAX_STEPS);
        state = s.state;
    }
}

#[test]
fn a2c_with_default_settings_solves_cartpole() -> Result<()> {
    let config = Config::default();
    manual_seed(config.seed);
    let model = ActorCritic::new(config.hidden)?;
    let report = actor_critic::train(&model, &config, |_, _| {})?;
    let last = report.evaluations.last().map_or(0.0, |e| e.1);
    assert!(report.solved && last >= 475.0, "greedy mean return {last} after {} updates", report.updates);
    assert!(report.episode_returns.iter().all(|e| (1.0..=500.0).contains(&e.1)));
    // The same evaluation again gives the same result: the policy is greedy and the
    // environments seeded.
    let again = actor_critic::evaluate(&model, config.eval_episodes, actor_critic::evaluation_seed(config.seed))?;
    assert_eq!(again, last);
    Ok(())
}

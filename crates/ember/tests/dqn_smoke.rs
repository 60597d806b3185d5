//! The DQN example's CI check, with small settings: the target network is an exact copy
//! after a hard update and stands still between copies, a soft update is the Polyak
//! average, TD targets carry no graph, the target's parameters never get a gradient, the
//! replay buffer keeps its capacity, and a short run improves the return.

use ember::cartpole::{CartPole, Rng};
use ember::dqn::{self, Config, ReplayBuffer, TargetUpdate, Transition};
use ember::nn::{Module, hard_update, soft_update};
use ember::optim::{Adam, AdamConfig};
use ember::{Result, manual_seed};

fn values(m: &dyn Module) -> Result<Vec<Vec<f32>>> {
    m.parameters().iter().map(|p| p.value().to_vec::<f32>()).collect()
}

/// A buffer filled by a random policy.
fn random_experience(steps: usize, seed: u64) -> Result<ReplayBuffer> {
    let mut buffer = ReplayBuffer::new(steps)?;
    let mut env = CartPole::new(seed);
    let mut state = env.reset();
    for _ in 0..steps {
        let action = (env.rng().next_u64() % 2) as usize;
        let s = env.step(action);
        buffer.push(Transition { state, action, reward: s.reward, next: s.state, terminated: s.terminated });
        state = if s.terminated || s.truncated { env.reset() } else { s.state };
    }
    Ok(buffer)
}

#[test]
fn target_network_copies_exactly_stands_still_between_copies_and_gets_no_gradient() -> Result<()> {
    manual_seed(0);
    let config = Config { hidden: 32, ..Config::default() };
    let (online, target) = (dqn::q_network(config.hidden)?, dqn::q_network(config.hidden)?);
    hard_update(&target, &online)?;
    assert_eq!(values(&target)?, values(&online)?, "a hard copy is bit for bit");
    assert!(target.parameters().iter().all(|p| !p.requires_grad()));

    let buffer = random_experience(500, 1)?;
    let mut rng = Rng::new(2);
    let mut opt = Adam::new(online.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
    let copied = values(&target)?;
    for _ in 0..5 {
        let batch = buffer.sample_batch(32, &mut rng)?;
        let targets = dqn::td_targets(&online, &target, &batch, config.gamma, true)?;
        assert!(!targets.requires_grad() && targets.is_leaf(), "TD targets carry no graph");
        assert_eq!(targets.shape().dims(), &[32]);
        dqn::train_step(&online, &target, &mut opt, &batch, &config)?;
        assert!(target.parameters().iter().all(|p| p.grad().is_none()), "no gradient reaches the target");
        assert!(online.parameters().iter().all(|p| p.grad().is_some()));
    }
    assert_ne!(values(&online)?, copied, "the online network learns between copies");
    assert_eq!(values(&target)?, copied, "the target network stands still between copies");
    hard_update(&target, &online)?;
    assert_eq!(values(&target)?, values(&online)?);

    // Even if the target's parameters required grad (a user unfreezing them by mistake),
    // the TD targets, computed under no_grad, would carry no graph; the next copy freezes
    // them again.
    target.parameters().iter().try_for_each(|p| p.requires_grad_(true).map(drop))?;
    let batch = buffer.sample_batch(32, &mut rng)?;
    let targets = dqn::td_targets(&online, &target, &batch, config.gamma, true)?;
    assert!(!targets.requires_grad() && targets.is_leaf());
    hard_update(&target, &online)?;
    assert!(target.parameters().iter().all(|p| !p.requires_grad()));

    // The plain-DQN targets too come without a graph, and they are never below the
    // Double-DQN ones (a max over the target's values bounds any one of them).
    let batch = buffer.sample_batch(64, &mut rng)?;
    online.parameters()[0].value().add_scalar_(0.01)?;
    let plain = dqn::td_targets(&online, &target, &batch, config.gamma, false)?;
    let double = dqn::td_targets(&online, &target, &batch, config.gamma, true)?;
    assert!(!plain.requires_grad());
    for (p, d) in plain.value().to_vec::<f32>()?.iter().zip(double.value().to_vec::<f32>()?) {
        assert!(*p >= d, "{p} < {d}");
    }
    Ok(())
}

#[test]
fn soft_update_gives_the_polyak_average() -> Result<()> {
    manual_seed(3);
    let (online, target) = (dqn::q_network(16)?, dqn::q_network(16)?);
    let (o, t) = (values(&online)?, values(&target)?);
    let tau = 0.05;
    soft_update(&target, &online, tau)?;
    for ((o, t), now) in o.iter().zip(&t).zip(values(&target)?) {
        for ((o, t), now) in o.iter().zip(t).zip(now) {
            let want = tau * f64::from(*o) + (1.0 - tau) * f64::from(*t);
            assert!((f64::from(now) - want).abs() <= 1e-7, "{now} vs {want}");
        }
    }
    Ok(())
}

#[test]
fn replay_buffer_keeps_its_capacity_and_samples_what_it_holds() -> Result<()> {
    let mut buffer = ReplayBuffer::new(5)?;
    assert!(buffer.is_empty() && buffer.sample(1, &mut Rng::new(0)).is_err());
    let t = |k: usize| Transition {
        state: [k as f64, 0.0, 0.0, 0.0],
        action: k % 2,
        reward: 1.0,
        next: [k as f64 + 1.0, 0.0, 0.0, 0.0],
        terminated: k.is_multiple_of(3),
    };
    for k in 0..8 {
        buffer.push(t(k));
        assert_eq!(buffer.len(), (k + 1).min(5));
    }
    assert_eq!(buffer.capacity(), 5);
    assert!((0..3).all(|k| !buffer.contains(&t(k))), "the oldest are replaced first");
    assert!((3..8).all(|k| buffer.contains(&t(k))));
    let mut rng = Rng::new(7);
    let sample = buffer.sample(1000, &mut rng)?;
    assert!(sample.iter().all(|s| buffer.contains(s)));
    for k in 3..8 {
        let hits = sample.iter().filter(|s| **s == t(k)).count();
        assert!((140..=260).contains(&hits), "transition {k} drawn {hits} times of 1000");
    }
    let batch = dqn::batch_of(&sample[..4])?;
    assert_eq!(
        (batch.states.shape().dims(), batch.actions.shape().dims(), batch.terminated.shape().dims()),
        (&[4, 4][..], &[4, 1][..], &[4][..])
    );
    assert!(ReplayBuffer::new(0).is_err());
    Ok(())
}

#[test]
fn a_short_run_improves_the_return() -> Result<()> {
    manual_seed(0);
    let config = Config {
        hidden: 64,
        lr: 1e-3,
        batch: 32,
        buffer: 5000,
        learning_starts: 300,
        train_every: 2,
        target_update: TargetUpdate::Hard(100),
        eps_steps: 1500,
        eps_end: 0.05,
        max_steps: 3000,
        eval_every: 3000,
        eval_episodes: 10,
        seed: 0,
        ..Config::default()
    };
    let (online, target) = (dqn::q_network(config.hidden)?, dqn::q_network(config.hidden)?);
    let report = dqn::train(&online, &target, &config, |_, _| {})?;
    let returns: Vec<f64> = report.episode_returns.iter().map(|e| e.1).collect();
    let mean = |r: &[f64]| r.iter().sum::<f64>() / r.len() as f64;
    let (first, last) = (mean(&returns[..10]), mean(&returns[returns.len() - 5..]));
    let eval = report.evaluations.last().map_or(0.0, |e| e.1);
    println!("first 10 episodes {first:.1}, last 5 {last:.1}, greedy {eval:.1}, {} updates", report.updates);
    assert!(last > 2.0 * first && eval > 2.0 * first, "first {first}, last {last}, greedy {eval}");
    assert_eq!(report.target_updates, config.max_steps / 100);
    Ok(())
}

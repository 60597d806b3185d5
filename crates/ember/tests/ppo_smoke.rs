//! The PPO example's CI check, with small settings: rollouts carry no graph, the clipped
//! objective and GAE match hand-computed values, each optimizer moves only its own
//! network, the shared trunk's two-backward gradients equal one backward of the sum, and a
//! short run improves the return.

use ember::autograd::Var;
use ember::optim::Optimizer;
use ember::ppo::{self, Agent, Config, Envs, Optimizers};
use ember::tensor::Tensor;
use ember::{Result, manual_seed};

fn values(params: &[Var]) -> Result<Vec<Vec<f32>>> {
    params.iter().map(|p| p.value().to_vec::<f32>()).collect()
}

fn small() -> Config {
    Config { envs: 4, horizon: 32, hidden: 32, ..Config::default() }
}

fn rows(n: usize) -> Result<Tensor> {
    Tensor::from_vec((0..n as i64).collect::<Vec<_>>(), [n])
}

#[test]
fn rollouts_carry_no_graph() -> Result<()> {
    for shared in [false, true] {
        manual_seed(0);
        let config = Config { shared_backbone: shared, ..small() };
        let agent = Agent::new(&config)?;
        let mut episodes = Vec::new();
        let r = ppo::collect(&agent, &mut Envs::new(config.envs, 0), &config, &mut episodes)?;
        let n = config.envs * config.horizon;
        for (name, v) in [("log_probs", &r.log_probs), ("values", &r.values)] {
            assert!(!v.requires_grad() && v.is_leaf(), "{name} has a graph");
            assert_eq!(v.shape().dims(), &[n]);
        }
        assert!(r.log_probs.value().to_vec::<f32>()?.iter().all(|&l| l < 0.0 && l > -10.0));
        // Collecting recorded nothing: no parameter has a gradient, nothing to backpropagate.
        assert!(agent.actor_parameters().iter().chain(&agent.critic_parameters()).all(|p| p.grad().is_none()));
        assert_eq!(
            (r.advantages.shape().dims(), r.returns.shape().dims(), r.states.shape().dims()),
            (&[n][..], &[n][..], &[n, 4][..])
        );
        // The critic's targets are advantages plus the stored values.
        let (a, v, ret) =
            (r.advantages.to_vec::<f32>()?, r.values.value().to_vec::<f32>()?, r.returns.to_vec::<f32>()?);
        assert!(a.iter().zip(&v).zip(&ret).all(|((a, v), r)| (a + v - r).abs() < 1e-5));
    }
    Ok(())
}

#[test]
fn clipped_objective_matches_a_hand_computed_batch() -> Result<()> {
    // Ratios 1.5, 0.5, 1.1, 0.7 against advantages 1, 1, -2, -1, clip 0.2:
    // min(1.5, 1.2) = 1.2, min(0.5, 0.8) = 0.5, min(-2.2, -2.2) = -2.2, min(-0.7, -0.8) = -0.8.
    let ratios = [1.5f32, 0.5, 1.1, 0.7];
    let new = Var::param(Tensor::from_vec(ratios.iter().map(|r| r.ln()).collect::<Vec<_>>(), [4])?);
    let old = Tensor::zeros([4], ember::DType::F32)?;
    let adv = Tensor::from_vec(vec![1f32, 1.0, -2.0, -1.0], [4])?;
    let objective = ppo::clipped_objective(&new, &old, &adv, 0.2)?;
    assert!((objective.item()? - (1.2 + 0.5 - 2.2 - 0.8) / 4.0).abs() < 1e-6, "{}", objective.item()?);
    // Clipped terms pass no gradient; the others give d(r * A)/d(log r) / 4 = r * A / 4.
    objective.backward()?;
    let grad = new.grad().unwrap().to_vec::<f32>()?;
    for (g, want) in grad.iter().zip([0.0, 0.125, -0.55, 0.0]) {
        assert!((f64::from(*g) - want).abs() < 1e-6, "{grad:?}");
    }
    Ok(())
}

#[test]
fn gae_matches_a_hand_computed_example() -> Result<()> {
    // Two environments, three steps, rows t * 2 + i; gamma 0.9, lambda 0.5.
    // Environment 0 runs on: deltas 0.86, 0.87, 0.88; A2 = 0.88, A1 = 0.87 + 0.45 * 0.88 =
    // 1.266, A0 = 0.86 + 0.45 * 1.266 = 1.4297.
    // Environment 1 fails at step 0 (next value 0, nothing carried back), then runs on:
    // deltas 0, -0.55, 1.13; A2 = 1.13, A1 = -0.55 + 0.45 * 1.13 = -0.0415, A0 = 0.
    let rewards = [1.0; 6];
    let values = [0.5, 1.0, 0.4, 2.0, 0.3, 0.5];
    let next_values = [0.4, 0.0, 0.3, 0.5, 0.2, 0.7];
    let ends = [false, true, false, false, false, false];
    let a = ppo::gae(&rewards, &values, &next_values, &ends, 2, 0.9, 0.5)?;
    for (got, want) in a.iter().zip([1.4297, 0.0, 1.266, -0.0415, 0.88, 1.13]) {
        assert!((got - want).abs() < 1e-12, "{a:?}");
    }
    // lambda = 1 and no ends: the discounted rewards to go plus the discounted last value.
    let a = ppo::gae(&[1.0, 1.0], &[0.0, 0.0], &[0.0, 2.0], &[false, false], 1, 0.5, 1.0)?;
    assert!((a[0] - (1.0 + 0.5 * (1.0 + 0.5 * 2.0))).abs() < 1e-12 && (a[1] - 2.0).abs() < 1e-12, "{a:?}");
    assert!(ppo::gae(&rewards, &values, &next_values, &ends, 4, 0.9, 0.5).is_err());
    Ok(())
}

#[test]
fn each_optimizer_moves_only_its_own_network() -> Result<()> {
    manual_seed(1);
    let config = small();
    let agent = Agent::new(&config)?;
    let mut opts = Optimizers::new(&agent, &config)?;
    let ids = |v: &[Var]| v.iter().map(Var::id).collect::<Vec<_>>();
    assert_eq!(ids(opts.actor.params()), ids(&agent.actor_parameters()));
    assert_eq!(ids(opts.critic.params()), ids(&agent.critic_parameters()));
    let r = ppo::collect(&agent, &mut Envs::new(config.envs, 1), &config, &mut Vec::new())?;
    let l = ppo::losses(&agent, &r, &rows(64)?, &config)?;
    l.actor.backward()?;
    assert!(agent.actor_parameters().iter().all(|p| p.grad().is_some()));
    assert!(agent.critic_parameters().iter().all(|p| p.grad().is_none()), "the actor loss reaches the critic");
    l.critic.backward()?;
    assert!(agent.critic_parameters().iter().all(|p| p.grad().is_some()));

    let (actor0, critic0) = (values(&agent.actor_parameters())?, values(&agent.critic_parameters())?);
    opts.actor.step()?;
    let actor1 = values(&agent.actor_parameters())?;
    assert_ne!(actor1, actor0);
    assert_eq!(values(&agent.critic_parameters())?, critic0, "the actor's optimizer moved the critic");
    opts.critic.step()?;
    assert_ne!(values(&agent.critic_parameters())?, critic0);
    assert_eq!(values(&agent.actor_parameters())?, actor1, "the critic's optimizer moved the actor");
    Ok(())
}

#[test]
fn shared_trunk_gradients_of_two_backwards_equal_one_backward_of_the_sum() -> Result<()> {
    manual_seed(2);
    let config = Config { shared_backbone: true, entropy_weight: 0.01, ..small() };
    let agent = Agent::new(&config)?;
    assert!(agent.is_shared() && agent.trunk_parameters().len() == 4);
    let trunk: Vec<usize> = agent.trunk_parameters().iter().map(Var::id).collect();
    assert!(trunk.iter().all(|id| agent.actor_parameters().iter().any(|p| p.id() == *id)), "the actor owns the trunk");
    assert!(trunk.iter().all(|id| agent.critic_parameters().iter().all(|p| p.id() != *id)));
    let r = ppo::collect(&agent, &mut Envs::new(config.envs, 2), &config, &mut Vec::new())?;
    let gap = ppo::shared_gradient_gap(&agent, &r, &rows(128)?, &config)?;
    let largest = agent
        .trunk_parameters()
        .iter()
        .map(|p| p.grad().unwrap().abs().max_all()?.item())
        .collect::<Result<Vec<f64>>>()?
        .into_iter()
        .fold(0.0, f64::max);
    println!("trunk gradient gap {gap:?}, largest trunk gradient {largest:e}");
    assert_eq!(gap.largest_gradient, largest);
    assert!(gap.largest_difference < 1e-6 && largest > 1e-4, "{gap:?}");

    // Both losses reach the trunk: the critic's alone gives it a gradient too.
    agent.zero_grad();
    ppo::losses(&agent, &r, &rows(128)?, &config)?.critic.backward()?;
    assert!(agent.trunk_parameters().iter().all(|p| p.grad().is_some()));
    assert!(ppo::shared_gradient_gap(&Agent::separate(8)?, &r, &rows(8)?, &config).is_err());
    Ok(())
}

#[test]
fn a_short_run_improves_the_return() -> Result<()> {
    for shared in [false, true] {
        manual_seed(0);
        let config = Config {
            shared_backbone: shared,
            epochs: 4,
            minibatch: 64,
            max_updates: 30,
            eval_every: 30,
            eval_episodes: 10,
            ..small()
        };
        let agent = Agent::new(&config)?;
        let report = ppo::train(&agent, &config, |_, _| {})?;
        let returns: Vec<f64> = report.episode_returns.iter().map(|e| e.1).collect();
        let mean = |r: &[f64]| r.iter().sum::<f64>() / r.len() as f64;
        let (first, last) = (mean(&returns[..10]), mean(&returns[returns.len() - 10..]));
        let eval = report.evaluations.last().map_or(0.0, |e| e.1);
        println!("shared {shared}: first 10 episodes {first:.1}, last 10 {last:.1}, greedy {eval:.1}");
        assert!(last > 1.5 * first, "shared {shared}: first {first}, last {last}");
        assert_eq!(report.shared_gaps.len(), if shared { report.updates } else { 0 });
        assert!(report.shared_gaps.iter().all(|g| g.largest_difference < 1e-6), "{:?}", report.shared_gaps);
    }
    Ok(())
}

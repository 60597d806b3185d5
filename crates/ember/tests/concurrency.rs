//! Training from several threads at once. Two models trained on two threads end bitwise
//! where sequential training ends; backward passes from several threads on graphs sharing
//! parameters accumulate the sequential sum; a few seconds of both at once finish under a
//! watchdog (a deadlock fails the test instead of hanging it).
//!
//! The global RNG is shared by every thread, so the models are built (and the data made)
//! on the main thread before any training thread starts.

use ember::Var;
use ember::mnist::{LAYERS, mlp};
use ember::nn::{CrossEntropyOptions, Module, Sequential, cross_entropy};
use ember::optim::{Adam, AdamConfig, Optimizer};
use ember::tensor::{Result, Tensor};
use parking_lot::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a piece of concurrent work may take before it is declared deadlocked: far
/// beyond its normal time even on a loaded two-core machine.
const WATCHDOG: Duration = Duration::from_secs(300);

/// Runs `f` on a thread and returns its result, failing if it takes longer than
/// [`WATCHDOG`].
fn with_watchdog<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(WATCHDOG).unwrap_or_else(|_| panic!("{what}: no result after {WATCHDOG:?} (deadlock?)"))
}

/// Deterministic batches (no RNG): inputs `[batch, 784]` and labels `[batch]`.
fn batches(n: usize, batch: usize, salt: usize) -> Vec<(Tensor, Tensor)> {
    (0..n)
        .map(|b| {
            let x: Vec<f32> =
                (0..batch * LAYERS[0]).map(|i| (((i * 7 + b * 13 + salt) % 31) as f32 - 15.0) / 15.0).collect();
            let y: Vec<i64> = (0..batch).map(|i| ((i * 3 + b + salt) % LAYERS[3]) as i64).collect();
            (Tensor::from_vec(x, [batch, LAYERS[0]]).unwrap(), Tensor::from_vec(y, [batch]).unwrap())
        })
        .collect()
}

/// Trains `model` with Adam on `data`; returns the loss bits of every step and the bits of
/// the final parameters.
fn train(model: Sequential, data: Vec<(Tensor, Tensor)>) -> Result<(Vec<u64>, Vec<u32>)> {
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
    let mut losses = Vec::new();
    for (x, y) in &data {
        let loss = cross_entropy(&model.forward(&Var::new(x.clone()))?, y, CrossEntropyOptions::default())?;
        opt.zero_grad();
        loss.backward()?;
        opt.step()?;
        losses.push(loss.item()?.to_bits());
    }
    let mut bits = Vec::new();
    for p in model.parameters() {
        bits.extend(p.value().to_vec::<f32>()?.iter().map(|v| v.to_bits()));
    }
    Ok((losses, bits))
}

/// A model built from `seed`. The tests of this file run in parallel and all draw from the
/// global RNG, so seeding and drawing hold a lock.
fn model(seed: u64) -> Sequential {
    static RNG: Mutex<()> = Mutex::new(());
    let _held = RNG.lock();
    ember::manual_seed(seed);
    mlp().unwrap()
}

#[test]
fn two_models_trained_at_once_match_sequential_training() {
    let (data_a, data_b) = (batches(12, 32, 0), batches(12, 32, 5));
    let sequential_a = train(model(1), data_a.clone()).unwrap();
    let sequential_b = train(model(2), data_b.clone()).unwrap();
    let (ma, mb) = (model(1), model(2));
    let (a, b) = with_watchdog("two trainings", move || {
        let ta = std::thread::spawn(move || train(ma, data_a));
        let tb = std::thread::spawn(move || train(mb, data_b));
        (ta.join().unwrap().unwrap(), tb.join().unwrap().unwrap())
    });
    assert_eq!(a, sequential_a, "model A trained beside model B differs from model A trained alone");
    assert_eq!(b, sequential_b, "model B trained beside model A differs from model B trained alone");
    assert_ne!(a.1, b.1);
}

/// A loss on shared parameters `w` (`[4, 3]`) and `bias` (`[3]`) from an input of `k`.
fn shared_loss(w: &Var, bias: &Var, k: usize) -> Result<Var> {
    let x: Vec<f64> = (0..8).map(|i| ((i * 5 + k * 3) % 11) as f64 / 5.0 - 1.0).collect();
    let x = Var::new(Tensor::from_vec(x, [2, 4])?);
    Ok(x.matmul(w)?.add(bias)?.tanh().square().sum_all())
}

/// The gradients of `w` and `bias` after `threads` threads each backpropagate the loss of
/// inputs `0..per_thread` (offset by thread) at once.
fn concurrent_grads(w: &Var, bias: &Var, threads: usize, per_thread: usize) -> (Vec<f64>, Vec<f64>) {
    w.zero_grad();
    bias.zero_grad();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (w, bias) = (w.clone(), bias.clone());
            std::thread::spawn(move || -> Result<()> {
                for i in 0..per_thread {
                    shared_loss(&w, &bias, t * per_thread + i)?.backward()?;
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    (w.grad().unwrap().to_vec::<f64>().unwrap(), bias.grad().unwrap().to_vec::<f64>().unwrap())
}

fn sequential_grads(w: &Var, bias: &Var, n: usize) -> (Vec<f64>, Vec<f64>) {
    w.zero_grad();
    bias.zero_grad();
    for k in 0..n {
        shared_loss(w, bias, k).unwrap().backward().unwrap();
    }
    (w.grad().unwrap().to_vec::<f64>().unwrap(), bias.grad().unwrap().to_vec::<f64>().unwrap())
}

fn shared_params() -> (Var, Var) {
    let w: Vec<f64> = (0..12).map(|i| (i as f64 - 6.0) / 7.0).collect();
    let w = Var::param(Tensor::from_vec(w, [4, 3]).unwrap());
    let bias = Var::param(Tensor::from_vec(vec![0.1f64, -0.2, 0.3], [3]).unwrap());
    (w, bias)
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        // Only the order of the additions differs.
        assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "{what}: {got:?} vs {want:?}");
    }
}

#[test]
fn concurrent_backward_on_shared_parameters_sums_like_sequential() {
    let (w, bias) = shared_params();
    let (threads, per_thread) = (4, 25);
    let want = sequential_grads(&w, &bias, threads * per_thread);
    let (w2, b2) = (w.clone(), bias.clone());
    let got = with_watchdog("concurrent backward", move || concurrent_grads(&w2, &b2, threads, per_thread));
    assert_close(&got.0, &want.0, "weight gradient");
    assert_close(&got.1, &want.1, "bias gradient");
}

/// Both kinds of concurrent work, over and over for a few seconds: a training thread
/// beside three backward threads, each round checked against its sequential result.
#[test]
fn concurrent_training_and_backward_stress() {
    let (w, bias) = shared_params();
    let want = sequential_grads(&w, &bias, 3 * 10);
    let want_train = train(model(3), batches(2, 16, 1)).unwrap();
    let rounds = with_watchdog("stress", move || {
        let started = Instant::now();
        let mut rounds = 0;
        while started.elapsed() < Duration::from_secs(3) || rounds < 2 {
            let m = model(3);
            let trainer = std::thread::spawn(move || train(m, batches(2, 16, 1)));
            let got = concurrent_grads(&w, &bias, 3, 10);
            assert_close(&got.0, &want.0, "weight gradient");
            assert_close(&got.1, &want.1, "bias gradient");
            assert_eq!(trainer.join().unwrap().unwrap(), want_train, "round {rounds}");
            rounds += 1;
        }
        rounds
    });
    assert!(rounds >= 2);
}

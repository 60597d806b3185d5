//! Gradient checkpointing: identical values and gradients to the plain computation,
//! parameters captured by the segment receive their gradients (through backward and
//! grad()), recomputation happens in backward, gradients of gradients through checkpoints
//! (create_graph) are right, and the error cases (the replay of the random generator is
//! tested in `checkpoint_rng.rs`, alone: the generator is process-wide).

use ember_autograd::{Var, checkpoint, grad, no_grad};
use ember_tensor::{DType, Result, Tensor};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

fn randn(shape: &[usize]) -> Tensor {
    Tensor::randn(shape.to_vec()).expect("randn").to_dtype(DType::F64)
}

fn layer(h: &Var, w: &Var, b: &Var) -> Result<Var> {
    Ok(h.matmul(w)?.add(b)?.tanh())
}

struct Mlp {
    ws: Vec<Var>,
    bs: Vec<Var>,
}

impl Mlp {
    fn new(depth: usize, width: usize) -> Self {
        Mlp {
            ws: (0..depth).map(|_| Var::param(randn(&[width, width]).mul_scalar(0.5))).collect(),
            bs: (0..depth).map(|_| Var::param(randn(&[width]).mul_scalar(0.1))).collect(),
        }
    }

    fn block(&self, from: usize, to: usize) -> impl Fn(&Var) -> Result<Var> + Send + Sync + Clone + 'static {
        let (ws, bs) = (self.ws[from..to].to_vec(), self.bs[from..to].to_vec());
        move |h: &Var| {
            let mut h = h.clone();
            for (w, b) in ws.iter().zip(&bs) {
                h = layer(&h, w, b)?;
            }
            Ok(h)
        }
    }

    fn params(&self) -> Vec<&Var> {
        self.ws.iter().chain(&self.bs).collect()
    }

    fn grads(&self) -> Vec<Vec<f64>> {
        self.params().iter().map(|p| p.grad().expect("a gradient").to_vec::<f64>().expect("f64")).collect()
    }

    fn zero_grad(&self) {
        for p in self.params() {
            p.zero_grad();
        }
    }
}

#[test]
fn checkpointed_segments_give_identical_values_and_gradients() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(5);
    let mlp = Mlp::new(6, 8);
    let x = Var::param(randn(&[4, 8]));
    let target = Var::new(randn(&[4, 8]));

    let plain = mlp.block(0, 6)(&x)?;
    plain.sub(&target)?.square().mean_all().backward()?;
    let (g_plain, gx_plain) = (mlp.grads(), x.grad().unwrap().to_vec::<f64>()?);
    mlp.zero_grad();
    x.zero_grad();

    let mut h = x.clone();
    for s in 0..3 {
        h = h.checkpoint(mlp.block(2 * s, 2 * s + 2))?;
        assert_eq!(h.op_name(), "checkpoint");
    }
    assert_eq!(h.value().to_vec::<f64>()?, plain.value().to_vec::<f64>()?);
    h.sub(&target)?.square().mean_all().backward()?;
    assert_eq!(mlp.grads(), g_plain, "parameter gradients");
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, gx_plain, "input gradient");
    Ok(())
}

#[test]
fn the_segment_is_recomputed_during_backward_only() -> Result<()> {
    let w = Var::param(Tensor::from_vec(vec![0.5f64, 2.0], [2])?);
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let w2 = w.clone();
    let x = Var::param(Tensor::from_vec(vec![1.0f64, 3.0], [2])?);
    let y = x.checkpoint(move |h| {
        r.fetch_add(1, Ordering::Relaxed);
        Ok(h.mul(&w2)?.exp())
    })?;
    assert_eq!(runs.load(Ordering::Relaxed), 1);
    let loss = y.sum_all();
    assert_eq!(runs.load(Ordering::Relaxed), 1);
    loss.backward()?;
    assert_eq!(runs.load(Ordering::Relaxed), 2);
    // d/dw exp(x w) = x exp(x w), d/dx = w exp(x w).
    let gw = w.grad().unwrap().to_vec::<f64>()?;
    let gx = x.grad().unwrap().to_vec::<f64>()?;
    assert!((gw[0] - 0.5f64.exp()).abs() < 1e-12 && (gw[1] - 3.0 * 6.0f64.exp()).abs() < 1e-9);
    assert!((gx[0] - 0.5 * 0.5f64.exp()).abs() < 1e-12 && (gx[1] - 2.0 * 6.0f64.exp()).abs() < 1e-9);
    Ok(())
}

#[test]
fn several_inputs_and_grad_reach_captured_parameters_without_touching_grad() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(6);
    let w = Var::param(randn(&[3, 3]));
    let a = Var::param(randn(&[2, 3]));
    let b = Var::param(randn(&[2, 3]));
    let w2 = w.clone();
    let segment = move |v: &[Var]| -> Result<Var> { v[0].matmul(&w2)?.mul(&v[1])?.sigmoid().sum(1, false) };
    let plain = segment(&[a.clone(), b.clone()])?.square().sum_all();
    let expected = grad(&[&plain], &[&w, &a, &b], &[], false, false)?;
    let ck = checkpoint(segment, &[&a, &b])?.square().sum_all();
    let got = grad(&[&ck], &[&w, &a, &b], &[], false, false)?;
    for (e, g) in expected.iter().zip(&got) {
        let (e, g) = (e.as_ref().unwrap().value().to_vec::<f64>()?, g.as_ref().unwrap().value().to_vec::<f64>()?);
        assert_eq!(e, g);
    }
    assert!(w.grad().is_none() && a.grad().is_none(), "grad() leaves .grad alone");
    Ok(())
}

#[test]
fn hooks_on_captured_parameters_run() -> Result<()> {
    let w = Var::param(Tensor::from_vec(vec![2.0f64], [1])?);
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    w.register_post_accumulate_grad_hook(move |_| {
        s.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })?;
    let w2 = w.clone();
    let x = Var::new(Tensor::from_vec(vec![3.0f64], [1])?);
    x.checkpoint(move |h| Ok(h.mul(&w2)?.square()))?.sum_all().backward()?;
    assert_eq!(seen.load(Ordering::Relaxed), 1);
    // d/dw (x w)^2 = 2 x^2 w.
    assert_eq!(w.grad().unwrap().to_vec::<f64>()?, vec![36.0]);
    Ok(())
}

#[test]
fn nested_checkpoints_give_identical_gradients() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(7);
    let mlp = Mlp::new(4, 5);
    let x = Var::param(randn(&[3, 5]));
    mlp.block(0, 4)(&x)?.sum_all().backward()?;
    let g_plain = mlp.grads();
    mlp.zero_grad();
    let (first, second) = (mlp.block(0, 2), mlp.block(2, 4));
    let outer = move |h: &Var| -> Result<Var> { h.checkpoint(first.clone())?.checkpoint(second.clone()) };
    x.checkpoint(outer)?.sum_all().backward()?;
    assert_eq!(mlp.grads(), g_plain);
    Ok(())
}

#[test]
fn in_place_writes_to_inputs_or_parameters_are_errors() -> Result<()> {
    let w = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    let h = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?).mul_scalar(1.0);
    let w2 = w.clone();
    let y = h.checkpoint(move |v| v.mul(&w2))?.sum_all();
    w.value().mul_scalar_(2.0)?;
    let err = y.backward().unwrap_err().to_string();
    assert!(err.contains("modified by an inplace operation") && err.contains("checkpoint"), "{err}");

    let w3 = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    let w4 = w3.clone();
    let y = h.checkpoint(move |v| v.mul(&w4))?.sum_all();
    h.value().add_scalar_(1.0)?;
    assert!(y.backward().unwrap_err().to_string().contains("modified by an inplace operation"));
    Ok(())
}

#[test]
fn a_captured_non_leaf_that_requires_grad_is_an_error() -> Result<()> {
    let w = Var::param(Tensor::from_vec(vec![1.0f64], [1])?);
    let scaled = w.mul_scalar(2.0);
    let x = Var::new(Tensor::from_vec(vec![1.0f64], [1])?);
    let err = x.checkpoint(move |h| h.mul(&scaled)).unwrap_err().to_string();
    assert!(err.contains("pass it as one of the checkpoint's inputs") && err.contains("mul_scalar"), "{err}");
    // Passed as an input, it works.
    let scaled = w.mul_scalar(2.0);
    checkpoint(|v: &[Var]| v[0].mul(&v[1]), &[&x, &scaled])?.sum_all().backward()?;
    assert_eq!(w.grad().unwrap().to_vec::<f64>()?, vec![2.0]);
    Ok(())
}

#[test]
fn a_segment_that_records_inside_captures_only_outer_parameters() -> Result<()> {
    // Turning grad mode back on inside the segment records its own nodes; they are not
    // mistaken for outer Vars.
    let w = Var::param(Tensor::from_vec(vec![3.0f64], [1])?);
    let w2 = w.clone();
    let x = Var::new(Tensor::from_vec(vec![2.0f64], [1])?);
    let y = x.checkpoint(move |h| ember_autograd::enable_grad(|| Ok(h.mul(&w2)?.square().mul_scalar(0.5))))?;
    y.sum_all().backward()?;
    // d/dw (x w)^2 / 2 = x^2 w.
    assert_eq!(w.grad().unwrap().to_vec::<f64>()?, vec![12.0]);
    Ok(())
}

fn values(vs: &[Option<Var>]) -> Vec<Vec<f64>> {
    vs.iter().map(|v| v.as_ref().expect("a gradient").value().to_vec::<f64>().expect("f64")).collect()
}

/// Second-order gradients through a checkpoint pass gradgradcheck: the first-order
/// gradient, computed with `create_graph` through the checkpointed segment, is checked
/// against finite differences with respect to the segment's input, the parameters it reads
/// and the output gradient.
#[test]
fn second_order_gradients_through_a_checkpoint_pass_gradgradcheck() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(11);
    let (x, w1, w2) = (randn(&[2, 3]), randn(&[3, 3]), randn(&[3, 2]));
    // The weights read by the segment (captured parameters).
    ember_autograd::gradgradcheck(
        |v| {
            let (w1, w2) = (v[1].clone(), v[2].clone());
            v[0].checkpoint(move |h| Ok(h.matmul(&w1)?.tanh().matmul(&w2)?.sigmoid()))
        },
        &[x.clone(), w1.clone(), w2.clone()],
        None,
        1e-6,
        1e-7,
        1e-5,
    )?;
    // The weights passed as inputs of the checkpoint.
    ember_autograd::gradgradcheck(
        |v| {
            checkpoint(
                |u: &[Var]| u[0].matmul(&u[1])?.tanh().matmul(&u[2])?.sigmoid().mul(&u[0].sum(1, true)?),
                &[&v[0], &v[1], &v[2]],
            )
        },
        &[x, w1, w2],
        None,
        1e-6,
        1e-7,
        1e-5,
    )
}

/// Third-order gradients, with respect to the input and to a parameter, are bitwise those
/// of the same computation without the checkpoint.
#[test]
fn third_order_gradients_through_a_checkpoint_equal_the_plain_ones() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(12);
    let w = Var::param(randn(&[3, 3]).mul_scalar(0.7));
    let x = Var::param(randn(&[2, 3]));
    let w2 = w.clone();
    let block = move |h: &Var| -> Result<Var> { Ok(h.matmul(&w2)?.tanh().mul(h)?.sin()) };
    let orders = |checkpointed: bool| -> Result<Vec<Vec<f64>>> {
        let y = if checkpointed { x.checkpoint(block.clone())? } else { block(&x)? };
        let d1 = grad(&[&y.sum_all()], &[&x, &w], &[], false, true)?;
        let s1 = d1[0].as_ref().unwrap().square().sum_all().add(&d1[1].as_ref().unwrap().sum_all())?;
        let d2 = grad(&[&s1], &[&x, &w], &[], false, true)?;
        let s2 = d2[0].as_ref().unwrap().sin().sum_all().add(&d2[1].as_ref().unwrap().square().sum_all())?;
        let d3 = grad(&[&s2], &[&x, &w], &[], false, false)?;
        assert!(d1.iter().chain(&d2).all(|g| g.as_ref().is_some_and(Var::requires_grad)));
        Ok([values(&d1), values(&d2), values(&d3)].concat())
    };
    let plain = orders(false)?;
    let checkpointed = orders(true)?;
    for (k, (p, c)) in plain.iter().zip(&checkpointed).enumerate() {
        for (a, b) in p.iter().zip(c) {
            assert_eq!(a.to_bits(), b.to_bits(), "gradient {k}: plain {a}, checkpointed {b}");
        }
    }
    Ok(())
}

/// The gradient a checkpoint hands to its input is the partial derivative: when the input
/// was itself computed from a parameter the segment also reads, that parameter's gradient
/// (first and second order) counts the path through the input once, as without the
/// checkpoint (bitwise the same).
#[test]
fn an_input_computed_from_a_parameter_the_segment_reads_counts_once() -> Result<()> {
    let w = Var::param(Tensor::from_vec(vec![0.3f64, -0.8, 1.2], [3])?);
    let z = Var::param(Tensor::from_vec(vec![1.0f64, 0.5, -2.0], [3])?);
    let w2 = w.clone();
    let block = move |h: &Var| -> Result<Var> { Ok(h.mul(&w2)?.tanh()) };
    let run = |checkpointed: bool| -> Result<Vec<Vec<f64>>> {
        let h = z.mul(&w)?;
        let y = if checkpointed { h.checkpoint(block.clone())? } else { block(&h)? };
        let d1 = grad(&[&y.sum_all()], &[&z, &w], &[], false, true)?;
        let penalty = d1[0].as_ref().unwrap().square().sum_all().add(&d1[1].as_ref().unwrap().square().sum_all())?;
        let d2 = grad(&[&penalty], &[&z, &w], &[], false, false)?;
        Ok([values(&d1), values(&d2)].concat())
    };
    let plain = run(false)?;
    let checkpointed = run(true)?;
    for (p, c) in plain.iter().zip(&checkpointed) {
        for (a, b) in p.iter().zip(c) {
            assert_eq!(a.to_bits(), b.to_bits(), "plain {a}, checkpointed {b}");
        }
    }
    Ok(())
}

/// Nested checkpoints under create_graph: a gradient penalty backpropagated into `.grad`
/// gives bitwise the plain parameter and input gradients.
#[test]
fn a_gradient_penalty_through_nested_checkpoints_matches_the_plain_one() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(13);
    let mlp = Mlp::new(4, 5);
    let x = Var::param(randn(&[3, 5]));
    let penalty_backward = |y: Var| -> Result<()> {
        let gx = grad(&[&y.sum_all()], &[&x], &[], false, true)?[0].clone().unwrap();
        gx.square().sum_all().add(&y.square().mean_all())?.backward()
    };
    penalty_backward(mlp.block(0, 4)(&x)?)?;
    let (g_plain, gx_plain) = (mlp.grads(), x.grad().unwrap().to_vec::<f64>()?);
    mlp.zero_grad();
    x.zero_grad();
    let (first, second) = (mlp.block(0, 2), mlp.block(2, 4));
    let outer = move |h: &Var| -> Result<Var> { h.checkpoint(first.clone())?.checkpoint(second.clone()) };
    penalty_backward(x.checkpoint(outer)?)?;
    // Bitwise: the loss's backward goes through the recorded recomputation, so the
    // penalty's gradient and the loss's add up at the same nodes as without checkpoints.
    assert_eq!(mlp.grads(), g_plain);
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, gx_plain);
    Ok(())
}

/// A backward after the one under create_graph (the loss of a gradient penalty) goes
/// through the recorded recomputation: the segment runs twice in all, not three times. A
/// backward without retain_graph hands the recording back, so the one after recomputes.
#[test]
fn a_later_backward_reuses_the_recorded_recomputation() -> Result<()> {
    let w = Var::param(Tensor::from_vec(vec![0.5f64, -1.5], [2])?);
    let x = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    let runs = Arc::new(AtomicUsize::new(0));
    let (r, w2) = (runs.clone(), w.clone());
    let y = x.checkpoint(move |h| {
        r.fetch_add(1, Ordering::Relaxed);
        Ok(h.mul(&w2)?.tanh())
    })?;
    let gx = grad(&[&y.sum_all()], &[&x], &[], false, true)?[0].clone().unwrap();
    assert_eq!(runs.load(Ordering::Relaxed), 2, "forward, then the recorded recomputation");
    let loss = gx.square().sum_all().add(&y.sum_all())?;
    loss.backward_with(None, true)?;
    assert_eq!(runs.load(Ordering::Relaxed), 2, "the loss's backward reuses the recording");
    y.sum_all().backward()?;
    assert_eq!(runs.load(Ordering::Relaxed), 2, "retained: still the recording");
    y.sum_all().backward()?;
    assert_eq!(runs.load(Ordering::Relaxed), 3, "handed back by the backward without retain_graph");
    // Per element, with t = tanh(x w) and s = 1 - t^2: the penalty (w s)^2 and three
    // backwards of tanh(x w) give d/dw = 2 w s (s - 2 x w t s) + 3 x s.
    let expected: Vec<f64> = [(1.0f64, 0.5f64), (2.0, -1.5)]
        .iter()
        .map(|&(x, w)| {
            let t = (x * w).tanh();
            let s = 1.0 - t * t;
            2.0 * w * s * (s - 2.0 * x * w * t * s) + 3.0 * x * s
        })
        .collect();
    for (a, b) in w.grad().unwrap().to_vec::<f64>()?.iter().zip(&expected) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }
    Ok(())
}

/// Without create_graph the gradients are plain values (the recomputed graph is dropped);
/// with it they carry a graph, and a write in place to a parameter between forward and
/// backward is still an error, before and after the recomputation was recorded.
#[test]
fn create_graph_decides_whether_the_gradients_carry_a_graph() -> Result<()> {
    let w = Var::param(Tensor::from_vec(vec![0.5f64, 2.0], [2])?);
    let x = Var::param(Tensor::from_vec(vec![1.0f64, -1.0], [2])?);
    let w2 = w.clone();
    let y = x.checkpoint(move |h| Ok(h.mul(&w2)?.exp()))?.sum_all();
    let plain = grad(&[&y], &[&x, &w], &[], true, false)?;
    assert!(plain.iter().all(|g| !g.as_ref().unwrap().requires_grad()));
    let recorded = grad(&[&y], &[&x, &w], &[], true, true)?;
    assert!(recorded.iter().all(|g| g.as_ref().unwrap().requires_grad()));
    assert_eq!(values(&plain), values(&recorded));
    // A later backward goes through the recorded recomputation, whose nodes check what
    // they saved; a checkpoint not recomputed yet checks its inputs itself.
    let w3 = w.clone();
    let fresh = x.checkpoint(move |h| Ok(h.mul(&w3)?.exp()))?.sum_all();
    w.value().mul_scalar_(2.0)?;
    let err = grad(&[&y], &[&x], &[], false, true).unwrap_err().to_string();
    assert!(err.contains("modified by an inplace operation"), "{err}");
    let err = grad(&[&fresh], &[&x], &[], false, true).unwrap_err().to_string();
    assert!(err.contains("modified by an inplace operation") && err.contains("checkpoint"), "{err}");
    Ok(())
}

#[test]
fn under_no_grad_the_segment_just_runs() -> Result<()> {
    let w = Var::param(Tensor::from_vec(vec![2.0f64], [1])?);
    let w2 = w.clone();
    let y = no_grad(|| Var::new(Tensor::from_vec(vec![3.0f64], [1])?).checkpoint(move |h| h.mul(&w2)))?;
    assert!(!y.requires_grad());
    assert_eq!(y.value().to_vec::<f64>()?, vec![6.0]);
    Ok(())
}

#[test]
fn a_segment_error_is_returned() {
    let x = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2]).unwrap());
    let err = x.checkpoint(|h| h.reshape([3])).unwrap_err().to_string();
    assert!(err.contains("reshape"), "{err}");
}

/// Sequence numbers are unique but no clock across threads: a parameter made on another
/// thread, after this thread's block of numbers was reserved, is numbered after everything
/// this thread makes, the segment included. It must still be captured (and get its
/// gradient) because it was not created inside the segment.
#[test]
fn parameters_made_on_another_thread_are_captured() -> Result<()> {
    // Run on a fresh thread, so that its block of numbers is reserved by `x` below and has
    // room for the whole test: the parameter's thread, started afterwards, then reserves a
    // later block, deterministically.
    let check = std::thread::spawn(|| -> Result<()> {
        let x = Var::new(Tensor::from_vec(vec![0.5f64, -1.0], [1, 2])?);
        let w = std::thread::spawn(|| Tensor::from_vec(vec![0.3f64, -0.7, 1.1, 0.2], [2, 2]).map(Var::param))
            .join()
            .expect("the parameter's thread does not panic")?;
        assert!(w.sequence_nr() > x.sequence_nr(), "the other thread's block comes later");
        let w2 = w.clone();
        let block = move |h: &Var| -> Result<Var> { Ok(h.matmul(&w2)?.tanh().matmul(&w2)?.sin()) };
        let expected = ember_autograd::grad(&[&block(&x)?.sum_all()], &[&w], &[], false, false)?[0]
            .clone()
            .expect("a plain gradient");
        x.checkpoint(block)?.sum_all().backward()?;
        let got = w.grad().expect("the parameter from the other thread gets its gradient");
        assert_eq!(got.to_vec::<f64>()?, expected.value().to_vec::<f64>()?);
        Ok(())
    });
    check.join().expect("the test thread does not panic")
}

/// A grad hook on a parameter the segment reads runs once per backward, as without the
/// checkpoint, with or without create_graph: the recomputation's inner backward leaves it
/// to the outer one.
#[test]
fn grad_hooks_on_captured_parameters_run_once() -> Result<()> {
    let run = |checkpointed: bool, create_graph: bool| -> Result<(Vec<f64>, usize)> {
        let w = Var::param(Tensor::from_vec(vec![0.4f64, -0.3], [2])?);
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        w.register_hook(move |g| {
            c.fetch_add(1, Ordering::Relaxed);
            Ok(Some(g.mul_scalar(2.0)))
        })?;
        let x = Var::new(Tensor::from_vec(vec![1.5f64, 2.0], [2])?);
        let w2 = w.clone();
        let block = move |h: &Var| -> Result<Var> { Ok(h.mul(&w2)?.tanh()) };
        let y = if checkpointed { x.checkpoint(block)? } else { block(&x)? };
        y.sum_all().backward_full(None, false, create_graph)?;
        Ok((w.grad().expect("a gradient").to_vec::<f64>()?, calls.load(Ordering::Relaxed)))
    };
    for create_graph in [false, true] {
        let (plain, plain_calls) = run(false, create_graph)?;
        let (checkpointed, checkpointed_calls) = run(true, create_graph)?;
        assert_eq!(plain_calls, 1);
        assert_eq!(checkpointed_calls, 1, "the hook ran {checkpointed_calls} times (create_graph {create_graph})");
        assert_eq!(checkpointed, plain, "x2 once, not x4 (create_graph {create_graph})");
    }
    Ok(())
}

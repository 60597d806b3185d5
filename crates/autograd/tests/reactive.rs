//! Reactive re-execution by value versions (docs/design.md, 'Value versions and
//! re-execution'): only dirty paths are recomputed, a request with nothing changed answers
//! at once, backward on a stale graph re-forwards.

use ember_autograd::{Var, reactive_nodes_visited};
use ember_tensor::{Result, Tensor};

fn t(v: &[f32]) -> Tensor {
    Tensor::from_slice(v, [v.len()]).unwrap()
}

/// `y = w * x + b`, only `x` changes. Mul and Add recompute; `w` and `b`
/// are not touched.
#[test]
fn only_the_dirty_path_recomputes() -> Result<()> {
    let w = Var::param(t(&[2.0]));
    let x = Var::new(t(&[3.0]));
    let b = Var::param(t(&[1.0]));
    let mul = w.mul(&x)?;
    let y = mul.add(&b)?;
    assert_eq!(y.forward()?.to_vec::<f32>()?, vec![7.0]);
    assert_eq!((mul.recompute_count(), y.recompute_count()), (0, 0));

    x.set_value(t(&[5.0]))?;
    assert_eq!(y.value().to_vec::<f32>()?, vec![7.0], "value() never recomputes");
    assert_eq!(y.forward()?.to_vec::<f32>()?, vec![11.0]);
    assert_eq!((mul.recompute_count(), y.recompute_count()), (1, 1));
    assert_eq!((w.value_version(), b.value_version(), x.value_version()), (0, 0, 1));

    // Only b changes: mul stays as it is.
    b.set_value(t(&[10.0]))?;
    assert_eq!(y.forward()?.to_vec::<f32>()?, vec![20.0]);
    assert_eq!((mul.recompute_count(), y.recompute_count()), (1, 2));
    Ok(())
}

#[test]
fn nothing_changed_means_nothing_recomputed() -> Result<()> {
    let x = Var::new(t(&[1.0, 2.0]));
    let mut y = x.clone();
    for _ in 0..100 {
        y = y.exp().log();
    }
    y.forward()?;
    y.forward()?;
    assert_eq!(y.recompute_count(), 0);
    assert_eq!(y.inputs()?[0].recompute_count(), 0);
    Ok(())
}

/// Requesting one output among several recomputes only its own ancestors.
#[test]
fn partial_forward_of_one_output() -> Result<()> {
    let shared = Var::param(t(&[1.0]));
    let x1 = Var::new(t(&[1.0]));
    let x2 = Var::new(t(&[2.0]));
    let h1 = x1.mul(&shared)?;
    let y1 = h1.exp();
    let h2 = x2.mul(&shared)?;
    let y2 = h2.exp();
    x1.set_value(t(&[3.0]))?;
    x2.set_value(t(&[4.0]))?;
    y1.forward()?;
    assert_eq!((h1.recompute_count(), y1.recompute_count()), (1, 1));
    assert_eq!((h2.recompute_count(), y2.recompute_count()), (0, 0), "y2 was not requested");
    let v = y2.forward()?.item()?;
    assert!((v - 4f64.exp()).abs() < 1e-5 * 4f64.exp(), "{v}");
    assert_eq!(h2.recompute_count(), 1);
    Ok(())
}

/// An in-place write to a leaf's storage, through any handle, makes dependents dirty for
/// `forward()`.
#[test]
fn in_place_writes_to_leaves_make_dependents_dirty() -> Result<()> {
    let w = Var::param(t(&[1.0, 2.0]));
    let y = w.mul_scalar(3.0).sum_all();
    let handle = w.value(); // another handle to the same storage
    handle.add_scalar_(1.0)?;
    assert_eq!(y.value().item()?, 9.0, "the cached value is unchanged");
    assert_eq!(y.forward()?.item()?, 15.0);
    Ok(())
}

/// Backward on a stale graph re-forwards first.
#[test]
fn backward_on_a_stale_graph_re_forwards() -> Result<()> {
    let w = Var::param(t(&[2.0]));
    let x = Var::new(t(&[3.0]));
    let y = w.mul(&x)?.sum_all();
    x.set_value(t(&[5.0]))?;
    y.backward()?;
    assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![5.0], "d(w x)/dw at the new x");
    assert_eq!(y.value().item()?, 10.0);
    Ok(())
}

/// A detached branch stops the backward walk; nothing upstream of it runs.
#[test]
fn a_detached_branch_stops_backward() -> Result<()> {
    let a = Var::param(t(&[1.0]));
    let upstream = a.exp();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let s = seen.clone();
    let _h = upstream.register_hook(move |_| {
        s.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(None)
    })?;
    let w = Var::param(t(&[2.0]));
    let y = upstream.detach_node().mul(&w)?.sum_all();
    y.backward()?;
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 0, "no gradient reached the upstream node");
    assert!(a.grad().is_none());
    assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![1f32.exp()]);
    Ok(())
}

#[test]
fn deep_graphs_recompute_without_recursion() -> Result<()> {
    let x = Var::new(Tensor::scalar(0.0f32));
    let mut y = x.clone();
    for _ in 0..200_000 {
        y = y.add_scalar(1.0);
    }
    x.set_value(Tensor::scalar(1.0f32))?;
    assert_eq!(y.forward()?.item()?, 200_001.0);
    Ok(())
}

/// The work a request does, counted in nodes visited rather than timed: a re-request with
/// nothing changed visits none whatever the graph size (the global change counter answers),
/// and after one of many independent branches changed, only that branch and the join are
/// visited, not the other branches.
#[test]
fn requests_visit_only_what_changed() -> Result<()> {
    for len in [10, 10_000] {
        let x = Var::new(Tensor::scalar(0.0f32));
        let mut y = x.clone();
        for _ in 0..len {
            y = y.add_scalar(1.0);
        }
        y.forward()?;
        let before = reactive_nodes_visited();
        for _ in 0..100 {
            y.forward()?;
        }
        assert_eq!(reactive_nodes_visited() - before, 0, "chain of {len}: idle re-requests walked the graph");
        x.set_value(Tensor::scalar(1.0f32))?;
        let before = reactive_nodes_visited();
        assert_eq!(y.forward()?.item()?, len as f64 + 1.0);
        assert!(reactive_nodes_visited() - before >= len as u64, "chain of {len}: the changed path was not walked");
    }

    let xs: Vec<Var> = (0..1000).map(|i| Var::new(Tensor::scalar(i as f32))).collect();
    let branches: Vec<Var> = xs.iter().map(|x| x.mul_scalar(2.0).add_scalar(1.0).sub_scalar(1.0)).collect();
    let refs: Vec<&Var> = branches.iter().collect();
    let out = Var::stack(&refs, 0)?.sum_all();
    out.forward()?;
    xs[500].set_value(Tensor::scalar(0.0f32))?;
    let before = reactive_nodes_visited();
    let expected: f64 = (0..1000).map(|i| if i == 500 { 0.0 } else { 2.0 * i as f64 }).sum();
    assert!((out.forward()?.item()? - expected).abs() < 1e-2 * expected);
    let visited = reactive_nodes_visited() - before;
    // sum, stack, and the changed branch's three ops, each visited before and after its
    // inputs: a few dozen at most, against 4,000 nodes in the graph.
    assert!(visited <= 20, "one changed branch visited {visited} nodes");
    assert_eq!(branches[499].recompute_count(), 0);
    assert_eq!(branches[500].recompute_count(), 1);
    Ok(())
}

//! Saved-tensor hooks: pack runs at node creation for each value backward reads, unpack
//! in backward instead of reading it; gradients are unchanged; lower precision and copies
//! work; nesting restores the outer hooks; the in-place check still holds.

use ember_autograd::{Function, FunctionCtx, SavedTensorsHooksGuard, Var, grad, saved_tensors_hooks};
use ember_tensor::{DType, Result, Tensor};
use parking_lot::Mutex;
use std::sync::Arc;

fn param(v: &[f64], shape: &[usize]) -> Var {
    Var::param(Tensor::from_slice(v, shape.to_vec()).expect("a valid tensor"))
}

/// A log of hook calls: `("pack" | "unpack", the value's elements)`.
type Log = Arc<Mutex<Vec<(&'static str, Vec<f64>)>>>;

/// Identity hooks that log every call.
fn logging(
    log: &Log,
) -> (impl Fn(&Tensor) -> Tensor + Send + Sync + 'static, impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static) {
    let (l1, l2) = (log.clone(), log.clone());
    (
        move |t: &Tensor| {
            l1.lock().push(("pack", t.to_vec_f64().unwrap_or_default()));
            t.clone()
        },
        move |t: &Tensor| {
            l2.lock().push(("unpack", t.to_vec_f64()?));
            Ok(t.clone())
        },
    )
}

#[test]
fn pack_and_unpack_are_called_once_per_saved_value_in_order() -> Result<()> {
    let a = param(&[1.0, 2.0], &[2]);
    let b = param(&[3.0, 4.0], &[2]);
    let log: Log = Default::default();
    let (pack, unpack) = logging(&log);
    let loss = saved_tensors_hooks(pack, unpack, || -> Result<Var> {
        let p = a.mul(&b)?; // saves a and b
        let e = p.exp(); // saves its output
        Ok(e.add(&a)?.sum_all()) // add and sum save nothing
    })?;
    let packs: Vec<_> = log.lock().clone();
    let e = [3.0f64.exp(), 8.0f64.exp()];
    assert_eq!(packs, vec![("pack", vec![1.0, 2.0]), ("pack", vec![3.0, 4.0]), ("pack", e.to_vec())]);
    loss.backward()?;
    let calls = log.lock()[3..].to_vec();
    // Backward runs exp first (its output), then mul (its inputs, as its formula reads them).
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(calls[0], ("unpack", e.to_vec()));
    assert!(calls[1..].iter().all(|(k, _)| *k == "unpack"));
    let mut rest: Vec<Vec<f64>> = calls[1..].iter().map(|(_, v)| v.clone()).collect();
    rest.sort_by(|x, y| x[0].total_cmp(&y[0]));
    assert_eq!(rest, vec![vec![1.0, 2.0], vec![3.0, 4.0]]);
    // d/da = b e + 1, d/db = a e.
    let ga = a.grad().unwrap().to_vec::<f64>()?;
    assert!((ga[0] - (3.0 * e[0] + 1.0)).abs() < 1e-9 && (ga[1] - (4.0 * e[1] + 1.0)).abs() < 1e-9);
    Ok(())
}

#[test]
fn hooks_are_inactive_outside_their_scope() -> Result<()> {
    let x = param(&[1.0], &[1]);
    let log: Log = Default::default();
    let (pack, unpack) = logging(&log);
    let inside = saved_tensors_hooks(pack, unpack, || x.exp());
    let outside = x.exp();
    inside.add(&outside)?.sum_all().backward()?;
    let kinds: Vec<&str> = log.lock().iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, vec!["pack", "unpack"]);
    Ok(())
}

#[test]
fn gradients_are_unchanged_by_identity_hooks() -> Result<()> {
    ember_tensor::manual_seed(3);
    let w = Var::param(Tensor::randn([4, 3])?.to_dtype(DType::F64));
    let x = Var::new(Tensor::randn([5, 4])?.to_dtype(DType::F64));
    let f = |w: &Var| -> Result<Var> { Ok(x.matmul(w)?.tanh().log_softmax(1)?.square().mean_all()) };
    let plain = grad(&[&f(&w)?], &[&w], &[], false, false)?[0].clone().unwrap().value().to_vec::<f64>()?;
    let log: Log = Default::default();
    let (pack, unpack) = logging(&log);
    let loss = saved_tensors_hooks(pack, unpack, || f(&w))?;
    let hooked = grad(&[&loss], &[&w], &[], false, false)?[0].clone().unwrap().value().to_vec::<f64>()?;
    assert_eq!(plain, hooked);
    let log = log.lock();
    let count = |kind: &str| log.iter().filter(|(k, _)| *k == kind).count();
    // matmul saves x and w, tanh and log_softmax their outputs, square its input; backward
    // unpacks only what it reads: matmul needs x alone for the gradient of w.
    assert_eq!((count("pack"), count("unpack")), (5, 4));
    Ok(())
}

#[test]
fn a_lower_precision_pack_gives_close_gradients() -> Result<()> {
    // Keep saved f64 values as f32 (like an f16 pack in PyTorch), back to f64 on unpack.
    let x = param(&[0.1, 0.2, 0.3], &[3]);
    let y = param(&[1.0 / 3.0, 2.0 / 3.0, 1.0], &[3]);
    let loss = saved_tensors_hooks(
        |t: &Tensor| t.to_dtype(DType::F32),
        |p: &Tensor| Ok(p.to_dtype(DType::F64)),
        || x.mul(&y).map(|p| p.sum_all()),
    )?;
    loss.backward()?;
    let gx = x.grad().unwrap().to_vec::<f64>()?;
    let exact = [1.0 / 3.0, 2.0 / 3.0, 1.0];
    for (g, e) in gx.iter().zip(exact) {
        assert!((g - e).abs() < 1e-7, "{g} vs {e}");
        assert_eq!(*g, e as f32 as f64, "the gradient went through f32");
    }
    Ok(())
}

#[test]
fn a_copying_pack_is_immune_to_later_reuse_of_the_buffer_but_not_to_the_version_check() -> Result<()> {
    // Pack a copy: backward reads the copy.
    let x = param(&[1.0, 2.0], &[2]);
    let y = saved_tensors_hooks(
        |t: &Tensor| t.contiguous().to_dtype(DType::F64).add_scalar(0.0),
        |p: &Tensor| Ok(p.clone()),
        || x.square(),
    );
    y.sum_all().backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![2.0, 4.0]);

    // The original is still version-checked: an in-place write is an error, as without hooks.
    let z = param(&[1.0, 2.0], &[2]);
    let h = z.mul_scalar(1.0);
    let y = saved_tensors_hooks(|t: &Tensor| t.add_scalar(0.0), |p: &Tensor| Ok(p.clone()), || h.square());
    h.value().mul_scalar_(3.0)?;
    let err = y.sum_all().backward().unwrap_err().to_string();
    assert!(err.contains("modified by an inplace operation") && err.contains("square"), "{err}");
    Ok(())
}

#[test]
fn nested_hooks_apply_innermost_and_restore_the_outer_ones() -> Result<()> {
    let x = param(&[2.0], &[1]);
    let log: Log = Default::default();
    let (l1, l2) = (log.clone(), log.clone());
    let outer = SavedTensorsHooksGuard::new(
        move |t: &Tensor| {
            l1.lock().push(("outer", t.to_vec_f64().unwrap_or_default()));
            t.clone()
        },
        |p: &Tensor| Ok(p.clone()),
    );
    let a = x.exp();
    let b = saved_tensors_hooks(
        move |t: &Tensor| {
            l2.lock().push(("inner", t.to_vec_f64().unwrap_or_default()));
            t.clone()
        },
        |p: &Tensor| Ok(p.clone()),
        || x.sqrt(),
    );
    let c = x.sigmoid(); // the outer hooks again
    drop(outer);
    let d = x.tanh(); // none
    let kinds: Vec<&str> = log.lock().iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, vec!["outer", "inner", "outer"]);
    a.add(&b)?.add(&c)?.add(&d)?.sum_all().backward()?;
    Ok(())
}

#[test]
fn an_unpack_of_the_wrong_shape_is_an_error_naming_the_operation() {
    let x = param(&[1.0, 2.0], &[2]);
    let y = saved_tensors_hooks(|t: &Tensor| t.clone(), |p: &Tensor| p.narrow(0, 0, 1), || x.exp());
    let err = y.sum_all().backward().unwrap_err().to_string();
    assert!(err.contains("exp") && err.contains("saved tensor hooks"), "{err}");
}

#[test]
fn an_unpack_error_fails_backward() {
    let x = param(&[1.0], &[1]);
    let y = saved_tensors_hooks(
        |t: &Tensor| t.clone(),
        |_: &Tensor| Err(ember_tensor::Error::autograd("offloaded copy lost")),
        || x.exp(),
    );
    let err = y.sum_all().backward().unwrap_err().to_string();
    assert!(err.contains("offloaded copy lost"), "{err}");
}

#[test]
fn higher_order_gradients_flow_through_unpacked_values() -> Result<()> {
    let x = Var::param(Tensor::scalar(2.0f64));
    let y =
        saved_tensors_hooks(|t: &Tensor| t.clone(), |p: &Tensor| Ok(p.clone()), || x.mul(&x).and_then(|s| s.mul(&x)))?;
    let d1 = grad(&[&y], &[&x], &[], false, true)?[0].clone().unwrap(); // 3x^2
    let d2 = grad(&[&d1], &[&x], &[], false, false)?[0].clone().unwrap(); // 6x
    assert_eq!((d1.item()?, d2.item()?), (12.0, 12.0));
    Ok(())
}

#[test]
fn a_pack_hook_may_use_var_operations_without_recursing() -> Result<()> {
    let x = param(&[1.0, 2.0], &[2]);
    let count = Arc::new(Mutex::new(0));
    let c = count.clone();
    let y = saved_tensors_hooks(
        move |t: &Tensor| {
            *c.lock() += 1;
            // Var operations inside pack are not packed themselves.
            Var::new(t.clone()).exp().log().value()
        },
        |p: &Tensor| Ok(p.clone()),
        || x.square(),
    );
    y.sum_all().backward()?;
    assert_eq!(*count.lock(), 1);
    let g = x.grad().unwrap().to_vec::<f64>()?;
    assert!((g[0] - 2.0).abs() < 1e-12 && (g[1] - 4.0).abs() < 1e-12);
    Ok(())
}

/// `y = x * w` as a custom function that saves both inputs.
struct Scale;

impl Function for Scale {
    fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        ctx.save_for_backward(&[&inputs[0], &inputs[1]]);
        Ok(vec![inputs[0].mul(&inputs[1])?])
    }
    fn backward(&self, ctx: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        let s = ctx.saved_tensors()?;
        Ok(vec![Some(grads[0].mul(&s[1])?), Some(grads[0].mul(&s[0])?)])
    }
}

#[test]
fn custom_functions_pack_what_they_save() -> Result<()> {
    let x = param(&[1.0, 2.0], &[2]);
    let w = param(&[3.0, 5.0], &[2]);
    let log: Log = Default::default();
    let (pack, unpack) = logging(&log);
    let y = saved_tensors_hooks(pack, unpack, || Scale.apply(&[&x, &w]))?;
    y[0].sum_all().backward()?;
    let kinds: Vec<&str> = log.lock().iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, vec!["pack", "pack", "unpack", "unpack"]);
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![3.0, 5.0]);
    assert_eq!(w.grad().unwrap().to_vec::<f64>()?, vec![1.0, 2.0]);
    Ok(())
}

/// Identity hooks: packing keeps a second handle to the same storage, which is enough to
/// see which values the scope drops.
fn identity()
-> (impl Fn(&Tensor) -> Tensor + Send + Sync + 'static, impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static) {
    (|t: &Tensor| t.clone(), |p: &Tensor| Ok(p.clone()))
}

/// A value only the graph holds is dropped when the scope ends; asking for it again (here
/// through `inputs()`) recomputes it from the leaves, and backward reads the packed copy.
/// A value a `Var` holds is kept.
#[test]
fn values_only_the_graph_holds_are_dropped_and_recomputed_on_demand() -> Result<()> {
    let w = param(&[0.5, -1.0], &[2]);
    let (pack, unpack) = identity();
    let (held, loss) = saved_tensors_hooks(pack, unpack, || -> Result<(Var, Var)> {
        let e = w.exp(); // saves its output: packed, then dropped once only the graph holds it
        let held = e.mul_scalar(2.0).sin(); // sin saves its input (mul_scalar's output)
        Ok((held.clone(), held.square().sum_all()))
    })?;
    // `held` is the user's: kept, never recomputed.
    assert_eq!(held.recompute_count(), 0);
    let sin_input = held.inputs()?.remove(0); // mul_scalar's output, dropped: recomputed now
    assert_eq!(sin_input.recompute_count(), 1);
    let expected: Vec<f64> = [0.5f64, -1.0].iter().map(|w| 2.0 * w.exp()).collect();
    assert_eq!(sin_input.value().to_vec::<f64>()?, expected);
    drop(sin_input);
    loss.backward()?;
    // d/dw sum(sin(2 e^w)^2) = 2 sin(2e^w) cos(2e^w) 2 e^w
    let g = w.grad().expect("a gradient").to_vec::<f64>()?;
    for (k, w) in [0.5f64, -1.0].iter().enumerate() {
        let u = 2.0 * w.exp();
        assert!((g[k] - 2.0 * u.sin() * u.cos() * u).abs() < 1e-12, "{g:?}");
    }
    Ok(())
}

/// Dropped values do not break re-execution: replacing a leaf and asking for the output
/// recomputes everything downstream, dropped values included.
#[test]
fn dropped_values_are_recomputed_when_a_leaf_changes() -> Result<()> {
    let x = Var::new(Tensor::from_slice(&[1.0f64, 2.0], [2])?);
    let w = param(&[3.0], &[1]);
    let (pack, unpack) = identity();
    let y = saved_tensors_hooks(pack, unpack, || -> Result<Var> { Ok(x.mul(&w)?.exp().mul(&w)?.sum_all()) })?;
    x.set_value(Tensor::from_slice(&[0.0f64, 0.5], [2])?)?;
    let fresh = y.forward()?.item()?;
    assert!((fresh - 3.0 * (1.0 + 1.5f64.exp())).abs() < 1e-12, "{fresh}");
    // Backward differentiates at the new value: the packs of the old one no longer apply.
    y.backward()?;
    let g = w.grad().expect("a gradient").to_vec::<f64>()?[0];
    // d/dw sum(w e^(x w)) = sum(e^(x w) (1 + x w))
    let expected = 1.0 + 1.5f64.exp() * (1.0 + 1.5);
    assert!((g - expected).abs() < 1e-9, "{g} vs {expected}");
    Ok(())
}

/// Writing a dropped value in place through a tensor handle that outlived its `Var` is
/// still an error naming the operation, as without hooks.
#[test]
fn an_in_place_write_to_a_dropped_value_is_still_caught() -> Result<()> {
    let w = param(&[1.0, 2.0], &[2]);
    let (pack, unpack) = identity();
    let (value, loss) = saved_tensors_hooks(pack, unpack, || -> Result<(Tensor, Var)> {
        let h = w.mul_scalar(3.0);
        let value = h.value();
        Ok((value, h.square().sum_all())) // square saves h; h's Var is gone at the end
    })?;
    value.mul_scalar_(2.0)?;
    let err = loss.backward().unwrap_err().to_string();
    assert!(err.contains("modified by an inplace operation") && err.contains("square"), "{err}");
    Ok(())
}

/// A backward without retain_graph frees the packed copies with each node's backward; a
/// second backward recomputes what it needs, as it does without hooks.
#[test]
fn a_second_backward_after_packs_were_freed_recomputes() -> Result<()> {
    let log: Log = Default::default();
    let (pack, unpack) = logging(&log);
    let w = param(&[0.5, 1.5], &[2]);
    let loss = saved_tensors_hooks(pack, unpack, || w.exp().sin().sum_all());
    loss.backward_with(None, true)?;
    loss.backward()?; // the packs are still there: unpacked again, then freed
    loss.backward()?; // nothing packed left: recomputed from the leaves
    let unpacks = log.lock().iter().filter(|(k, _)| *k == "unpack").count();
    assert_eq!(unpacks, 4, "exp's output and sin's input, unpacked by the first two backward calls");
    let g = w.grad().expect("a gradient").to_vec::<f64>()?;
    for (k, w) in [0.5f64, 1.5].iter().enumerate() {
        let expected = 3.0 * w.exp().cos() * w.exp();
        assert!((g[k] - expected).abs() < 1e-12, "{g:?}");
    }
    Ok(())
}

/// A custom function drops its own reference to a saved tensor once it is packed: a tensor
/// only the function kept is then freed, and backward reads the packed copy.
struct SavesACopy {
    storage: Arc<Mutex<Option<std::sync::Weak<ember_tensor::storage::StorageCell>>>>,
}

impl Function for SavesACopy {
    fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let doubled = inputs[0].mul_scalar(2.0);
        *self.storage.lock() = Some(Arc::downgrade(doubled.storage()));
        ctx.save_for_backward(&[&doubled]);
        Ok(vec![inputs[0].square()])
    }
    fn backward(&self, ctx: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        Ok(vec![Some(grads[0].mul(&ctx.saved_tensors()?[0])?)])
    }
}

#[test]
fn custom_functions_drop_what_they_packed() -> Result<()> {
    let x = param(&[1.0, 3.0], &[2]);
    let storage = Arc::new(Mutex::new(None));
    let y = saved_tensors_hooks(
        |t: &Tensor| t.to_dtype(DType::F32),
        |p: &Tensor| Ok(p.to_dtype(DType::F64)),
        || SavesACopy { storage: storage.clone() }.apply(&[&x]),
    )?;
    let weak = storage.lock().clone().expect("forward ran");
    assert!(weak.upgrade().is_none(), "the original outlived its packed copy");
    y[0].sum_all().backward()?;
    assert_eq!(x.grad().expect("a gradient").to_vec::<f64>()?, vec![2.0, 6.0]);
    Ok(())
}

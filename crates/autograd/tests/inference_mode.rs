//! Inference mode: no graph, no version bumps, inference tensors kept out of later graphs
//! with errors naming the operation, copies that escape, and a mode that nests, restores
//! itself (on drop and on panic) and belongs to its thread.

use ember_autograd::{
    Function, FunctionCtx, InferenceModeGuard, Var, enable_grad, inference_mode, is_grad_enabled,
    is_inference_mode_enabled, no_grad, saved_tensors_hooks,
};
use ember_tensor::{DType, Result, Tensor};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

fn param() -> Var {
    Var::param(Tensor::from_vec(vec![0.5f64, -1.0, 2.0], [3]).unwrap())
}

const SAVED: &str = "Inference tensors cannot be saved for backward";

#[test]
fn records_no_graph() {
    let w = param();
    assert!(!is_inference_mode_enabled());
    let y = inference_mode(|| {
        assert!(is_inference_mode_enabled());
        assert!(!is_grad_enabled(), "inference mode turns grad mode off, as in PyTorch");
        w.mul_scalar(2.0).exp()
    });
    assert!(y.is_inference());
    assert!(!y.requires_grad() && y.is_leaf());
    assert_eq!(y.op_name(), "leaf", "no operation was recorded");
    assert!(y.inputs().unwrap().is_empty());
    assert!(!w.is_inference(), "a Var made outside stays normal");
    assert!(!is_inference_mode_enabled() && is_grad_enabled());
    let made = inference_mode(|| Var::new(Tensor::ones([2], DType::F32).unwrap()));
    assert!(made.is_inference(), "every Var made inside is an inference tensor");
}

#[test]
fn inference_tensors_do_not_bump_versions() -> Result<()> {
    let w = param();
    inference_mode(|| -> Result<()> {
        let y = w.exp();
        let before = y.value().version();
        y.value().mul_scalar_(3.0)?;
        y.value().add_scalar_(1.0)?;
        assert_eq!(y.value().version(), before, "an in-place write to an inference tensor left no version");
        assert_eq!(y.value().to_vec::<f64>()?[0], 3.0 * 0.5f64.exp() + 1.0, "the write itself happened");
        let leaf = Var::new(Tensor::zeros([2], DType::F64)?);
        leaf.value().add_scalar_(1.0)?;
        assert_eq!(leaf.value().version(), 0);
        // Normal tensors keep counting, inside inference mode too.
        let normal = w.value().version();
        w.value().mul_scalar_(1.0)?;
        assert_eq!(w.value().version(), normal + 1);
        Ok(())
    })
}

#[test]
fn saving_an_inference_tensor_for_backward_is_an_error_naming_the_op() {
    let w = param();
    let y = inference_mode(|| w.exp());
    for (op, r) in [("mul", y.mul(&w)), ("matmul", y.reshape([1, 3]).unwrap().matmul(&w.reshape([3, 1]).unwrap()))] {
        let err = r.unwrap_err().to_string();
        assert!(err.starts_with(&format!("{op}:")) || err.contains(&format!(" {op}:")), "{err}");
        assert!(err.contains(SAVED) && err.contains("clone"), "{err}");
    }
    // Ember keeps every recorded input for re-execution, so even an operation whose backward
    // reads nothing refuses an inference tensor while it records.
    let err = y.add(&w).unwrap_err().to_string();
    assert!(err.contains("add") && err.contains(SAVED), "{err}");
    // A parameter made inside inference mode is an inference tensor, which never requires
    // grad in ember (operations of one input cannot fail, so none of them may need to).
    let p = inference_mode(|| Var::param(Tensor::ones([3], DType::F64).unwrap()));
    assert!(p.is_inference() && !p.requires_grad());
    assert!(p.mul(&w).unwrap_err().to_string().contains(SAVED));
}

#[test]
fn custom_functions_refuse_inference_tensors_too() {
    struct Square;
    impl Function for Square {
        fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
            ctx.save_for_backward(&[&inputs[0]]);
            Ok(vec![inputs[0].mul(&inputs[0])?])
        }
        fn backward(&self, ctx: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
            let x = &ctx.saved_tensors()?[0];
            Ok(vec![Some(grads[0].mul(x)?.mul_scalar(2.0))])
        }
    }
    let w = param();
    let y = inference_mode(|| w.exp());
    let err = Square.apply(&[&y, &w]).unwrap_err().to_string();
    assert!(err.contains("custom function") && err.contains(SAVED), "{err}");
    let out = inference_mode(|| Square.apply(&[&w])).unwrap().remove(0);
    assert!(out.is_inference() && !out.requires_grad());
}

#[test]
fn requires_grad_and_set_value_on_inference_tensors_are_errors_outside() -> Result<()> {
    let y = inference_mode(|| Var::new(Tensor::ones([2], DType::F32).unwrap()));
    let err = y.requires_grad_(true).unwrap_err().to_string();
    assert!(err.contains("requires_grad_") && err.contains("inference tensor"), "{err}");
    let err = y.set_value(Tensor::zeros([2], DType::F32)?).unwrap_err().to_string();
    assert!(err.contains("set_value") && err.contains("inference tensor outside inference_mode"), "{err}");
    assert_eq!(y.value().to_vec::<f32>()?, vec![1.0, 1.0], "the refused write changed nothing");
    // Inside inference mode the value may be replaced, and no version moves; requires_grad
    // stays off (ember's inference tensors never require grad).
    inference_mode(|| -> Result<()> {
        y.set_value(Tensor::zeros([2], DType::F32)?)?;
        assert_eq!(y.value_version(), 0);
        assert!(y.requires_grad_(true).is_err());
        Ok(())
    })?;
    assert_eq!(y.value().to_vec::<f32>()?, vec![0.0, 0.0]);
    Ok(())
}

#[test]
fn a_copy_outside_inference_mode_is_a_normal_tensor() -> Result<()> {
    let w = param();
    let y = inference_mode(|| w.exp());
    let z = y.copy();
    assert!(!z.is_inference());
    let before = z.value().version();
    z.value().mul_scalar_(1.0)?;
    assert_eq!(z.value().version(), before + 1, "the copy counts its writes again");
    z.mul(&w)?.sum_all().backward()?;
    let expect: Vec<f64> = w.value().to_vec::<f64>()?.iter().map(|v| v.exp()).collect();
    assert_eq!(w.grad().unwrap().to_vec::<f64>()?, expect);
    // Operations that record nothing accept inference tensors.
    let c = y.mul_scalar(2.0);
    assert!(!c.is_inference() && !c.requires_grad());
    let n = no_grad(|| y.mul(&w))?;
    assert!(!n.requires_grad());
    // A copy made inside inference mode is still an inference tensor.
    assert!(inference_mode(|| y.copy()).is_inference());
    Ok(())
}

#[test]
fn views_follow_their_base() -> Result<()> {
    let x = Var::new(Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?);
    let (of_normal, y) = inference_mode(|| -> Result<(Var, Var)> { Ok((x.t()?, x.exp())) })?;
    assert!(!of_normal.is_inference(), "a view of a normal tensor made in inference mode is normal");
    assert!(of_normal.value().shares_storage(&x.value()));
    let view = y.reshape([4])?;
    assert!(view.value().shares_storage(&y.value()));
    assert!(view.is_inference(), "a view of an inference tensor is one");
    let w = Var::param(Tensor::ones([4], DType::F32)?);
    assert!(view.mul(&w).unwrap_err().to_string().contains(SAVED));
    assert!(y.detach().is_inference() && !x.detach().is_inference());
    Ok(())
}

#[test]
fn nests_and_wins_over_enable_grad() {
    let w = param();
    inference_mode(|| {
        enable_grad(|| {
            assert!(is_grad_enabled());
            let y = w.mul_scalar(2.0);
            assert!(y.is_inference() && !y.requires_grad(), "inference mode wins while active");
            let c = w.checkpoint(|x| Ok(x.mul_scalar(2.0))).unwrap();
            assert!(c.is_inference() && !c.requires_grad(), "a checkpoint records nothing either");
        });
        inference_mode(|| assert!(is_inference_mode_enabled()));
        assert!(is_inference_mode_enabled(), "an inner scope restores the outer one");
        {
            let _off = InferenceModeGuard::with_mode(false);
            assert!(!is_inference_mode_enabled() && is_grad_enabled());
            let y = w.mul_scalar(2.0);
            assert!(!y.is_inference() && y.requires_grad(), "inference_mode(false) records again");
        }
        assert!(is_inference_mode_enabled() && !is_grad_enabled());
    });
    no_grad(|| {
        inference_mode(|| assert!(!is_grad_enabled()));
        assert!(!is_grad_enabled() && !is_inference_mode_enabled(), "no_grad is restored");
    });
    assert!(is_grad_enabled() && !is_inference_mode_enabled());
}

#[test]
fn guards_restore_on_drop_and_on_panic() {
    {
        let _g = InferenceModeGuard::new();
        assert!(is_inference_mode_enabled());
    }
    assert!(!is_inference_mode_enabled() && is_grad_enabled());
    let r = std::panic::catch_unwind(|| inference_mode(|| panic!("inside inference_mode")));
    assert!(r.is_err());
    assert!(!is_inference_mode_enabled() && is_grad_enabled());
    let r = std::panic::catch_unwind(|| {
        let _g = InferenceModeGuard::new();
        let _off = InferenceModeGuard::with_mode(false);
        panic!("inside nested guards")
    });
    assert!(r.is_err());
    assert!(!is_inference_mode_enabled() && is_grad_enabled());
    assert!(param().mul_scalar(2.0).requires_grad(), "operations record again");
}

#[test]
fn threads_are_independent() {
    let w = param();
    let _g = InferenceModeGuard::new();
    let w2 = w.clone();
    let (mode, records) =
        std::thread::spawn(move || (is_inference_mode_enabled(), w2.mul_scalar(2.0).requires_grad())).join().unwrap();
    assert!(!mode && records, "another thread is not in inference mode");
    assert!(w.mul_scalar(2.0).is_inference());
    let inner = std::thread::spawn(|| inference_mode(is_inference_mode_enabled)).join().unwrap();
    assert!(inner);
    assert!(is_inference_mode_enabled(), "the other thread's scope did not end this one");
}

#[test]
fn other_extensions_see_no_recorded_node() {
    let w = param();
    let packs = Arc::new(AtomicUsize::new(0));
    let counter = packs.clone();
    let y = saved_tensors_hooks(
        move |t: &Tensor| {
            counter.fetch_add(1, Ordering::Relaxed);
            t.clone()
        },
        |t: &Tensor| Ok(t.clone()),
        || inference_mode(|| w.mul(&w)),
    )
    .unwrap();
    assert!(y.is_inference() && !y.requires_grad());
    assert_eq!(packs.load(Ordering::Relaxed), 0, "nothing was saved for backward");
}

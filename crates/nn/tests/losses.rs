//! Losses: values against hand computations with every reduction, the Loss objects,
//! numerical stability, and errors.

mod common;

use common::{assert_close, idx, t32, t64, values};
use ember_autograd::Var;
use ember_nn::{
    BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, CrossEntropyOptions, HuberLoss, HuberOptions, L1Loss, Loss, MSELoss,
    NLLLoss, NllOptions, Reduction, binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, huber_loss,
    l1_loss, mse_loss, nll_loss,
};
use ember_tensor::{DType, Error, Tensor};

const ALL: [Reduction; 3] = [Reduction::Mean, Reduction::Sum, Reduction::None];

/// Checks `f(reduction)` against the per-element losses `per_element` for every reduction
/// (the mean over `count` elements).
#[track_caller]
fn check_reductions(f: impl Fn(Reduction) -> Var, per_element: &[f64], count: f64, tol: f64) {
    let sum: f64 = per_element.iter().sum();
    for r in ALL {
        let out = f(r);
        match r {
            Reduction::Mean => {
                assert_eq!(out.rank(), 0);
                assert_close(&values(&out), &[sum / count], tol);
            }
            Reduction::Sum => {
                assert_eq!(out.rank(), 0);
                assert_close(&values(&out), &[sum], tol);
            }
            Reduction::None => assert_close(&values(&out), per_element, tol),
        }
    }
}

/// log-softmax of one row, computed directly.
fn log_softmax(row: &[f64]) -> Vec<f64> {
    let z = row.iter().map(|v| v.exp()).sum::<f64>().ln();
    row.iter().map(|v| v - z).collect()
}

// ---------------------------------------------------------------------------------------
// Regression

#[test]
fn mse_and_l1_by_hand() {
    // d = input - target = [1, 0, -2, 3].
    let x = Var::new(t64(&[1.0, 2.0, 3.0, 4.0], &[2, 2]));
    let y = t64(&[0.0, 2.0, 5.0, 1.0], &[2, 2]);
    check_reductions(|r| mse_loss(&x, &y, r).unwrap(), &[1.0, 0.0, 4.0, 9.0], 4.0, 0.0);
    check_reductions(|r| l1_loss(&x, &y, r).unwrap(), &[1.0, 0.0, 2.0, 3.0], 4.0, 0.0);
    assert_eq!(mse_loss(&x, &y, Reduction::None).unwrap().shape().dims(), &[2, 2]);
}

#[test]
fn huber_is_quadratic_inside_delta_and_linear_outside() {
    // d = [1, 0, -2, 0.5].
    let x = Var::new(t64(&[1.0, 2.0, 3.0, 4.5], &[4]));
    let y = t64(&[0.0, 2.0, 5.0, 4.0], &[4]);
    let huber = |delta: f64, r| huber_loss(&x, &y, HuberOptions { reduction: r, delta }).unwrap();
    // delta 1: |1| is not inside (linear: 1 * (1 - 0.5)); 0 and 0.5 are (d^2 / 2); 2 is linear.
    check_reductions(|r| huber(1.0, r), &[0.5, 0.0, 1.5, 0.125], 4.0, 0.0);
    // delta 2: 1 and 0.5 inside; |-2| on the boundary is linear: 2 * (2 - 1).
    check_reductions(|r| huber(2.0, r), &[0.5, 0.0, 2.0, 0.125], 4.0, 0.0);
    assert_eq!(HuberOptions::default(), HuberOptions { reduction: Reduction::Mean, delta: 1.0 });
}

#[test]
fn regression_gradients_by_hand() {
    let x = Var::param(t64(&[1.0, 2.0, 3.0, 4.5], &[4]));
    let y = t64(&[0.0, 2.0, 5.0, 4.0], &[4]);
    mse_loss(&x, &y, Reduction::Mean).unwrap().backward().unwrap();
    // 2 d / n.
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), vec![0.5, 0.0, -1.0, 0.25]);
    x.zero_grad();
    l1_loss(&x, &y, Reduction::Sum).unwrap().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), vec![1.0, 0.0, -1.0, 1.0]);
    x.zero_grad();
    huber_loss(&x, &y, HuberOptions { reduction: Reduction::Sum, delta: 1.0 }).unwrap().backward().unwrap();
    // d inside, delta * sign(d) outside (and at |d| = delta, as PyTorch).
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), vec![1.0, 0.0, -1.0, 0.5]);
}

// ---------------------------------------------------------------------------------------
// Cross-entropy and NLL

fn two_samples() -> (Var, Tensor, [Vec<f64>; 2]) {
    let rows = [[2.0, 0.0, 0.0], [0.0, 3.0, -1.0]];
    let logits = Var::param(t64(&[rows[0], rows[1]].concat(), &[2, 3]));
    (logits, idx(&[0, 2], &[2]), [log_softmax(&rows[0]), log_softmax(&rows[1])])
}

fn ce(reduction: Reduction, label_smoothing: f64, ignore_index: Option<i64>) -> CrossEntropyOptions {
    CrossEntropyOptions { reduction, label_smoothing, ignore_index }
}

#[test]
fn cross_entropy_by_hand() {
    let (logits, targets, lp) = two_samples();
    let nll = [-lp[0][0], -lp[1][2]];
    check_reductions(|r| cross_entropy(&logits, &targets, ce(r, 0.0, None)).unwrap(), &nll, 2.0, 1e-14);
    assert_eq!(CrossEntropyOptions::default(), ce(Reduction::Mean, 0.0, Some(-100)));
}

#[test]
fn cross_entropy_label_smoothing_by_hand() {
    let (logits, targets, lp) = two_samples();
    let eps = 0.1;
    // (1 - eps) * nll + eps * mean over classes of -log p.
    let smooth = |row: &[f64], t: usize| (1.0 - eps) * -row[t] + eps * -row.iter().sum::<f64>() / 3.0;
    let per = [smooth(&lp[0], 0), smooth(&lp[1], 2)];
    check_reductions(|r| cross_entropy(&logits, &targets, ce(r, eps, None)).unwrap(), &per, 2.0, 1e-14);
    // Full smoothing is the cross-entropy with the uniform distribution.
    let uniform = cross_entropy(&logits, &targets, ce(Reduction::None, 1.0, None)).unwrap();
    let expected: Vec<f64> = lp.iter().map(|row| -row.iter().sum::<f64>() / 3.0).collect();
    assert_close(&values(&uniform), &expected, 1e-14);
}

#[test]
fn cross_entropy_ignore_index_means_over_the_rest() {
    let (logits, _, lp) = two_samples();
    let targets = idx(&[0, -100], &[2]);
    let opts = |r| ce(r, 0.0, Some(-100));
    // The mean divides by the one sample that counts.
    check_reductions(|r| cross_entropy(&logits, &targets, opts(r)).unwrap(), &[-lp[0][0], 0.0], 1.0, 1e-14);
    // An ignored sample gets no gradient.
    cross_entropy(&logits, &targets, opts(Reduction::Mean)).unwrap().backward().unwrap();
    let g = logits.grad().unwrap().to_vec::<f64>().unwrap();
    assert_eq!(&g[3..], &[0.0, 0.0, 0.0]);
    assert!(g[..3].iter().all(|v| *v != 0.0));
    // Any value can be the ignored one, a valid class included.
    let per = [0.0, -lp[1][2]];
    let ignore0 = |r| cross_entropy(&logits, idx(&[0, 2], &[2]), ce(r, 0.0, Some(0))).unwrap();
    check_reductions(ignore0, &per, 1.0, 1e-14);
    // With smoothing, ignored samples still contribute nothing.
    let both = cross_entropy(&logits, &targets, ce(Reduction::None, 0.2, Some(-100))).unwrap();
    assert_eq!(values(&both)[1], 0.0);
}

#[test]
fn cross_entropy_with_every_target_ignored_is_nan_as_in_pytorch() {
    let (logits, _, _) = two_samples();
    let targets = idx(&[-100, -100], &[2]);
    let mean = cross_entropy(&logits, &targets, ce(Reduction::Mean, 0.0, Some(-100))).unwrap();
    assert!(mean.item().unwrap().is_nan());
    let sum = cross_entropy(&logits, &targets, ce(Reduction::Sum, 0.0, Some(-100))).unwrap();
    assert_eq!(sum.item().unwrap(), 0.0);
}

#[test]
fn cross_entropy_with_class_probabilities() {
    let (logits, _, lp) = two_samples();
    let probs = t64(&[1.0, 0.0, 0.0, 0.0, 0.5, 0.5], &[2, 3]);
    let per = [-lp[0][0], -(0.5 * lp[1][1] + 0.5 * lp[1][2])];
    check_reductions(|r| cross_entropy(&logits, &probs, ce(r, 0.0, None)).unwrap(), &per, 2.0, 1e-14);
    // Smoothing mixes the probabilities with the uniform distribution.
    let eps = 0.3;
    let mixed: Vec<f64> = [1.0, 0.0, 0.0, 0.0, 0.5, 0.5].iter().map(|p| p * (1.0 - eps) + eps / 3.0).collect();
    let per: Vec<f64> = (0..2).map(|i| -(0..3).map(|c| mixed[3 * i + c] * lp[i][c]).sum::<f64>()).collect();
    check_reductions(|r| cross_entropy(&logits, &probs, ce(r, eps, None)).unwrap(), &per, 2.0, 1e-14);
}

#[test]
fn cross_entropy_on_a_single_sample_and_on_spatial_inputs() {
    let row = [2.0, 0.0, 0.0];
    let single = Var::new(t64(&row, &[3]));
    let target = Tensor::scalar(0i64);
    let none = cross_entropy(&single, &target, ce(Reduction::None, 0.0, None)).unwrap();
    assert_eq!(none.rank(), 0);
    assert_close(&values(&none), &[-log_softmax(&row)[0]], 1e-14);
    let mean = cross_entropy(&single, &target, ce(Reduction::Mean, 0.0, None)).unwrap();
    assert_close(&values(&mean), &[-log_softmax(&row)[0]], 1e-14);

    // [N=1, C=2, d=3]: classes along dimension 1, targets [1, 3].
    let x = Var::new(t64(&[0.0, 1.0, 2.0, 1.0, 1.0, 0.0], &[1, 2, 3]));
    let t = idx(&[1, 0, 0], &[1, 3]);
    let out = cross_entropy(&x, &t, ce(Reduction::None, 0.0, None)).unwrap();
    assert_eq!(out.shape().dims(), &[1, 3]);
    let per = [-log_softmax(&[0.0, 1.0])[1], -log_softmax(&[1.0, 1.0])[0], -log_softmax(&[2.0, 0.0])[0]];
    assert_close(&values(&out), &per, 1e-14);
}

#[test]
fn nll_loss_by_hand() {
    let x = Var::new(t64(&[-1.0, -2.0, -0.5, -3.0], &[2, 2]));
    let t = idx(&[1, 0], &[2]);
    let opts = |reduction| NllOptions { reduction, ignore_index: None };
    check_reductions(|r| nll_loss(&x, &t, opts(r)).unwrap(), &[2.0, 0.5], 2.0, 0.0);
    let ignoring = |reduction| NllOptions { reduction, ignore_index: Some(0) };
    check_reductions(|r| nll_loss(&x, &t, ignoring(r)).unwrap(), &[2.0, 0.0], 1.0, 0.0);
}

// ---------------------------------------------------------------------------------------
// Binary cross-entropy

#[test]
fn binary_cross_entropy_by_hand_with_pytorch_clamp() {
    let p = Var::param(t64(&[0.5, 0.9, 0.0, 1.0, 0.0], &[5]));
    let y = t64(&[1.0, 0.0, 1.0, 0.0, 0.0], &[5]);
    // ln 0 is clamped to -100.
    let per = [2f64.ln(), -(0.1f64.ln()), 100.0, 100.0, 0.0];
    check_reductions(|r| binary_cross_entropy(&p, &y, r).unwrap(), &per, 5.0, 1e-14);
    // Gradients stay finite at saturated probabilities.
    binary_cross_entropy(&p, &y, Reduction::Sum).unwrap().backward().unwrap();
    let g = p.grad().unwrap().to_vec::<f64>().unwrap();
    assert!(g.iter().all(|v| v.is_finite()), "{g:?}");
    // Inside (0, 1): (p - y) / (p (1 - p)).
    assert_close(&g[..2], &[-2.0, 10.0], 1e-12);
}

#[test]
fn binary_cross_entropy_with_logits_by_hand() {
    let x = Var::param(t64(&[0.0, 2.0, -3.0], &[3]));
    let y = t64(&[1.0, 0.0, 0.5], &[3]);
    let softplus = |v: f64| (1.0 + v.exp()).ln();
    let per = [softplus(0.0), softplus(2.0), softplus(-3.0) + 1.5];
    check_reductions(|r| binary_cross_entropy_with_logits(&x, &y, r).unwrap(), &per, 3.0, 1e-14);
    binary_cross_entropy_with_logits(&x, &y, Reduction::Sum).unwrap().backward().unwrap();
    // sigmoid(x) - y, exactly -0.5 at x = 0.
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    assert_close(&x.grad().unwrap().to_vec::<f64>().unwrap(), &[-0.5, sig(2.0), sig(-3.0) - 0.5], 1e-15);
}

// ---------------------------------------------------------------------------------------
// Stability

#[test]
fn huge_logits_give_finite_losses_and_gradients() {
    let logits = Var::param(t32(&[1e4, 0.0, -1e4, -1e4, 1e4, 1e4], &[2, 3]));
    let targets = idx(&[2, 0], &[2]);
    let loss = cross_entropy(&logits, &targets, ce(Reduction::None, 0.1, None)).unwrap();
    let l = values(&loss);
    // Sample 0: nll 2e4, smoothing term mean(-log p) = (1e4 + 2e4) / 3 (log p = [0, -1e4, -2e4]).
    // Sample 1: log p = [-2e4 - ln 2, -ln 2, -ln 2].
    let ln2 = 2f64.ln();
    let expected = [0.9 * 2e4 + 0.1 * 1e4, 0.9 * (2e4 + ln2) + 0.1 * (2e4 + 3.0 * ln2) / 3.0];
    assert_close(&l, &expected, 1e-6);
    loss.sum_all().backward().unwrap();
    assert!(logits.grad().unwrap().to_vec::<f32>().unwrap().iter().all(|v| v.is_finite()));

    let x = Var::param(t32(&[1e4, -1e4, 1e4, -1e4], &[4]));
    let y = t32(&[0.0, 1.0, 1.0, 0.0], &[4]);
    let bce = binary_cross_entropy_with_logits(&x, &y, Reduction::None).unwrap();
    assert_eq!(values(&bce), vec![1e4, 1e4, 0.0, 0.0]);
    bce.sum_all().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), vec![1.0, -1.0, 0.0, 0.0]);

    // Probabilities that saturated to exactly 0 and 1 in f32.
    let p = Var::param(x.value().sigmoid());
    let clamped = binary_cross_entropy(&p, &y, Reduction::None).unwrap();
    assert_eq!(values(&clamped), vec![100.0, 100.0, 0.0, 0.0]);
    clamped.sum_all().backward().unwrap();
    assert!(p.grad().unwrap().to_vec::<f32>().unwrap().iter().all(|v| v.is_finite()));

    let nll = nll_loss(&logits.log_softmax(1).unwrap(), &targets, NllOptions::default()).unwrap();
    assert!(nll.item().unwrap().is_finite());
}

// ---------------------------------------------------------------------------------------
// Loss objects

#[test]
fn loss_objects_match_the_functions() {
    let (logits, targets, _) = two_samples();
    let t = Var::new(targets.clone());
    let opts = ce(Reduction::Sum, 0.1, Some(2));
    let criteria: Vec<(Box<dyn Loss>, Var)> = vec![
        (Box::new(CrossEntropyLoss(opts)), cross_entropy(&logits, &targets, opts).unwrap()),
        (
            Box::new(NLLLoss(NllOptions::default())),
            nll_loss(&logits.log_softmax(1).unwrap(), &targets, NllOptions::default()).unwrap(),
        ),
    ];
    for (i, (c, expected)) in criteria.iter().enumerate() {
        let input = if i == 1 { logits.log_softmax(1).unwrap() } else { logits.clone() };
        assert_eq!(values(&c.forward(&input, &t).unwrap()), values(expected));
    }
    let x = Var::new(t64(&[0.2, 0.7, 0.4], &[3]));
    let y = Var::new(t64(&[0.0, 1.0, 1.0], &[3]));
    let pairs: Vec<(Box<dyn Loss>, Var)> = vec![
        (Box::new(MSELoss::default()), mse_loss(&x, &y, Reduction::Mean).unwrap()),
        (Box::new(L1Loss(Reduction::Sum)), l1_loss(&x, &y, Reduction::Sum).unwrap()),
        (Box::new(HuberLoss(HuberOptions { reduction: Reduction::None, delta: 0.5 })), {
            huber_loss(&x, &y, HuberOptions { reduction: Reduction::None, delta: 0.5 }).unwrap()
        }),
        (Box::new(BCELoss::default()), binary_cross_entropy(&x, &y, Reduction::Mean).unwrap()),
        (
            Box::new(BCEWithLogitsLoss(Reduction::Sum)),
            binary_cross_entropy_with_logits(&x, &y, Reduction::Sum).unwrap(),
        ),
    ];
    for (c, expected) in &pairs {
        assert_eq!(values(&c.forward(&x, &y).unwrap()), values(expected));
    }
}

// ---------------------------------------------------------------------------------------
// Errors

#[test]
fn cross_entropy_rejects_bad_targets() {
    let (logits, _, _) = two_samples();
    let opts = CrossEntropyOptions::default();
    let check = |target: Tensor, o: CrossEntropyOptions, want: fn(&Error) -> bool, text: &str| {
        let e = cross_entropy(&logits, &target, o).unwrap_err();
        assert!(want(&e), "wrong error kind: {e}");
        assert!(e.to_string().contains(text), "{e:?} does not mention {text:?}");
        assert!(e.to_string().starts_with("cross_entropy"), "{e}");
    };
    let shape = |e: &Error| matches!(e, Error::Shape { .. });
    let dtype = |e: &Error| matches!(e, Error::DType { .. });
    let index = |e: &Error| matches!(e, Error::Index { .. });
    let invalid = |e: &Error| matches!(e, Error::InvalidArgument { .. });
    check(idx(&[0, 3], &[2]), opts, index, "target 3 (element 1) is out of range for 3 classes");
    check(idx(&[-1, 0], &[2]), opts, index, "target -1");
    let strict = ce(Reduction::Mean, 0.0, None);
    check(idx(&[-100, 0], &[2]), strict, index, "the default, Some(-100), ignores");
    // The default ignores -100, as PyTorch's does.
    let (_, _, lp) = two_samples();
    let default_ignores = cross_entropy(&logits, idx(&[-100, 0], &[2]), opts).unwrap();
    assert_close(&values(&default_ignores), &[-lp[1][0]], 1e-14);
    check(idx(&[5, 0], &[2]), ce(Reduction::Mean, 0.0, Some(-100)), index, "target 5");
    check(idx(&[0, 1, 2], &[3]), opts, shape, "needs targets of shape [2], got [3]");
    check(idx(&[0, 1], &[2, 1]), opts, shape, "[2, 1]");
    check(t64(&[0.0, 1.0], &[2]), opts, shape, "must be i64");
    check(Tensor::from_vec(vec![0u8, 1], [2]).unwrap(), opts, dtype, "must be i64, got u8");
    let probs = Tensor::full([2, 3], 1.0 / 3.0, DType::F64).unwrap();
    check(probs.clone(), ce(Reduction::Mean, 0.0, Some(0)), invalid, "ignore_index 0");
    // A negative ignore_index (the default included) does not concern probability targets.
    assert!(cross_entropy(&logits, &probs, opts).is_ok());
    check(idx(&[0, 1], &[2]), ce(Reduction::Mean, 1.5, None), invalid, "label_smoothing");
    check(idx(&[0, 1], &[2]), ce(Reduction::Mean, -0.1, None), invalid, "label_smoothing");

    let e = cross_entropy(&Var::new(Tensor::scalar(1.0f32)), Tensor::scalar(0i64), opts).unwrap_err();
    assert!(shape(&e), "{e}");
    let ints = Var::new(idx(&[1, 2, 3, 4], &[2, 2]));
    assert!(dtype(&cross_entropy(&ints, idx(&[0, 1], &[2]), opts).unwrap_err()));
    let e = nll_loss(&logits, idx(&[0, 7], &[2]), NllOptions::default()).unwrap_err();
    assert!(index(&e) && e.to_string().starts_with("nll_loss"), "{e}");
}

#[test]
fn pointwise_losses_reject_mismatches() {
    let x = Var::new(t64(&[0.5, 0.5], &[2]));
    type LossFn = fn(&Var, Tensor) -> ember_tensor::Result<Var>;
    let losses: [(&str, LossFn); 5] = [
        ("mse_loss", |x, y| mse_loss(x, y, Reduction::Mean)),
        ("l1_loss", |x, y| l1_loss(x, y, Reduction::Mean)),
        ("huber_loss", |x, y| huber_loss(x, y, HuberOptions::default())),
        ("binary_cross_entropy", |x, y| binary_cross_entropy(x, y, Reduction::Mean)),
        ("binary_cross_entropy_with_logits", |x, y| binary_cross_entropy_with_logits(x, y, Reduction::Mean)),
    ];
    for (name, f) in losses {
        let e = f(&x, t64(&[0.0, 1.0, 1.0], &[3])).unwrap_err();
        assert!(matches!(e, Error::Shape { .. }) && e.to_string().starts_with(name), "{e}");
        assert!(e.to_string().contains("[2]") && e.to_string().contains("[3]"), "{e}");
        let e = f(&x, idx(&[0, 1], &[2])).unwrap_err();
        assert!(matches!(e, Error::DType { .. }) && e.to_string().contains("i64"), "{e}");
        let ints = Var::new(idx(&[0, 1], &[2]));
        assert!(matches!(f(&ints, t64(&[0.0, 1.0], &[2])), Err(Error::DType { .. })));
    }
}

#[test]
fn invalid_option_values_are_errors() {
    let x = Var::new(t64(&[0.5, 1.5], &[2]));
    let y = t64(&[0.0, 1.0], &[2]);
    for delta in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let e = huber_loss(&x, &y, HuberOptions { reduction: Reduction::Mean, delta }).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    }
    // Probabilities outside [0, 1] (and NaN) are refused, naming the element.
    let e = binary_cross_entropy(&x, &y, Reduction::Mean).unwrap_err();
    assert!(e.to_string().contains("element 1 is 1.5"), "{e}");
    let nan = Var::new(t64(&[f64::NAN, 0.5], &[2]));
    assert!(binary_cross_entropy(&nan, &y, Reduction::Mean).is_err());
}

#[test]
fn cross_entropy_recomputes_with_new_targets() {
    // The loss is a graph of the target too: replacing the target's value and asking for the
    // fresh loss gives the loss of the new targets, ignored positions and mean count included.
    let (logits, _, lp) = two_samples();
    let target = Var::new(idx(&[0, -100], &[2]));
    let loss = cross_entropy(&logits, &target, ce(Reduction::Mean, 0.0, Some(-100))).unwrap();
    assert_close(&values(&loss), &[-lp[0][0]], 1e-14);
    target.set_value(idx(&[1, 2], &[2])).unwrap();
    let fresh = loss.forward().unwrap().to_vec::<f64>().unwrap();
    assert_close(&fresh, &[(-lp[0][1] - lp[1][2]) / 2.0], 1e-14);
}

#[test]
fn class_index_losses_record_one_node() {
    // The loss's only inputs are the scores and the target themselves: no log_softmax,
    // gather, mask or reduction nodes between them, whatever the shape and options.
    let cases = [
        (Var::param(t64(&[2.0, 0.0, 0.0, 0.0, 3.0, -1.0], &[2, 3])), idx(&[0, -100], &[2])),
        (Var::param(t64(&[0.0, 1.0, 2.0, 1.0, 1.0, 0.0], &[1, 2, 3])), idx(&[1, 0, -100], &[1, 3])),
        (Var::param(t64(&[2.0, 0.0, 0.0], &[3])), Tensor::scalar(2i64)),
    ];
    for (scores, target) in cases {
        let target = Var::new(target);
        for r in ALL {
            let losses = [
                ("cross_entropy", cross_entropy(&scores, &target, ce(r, 0.1, Some(-100))).unwrap()),
                (
                    "nll_loss",
                    nll_loss(&scores, &target, NllOptions { reduction: r, ignore_index: Some(-100) }).unwrap(),
                ),
            ];
            for (name, loss) in losses {
                assert_eq!(loss.op_name(), name);
                let inputs = loss.inputs().unwrap();
                assert_eq!(inputs.len(), 2, "{name}");
                assert!(inputs[0].same_node(&scores) && inputs[1].same_node(&target), "{name} of {:?}", scores.shape());
            }
        }
    }
}

#[test]
fn a_recomputed_loss_checks_its_new_targets() {
    let (logits, _, _) = two_samples();
    let target = Var::new(idx(&[0, 1], &[2]));
    let loss = cross_entropy(&logits, &target, CrossEntropyOptions::default()).unwrap();
    target.set_value(idx(&[0, 3], &[2])).unwrap();
    let e = loss.forward().unwrap_err();
    assert!(e.to_string().starts_with("cross_entropy"), "{e}");
    assert!(e.to_string().contains("target 3 (element 1) is out of range for 3 classes"), "{e}");
}

#[test]
fn class_index_losses_in_f32_match_f64() {
    // The f32 kernel (its own SIMD paths) against f64, on rows longer than the vector
    // width, with smoothing and ignored targets, and its gradient.
    let n = 37;
    let data: Vec<f64> = (0..n * 41).map(|i| ((i * 7919) % 1009) as f64 * 0.01 - 5.0).collect();
    let targets: Vec<i64> = (0..n as i64).map(|i| if i % 7 == 3 { -100 } else { (i * 5) % 41 }).collect();
    let t = idx(&targets, &[n]);
    for r in ALL {
        let opts = ce(r, 0.1, Some(-100));
        let x64 = Var::param(t64(&data, &[n, 41]));
        let x32 = Var::param(x64.value().to_dtype(DType::F32));
        let (l64, l32) = (cross_entropy(&x64, &t, opts).unwrap(), cross_entropy(&x32, &t, opts).unwrap());
        assert_eq!(l32.dtype(), DType::F32);
        assert_close(&values(&l32), &values(&l64), 1e-5);
        l64.sum_all().backward().unwrap();
        l32.sum_all().backward().unwrap();
        let (g64, g32) = (x64.grad().unwrap().to_vec_f64().unwrap(), x32.grad().unwrap().to_vec_f64().unwrap());
        assert_close(&g32, &g64, 1e-5);
    }
}

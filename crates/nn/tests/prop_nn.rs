//! Property tests of ember-nn's functional API and layers under random, often invalid,
//! arguments: every call either succeeds with the value a naive reference in this file
//! gives, or fails with an error whose message names the operation (or the layer). A panic
//! fails the property.
//!
//! Covered: the losses (cross-entropy with class indices or probabilities, `ignore_index`,
//! label smoothing and every reduction; NLL; MSE, L1, Huber, BCE, BCE with logits), the
//! normalisations (batch, instance, group, layer and RMS norm, functional and as layers),
//! scaled dot-product attention (masks, causal, scale), `MultiheadAttention`, embedding and
//! the recurrent cells. Shapes have extents 0 to 4 (zero-size included).

use ember_autograd::Var;
use ember_nn::functional as F;
use ember_nn::{
    AdaptiveAvgPool2d, AvgPool2d, BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, Conv2dOptions, ConvOptions,
    CrossEntropyOptions, Embedding, GRU, GRUCell, GroupNorm, HuberOptions, InstanceNorm2d, LSTM, LSTMCell, LayerNorm,
    Linear, MaxPool2d, Module, MultiheadAttention, MultiheadAttentionArgs, NllOptions, RMSNorm, RNN, RNNCell,
    Reduction, RnnOptions,
};
use ember_tensor::{DType, Padding, Result, Tensor};
use ember_testing::prop::{close, dtype, shape, strides, tensor, values, var_f64s};
use proptest::prelude::*;

/// Cases per property: every error path is hit, and the file runs in seconds in debug.
const CASES: u32 = 1000;

fn var(shape: &[usize], seed: u64, dtype: DType) -> Var {
    Var::param(tensor(shape, seed, dtype))
}

fn reduction() -> impl Strategy<Value = Reduction> {
    prop_oneof![Just(Reduction::None), Just(Reduction::Sum), Just(Reduction::Mean)]
}

/// `Ok(v)`, or `None` after checking that the error names one of `ops`.
fn ok_or_names<T>(result: Result<T>, ops: &[&str]) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(e) => {
            let msg = e.to_string();
            assert!(ops.iter().any(|op| msg.contains(op)), "error {msg:?} names none of {ops:?}");
            None
        }
    }
}

/// The reduction of per-element losses as PyTorch defines it (`count` divides the mean).
fn reduce(losses: &[f64], red: Reduction, count: f64) -> Vec<f64> {
    match red {
        Reduction::None => losses.to_vec(),
        Reduction::Sum => vec![losses.iter().sum()],
        Reduction::Mean => vec![losses.iter().sum::<f64>() / count],
    }
}

fn log_softmax(row: &[f64]) -> Vec<f64> {
    let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = m + row.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
    row.iter().map(|x| x - lse).collect()
}

/// Normalises `data` within groups (`group[i]` is element i's group): `(x - mean) /
/// sqrt(var + eps)` with the biased variance, or `x / sqrt(mean(x^2) + eps)` for `rms`.
fn normalise(data: &[f64], group: &[usize], groups: usize, eps: f64, rms: bool) -> Vec<f64> {
    let mut n = vec![0.0; groups];
    let mut sum = vec![0.0; groups];
    for (x, &g) in data.iter().zip(group) {
        n[g] += 1.0;
        sum[g] += if rms { 0.0 } else { *x };
    }
    let mean: Vec<f64> = sum.iter().zip(&n).map(|(s, n)| s / n).collect();
    let mut sq = vec![0.0; groups];
    for (x, &g) in data.iter().zip(group) {
        sq[g] += (x - mean[g]).powi(2);
    }
    data.iter().zip(group).map(|(x, &g)| (x - mean[g]) / (sq[g] / n[g] + eps).sqrt()).collect()
}

/// Naive attention of `q [b, l, e]` over `k [b, s, e]`, `v [b, s, ev]` with an additive
/// `[l, s]` bias (`-inf` hides); rows with every score hidden are `None`.
fn naive_attention(q: &[f64], k: &[f64], v: &[f64], dims: [usize; 5], bias: &[f64], scale: f64) -> Vec<Option<f64>> {
    let [b, l, s, e, ev] = dims;
    let mut out = Vec::new();
    for bi in 0..b {
        for i in 0..l {
            let scores: Vec<f64> = (0..s)
                .map(|j| {
                    let dot: f64 = (0..e).map(|p| q[(bi * l + i) * e + p] * k[(bi * s + j) * e + p]).sum();
                    dot * scale + bias[i * s + j]
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if m == f64::NEG_INFINITY {
                out.extend(std::iter::repeat_n(None, ev));
                continue;
            }
            let w: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
            let total: f64 = w.iter().sum();
            for c in 0..ev {
                out.push(Some((0..s).map(|j| w[j] / total * v[(bi * s + j) * ev + c]).sum()));
            }
        }
    }
    out
}

/// A recurrent layer run on an input and optional `h0` and `c0`: its output and h_n.
type RunLayer = dyn Fn(&Var, Option<&Var>, Option<&Var>) -> Result<(Var, Var)>;

/// A layer's output and its functional form's: both values and bitwise equal, or both
/// refused.
fn same(layer: Option<Var>, function: Result<Var>, name: &str) -> std::result::Result<(), TestCaseError> {
    match (layer, function) {
        (Some(a), Ok(b)) => prop_assert_eq!(var_f64s(&a), var_f64s(&b), "{}", name),
        (None, Err(_)) => {}
        (a, b) => prop_assert!(false, "{}: the layer gave {}, the function {:?}", name, a.is_some(), b.err()),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// cross_entropy and nll_loss with class-index targets (some out of range, some the
    /// ignore index), any ignore_index, label smoothing inside and outside [0, 1] and every
    /// reduction: the naive log-softmax formula, or an error naming the loss.
    #[test]
    fn class_index_losses_match_naive(
        rows in 0usize..4,
        classes in 0usize..5,
        single in any::<bool>(),
        targets in prop::collection::vec(prop_oneof![4 => -2i64..7, 1 => Just(-100i64)], 0..5),
        match_len in prop::bool::weighted(0.8),
        ignore in prop::option::of(prop_oneof![-1i64..3, Just(-100i64)]),
        smoothing in prop_oneof![Just(0.0), Just(0.1), Just(0.5), Just(1.0), Just(-0.5), Just(1.5), Just(f64::NAN)],
        red in reduction(),
        seed in any::<u64>(),
        dt in dtype(),
    ) {
        let in_shape = if single { vec![classes] } else { vec![rows, classes] };
        let x = var(&in_shape, seed, dt);
        let mut targets = targets;
        if match_len && !single {
            targets.resize(rows, 0);
        }
        let (t_shape, ts): (Vec<usize>, Vec<i64>) = match (single, targets.first()) {
            (true, Some(&t)) => (vec![], vec![t]),
            _ => (vec![targets.len()], targets.clone()),
        };
        let target = Tensor::from_vec(ts.clone(), t_shape.clone()).unwrap();
        let shape_ok = if single { t_shape.is_empty() } else { t_shape == [rows] };
        let ignored = |t: i64| ignore == Some(t);
        let targets_ok = ts.iter().all(|&t| ignored(t) || (0..classes as i64).contains(&t));
        let data = values(&in_shape, seed);
        let row = |n: usize| &data[n * classes..(n + 1) * classes];
        let reference = |log_probs: bool, eps: f64| -> Vec<f64> {
            let losses: Vec<f64> = ts.iter().enumerate().map(|(n, &t)| {
                if ignored(t) {
                    return 0.0;
                }
                let lp = if log_probs { row(n).to_vec() } else { log_softmax(row(n)) };
                let smooth = if eps > 0.0 { eps / classes as f64 * lp.iter().sum::<f64>() } else { 0.0 };
                -(1.0 - eps) * lp[t as usize] - smooth
            }).collect();
            let count = ts.iter().filter(|&&t| !ignored(t)).count() as f64;
            reduce(&losses, red, count)
        };

        let ce = CrossEntropyOptions { reduction: red, label_smoothing: smoothing, ignore_index: ignore };
        let got = ok_or_names(F::cross_entropy(&x, &target, ce), &["cross_entropy"]);
        prop_assert_eq!(got.is_some(), shape_ok && targets_ok && (0.0..=1.0).contains(&smoothing), "cross_entropy {:?} {:?} {:?}", in_shape, ts, smoothing);
        if let Some(l) = got {
            let want = reference(false, smoothing);
            prop_assert!(close(&var_f64s(&l), &want, dt), "cross_entropy {:?} vs {:?}", var_f64s(&l), want);
            if red == Reduction::None {
                prop_assert_eq!(l.shape().dims().to_vec(), t_shape.clone());
            }
        }
        let nll = NllOptions { reduction: red, ignore_index: ignore };
        let got = ok_or_names(F::nll_loss(&x, &target, nll), &["nll_loss"]);
        prop_assert_eq!(got.is_some(), shape_ok && targets_ok);
        if let Some(l) = got {
            let want = reference(true, 0.0);
            prop_assert!(close(&var_f64s(&l), &want, dt), "nll_loss {:?} vs {:?}", var_f64s(&l), want);
        }
    }

    /// cross_entropy with class-probability targets of the input's shape (or not): the
    /// naive formula with smoothing, the mean over samples; an ignore_index >= 0 is refused.
    #[test]
    fn class_probability_cross_entropy_matches_naive(
        rows in 0usize..4,
        classes in 1usize..5,
        wrong_shape in prop::bool::weighted(0.2),
        ignore in prop::option::of(-1i64..2),
        smoothing in prop_oneof![Just(0.0), Just(0.2), Just(1.0), Just(2.0)],
        red in reduction(),
        seed in any::<u64>(),
        dt in dtype(),
    ) {
        let shape = vec![rows, classes];
        let x = var(&shape, seed, dt);
        let t_shape = if wrong_shape { vec![rows, classes + 1] } else { shape.clone() };
        let y = tensor(&t_shape, seed ^ 5, dt).abs();
        let ce = CrossEntropyOptions { reduction: red, label_smoothing: smoothing, ignore_index: ignore };
        let got = ok_or_names(F::cross_entropy(&x, &y, ce), &["cross_entropy"]);
        let valid = !wrong_shape && ignore.is_none_or(|i| i < 0) && (0.0..=1.0).contains(&smoothing);
        prop_assert_eq!(got.is_some(), valid);
        if let Some(l) = got {
            let (data, yd) = (values(&shape, seed), var_f64s(&Var::new(y)));
            let losses: Vec<f64> = (0..rows).map(|n| {
                let lp = log_softmax(&data[n * classes..(n + 1) * classes]);
                -(0..classes).map(|c| (yd[n * classes + c] * (1.0 - smoothing) + smoothing / classes as f64) * lp[c]).sum::<f64>()
            }).collect();
            let want = reduce(&losses, red, rows as f64);
            prop_assert!(close(&var_f64s(&l), &want, dt), "{:?} vs {:?}", var_f64s(&l), want);
        }
    }

    /// The elementwise losses on random (sometimes mismatched) shapes, probabilities inside
    /// or outside [0, 1] and any Huber delta: the naive formula or an error naming the loss.
    #[test]
    fn pointwise_losses_match_naive(
        s in shape(3),
        mismatch in prop::bool::weighted(0.2),
        outside in prop::bool::weighted(0.2),
        delta in prop_oneof![Just(1.0), Just(0.5), Just(2.5), Just(0.0), Just(-1.0), Just(f64::NAN), Just(f64::INFINITY)],
        red in reduction(),
        seed in any::<u64>(),
        dt in dtype(),
    ) {
        let n = s.iter().product::<usize>() as f64;
        let t_shape = if mismatch { let mut t = s.clone(); t.push(2); t } else { s.clone() };
        let (x, y) = (var(&s, seed, dt), tensor(&t_shape, seed ^ 9, dt));
        let (xd, yd) = (values(&s, seed), values(&t_shape, seed ^ 9));
        let check = |name: &str, got: Result<Var>, valid: bool, f: &dyn Fn(f64, f64) -> f64| -> std::result::Result<(), TestCaseError> {
            let got = ok_or_names(got, &[name]);
            prop_assert_eq!(got.is_some(), valid, "{}", name);
            if let Some(l) = got {
                let losses: Vec<f64> = xd.iter().zip(&yd).map(|(&a, &b)| f(a, b)).collect();
                let want = reduce(&losses, red, n);
                prop_assert!(close(&var_f64s(&l), &want, dt), "{}: {:?} vs {:?}", name, var_f64s(&l), want);
                if red == Reduction::None {
                    prop_assert_eq!(l.shape().dims().to_vec(), s.clone());
                }
            }
            Ok(())
        };
        check("mse_loss", F::mse_loss(&x, &y, red), !mismatch, &|a, b| (a - b).powi(2))?;
        check("l1_loss", F::l1_loss(&x, &y, red), !mismatch, &|a, b| (a - b).abs())?;
        let huber = HuberOptions { reduction: red, delta };
        let delta_ok = delta > 0.0 && delta.is_finite();
        check("huber_loss", F::huber_loss(&x, &y, huber), !mismatch && delta_ok, &|a, b| {
            let d = (a - b).abs();
            if d < delta { 0.5 * d * d } else { delta * (d - 0.5 * delta) }
        })?;
        check("binary_cross_entropy_with_logits", F::binary_cross_entropy_with_logits(&x, &y, red), !mismatch, &|a, b| {
            a.max(0.0) - a * b + (-a.abs()).exp().ln_1p()
        })?;
        // Probabilities: the values mapped into [0, 1], or pushed out of it.
        let p_data: Vec<f64> = xd.iter().map(|v| (v + 2.0) / 4.0 + if outside { 1.5 } else { 0.0 }).collect();
        let p = Var::new(Tensor::from_vec(p_data.clone(), s.clone()).unwrap().to_dtype(dt));
        let got = ok_or_names(F::binary_cross_entropy(&p, &y, red), &["binary_cross_entropy"]);
        prop_assert_eq!(got.is_some(), !mismatch && (!outside || s.contains(&0)));
        if let Some(l) = got {
            let losses: Vec<f64> = p_data.iter().zip(&yd).map(|(&p, &y)| {
                -(y * p.ln().max(-100.0) + (1.0 - y) * (1.0 - p).ln().max(-100.0))
            }).collect();
            let want = reduce(&losses, red, n);
            prop_assert!(close(&var_f64s(&l), &want, dt), "binary_cross_entropy: {:?} vs {:?}", var_f64s(&l), want);
        }
    }

    /// batch, instance and group norm (functional) on random [N, C, *] inputs with weights
    /// and running statistics of the right or a wrong length, any eps: the naive
    /// normalisation (and running-statistics update), or an error naming the op.
    #[test]
    fn channel_norms_match_naive(
        s in shape(4),
        groups in 0usize..4,
        wrong_param in prop::bool::weighted(0.15),
        training in any::<bool>(),
        eps in prop_oneof![4 => Just(1e-5), 1 => Just(0.0), 1 => Just(-1.0), 1 => Just(f64::NAN)],
        momentum in prop_oneof![Just(0.1), Just(1.0), Just(0.0)],
        seed in any::<u64>(),
        dt in dtype(),
    ) {
        let x = var(&s, seed, dt);
        let data = values(&s, seed);
        let c = if s.len() >= 2 { s[1] } else { 0 };
        let pc = c + usize::from(wrong_param);
        let (w, b) = (var(&[pc], seed ^ 1, dt), var(&[pc], seed ^ 2, dt));
        let (wd, bd) = (values(&[pc], seed ^ 1), values(&[pc], seed ^ 2));
        let eps_ok = eps.is_finite() && eps >= 0.0;
        let numel = data.len();
        let st = strides(&s);
        let channel = |i: usize| if s.len() >= 2 { (i / st[1]) % s[1].max(1) } else { 0 };
        let batch = |i: usize| if s.is_empty() { 0 } else { i / st[0] };
        let affine = |y: Vec<f64>| -> Vec<f64> { y.iter().enumerate().map(|(i, v)| v * wd[channel(i)] + bd[channel(i)]).collect() };

        // batch_norm: statistics per channel over every other dimension.
        let rm = Tensor::from_vec(values(&[pc], seed ^ 3), [pc]).unwrap().to_dtype(dt);
        let rv = Tensor::from_vec(values(&[pc], seed ^ 4).iter().map(|v| v.abs() + 0.5).collect::<Vec<_>>(), [pc]).unwrap().to_dtype(dt);
        let (rm0, rv0) = (rm.to_vec_f64().unwrap(), rv.to_vec_f64().unwrap());
        let got = ok_or_names(F::batch_norm(&x, Some(&rm), Some(&rv), Some(&w), Some(&b), training, momentum, eps), &["batch_norm"]);
        let per_channel = numel / c.max(1);
        let valid = s.len() >= 2 && !wrong_param && eps_ok && (!training || per_channel > 1);
        prop_assert_eq!(got.is_some(), valid, "batch_norm {:?} training={}", s, training);
        if let Some(y) = got {
            let group: Vec<usize> = (0..numel).map(channel).collect();
            let want = if training {
                normalise(&data, &group, c, eps, false)
            } else {
                data.iter().enumerate().map(|(i, x)| (x - rm0[channel(i)]) / (rv0[channel(i)] + eps).sqrt()).collect()
            };
            prop_assert!(close(&var_f64s(&y), &affine(want), dt), "batch_norm {:?}", s);
            if training {
                let (mut mean, mut var) = (vec![0.0; c], vec![0.0; c]);
                for (i, x) in data.iter().enumerate() {
                    mean[channel(i)] += x / per_channel as f64;
                }
                for (i, x) in data.iter().enumerate() {
                    var[channel(i)] += (x - mean[channel(i)]).powi(2) / (per_channel - 1) as f64;
                }
                let want_rm: Vec<f64> = rm0.iter().zip(&mean).map(|(r, m)| (1.0 - momentum) * r + momentum * m).collect();
                let want_rv: Vec<f64> = rv0.iter().zip(&var).map(|(r, v)| (1.0 - momentum) * r + momentum * v).collect();
                prop_assert!(close(&rm.to_vec_f64().unwrap(), &want_rm, dt), "running_mean");
                prop_assert!(close(&rv.to_vec_f64().unwrap(), &want_rv, dt), "running_var");
            }
        }

        // instance_norm: statistics per sample and channel.
        let got = ok_or_names(F::instance_norm(&x, None, None, Some(&w), Some(&b), true, 0.1, eps), &["instance_norm"]);
        let spatial = numel / (s.first().copied().unwrap_or(0) * c).max(1);
        prop_assert_eq!(got.is_some(), s.len() >= 2 && !wrong_param && eps_ok && spatial > 1, "instance_norm {:?}", s);
        if let Some(y) = got {
            let group: Vec<usize> = (0..numel).map(|i| batch(i) * c + channel(i)).collect();
            let want = affine(normalise(&data, &group, s[0] * c, eps, false));
            prop_assert!(close(&var_f64s(&y), &want, dt), "instance_norm {:?}", s);
        }

        // group_norm: statistics per sample and group of channels.
        let got = ok_or_names(F::group_norm(&x, groups, Some(&w), Some(&b), eps), &["group_norm"]);
        let valid = s.len() >= 2 && !wrong_param && eps_ok && groups > 0 && c % groups == 0;
        prop_assert_eq!(got.is_some(), valid, "group_norm {:?} groups={}", s, groups);
        if let Some(y) = got {
            let per_group = c / groups;
            let group: Vec<usize> = (0..numel).map(|i| batch(i) * groups + channel(i) / per_group.max(1)).collect();
            let want = affine(normalise(&data, &group, s[0] * groups, eps, false));
            prop_assert!(close(&var_f64s(&y), &want, dt), "group_norm {:?}", s);
        }
    }

    /// layer_norm and rms_norm over a random trailing shape (which may not match the input,
    /// be empty or hold a zero), with weights of that shape or another: the naive
    /// normalisation, or an error naming the op. The layers agree with the functions.
    #[test]
    fn trailing_norms_match_naive(
        s in shape(4),
        k in 0usize..3,
        bad_norm_shape in prop::bool::weighted(0.15),
        wrong_param in prop::bool::weighted(0.15),
        eps in prop_oneof![4 => Just(1e-5f64), 1 => Just(0.0), 1 => Just(-1.0)],
        seed in any::<u64>(),
        dt in dtype(),
    ) {
        let x = var(&s, seed, dt);
        let data = values(&s, seed);
        let k = k.min(s.len());
        let mut ns: Vec<usize> = s[s.len() - k..].to_vec();
        if bad_norm_shape {
            // Extents are below 5: never the input's own trailing extent.
            ns.push(5);
        }
        let mut ps = ns.clone();
        if wrong_param {
            ps.push(1);
        }
        let (w, b) = (var(&ps, seed ^ 1, dt), var(&ps, seed ^ 2, dt));
        let (wd, bd) = (values(&ps, seed ^ 1), values(&ps, seed ^ 2));
        let inner: usize = ns.iter().product();
        let shape_ok = !ns.is_empty() && !ns.contains(&0) && !bad_norm_shape;
        let eps_ok = eps.is_finite() && eps >= 0.0;
        let group: Vec<usize> = (0..data.len()).map(|i| i / inner.max(1)).collect();
        let groups = data.len() / inner.max(1);
        let affine = |y: Vec<f64>, bias: bool| -> Vec<f64> {
            y.iter().enumerate().map(|(i, v)| v * wd[i % inner] + if bias { bd[i % inner] } else { 0.0 }).collect()
        };

        let got = ok_or_names(F::layer_norm(&x, &ns, Some(&w), Some(&b), eps), &["LayerNorm", "layer_norm"]);
        prop_assert_eq!(got.is_some(), shape_ok && !wrong_param && eps_ok, "layer_norm {:?} over {:?}", s, ns);
        if let Some(y) = got {
            let want = affine(normalise(&data, &group, groups, eps, false), true);
            prop_assert!(close(&var_f64s(&y), &want, dt), "layer_norm {:?} over {:?}", s, ns);
        }
        let got = ok_or_names(F::rms_norm(&x, &ns, Some(&w), Some(eps)), &["rms_norm"]);
        prop_assert_eq!(got.is_some(), shape_ok && !wrong_param && eps_ok, "rms_norm {:?} over {:?}", s, ns);
        if let Some(y) = got {
            let want = affine(normalise(&data, &group, groups, eps, true), false);
            prop_assert!(close(&var_f64s(&y), &want, dt), "rms_norm {:?} over {:?}", s, ns);
        }

        // The layers (f32, weight one and bias zero) compute their function.
        let x32 = var(&s, seed, DType::F32);
        if let Some(layer) = ok_or_names(LayerNorm::new(&ns), &["LayerNorm"]) {
            prop_assert!(!ns.is_empty() && !ns.contains(&0));
            same(ok_or_names(layer.forward(&x32), &["LayerNorm"]), F::layer_norm(&x32, &ns, None, None, 1e-5), "LayerNorm")?;
        }
        if let Some(layer) = ok_or_names(RMSNorm::new(&ns), &["RMSNorm", "rms_norm"]) {
            same(ok_or_names(layer.forward(&x32), &["RMSNorm", "rms_norm"]), F::rms_norm(&x32, &ns, None, None), "RMSNorm")?;
        }
    }

    /// The channel-norm layers on inputs of any rank and channel count: in training they
    /// compute the functional form with their own parameters, or refuse naming the layer.
    #[test]
    fn channel_norm_layers_agree_with_the_functions(s in shape(5), features in 0usize..4, groups in 0usize..3, seed in any::<u64>()) {
        let x = var(&s, seed, DType::F32);
        let fits = s.len() >= 2 && s[1] == features;
        if let Some(bn) = ok_or_names(BatchNorm1d::new(features), &["BatchNorm1d"]) {
            let got = ok_or_names(bn.forward(&x), &["BatchNorm1d", "batch_norm"]);
            if let Some(y) = got {
                prop_assert!(fits && (s.len() == 2 || s.len() == 3));
                let (rm, rv) = (Tensor::zeros([features], DType::F32).unwrap(), Tensor::ones([features], DType::F32).unwrap());
                same(Some(y), F::batch_norm(&x, Some(&rm), Some(&rv), None, None, true, 0.1, 1e-5), "BatchNorm1d")?;
            }
        }
        if let Some(bn) = ok_or_names(BatchNorm2d::new(features), &["BatchNorm2d"])
            && ok_or_names(bn.forward(&x), &["BatchNorm2d", "batch_norm"]).is_some()
        {
            prop_assert!(fits && s.len() == 4);
        }
        if let Some(inorm) = ok_or_names(InstanceNorm2d::new(features), &["InstanceNorm2d"])
            && let Some(y) = ok_or_names(inorm.forward(&x), &["InstanceNorm2d", "instance_norm"])
        {
            prop_assert!(s.len() == 3 || s.len() == 4, "InstanceNorm2d accepted {:?}", s);
            // A 3-d input is one unbatched sample [C, H, W].
            let batched = if s.len() == 3 { x.unsqueeze(0).unwrap() } else { x.clone() };
            let want = F::instance_norm(&batched, None, None, None, None, true, 0.1, 1e-5).and_then(|y| y.reshape(s.clone()));
            same(Some(y), want, "InstanceNorm2d")?;
        }
        if let Some(gn) = ok_or_names(GroupNorm::new(groups, features), &["GroupNorm", "group_norm"]) {
            prop_assert!(groups > 0 && features % groups == 0);
            if let Some(y) = ok_or_names(gn.forward(&x), &["GroupNorm", "group_norm"]) {
                prop_assert!(fits);
                same(Some(y), F::group_norm(&x, groups, None, None, 1e-5), "GroupNorm")?;
            }
        }
    }

    /// scaled_dot_product_attention with random (sometimes mismatched) shapes, a bool or
    /// float mask of the right or a wrong shape, causal or not, any scale and dropout
    /// probability: the naive softmax(q k^T scale + mask) v, or an error naming the op.
    #[test]
    fn sdpa_matches_naive(
        b in 0usize..3,
        l in 0usize..4,
        s in 0usize..4,
        e in 0usize..4,
        ev in 0usize..3,
        k_e_off in prop::bool::weighted(0.1),
        mask_kind in 0usize..4,
        mask_wrong in prop::bool::weighted(0.15),
        causal in any::<bool>(),
        scale in prop::option::of(prop_oneof![Just(0.5), Just(2.0), Just(0.0)]),
        p in prop_oneof![8 => Just(0.0), 1 => Just(-0.5), 1 => Just(1.5)],
        seed in any::<u64>(),
        dt in dtype(),
    ) {
        let ke = e + usize::from(k_e_off);
        let (q, k, v) = (var(&[b, l, e], seed, dt), var(&[b, s, ke], seed ^ 1, dt), var(&[b, s, ev], seed ^ 2, dt));
        // Two rows more: a shape that cannot broadcast, even from one row.
        let ms = if mask_wrong { vec![l + 2, s] } else { vec![l, s] };
        let bits: Vec<u8> = values(&ms, seed ^ 3).iter().map(|x| u8::from(*x > -1.0)).collect();
        let mut args = F::SdpaArgs { dropout_p: p, is_causal: causal, scale, ..Default::default() };
        // mask 0: none; 1: bool (true attends); 2: float bias; 3: bool, all hidden.
        let bias: Vec<f64> = match mask_kind {
            1 => bits.iter().map(|&m| if m == 1 { 0.0 } else { f64::NEG_INFINITY }).collect(),
            2 => values(&ms, seed ^ 3),
            3 => vec![f64::NEG_INFINITY; ms.iter().product()],
            _ => vec![0.0; l * s],
        };
        match mask_kind {
            1 => args.attn_mask = Some(Var::new(Tensor::from_vec(bits.clone(), ms.clone()).unwrap())),
            2 => args.attn_mask = Some(Var::new(tensor(&ms, seed ^ 3, dt))),
            3 => args.attn_mask = Some(Var::new(Tensor::zeros(ms.clone(), DType::U8).unwrap())),
            _ => {}
        }
        let got = ok_or_names(F::scaled_dot_product_attention(&q, &k, &v, &args), &["attention"]);
        let valid = !k_e_off && (mask_kind == 0 || (!mask_wrong && !causal)) && (0.0..=1.0).contains(&p);
        prop_assert_eq!(got.is_some(), valid, "q {:?} k {:?} v {:?} mask {} {:?} causal {} p {}", [b, l, e], [b, s, ke], [b, s, ev], mask_kind, ms, causal, p);
        if let Some(out) = &got {
            prop_assert_eq!(out.shape().dims().to_vec(), vec![b, l, ev]);
        }
        // With dropout the value is random; without, the reference's.
        if let (Some(out), true) = (got, p == 0.0) {
            let mut bias = bias;
            if causal {
                for i in 0..l {
                    for j in i + 1..s {
                        bias[i * s + j] = f64::NEG_INFINITY;
                    }
                }
            }
            let scale = scale.unwrap_or(1.0 / (e as f64).sqrt());
            let want = naive_attention(&values(&[b, l, e], seed), &values(&[b, s, e], seed ^ 1), &values(&[b, s, ev], seed ^ 2), [b, l, s, e, ev], &bias, scale);
            let got = var_f64s(&out);
            for (g, w) in got.iter().zip(&want) {
                // A row with every key hidden has no defined value.
                if let Some(w) = w {
                    prop_assert!(close(&[*g], &[*w], dt), "{:?} vs {:?}", got, want);
                }
            }
        }
    }

    /// MultiheadAttention with random embedding sizes and head counts (some not dividing),
    /// batch-first or not, on random sequence lengths and widths: the output has the query's
    /// shape and each row of the averaged weights sums to one; otherwise an error naming it.
    #[test]
    fn multihead_attention_shapes_and_weights(
        embed in 0usize..7,
        heads in 0usize..4,
        batch in 0usize..3,
        tgt in 0usize..4,
        src in 0usize..4,
        width_off in prop::bool::weighted(0.15),
        unbatched in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let Some(mha) = ok_or_names(MultiheadAttention::new(embed, heads), &["MultiheadAttention"]) else {
            prop_assert!(embed == 0 || heads == 0 || embed % heads != 0);
            return Ok(());
        };
        let w = embed + usize::from(width_off);
        let (qs, ks) = if unbatched { (vec![tgt, embed], vec![src, w]) } else { (vec![tgt, batch, embed], vec![src, batch, w]) };
        let (q, kv) = (var(&qs, seed, DType::F32), var(&ks, seed ^ 1, DType::F32));
        let args = MultiheadAttentionArgs { need_weights: true, average_attn_weights: true, ..Default::default() };
        let got = ok_or_names(mha.forward_with(&q, &kv, &kv, &args), &["MultiheadAttention"]);
        prop_assert_eq!(got.is_some(), !width_off);
        if let Some(out) = got {
            prop_assert_eq!(out.output.shape().dims().to_vec(), qs.clone());
            if let Some(weights) = out.weights
                && src > 0
            {
                let row_sums = weights.value().sum(-1, false).unwrap().to_vec_f64().unwrap();
                prop_assert!(row_sums.iter().all(|s| (s - 1.0).abs() < 1e-5), "{:?}", row_sums);
            }
        }
    }

    /// embedding with random (some out-of-range or negative) indices of any shape and any
    /// padding index: the weight's rows, or an error naming the op.
    #[test]
    fn embedding_matches_rows(
        rows in 0usize..5,
        dim in 0usize..4,
        idx in prop::collection::vec(-2i64..7, 0..6),
        as_matrix in any::<bool>(),
        padding in prop::option::of(0usize..6),
        seed in any::<u64>(),
        dt in dtype(),
    ) {
        let weight = var(&[rows, dim], seed, dt);
        let ishape = if as_matrix && idx.len() % 2 == 0 { vec![2, idx.len() / 2] } else { vec![idx.len()] };
        let indices = Var::new(Tensor::from_vec(idx.clone(), ishape.clone()).unwrap());
        let got = ok_or_names(F::embedding(&indices, &weight, padding), &["Embedding", "embedding", "index_select"]);
        let in_range = idx.iter().all(|&i| (0..rows as i64).contains(&i));
        let pad_ok = padding.is_none_or(|p| p < rows);
        prop_assert_eq!(got.is_some(), in_range && pad_ok, "indices {:?} of {} rows, padding {:?}", idx, rows, padding);
        if let Some(out) = got {
            let mut want_shape = ishape.clone();
            want_shape.push(dim);
            prop_assert_eq!(out.shape().dims().to_vec(), want_shape.clone());
            let w = values(&[rows, dim], seed);
            let want: Vec<f64> = idx.iter().flat_map(|&i| w[i as usize * dim..(i as usize + 1) * dim].to_vec()).collect();
            prop_assert_eq!(var_f64s(&out), want);
            out.sum_all().backward().unwrap();
            if let (Some(p), Some(g)) = (padding, weight.grad()) {
                let g = g.to_vec_f64().unwrap();
                prop_assert!(g[p * dim..(p + 1) * dim].iter().all(|&v| v == 0.0), "the padding row got a gradient");
            }
        }
    }

    /// The recurrent cells on inputs of random batch and width (sometimes wrong) with or
    /// without a state: the naive cell equations with the cell's own weights, or an error
    /// naming the cell.
    #[test]
    fn recurrent_cells_match_naive(
        input in 0usize..4,
        hidden in 0usize..4,
        batch in 0usize..3,
        width_off in prop::bool::weighted(0.15),
        with_state in any::<bool>(),
        unbatched in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let xw = input + usize::from(width_off);
        let xs = if unbatched { vec![xw] } else { vec![batch, xw] };
        let hs = if unbatched { vec![hidden] } else { vec![batch, hidden] };
        let x = var(&xs, seed, DType::F32);
        let h0 = var(&hs, seed ^ 1, DType::F32);
        let c0 = var(&hs, seed ^ 2, DType::F32);
        let rows = if unbatched { 1 } else { batch };
        let (xd, hd, cd) = (values(&xs, seed), values(&hs, seed ^ 1), values(&hs, seed ^ 2));
        let hd = if with_state { hd } else { vec![0.0; hd.len()] };
        let cd = if with_state { cd } else { vec![0.0; cd.len()] };
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        // gates[r][g] = W_ih x + b_ih (+ W_hh h + b_hh when `with_h`), for the cell's params.
        let affine = |params: &[(String, Var)], name: &str, v: &[f64], width: usize, r: usize, g: usize| -> f64 {
            let find = |n: &str| params.iter().find(|(k, _)| k == n).map(|(_, p)| p.value().to_vec_f64().unwrap());
            let w = find(&format!("weight_{name}")).unwrap();
            let b = find(&format!("bias_{name}")).map_or(0.0, |b| b[g]);
            (0..width).map(|i| w[g * width + i] * v[r * width + i]).sum::<f64>() + b
        };

        let Some(cell) = ok_or_names(RNNCell::new(input, hidden), &["RNNCell"]) else {
            prop_assert!(input == 0 || hidden == 0, "RNNCell::new({}, {}) refused", input, hidden);
            return Ok(());
        };
        let got = ok_or_names(cell.run(&x, with_state.then_some(&h0)), &["RNNCell"]);
        prop_assert_eq!(got.is_some(), !width_off);
        if let Some(h) = got {
            prop_assert_eq!(h.shape().dims().to_vec(), hs.clone());
            let p = cell.named_parameters();
            let want: Vec<f64> = (0..rows).flat_map(|r| (0..hidden).map(move |g| (r, g))).map(|(r, g)| {
                (affine(&p, "ih", &xd, input, r, g) + affine(&p, "hh", &hd, hidden, r, g)).tanh()
            }).collect();
            prop_assert!(close(&var_f64s(&h), &want, DType::F32), "RNNCell {:?} vs {:?}", var_f64s(&h), want);
        }

        let Some(cell) = ok_or_names(LSTMCell::new(input, hidden), &["LSTMCell"]) else {
            prop_assert!(input == 0 || hidden == 0, "LSTMCell::new({}, {}) refused", input, hidden);
            return Ok(());
        };
        let state = ember_nn::LstmState { h: h0.clone(), c: c0.clone() };
        let got = ok_or_names(cell.run(&x, with_state.then_some(&state)), &["LSTMCell"]);
        prop_assert_eq!(got.is_some(), !width_off);
        if let Some(out) = got {
            let p = cell.named_parameters();
            let (mut wh, mut wc) = (Vec::new(), Vec::new());
            for r in 0..rows {
                for j in 0..hidden {
                    let gate = |k: usize| affine(&p, "ih", &xd, input, r, k * hidden + j) + affine(&p, "hh", &hd, hidden, r, k * hidden + j);
                    let c = sig(gate(1)) * cd[r * hidden + j] + sig(gate(0)) * gate(2).tanh();
                    wc.push(c);
                    wh.push(sig(gate(3)) * c.tanh());
                }
            }
            prop_assert!(close(&var_f64s(&out.h), &wh, DType::F32), "LSTMCell h {:?} vs {:?}", var_f64s(&out.h), wh);
            prop_assert!(close(&var_f64s(&out.c), &wc, DType::F32), "LSTMCell c");
        }

        let Some(cell) = ok_or_names(GRUCell::new(input, hidden), &["GRUCell"]) else {
            prop_assert!(input == 0 || hidden == 0, "GRUCell::new({}, {}) refused", input, hidden);
            return Ok(());
        };
        let got = ok_or_names(cell.run(&x, with_state.then_some(&h0)), &["GRUCell"]);
        prop_assert_eq!(got.is_some(), !width_off);
        if let Some(h) = got {
            let p = cell.named_parameters();
            let mut want = Vec::new();
            for r in 0..rows {
                for j in 0..hidden {
                    let (gi, gh) = (|k: usize| affine(&p, "ih", &xd, input, r, k * hidden + j), |k: usize| affine(&p, "hh", &hd, hidden, r, k * hidden + j));
                    let (rg, z) = (sig(gi(0) + gh(0)), sig(gi(1) + gh(1)));
                    let n = (gi(2) + rg * gh(2)).tanh();
                    want.push((1.0 - z) * n + z * hd[r * hidden + j]);
                }
            }
            prop_assert!(close(&var_f64s(&h), &want, DType::F32), "GRUCell {:?} vs {:?}", var_f64s(&h), want);
        }
    }

    /// RNN, LSTM (with and without projection) and GRU with random layer counts,
    /// directions, layouts and (sometimes wrong) input widths and initial states: outputs
    /// of PyTorch's shapes, the last step of a one-layer forward output equal to h_n; or an
    /// error naming the layer.
    #[test]
    fn recurrent_layers_shapes_and_final_state(
        kind in 0usize..3,
        input in 1usize..4,
        hidden in 0usize..4,
        layers in 0usize..3,
        bidirectional in any::<bool>(),
        batch_first in any::<bool>(),
        proj in 0usize..3,
        steps in 0usize..4,
        batch in 0usize..3,
        unbatched in prop::bool::weighted(0.2),
        width_off in prop::bool::weighted(0.15),
        state in 0usize..3,
        seed in any::<u64>(),
    ) {
        let proj = if kind == 1 { proj } else { 0 };
        let name = ["RNN", "LSTM", "GRU"][kind];
        let options = RnnOptions::default().num_layers(layers).bidirectional(bidirectional).batch_first(batch_first).proj_size(proj);
        let dirs = if bidirectional { 2 } else { 1 };
        let built: Result<Box<RunLayer>> = match kind {
            0 => RNN::with_options(input, hidden, options).map(|m| Box::new(move |x: &Var, h: Option<&Var>, _: Option<&Var>| m.run(x, h).map(|o| (o.output, o.h_n))) as Box<_>),
            1 => LSTM::with_options(input, hidden, options).map(|m| Box::new(move |x: &Var, h: Option<&Var>, c: Option<&Var>| {
                m.run(x, h.zip(c)).map(|o| (o.output, o.h_n))
            }) as Box<_>),
            _ => GRU::with_options(input, hidden, options).map(|m| Box::new(move |x: &Var, h: Option<&Var>, _: Option<&Var>| m.run(x, h).map(|o| (o.output, o.h_n))) as Box<_>),
        };
        let Some(run) = ok_or_names(built, &[name]) else {
            prop_assert!(hidden == 0 || layers == 0 || (proj > 0 && proj >= hidden), "{} refused hidden {} layers {} proj {}", name, hidden, layers, proj);
            return Ok(());
        };
        let out_h = if proj > 0 { proj } else { hidden };
        let width = input + usize::from(width_off);
        let xs = match (unbatched, batch_first) {
            (true, _) => vec![steps, width],
            (false, true) => vec![batch, steps, width],
            (false, false) => vec![steps, batch, width],
        };
        let x = var(&xs, seed, DType::F32);
        // state 0: none; 1: the right shape; 2: one layer too many.
        let lead = layers * dirs + usize::from(state == 2);
        let hs = if unbatched { vec![lead, out_h] } else { vec![lead, batch, out_h] };
        let cs = if unbatched { vec![lead, hidden] } else { vec![lead, batch, hidden] };
        let (h0, c0) = (var(&hs, seed ^ 1, DType::F32), var(&cs, seed ^ 2, DType::F32));
        let got = ok_or_names(run(&x, (state > 0).then_some(&h0), (state > 0).then_some(&c0)), &[name]);
        // PyTorch refuses empty sequences too.
        prop_assert_eq!(got.is_some(), !width_off && state != 2 && steps > 0, "{} on {:?} with state {}", name, xs, state);
        if let Some((output, h_n)) = got {
            let feat = dirs * out_h;
            let want_out = match (unbatched, batch_first) {
                (true, _) => vec![steps, feat],
                (false, true) => vec![batch, steps, feat],
                (false, false) => vec![steps, batch, feat],
            };
            prop_assert_eq!(output.shape().dims().to_vec(), want_out);
            let want_h = if unbatched { vec![layers * dirs, out_h] } else { vec![layers * dirs, batch, out_h] };
            prop_assert_eq!(h_n.shape().dims().to_vec(), want_h);
            if layers == 1 && !bidirectional && steps > 0 {
                let time = if batch_first && !unbatched { 1 } else { 0 };
                let last = output.select(time as i64, steps - 1).unwrap();
                prop_assert!(close(&var_f64s(&last), &var_f64s(&h_n.select(0, 0).unwrap()), DType::F32), "{}: last output is not h_n", name);
            }
        }
    }

    /// dropout and dropout2d with any probability: refused outside [0, 1] naming the op;
    /// the identity when not training or p = 0; otherwise every element (every channel for
    /// dropout2d) is dropped or scaled by 1 / (1 - p).
    #[test]
    fn dropout_keeps_or_scales(s in shape(4), p in prop_oneof![Just(0.0), Just(0.5), Just(1.0), Just(-0.1), Just(1.5), Just(f64::NAN)], training in any::<bool>(), seed in any::<u64>()) {
        let x = var(&s, seed, DType::F64);
        let data = values(&s, seed);
        let valid = (0.0..=1.0).contains(&p);
        let got = ok_or_names(F::dropout(&x, p, training), &["dropout"]);
        prop_assert_eq!(got.is_some(), valid, "dropout p={}", p);
        if let Some(y) = got {
            let y = var_f64s(&y);
            prop_assert_eq!(y.len(), data.len());
            for (a, b) in y.iter().zip(&data) {
                let kept = if !training || p == 0.0 { *a == *b } else if p == 1.0 { *a == 0.0 } else { *a == 0.0 || (*a - b / (1.0 - p)).abs() < 1e-12 };
                prop_assert!(kept, "dropout p={} training={}: {} from {}", p, training, a, b);
            }
        }
        if let Some(y) = ok_or_names(F::dropout2d(&x, p, training), &["dropout2d"]) {
            prop_assert!(valid && (s.len() == 3 || s.len() == 4), "dropout2d accepted p={} on {:?}", p, s);
            let y = var_f64s(&y);
            // A channel is the trailing plane: all of it is dropped or all of it kept.
            let plane: usize = s[s.len() - 2..].iter().product();
            for (yc, xc) in y.chunks(plane.max(1)).zip(data.chunks(plane.max(1))) {
                let dropped = yc.iter().zip(xc).all(|(a, b)| *a == 0.0 || *b == 0.0);
                let scale = if !training || p == 0.0 { 1.0 } else { 1.0 / (1.0 - p) };
                let kept = yc.iter().zip(xc).all(|(a, b)| (a - b * scale).abs() < 1e-12);
                prop_assert!(dropped || kept, "dropout2d mixed a channel");
            }
        }
    }

    /// Conv1d/Conv2d layers with random options (explicit, "same" and "valid" padding,
    /// stride, dilation, groups; some invalid) and the pooling layers compute their
    /// functional forms bitwise with their own parameters, or refuse naming the layer;
    /// "same" padding keeps the spatial size.
    #[test]
    fn conv_and_pool_layers_agree_with_functions(
        n in 0usize..3,
        c in 0usize..4,
        hw in 0usize..6,
        oc in 0usize..4,
        k in 0usize..4,
        stride in 0usize..3,
        pad in 0usize..4,
        dil in 0usize..3,
        groups in 0usize..3,
        seed in any::<u64>(),
    ) {
        let padding = match pad { 0 => Padding::Same, 1 => Padding::Valid, p => Padding::Explicit([p - 2; 2]) };
        let options = Conv2dOptions { stride: [stride; 2], padding, dilation: [dil; 2], groups, ..Default::default() };
        let x = var(&[n, c, hw, hw], seed, DType::F32);
        if let Some(conv) = ok_or_names(Conv2d::with_options(c, oc, k, options), &["Conv2d"]) {
            prop_assert!(k > 0 && stride > 0 && dil > 0 && groups > 0 && c % groups == 0 && oc % groups == 0, "Conv2d accepted {:?}", options);
            let layer = ok_or_names(conv.forward(&x), &["Conv2d", "conv2d"]);
            if let (Some(y), Padding::Same) = (&layer, padding) {
                prop_assert_eq!(y.shape().dims()[2..].to_vec(), vec![hw, hw]);
            }
            same(layer, F::conv2d(&x, conv.weight(), conv.bias(), conv.args()), "Conv2d")?;
        }
        let options1 = ConvOptions::<1> { stride: [stride], padding: match padding { Padding::Explicit([p, _]) => Padding::Explicit([p]), Padding::Same => Padding::Same, Padding::Valid => Padding::Valid }, dilation: [dil], groups, ..Default::default() };
        let x1 = var(&[n, c, hw], seed, DType::F32);
        if let Some(conv) = ok_or_names(Conv1d::with_options(c, oc, k, options1), &["Conv1d"]) {
            same(ok_or_names(conv.forward(&x1), &["Conv1d", "conv1d"]), F::conv1d(&x1, conv.weight(), conv.bias(), conv.args()), "Conv1d")?;
        }
        let p = pad.saturating_sub(2);
        let mp = MaxPool2d::new(k).stride(stride).padding(p).dilation(dil);
        same(ok_or_names(mp.forward(&x), &["max_pool2d", "MaxPool2d"]), F::max_pool2d(&x, &mp.args), "MaxPool2d")?;
        let ap = AvgPool2d::new(k).stride(stride).padding(p);
        same(ok_or_names(ap.forward(&x), &["avg_pool2d", "AvgPool2d"]), F::avg_pool2d(&x, &ap.args), "AvgPool2d")?;
        let aap = AdaptiveAvgPool2d::new([k, oc]);
        same(ok_or_names(aap.forward(&x), &["adaptive_avg_pool2d", "AdaptiveAvgPool2d"]), F::adaptive_avg_pool2d(&x, [k, oc]), "AdaptiveAvgPool2d")?;
        let uargs = F::UnfoldArgs::new(k).stride(stride).padding(p).dilation(dil);
        same(ok_or_names(F::unfold(&x, &uargs), &["unfold"]), x.im2col(&uargs), "unfold")?;
    }

    /// Layers whose parameters cannot be held are refused before anything is allocated:
    /// never an abort. (The errors name the initialiser that refused, `uniform`, `normal`
    /// or `ones`, with the sizes.)
    #[test]
    fn huge_layers_are_refused(a in 1usize << 20..1usize << 40, b in 1usize << 20..1usize << 40) {
        let refused = ["cannot allocate", "too many elements", "more than a tensor may hold"];
        prop_assert!(ok_or_names(Linear::new(a, b), &refused).is_none());
        prop_assert!(ok_or_names(Embedding::new(a, b), &refused).is_none());
        prop_assert!(ok_or_names(Conv2d::new(a, b, 3), &refused).is_none());
        prop_assert!(ok_or_names(LayerNorm::new(&[a, b]), &refused).is_none());
        prop_assert!(ok_or_names(RNN::new(a, b), &refused).is_none());
        prop_assert!(ok_or_names(MultiheadAttention::new(a, 1), &refused).is_none());
    }
}

/// Found by `recurrent_layers_shapes_and_final_state`: a batch of zero sequences failed in
/// an internal reshape (`[T, 0, -1]` has nothing to infer from), and an empty sequence gave
/// that reshape's error. The first now runs; the second is refused naming the layer, as
/// PyTorch refuses it.
#[test]
fn recurrent_layers_run_empty_batches_and_refuse_empty_sequences() {
    let x = |shape: [usize; 3]| Var::new(Tensor::zeros(shape, DType::F32).unwrap());
    let lstm = LSTM::new(3, 4).unwrap();
    let out = lstm.run(&x([5, 0, 3]), None).unwrap();
    assert_eq!(out.output.shape().dims(), &[5, 0, 4]);
    assert_eq!(out.h_n.shape().dims(), &[1, 0, 4]);
    let gru = GRU::new(3, 4).unwrap();
    assert_eq!(gru.run(&x([2, 0, 3]), None).unwrap().output.shape().dims(), &[2, 0, 4]);
    let e = lstm.run(&x([0, 2, 3]), None).err().expect("an empty sequence is an error").to_string();
    assert!(e.starts_with("LSTM:") && e.contains("sequence length"), "{e}");
    let e = RNN::new(3, 4).unwrap().run(&x([0, 0, 3]), None).err().expect("an empty sequence is an error").to_string();
    assert!(e.starts_with("RNN:"), "{e}");
}

/// dropout2d's probability errors name dropout2d (they named dropout; found by
/// `dropout_keeps_or_scales`).
#[test]
fn dropout2d_probability_errors_name_dropout2d() {
    let x = Var::new(Tensor::zeros([1, 2, 2, 2], DType::F32).unwrap());
    let e = F::dropout2d(&x, 1.5, true).unwrap_err().to_string();
    assert!(e.starts_with("dropout2d:"), "{e}");
}

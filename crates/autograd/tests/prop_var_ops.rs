//! Property tests of the `Var` ops `prop_var.rs` leaves out, under random, often invalid,
//! arguments: each op succeeds exactly when the same `Tensor` op does, with bitwise the same
//! value, and its backward gives every input a gradient of the input's shape; or it fails
//! with an error naming the op. A panic fails the property. The `Tensor` ops themselves are
//! checked against naive references in `crates/tensor/tests/prop_layers.rs`.

use ember_autograd::Var;
use ember_tensor::ops::pool::{AvgPoolArgs, InterpolateArgs, InterpolateMode, MaxPoolArgs};
use ember_tensor::{
    Attention, ClassLoss, ClassScores, ConvArgs, ConvTransposeArgs, DType, LossReduction, Result, Tensor, UnfoldArgs,
};
use ember_testing::prop::{agree, dtype, param, same_bits, shape, tensor, values};
use proptest::prelude::*;

/// Cases per property: every error path is hit, and the file runs in seconds in debug.
const CASES: u32 = 1000;

/// `agree` for ops that return several pieces (split, chunk).
fn agree_pieces(
    op: &str,
    var: Result<Vec<Var>>,
    tensor: Result<Vec<Tensor>>,
    input: &Var,
) -> std::result::Result<(), TestCaseError> {
    match (var, tensor) {
        (Err(e), Err(_)) => prop_assert!(e.to_string().contains(op), "{}: error {} does not name the op", op, e),
        (Ok(vs), Ok(ts)) => {
            prop_assert_eq!(vs.len(), ts.len(), "{}: pieces", op);
            for (v, t) in vs.iter().zip(&ts) {
                prop_assert!(same_bits(&v.value().to_vec_f64().unwrap(), &t.to_vec_f64().unwrap()), "{}", op);
            }
            if !vs.is_empty() {
                let total = vs.iter().map(Var::sum_all).reduce(|a, b| a.add(&b).unwrap()).unwrap();
                total.backward().unwrap();
                if let Some(g) = input.grad() {
                    prop_assert_eq!(g.shape(), &input.shape(), "{}: gradient shape", op);
                    input.zero_grad();
                }
            }
        }
        (Ok(_), Err(e)) => prop_assert!(false, "{}: Var accepted what Tensor refused ({})", op, e),
        (Err(e), Ok(_)) => prop_assert!(false, "{}: Var refused what Tensor accepted ({})", op, e),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn convolutions_agree(n in 0usize..3, c in 0usize..4, hw in 0usize..5, oc in 0usize..4, k in 0usize..4, stride in 0usize..3, pad in 0usize..3, dil in 0usize..3, groups in 0usize..3, op in 0usize..2, bias in any::<bool>(), seed in any::<u64>(), dt in dtype()) {
        let cpg = c / groups.max(1);
        let b = param(&[oc], seed ^ 3, dt);
        let bias = bias.then_some(&b);
        let tb = bias.map(Var::value);
        let x1 = param(&[n, c, hw], seed, dt);
        let w1 = param(&[oc, cpg, k], seed ^ 1, dt);
        let args1 = ConvArgs::default().stride(stride).padding(pad).dilation(dil).groups(groups);
        agree("conv1d", x1.conv1d(&w1, bias, &args1), x1.value().conv1d(&w1.value(), tb.as_ref(), &args1), &[&x1, &w1, &b])?;

        let x = param(&[n, c, hw, hw], seed, dt);
        let wt = param(&[c, oc, k, k], seed ^ 2, dt);
        let targs = ConvTransposeArgs::default().stride(stride).padding(pad).dilation(dil).output_padding(op).groups(groups);
        // A transposed convolution has oc channels per group.
        let bt = param(&[oc * groups.max(1)], seed ^ 3, dt);
        let tbias = bias.is_some().then_some(&bt);
        let ttb = tbias.map(Var::value);
        agree("conv_transpose2d", x.conv_transpose2d(&wt, tbias, &targs), x.value().conv_transpose2d(&wt.value(), ttb.as_ref(), &targs), &[&x, &wt, &bt])?;
        let wt1 = param(&[c, oc, k], seed ^ 2, dt);
        let targs1 = ConvTransposeArgs::default().stride(stride).padding(pad).dilation(dil).output_padding(op).groups(groups);
        agree("conv_transpose1d", x1.conv_transpose1d(&wt1, tbias, &targs1), x1.value().conv_transpose1d(&wt1.value(), ttb.as_ref(), &targs1), &[&x1, &wt1, &bt])?;

        let uargs = UnfoldArgs::new(k).stride(stride).padding(pad).dilation(dil);
        agree("unfold", x.im2col(&uargs), x.value().im2col(&uargs), &[&x])?;
        let cols = param(&[n, c * k * k, hw], seed ^ 4, dt);
        agree("fold", cols.col2im([hw, hw + 1], &uargs), cols.value().col2im([hw, hw + 1], &uargs), &[&cols])?;
    }

    #[test]
    fn pools_and_interpolate_agree(s in shape(4), k in 0usize..4, stride in 0usize..3, pad in 0usize..3, dil in 0usize..3, ceil in any::<bool>(), include_pad in any::<bool>(), out in 0usize..4, mode in 0usize..3, scale in prop_oneof![Just(0.5), Just(2.0), Just(0.0)], seed in any::<u64>(), dt in dtype()) {
        let x = param(&s, seed, dt);
        let t = x.value();
        let m1 = MaxPoolArgs::new(k).stride(stride).padding(pad).dilation(dil).ceil_mode(ceil);
        agree("max_pool1d", x.max_pool1d(&m1), t.max_pool1d(&m1), &[&x])?;
        let m2 = MaxPoolArgs::new(k).stride(stride).padding(pad).dilation(dil).ceil_mode(ceil);
        agree("max_pool2d", x.max_pool2d(&m2), t.max_pool2d(&m2), &[&x])?;
        let a1 = AvgPoolArgs::new(k).stride(stride).padding(pad).ceil_mode(ceil).count_include_pad(include_pad);
        agree("avg_pool1d", x.avg_pool1d(&a1), t.avg_pool1d(&a1), &[&x])?;
        let a2 = AvgPoolArgs::new(k).stride(stride).padding(pad).ceil_mode(ceil).count_include_pad(include_pad);
        agree("avg_pool2d", x.avg_pool2d(&a2), t.avg_pool2d(&a2), &[&x])?;
        agree("adaptive_avg_pool1d", x.adaptive_avg_pool1d(out), t.adaptive_avg_pool1d(out), &[&x])?;
        agree("adaptive_avg_pool2d", x.adaptive_avg_pool2d([out, k]), t.adaptive_avg_pool2d([out, k]), &[&x])?;
        agree("adaptive_max_pool2d", x.adaptive_max_pool2d([out, k]), t.adaptive_max_pool2d([out, k]), &[&x])?;
        let mut args = if ceil { InterpolateArgs::size(vec![out; k.max(1)]) } else { InterpolateArgs::scale_factor(vec![scale]) };
        args.mode = [InterpolateMode::Nearest, InterpolateMode::Linear, InterpolateMode::Bilinear][mode];
        if mode > 0 {
            args.align_corners = Some(include_pad);
        }
        agree("interpolate", x.interpolate(&args), t.interpolate(&args), &[&x])?;
    }

    #[test]
    fn joins_slices_and_masks_agree(s in shape(3), dim in -4i64..4, size in 0usize..4, sizes in prop::collection::vec(0usize..4, 0..4), start in 0usize..5, end in 0usize..5, step in 0usize..3, pads in prop::collection::vec((0usize..3, 0usize..3), 0..4), repeats in prop::collection::vec(0usize..3, 0..5), diag in -3i64..3, ms in shape(3), seed in any::<u64>(), dt in dtype()) {
        let x = param(&s, seed, dt);
        let t = x.value();
        agree("pad", x.pad(&pads, 0.5), t.pad(&pads, 0.5), &[&x])?;
        agree("repeat", x.repeat(&repeats), t.repeat(&repeats), &[&x])?;
        agree("tril", x.tril(diag), t.tril(diag), &[&x])?;
        agree("triu", x.triu(diag), t.triu(diag), &[&x])?;
        agree("slice", x.slice(dim, start, end, step), t.slice(dim, start, end, step), &[&x])?;
        agree("squeeze", x.squeeze(dim), t.squeeze(dim), &[&x])?;
        agree("flatten", x.flatten(dim, -1), t.flatten(dim, -1), &[&x])?;
        agree_pieces("split", x.split(size, dim), t.split(size, dim), &x)?;
        agree_pieces("split_sizes", x.split_sizes(&sizes, dim), t.split_sizes(&sizes, dim), &x)?;
        agree_pieces("chunk", x.chunk(size, dim), t.chunk(size, dim), &x)?;
        let bits: Vec<u8> = values(&ms, seed ^ 1).iter().map(|v| u8::from(*v > 0.0)).collect();
        let mask = Tensor::from_vec(bits, ms.clone()).unwrap();
        agree("masked_fill", x.masked_fill(mask.clone(), 9.0), t.masked_fill(&mask, 9.0), &[&x])?;
        let other = param(&ms, seed ^ 2, dt);
        agree("where", Var::new(mask.clone()).where_cond(&x, &other), mask.where_cond(&t, &other.value()), &[&x, &other])?;
    }

    #[test]
    fn more_reductions_agree(s in shape(4), dims in prop::collection::vec(-6i64..6, 0..3), keep in any::<bool>(), unbiased in any::<bool>(), seed in any::<u64>(), dt in dtype()) {
        let x = param(&s, seed, dt);
        let t = x.value();
        agree("prod", x.prod(dims.clone(), keep), t.prod(dims.clone(), keep), &[&x])?;
        agree("min", x.min(dims.clone(), keep), t.min(dims.clone(), keep), &[&x])?;
        agree("std", x.std(dims.clone(), unbiased, keep), t.std(dims.clone(), unbiased, keep), &[&x])?;
        let dim = dims.first().copied().unwrap_or(0);
        agree("argmin", x.argmin(dim, keep), t.argmin(dim, keep), &[&x])?;
        agree("argmax", x.argmax(dim, keep), t.argmax(dim, keep), &[&x])?;
    }

    #[test]
    fn attention_and_channel_norm_agree(b in 0usize..3, l in 0usize..4, s in 0usize..4, e in 0usize..4, ev in 0usize..3, ke_off in prop::bool::weighted(0.1), mask_kind in 0usize..3, causal in any::<bool>(), eps in prop_oneof![Just(1e-5), Just(0.0), Just(-1.0)], cs in shape(4), seed in any::<u64>(), dt in dtype()) {
        let (q, k, v) = (param(&[b, l, e], seed, dt), param(&[b, s, e + usize::from(ke_off)], seed ^ 1, dt), param(&[b, s, ev], seed ^ 2, dt));
        let mask = match mask_kind {
            1 => Some(Tensor::from_vec(values(&[l, s], seed ^ 3).iter().map(|v| u8::from(*v > -1.0)).collect::<Vec<_>>(), [l, s]).unwrap()),
            2 => Some(tensor(&[l, s], seed ^ 3, dt)),
            _ => None,
        };
        let spec = Attention { scale: Attention::default_scale(e), causal };
        let mv = mask.clone().map(Var::new);
        let tout = q.value().attention(&k.value(), &v.value(), mask.as_ref(), &spec).map(|(out, _)| out);
        agree("attention", q.attention(&k, &v, mv.as_ref(), &spec), tout, &[&q, &k, &v])?;

        let x = param(&cs, seed, dt);
        let c = cs.get(1).copied().unwrap_or(0);
        let (w, bias) = (param(&[c], seed ^ 4, dt), param(&[c], seed ^ 5, dt));
        let got = x.channel_norm(Some(&w), Some(&bias), eps).map(|(y, _, _)| y);
        let want = x.value().channel_norm(Some(&w.value()), Some(&bias.value()), eps).map(|(y, _, _)| y);
        agree("channel_norm", got, want, &[&x, &w, &bias])?;
    }

    #[test]
    fn smoothed_class_losses_agree(rows in 0usize..4, classes in 0usize..5, targets in prop::collection::vec(-2i64..7, 0..5), ignore in prop::option::of(-1i64..3), smoothing in prop_oneof![Just(0.1), Just(1.0), Just(-0.5), Just(2.0)], red in 0usize..3, seed in any::<u64>(), dt in dtype()) {
        let x = param(&[rows, classes], seed, dt);
        let mut targets = targets;
        targets.truncate(rows);
        let target = Tensor::from_vec(targets.clone(), [targets.len()]).unwrap();
        let loss = ClassLoss {
            scores: ClassScores::Logits,
            label_smoothing: smoothing,
            ignore_index: ignore,
            reduction: [LossReduction::None, LossReduction::Sum, LossReduction::Mean][red],
        };
        agree(loss.name(), x.class_loss(&Var::new(target.clone()), loss), x.value().class_loss(&target, &loss), &[&x])?;
    }
}

/// `Var::argmax` / `argmin` of a 0-d value take dimension 0 or -1 as the `Tensor` ops do
/// (they resolved it against rank 0 and refused; found by `more_reductions_agree`).
#[test]
fn argmax_of_a_scalar_takes_dimension_zero() -> Result<()> {
    let x = Var::param(Tensor::scalar(2.5f64));
    for dim in [0i64, -1] {
        assert_eq!(x.argmax(dim, false)?.value().to_vec::<i64>()?, vec![0]);
        assert_eq!(x.argmin(dim, true)?.value().to_vec::<i64>()?, vec![0]);
    }
    assert!(x.argmax(1, false).unwrap_err().to_string().starts_with("argmax"));
    Ok(())
}

/// `Var::std` names itself in dimension errors, not the `var` it is built on (found by
/// `more_reductions_agree`).
#[test]
fn std_errors_name_std() {
    let x = Var::param(Tensor::zeros([2, 3], DType::F32).unwrap());
    let msg = x.std(5, true, false).unwrap_err().to_string();
    assert!(msg.starts_with("std:"), "{msg}");
}

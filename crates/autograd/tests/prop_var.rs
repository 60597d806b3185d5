//! Property tests of the public `Var` API under random, often invalid, arguments: each op
//! succeeds exactly when the same `Tensor` op does, with bitwise the same value, and its
//! backward gives every input a gradient of the input's shape; or it fails with an error
//! naming the op. A panic anywhere fails the property.
//!
//! Shapes have rank 0 to 4 and extents 0 to 4 (zero-size included), dimensions range over
//! -6..6 and indices and class targets over -2..7, in `f32` and `f64`.

use ember_autograd::Var;
use ember_tensor::ops::pool::MaxPoolArgs;
use ember_tensor::{ClassLoss, ClassScores, ConvArgs, DType, LossReduction, Result, Tensor};
use ember_testing::prop::{agree, dtype, param, shape};
use proptest::prelude::*;

/// Cases per property: every error path is hit, and the file runs in seconds in debug.
const CASES: u32 = 1000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn view_ops_agree(s in shape(4), to in shape(4), a in -6i64..6, b in -6i64..6, start in 0usize..6, len in 0usize..6, seed in any::<u64>(), dt in dtype()) {
        let x = param(&s, seed, dt);
        let t = x.value();
        agree("reshape", x.reshape(to.clone()), t.reshape(to.clone()), &[&x])?;
        agree("transpose", x.transpose(a, b), t.transpose(a, b), &[&x])?;
        agree("permute", x.permute(&[a, b]), t.permute(&[a, b]), &[&x])?;
        agree("narrow", x.narrow(a, start, len), t.narrow(a, start, len), &[&x])?;
        agree("select", x.select(a, start), t.select(a, start), &[&x])?;
        agree("unsqueeze", x.unsqueeze(b), t.unsqueeze(b), &[&x])?;
        agree("expand", x.expand(to.clone()), t.expand(to.clone()), &[&x])?;
    }

    #[test]
    fn indexing_ops_agree(s in shape(3), dim in -4i64..4, idx in prop::collection::vec(-2i64..7, 0..6), seed in any::<u64>(), dt in dtype()) {
        let x = param(&s, seed, dt);
        let t = x.value();
        let index = Tensor::from_vec(idx.clone(), [idx.len()]).unwrap();
        agree("index_select", x.index_select(dim, Var::new(index.clone())), t.index_select(dim, &index), &[&x])?;
        if s.len() == 1 {
            agree("gather", x.gather(dim, Var::new(index.clone())), t.gather(dim, &index), &[&x])?;
            let src = param(&[idx.len()], seed ^ 7, dt);
            agree("scatter_add", x.scatter_add(dim, Var::new(index.clone()), &src), t.scatter_add(dim, &index, &src.value()), &[&x, &src])?;
        }
    }

    #[test]
    fn joins_agree(shapes in prop::collection::vec(shape(3), 0..4), dim in -4i64..4, seed in any::<u64>(), dt in dtype()) {
        let xs: Vec<Var> = shapes.iter().enumerate().map(|(i, s)| param(s, seed + i as u64, dt)).collect();
        let refs: Vec<&Var> = xs.iter().collect();
        let ts: Vec<Tensor> = xs.iter().map(Var::value).collect();
        let trefs: Vec<&Tensor> = ts.iter().collect();
        agree("cat", Var::cat(&refs, dim), Tensor::cat(&trefs, dim), &refs)?;
        agree("stack", Var::stack(&refs, dim), Tensor::stack(&trefs, dim), &refs)?;
    }

    #[test]
    fn reductions_and_softmax_agree(s in shape(4), dims in prop::collection::vec(-6i64..6, 0..3), keep in any::<bool>(), seed in any::<u64>(), dt in dtype()) {
        let x = param(&s, seed, dt);
        let t = x.value();
        agree("sum", x.sum(dims.clone(), keep), t.sum(dims.clone(), keep), &[&x])?;
        agree("mean", x.mean(dims.clone(), keep), t.mean(dims.clone(), keep), &[&x])?;
        agree("max", x.max(dims.clone(), keep), t.max(dims.clone(), keep), &[&x])?;
        agree("var", x.var(dims.clone(), true, keep), t.var(dims.clone(), true, keep), &[&x])?;
        agree("logsumexp", x.logsumexp(dims.clone(), keep), t.logsumexp(dims.clone(), keep), &[&x])?;
        let dim = dims.first().copied().unwrap_or(-1);
        agree("softmax", x.softmax(dim), t.softmax(dim), &[&x])?;
        agree("log_softmax", x.log_softmax(dim), t.log_softmax(dim), &[&x])?;
    }

    #[test]
    fn matmul_conv_pool_agree(sa in shape(3), sb in shape(3), n in 0usize..3, c in 0usize..3, hw in 0usize..6, oc in 0usize..3, k in 0usize..4, stride in 0usize..3, seed in any::<u64>(), dt in dtype()) {
        let (a, b) = (param(&sa, seed, dt), param(&sb, seed ^ 1, dt));
        agree("matmul", a.matmul(&b), a.value().matmul(&b.value()), &[&a, &b])?;
        let x = param(&[n, c, hw, hw], seed, dt);
        let w = param(&[oc, c, k, k], seed ^ 2, dt);
        let args = ConvArgs::default().stride(stride);
        agree("conv2d", x.conv2d(&w, None, &args), x.value().conv2d(&w.value(), None, &args), &[&x, &w])?;
        let pool = MaxPoolArgs::new([k, k]).stride(stride.max(1));
        agree("max_pool2d", x.max_pool2d(&pool), x.value().max_pool2d(&pool), &[&x])?;
    }

    #[test]
    fn class_losses_agree(rows in 0usize..4, classes in 0usize..5, targets in prop::collection::vec(-2i64..7, 0..5), ignore in prop::option::of(-1i64..3), logits in any::<bool>(), mean in any::<bool>(), seed in any::<u64>(), dt in dtype()) {
        let x = param(&[rows, classes], seed, dt);
        let target = Tensor::from_vec(targets.clone(), [targets.len()]).unwrap();
        let loss = ClassLoss {
            scores: if logits { ClassScores::Logits } else { ClassScores::LogProbs },
            label_smoothing: 0.0,
            ignore_index: ignore,
            reduction: if mean { LossReduction::Mean } else { LossReduction::Sum },
        };
        let name = loss.name();
        agree(name, x.class_loss(&Var::new(target.clone()), loss), x.value().class_loss(&target, &loss), &[&x])?;
    }
}

/// The variance of nothing is NaN, biased or not, as `Tensor::var` and PyTorch give (the
/// unbiased `Var::var` once divided 0 by -1 and returned -0).
#[test]
fn variance_of_an_empty_tensor_is_nan() -> Result<()> {
    let x = Var::param(Tensor::zeros([0, 3], DType::F64)?);
    for unbiased in [true, false] {
        let v = x.var(0, unbiased, false)?.value().to_vec::<f64>()?;
        assert_eq!(v.len(), 3);
        assert!(v.iter().all(|v| v.is_nan()), "unbiased={unbiased}: {v:?}");
        assert!(x.var_all(unbiased).item()?.is_nan());
    }
    Ok(())
}

//! Flushing subnormals (`threading::set_flush_denormal`, docs/design.md "Subnormal numbers"):
//! every thread that runs a kernel follows the setting, and the program's own arithmetic
//! never changes. One test function, since the setting is global to the process.

use ember_tensor::ops::conv::ConvArgs;
use ember_tensor::ops::optim::AdamStep;
use ember_tensor::threading::{flush_denormal, set_flush_denormal};
use ember_tensor::{ClassLoss, ClassScores, DType, LossReduction, Tensor};
use std::hint::black_box;

/// Elements in a tensor large enough to be split over the helper threads (above every
/// kernel's parallel grain).
const LARGE: usize = 1 << 18;
/// Elements in a tensor every kernel handles on the calling thread alone.
const SMALL: usize = 16;

/// The smallest normal `f32`; a tenth less is subnormal.
const TINY: f32 = f32::MIN_POSITIVE;

/// `TINY * 1e-3` computed by the program itself, out of the compiler's reach.
fn program_subnormal() -> f32 {
    black_box(TINY) * black_box(1e-3f32)
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().expect("an f32 tensor")
}

fn filled(n: usize, v: f32) -> Tensor {
    Tensor::from_vec(vec![v; n], [n]).expect("a tensor")
}

/// What each probe kernel gives for its subnormal-producing inputs: all zero with flushing,
/// without it the IEEE result `expect` (or, where `expect` is `None`, some positive
/// subnormal).
fn check(label: &str, got: &[f32], flush: bool, expect: Option<f32>) {
    assert!(!got.is_empty(), "{label}: no values");
    let head = &got[..4.min(got.len())];
    if flush {
        assert!(got.iter().all(|&v| v == 0.0), "{label}: expected zeros with flushing, got {head:?}");
        return;
    }
    match expect {
        Some(e) => {
            assert!(e.is_subnormal(), "{label}: the expected value {e:e} is not subnormal");
            assert!(got.iter().all(|&v| v == e), "{label}: expected {e:e} without flushing, got {head:?}");
        }
        None => assert!(
            got.iter().all(|&v| v > 0.0 && v.is_subnormal()),
            "{label}: expected positive subnormals without flushing, got {head:?}"
        ),
    }
}

/// Runs every probe kernel, small (caller only) and large (split over helpers), and checks
/// their results against the current setting.
fn probe_kernels(flush: bool) {
    let sub = program_subnormal();
    for n in [SMALL, LARGE] {
        // Elementwise with a scalar (a unary kernel) and with a tensor (a binary one).
        let x = filled(n, TINY);
        check(&format!("mul_scalar n={n}"), &values(&x.mul_scalar(1e-3)), flush, Some(sub));
        let y = filled(n, 1e-3);
        check(&format!("mul n={n}"), &values(&x.mul(&y).expect("mul")), flush, Some(sub));
        // A subnormal operand: read as zero with flushing, kept without.
        let s = filled(n, sub);
        check(&format!("subnormal operand n={n}"), &values(&s.mul_scalar(1.0)), flush, Some(sub));
        // `ceil` of a subnormal (a quarter of the smallest normal, subnormal in f32 and bf16
        // alike) in every layout: the rounding instruction reads it as zero with flushing
        // (0), and as itself without (1). The broadcast, stepped and tiled loops must be the same
        // instruction as the contiguous one, not a call into the C library, which ignores
        // the flush mode.
        let quarter = black_box(TINY) / 4.0;
        let f32s = |len: usize| Tensor::from_vec(vec![quarter; len], [len]).expect("f32 operand");
        let bf16s = |len: usize| {
            Tensor::from_vec(vec![ember_tensor::bf16::from_f32(quarter); len], [len]).expect("bf16 operand")
        };
        for (dtype, make) in [("f32", &f32s as &dyn Fn(usize) -> Tensor), ("bf16", &bf16s)] {
            let views = [
                ("contiguous", make(n)),
                ("broadcast", make(1).expand([n]).expect("expand")),
                ("stepped", make(2 * n).slice(0, 0, 2 * n, 2).expect("slice")),
                // Copied in tiles (`map_transposed`).
                ("transposed", make(16 * n).reshape([16, n]).and_then(|t| t.t()).expect("transpose")),
            ];
            for (layout, v) in views {
                let got = values(&v.ceil().to_dtype(DType::F32));
                let want = if flush { 0.0 } else { 1.0 };
                assert!(
                    got.iter().all(|&g| g == want),
                    "ceil {layout} {dtype} n={n}: {:?}, want {want}",
                    &got[..4.min(n)]
                );
            }
        }
        // exp of a large negative number (the fast vectorised exp, which may differ from the
        // standard library's in the last bits).
        let e = filled(n, -100.0);
        check(&format!("exp n={n}"), &values(&e.exp()), flush, None);
        // A reduction of subnormal operands: zero with flushing (its total over the large
        // tensor would be normal), positive without.
        let total = values(&s.sum_all())[0];
        assert_eq!(total == 0.0, flush, "sum n={n}: {total:e} with flushing {flush}");
        // softmax of rows [0, -100]: the second probability, e^-100, is subnormal in f32.
        let logits = Tensor::from_vec([0.0f32, -100.0].repeat(n / 2), [n / 2, 2]).expect("logits");
        let probs = values(&logits.softmax(-1).expect("softmax"));
        let second: Vec<f32> = probs.iter().skip(1).step_by(2).copied().collect();
        check(&format!("softmax n={n}"), &second, flush, None);
        // Adam's first moment after one step from zero with a tiny gradient: (1 - beta1) g.
        let p = filled(n, 1.0);
        let g = filled(n, TINY);
        let m = filled(n, 0.0);
        let v = filled(n, 1.0);
        let hp = AdamStep {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
            amsgrad: false,
            step: 1,
        };
        p.adam_step_(&g, &m, &v, None, &hp).expect("adam_step_");
        let lerped = black_box((1.0f64 - 0.9) as f32) * black_box(TINY);
        check(&format!("adam exp_avg n={n}"), &values(&m), flush, Some(lerped));
    }
    // Matrix products: `[rows, k] @ [k, 1]` with every product `a * b` subnormal, on one
    // thread and split into row blocks over the helpers.
    for rows in [4usize, 1024] {
        let k = 64;
        let a = Tensor::from_vec(vec![1e-20f32; rows * k], [rows, k]).expect("a");
        let b = Tensor::from_vec(vec![1e-20f32; k * 256], [k, 256]).expect("b");
        check(&format!("matmul rows={rows}"), &values(&a.matmul(&b).expect("matmul")), flush, None);
    }
    // Convolutions: 3x3 over 4 channels, every product `x * w` subnormal (their sums of 36
    // stay subnormal), on one thread and split over the helpers.
    for batch in [1usize, 32] {
        let x = Tensor::from_vec(vec![1e-20f32; batch * 4 * 16 * 16], [batch, 4, 16, 16]).expect("x");
        let w = Tensor::from_vec(vec![1e-20f32; 8 * 4 * 9], [8, 4, 3, 3]).expect("w");
        let y = x.conv2d(&w, None, &ConvArgs::default()).expect("conv2d");
        check(&format!("conv2d batch={batch}"), &values(&y), flush, None);
    }
    // The fused cross-entropy's gradient for a tiny incoming gradient: rows of equal logits
    // give `(1/2 - onehot) g / N`, subnormal for `g = TINY` (the non-target column is positive).
    for rows in [2usize, 4096] {
        let logits = filled(rows * 2, 0.0).reshape([rows, 2]).expect("logits");
        let targets = Tensor::from_vec(vec![0i64; rows], [rows]).expect("targets");
        let loss = ClassLoss {
            scores: ClassScores::Logits,
            label_smoothing: 0.0,
            ignore_index: None,
            reduction: LossReduction::Sum,
        };
        let g = Tensor::from_vec(vec![TINY], []).expect("grad");
        let grad = values(&logits.class_loss_backward(&targets, &g, &loss).expect("class_loss_backward"));
        let other: Vec<f32> = grad.iter().skip(1).step_by(2).copied().collect();
        check(&format!("cross_entropy backward rows={rows}"), &other, flush, None);
    }
    // The program's own arithmetic on this thread is untouched, whatever the kernels did.
    assert!(program_subnormal().is_subnormal(), "the caller's own arithmetic flushed after the kernels");
}

/// Whether the program's own arithmetic produces subnormals on every `rayon` thread.
fn rayon_threads_keep_subnormals() -> bool {
    rayon::broadcast(|_| program_subnormal().is_subnormal()).into_iter().all(|b| b)
}

#[test]
fn kernels_follow_the_setting_and_user_code_keeps_its_mode() {
    // Four workers, so that large kernels run on helper threads even on a small machine; set
    // before anything starts `rayon`'s pool, so that the first large kernel below starts it.
    // SAFETY: this binary has only this test, and no thread has started that reads the
    // environment.
    unsafe { std::env::set_var("RAYON_NUM_THREADS", "4") };
    let initial = flush_denormal();
    if !set_flush_denormal(true) {
        // Nothing to flush with on this processor: the setting stays off.
        assert!(!flush_denormal());
        probe_kernels(false);
        return;
    }
    assert!(flush_denormal());
    // The first large kernel starts the helpers and `rayon`'s pool while the caller is in
    // flushing mode: the pool's threads must still start in the program's own mode.
    probe_kernels(true);
    assert!(rayon_threads_keep_subnormals(), "rayon's threads inherited the kernels' mode");

    // Off, then on again: the helpers take up each change.
    assert!(set_flush_denormal(false));
    assert!(!flush_denormal());
    probe_kernels(false);
    assert!(set_flush_denormal(true));
    probe_kernels(true);

    // Kernels called from inside `rayon`'s pool run their parallel parts as `rayon` tasks,
    // which set the mode for themselves and give the thread back its own.
    let inside = rayon::scope(|_| {
        let x = filled(LARGE, TINY);
        let flushed = values(&x.mul_scalar(1e-3)).iter().all(|&v| v == 0.0);
        (flushed, program_subnormal().is_subnormal())
    });
    assert_eq!(inside, (true, true), "(kernel flushed, user code kept subnormals) inside rayon's pool");
    assert!(rayon_threads_keep_subnormals(), "rayon's threads kept the kernels' mode after a kernel");

    // f64 kernels follow the setting too.
    let d = Tensor::from_vec(vec![f64::MIN_POSITIVE; LARGE], [LARGE]).expect("f64").mul_scalar(1e-3);
    assert!(d.to_vec::<f64>().expect("f64").iter().all(|&v| v == 0.0));
    assert_eq!(d.dtype(), DType::F64);

    set_flush_denormal(initial);
}

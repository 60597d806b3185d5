//! Gradients computed in `bf16` and `f16` against the same gradients in `f64`, at the same
//! inputs (values of the low dtype, so both start from identical numbers): every
//! differentiable case of the shared elementwise table, the reductions, softmax and
//! log-softmax, matmul, conv2d, pooling, layer norm (and batch norm), attention, an LSTM
//! composed of `Var` ops, the fused LSTM sequence kernel's backward, and the indexing ops.
//!
//! The loss is a weighted sum of the outputs, `sum(y * w)` with fixed weights `w` (values of
//! the low dtype too): a plain sum would give every output the same upstream gradient, which
//! for softmax, norms and attention makes the gradient zero and the check empty.
//!
//! **Tolerance.** Every tensor a low-precision backward computes (saved outputs, upstream
//! gradients, each intermediate of a composed backward) is rounded to the low dtype, a
//! relative error of at most its unit roundoff `u` (`2^-8` for bf16, `2^-11` for f16), while
//! sums inside a kernel accumulate in `f32`. A backward chains a few such roundings, so its
//! result stays within `4u` (`2^-6` for bf16, `2^-9` for f16) of the magnitudes involved.
//! Where terms cancel (`1 - y^2` of tanh near 1, the centring of a norm, softmax's
//! `y (g - sum g y)`) those magnitudes are larger than the gradient element itself, so the
//! comparison is norm-wise, against the largest gradient element of the operand:
//! `max |g_low - g_f64| <= 4u * kappa * max |g_f64|`, with the condition factor `kappa` 1
//! for every op, the accumulations being in `f32`, and one per step for the recurrence of the
//! composed LSTM, whose roundings compound. Run with `--nocapture` to see each case's
//! measured error in these units (at most 0.57 for the single ops).

use ember_autograd::Var;
use ember_tensor::{Attention, AvgPoolArgs, ConvArgs, DType, MaxPoolArgs, Result, Tensor, manual_seed};
use ember_testing::elementwise::{BINARY, BinaryInputs};
use ember_testing::{Grad, UNARY};
use parking_lot::Mutex;

const LOWS: [DType; 2] = [DType::BF16, DType::F16];

/// `4u`: a few roundings to the low dtype.
fn rtol(low: DType) -> f64 {
    if low == DType::BF16 { 2f64.powi(-6) } else { 2f64.powi(-9) }
}

/// The global generator is shared by the test threads: the lock keeps every draw the same
/// on every run.
static RNG: Mutex<()> = Mutex::new(());

/// Standard normal `f64` values of `shape` from `seed`, mapped through `f`.
fn normal(seed: u64, shape: &[usize], f: impl Fn(f64) -> f64) -> Tensor {
    let t = {
        let _guard = RNG.lock();
        manual_seed(seed);
        Tensor::normal(shape, 0.0, 1.0, DType::F64).expect("normal values")
    };
    let v: Vec<f64> = t.to_vec::<f64>().expect("f64").into_iter().map(f).collect();
    Tensor::from_vec(v, shape).expect("same shape")
}

fn plain(v: f64) -> f64 {
    v
}

/// An operand: float values (the parameters, rounded to the low dtype) or a constant that
/// keeps its dtype (indices, masks).
enum Operand {
    Float(Tensor),
    Constant(Tensor),
}

/// The largest magnitude of `t`.
fn max_abs(t: &[f64]) -> f64 {
    t.iter().fold(0.0f64, |m, v| m.max(v.abs()))
}

/// Runs `f` on the operands in `dtype` (float operands as parameters) and backpropagates
/// `sum(f(..) * w)`, `w` the low-precision weights in `dtype`; returns the parameters'
/// gradients.
fn gradients(
    f: &dyn Fn(&[Var]) -> Result<Var>,
    operands: &[Operand],
    low: DType,
    dtype: DType,
    seed: u64,
) -> Result<Vec<Tensor>> {
    let vars: Vec<Var> = operands
        .iter()
        .map(|o| match o {
            Operand::Float(t) => Var::param(t.to_dtype(low).to_dtype(dtype)),
            Operand::Constant(t) => Var::new(t.clone()),
        })
        .collect();
    let y = f(&vars)?;
    let w = normal(seed ^ 0x77, y.shape().dims(), plain).to_dtype(low).to_dtype(dtype);
    y.mul(&Var::new(w))?.sum_all().backward()?;
    let mut grads = vec![];
    for (v, o) in vars.iter().zip(operands) {
        if let Operand::Float(_) = o {
            let g =
                v.grad().ok_or_else(|| ember_tensor::Error::invalid("half_grads", "a parameter got no gradient"))?;
            grads.push(g);
        }
    }
    Ok(grads)
}

/// The worst error of the low-precision gradients in units of `4u * max |g_f64|`, over both
/// low dtypes (it must stay within `kappa`); the gradients must have the low dtype.
fn worst_ratio(name: &str, f: &dyn Fn(&[Var]) -> Result<Var>, operands: &[Operand], seed: u64) -> f64 {
    let mut worst = 0.0f64;
    for low in LOWS {
        let got = gradients(f, operands, low, low, seed).unwrap_or_else(|e| panic!("{name} ({low}): {e}"));
        let want = gradients(f, operands, low, DType::F64, seed).unwrap_or_else(|e| panic!("{name} (f64): {e}"));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.dtype(), low, "{name}: the gradient of operand {i} has dtype {}", g.dtype());
            let g = g.to_dtype(DType::F64).to_vec::<f64>().expect("f64");
            let w = w.to_vec::<f64>().expect("f64");
            assert!(g.iter().all(|v| v.is_finite()), "{name} ({low}): a gradient of operand {i} is not finite");
            let err = g.iter().zip(&w).fold(0.0f64, |m, (g, w)| m.max((g - w).abs()));
            let scale = rtol(low) * max_abs(&w);
            if scale > 0.0 {
                worst = worst.max(err / scale);
            } else {
                assert_eq!(err, 0.0, "{name} ({low}): operand {i}'s gradient must be zero");
            }
        }
    }
    worst
}

/// Checks one case within `kappa`, printing the measured ratio (`--nocapture` shows it).
#[track_caller]
fn check(name: &str, kappa: f64, f: impl Fn(&[Var]) -> Result<Var>, operands: &[Operand], seed: u64) {
    let ratio = worst_ratio(name, &f, operands, seed);
    println!("{name}: error {ratio:.3} of 4u max|g|, kappa {kappa}");
    assert!(ratio <= kappa, "{name}: the low-precision gradient is {ratio:.3} x 4u max|g| off, allowed {kappa}");
}

fn float(seed: u64, shape: &[usize]) -> Operand {
    Operand::Float(normal(seed, shape, plain))
}

/// Every case of the shared unary table that has a gradient, on its domain: each gradient is
/// the upstream gradient times a slope computed from a few rounded values.
#[test]
fn elementwise_unary_gradients() {
    for (k, case) in UNARY.iter().enumerate() {
        let domain = match case.grad {
            Grad::No => continue,
            Grad::First(d) | Grad::Second(d) | Grad::Zero(d) => d,
        };
        let x = Operand::Float(normal(100 + k as u64, &[4, 6], domain));
        let var = case.var;
        check(case.name, 1.0, move |v| Ok(var(&v[0])), &[x], 200 + k as u64);
    }
}

/// Every binary case of the shared table, the second operand broadcast (its gradient sums
/// over the broadcast rows, in `f32`).
#[test]
fn elementwise_binary_gradients() {
    for (k, case) in BINARY.iter().enumerate() {
        let seed = 300 + 10 * k as u64;
        let (a, b) = match case.grad {
            BinaryInputs::Normal(da, db) => (normal(seed, &[3, 5], da), normal(seed + 1, &[5], db)),
            // Two grids offset by 0.3 (beyond bf16's rounding), so that no pair ties.
            BinaryInputs::OffsetGrids => {
                let grid = |off: f64, n: usize| (0..n).map(|i| (i as f64 - 7.0) * 0.5 + off).collect::<Vec<_>>();
                (Tensor::from_vec(grid(0.0, 15), [3, 5]).unwrap(), Tensor::from_vec(grid(0.3, 5), [5]).unwrap())
            }
        };
        let var = case.var;
        check(case.name, 1.0, move |v| var(&v[0], &v[1]), &[Operand::Float(a), Operand::Float(b)], seed + 2);
    }
}

/// Reductions, softmax and log-softmax along dimension 1 of `[4, 20]` (`prod` of `[4, 6]`):
/// sums pass the upstream gradient through; the variance's `2 (x - mean) / (n - 1)` and the
/// softmax family's `y (g - sum g y)` subtract terms no larger than the largest gradient.
#[test]
fn reduction_and_softmax_gradients() {
    type F = fn(&[Var]) -> Result<Var>;
    let cases: [(&str, f64, F); 8] = [
        ("sum", 1.0, |v| v[0].sum(1, false)),
        ("mean", 1.0, |v| v[0].mean(1, false)),
        ("max", 1.0, |v| v[0].max(1, false)),
        ("prod", 1.0, |v| v[0].prod(1, false)),
        ("var", 1.0, |v| v[0].var(1, true, false)),
        ("logsumexp", 1.0, |v| v[0].logsumexp(1, false)),
        ("softmax", 1.0, |v| v[0].softmax(1)),
        ("log_softmax", 1.0, |v| v[0].log_softmax(1)),
    ];
    for (k, (name, kappa, f)) in cases.into_iter().enumerate() {
        let shape: &[usize] = if name == "prod" { &[4, 6] } else { &[4, 20] };
        check(name, kappa, f, &[float(400 + k as u64, shape)], 450 + k as u64);
    }
}

/// `[5, 12] @ [12, 4]` and a batched `[2, 3, 12] @ [2, 12, 4]`: each gradient element sums
/// 4 (or 12) products of rounded values in `f32`.
#[test]
fn matmul_gradients() {
    check("matmul", 1.0, |v| v[0].matmul(&v[1]), &[float(500, &[5, 12]), float(501, &[12, 4])], 502);
    check("matmul batched", 1.0, |v| v[0].matmul(&v[1]), &[float(510, &[2, 3, 12]), float(511, &[2, 12, 4])], 512);
}

/// conv2d `[2, 3, 6, 6]` with a `[4, 3, 3, 3]` kernel and bias, padding 1: the weight's
/// gradient sums 72 products per element, the input's 36, in `f32`.
#[test]
fn conv2d_gradients() {
    let args = ConvArgs::default().padding(1);
    check(
        "conv2d",
        1.0,
        move |v| v[0].conv2d(&v[1], Some(&v[2]), &args),
        &[float(600, &[2, 3, 6, 6]), float(601, &[4, 3, 3, 3]), float(602, &[4])],
        603,
    );
}

/// Max and average pooling: the gradient is routed (max) or spread (average), one rounding.
#[test]
fn pooling_gradients() {
    let max = MaxPoolArgs::new(3).stride(2).padding(1);
    check("max_pool2d", 1.0, move |v| v[0].max_pool2d(&max), &[float(700, &[2, 2, 7, 7])], 701);
    let avg = AvgPoolArgs::new(2);
    check("avg_pool2d", 1.0, move |v| v[0].avg_pool2d(&avg), &[float(710, &[2, 2, 6, 6])], 711);
}

/// Layer norm over the last dimension of `[6, 16]` with an elementwise affine (the
/// normalisation is `channel_norm` of `[1, rows, features]`), and batch norm of `[4, 3, 5]`.
/// The input's gradient `(g - mean g - xhat mean(g xhat)) / sigma` subtracts two means no
/// larger than the largest gradient.
#[test]
fn norm_gradients() {
    check(
        "layer_norm",
        1.0,
        |v| {
            let (y, _, _) = v[0].reshape([1, 6, 16])?.channel_norm(None, None, 1e-5)?;
            y.reshape([6, 16])?.mul(&v[1])?.add(&v[2])
        },
        &[float(800, &[6, 16]), float(801, &[16]), float(802, &[16])],
        803,
    );
    check(
        "batch_norm",
        1.0,
        |v| Ok(v[0].channel_norm(Some(&v[1]), Some(&v[2]), 1e-5)?.0),
        &[float(810, &[4, 3, 5]), float(811, &[3]), float(812, &[3])],
        813,
    );
}

/// Scaled dot-product attention `[2, 5, 8]` over `[2, 6, 8]` keys, causal and not: the
/// gradients go through softmax's `p (dp - sum p dp)` and sums over 6 keys or 8 features.
#[test]
fn attention_gradients() {
    for (k, causal) in [false, true].into_iter().enumerate() {
        let spec = Attention { scale: Attention::default_scale(8), causal };
        let seed = 900 + 10 * k as u64;
        check(
            if causal { "attention causal" } else { "attention" },
            1.0,
            move |v| v[0].attention(&v[1], &v[2], None, &spec),
            &[float(seed, &[2, 5, 8]), float(seed + 1, &[2, 6, 8]), float(seed + 2, &[2, 6, 8])],
            seed + 3,
        );
    }
}

/// An LSTM of hidden size 4 over 3 steps of `[2, 3]` inputs, composed of `Var` ops (PyTorch's
/// gate order i, f, g, o): the gradient flows back through the recurrence, and each of the 3
/// steps adds the roundings of its gate products and state update (kappa 3, one per step).
#[test]
fn lstm_gradients() {
    let (t, b, i, h) = (3, 2, 3, 4);
    let lstm = move |v: &[Var]| -> Result<Var> {
        let (x, w_ih, w_hh, bias) = (&v[0], &v[1], &v[2], &v[3]);
        let (mut hs, mut c) = (v[4].clone(), v[5].clone());
        let mut outs = vec![];
        for step in 0..t {
            let gates = x.select(0, step)?.matmul(&w_ih.t()?)?.add(&hs.matmul(&w_hh.t()?)?)?.add(bias)?;
            let g = gates.chunk(4, 1)?;
            c = g[1].sigmoid().mul(&c)?.add(&g[0].sigmoid().mul(&g[2].tanh())?)?;
            hs = g[3].sigmoid().mul(&c.tanh())?;
            outs.push(hs.clone());
        }
        Var::stack(&outs.iter().collect::<Vec<_>>(), 0)
    };
    let ops = [
        float(1000, &[t, b, i]),
        Operand::Float(normal(1001, &[4 * h, i], |v| 0.5 * v)),
        Operand::Float(normal(1002, &[4 * h, h], |v| 0.5 * v)),
        float(1003, &[4 * h]),
        float(1004, &[b, h]),
        float(1005, &[b, h]),
    ];
    check("lstm (composed)", 3.0, lstm, &ops, 1006);
}

/// The fused LSTM sequence kernel's backward (`Tensor::lstm_sequence_backward`) in the low
/// dtypes against `f64`, for a gradient arriving at every step's hidden state: 4 steps of
/// batch 2, hidden 3. The fused kernel computes the whole recurrence in `f32` and rounds its
/// results once (kappa 1).
#[test]
fn lstm_sequence_kernel_gradients() {
    let (t, b, h) = (4, 2, 3);
    let gi = normal(1100, &[t, b, 4 * h], plain);
    let w_hh = normal(1101, &[4 * h, h], |v| 0.5 * v);
    let h0 = normal(1102, &[b, h], plain);
    let c0 = normal(1103, &[b, h], plain);
    // Weights on the hidden state only (slot 1 of the state gradient), as a layer's output uses.
    let slot = Tensor::from_vec(vec![0.0f64, 1.0], [1, 2, 1, 1]).unwrap();
    let gy = normal(1104, &[t, 2, b, h], plain).mul(&slot).unwrap();
    let run = |dtype: DType, low: DType| -> Vec<Vec<f64>> {
        let at = |x: &Tensor| x.to_dtype(low).to_dtype(dtype);
        let y = Tensor::lstm_sequence(&at(&gi), &at(&w_hh), &at(&h0), &at(&c0), false).unwrap();
        let (d_gi, dh0, dc0) = Tensor::lstm_sequence_backward(&y, &at(&gy), &at(&w_hh), &at(&c0), false).unwrap();
        [d_gi, dh0, dc0]
            .iter()
            .map(|g| {
                assert_eq!(g.dtype(), dtype, "the kernel's gradients keep the operands' dtype");
                g.to_dtype(DType::F64).to_vec::<f64>().unwrap()
            })
            .collect()
    };
    let mut worst = 0.0f64;
    for low in LOWS {
        for (g, w) in run(low, low).iter().zip(run(DType::F64, low)) {
            let err = g.iter().zip(&w).fold(0.0f64, |m, (g, w)| m.max((g - w).abs()));
            worst = worst.max(err / (rtol(low) * max_abs(&w)));
        }
    }
    println!("lstm_sequence kernel: error {worst:.3} of 4u max|g|, kappa 1");
    assert!(worst <= 1.0, "lstm_sequence_backward: {worst:.3} x 4u max|g| off, allowed 1");
}

/// Indexing and joins route gradients: `scatter_add`'s source gradient is a gather,
/// `masked_fill` and `where_cond` zero some, `cat` splits them, `index_select` sums repeats.
#[test]
fn indexing_gradients() {
    let idx = Tensor::from_vec(vec![2i64, 0, 3, 3, 1, 0], [2, 3]).unwrap();
    let rows = Tensor::from_vec(vec![3i64, 0, 3], [3]).unwrap();
    let mask = Tensor::from_vec((0..12).map(|i| (i % 3 == 0) as u8).collect::<Vec<u8>>(), [3, 4]).unwrap();
    let constant = |t: &Tensor| Operand::Constant(t.clone());
    check("gather", 1.0, |v| v[0].gather(1, &v[1]), &[float(1200, &[2, 4]), constant(&idx)], 1201);
    check("index_select", 1.0, |v| v[0].index_select(0, &v[1]), &[float(1210, &[4, 3]), constant(&rows)], 1211);
    check(
        "scatter_add",
        1.0,
        |v| v[0].scatter_add(1, &v[1], &v[2]),
        &[float(1220, &[2, 4]), constant(&idx), float(1221, &[2, 3])],
        1222,
    );
    check("masked_fill", 1.0, |v| v[0].masked_fill(&v[1], 0.5), &[float(1230, &[3, 4]), constant(&mask)], 1231);
    check(
        "where_cond",
        1.0,
        |v| v[0].where_cond(&v[1], &v[2]),
        &[constant(&mask), float(1240, &[3, 4]), float(1241, &[4])],
        1242,
    );
    check("cat", 1.0, |v| Var::cat(&[&v[0], &v[1]], 0), &[float(1250, &[2, 3]), float(1251, &[4, 3])], 1252);
}

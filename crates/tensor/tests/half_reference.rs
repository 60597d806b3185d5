//! Every public `Tensor` op in `bf16` and `f16` against PyTorch's CPU results: the fixture
//! `tools/parity/fixtures/half_ops.tsv` (written by `tools/parity/half_ops.py`, which
//! describes its format) holds each case's operands, already values of the low dtype, and
//! what PyTorch computed from them; this file replays every case with ember and compares.
//!
//! Both libraries compute a low-precision op in `f32` and round the result once, so an
//! elementwise result may differ only where the two `f32` functions (a few `f32` ulps apart
//! at most) fall on either side of a rounding boundary of the low dtype: one ulp of the low
//! dtype, which is `2^-7` relative for `bf16` (8 significant bits) and `2^-10` for `f16`
//! (11 bits). Results that add many terms also differ by the order of the `f32` additions,
//! at most `n 2^-24` times the sum of the magnitudes added (the case's `scale`), far below
//! an ulp of the low dtype; where PyTorch rounds an intermediate to the low dtype (attention's
//! probabilities, the LSTM's gate sums, batch norm's affine factors, the products of `prod`
//! and of a transposed convolution in f16) the tolerance adds that
//! rounding, `u = 2^-8` (bf16) or `2^-11` (f16) relative, times the size it scales with
//! ([`tolerance`] states each case's reason). Casts, comparisons, indices, copies and
//! extrema must match exactly, casts bit for bit (NaN payloads aside).
//!
//! [`every_table_variant_has_a_low_precision_case`] fails when a variant of the unary,
//! binary, comparison or reduction table has no case here, so a new op gets one.

mod common;

use common::ieee_subnormals;
use ember_tensor::Scalar::{Float, Int};
use ember_tensor::{
    Attention, AvgPoolArgs, ConvArgs, ConvTransposeArgs, DType, Error, MaxPoolArgs, Result, Tensor, UnaryOp, bf16, f16,
};
use std::collections::BTreeMap;
use std::sync::OnceLock;

const FIXTURE_PATH: &str = "tools/parity/fixtures/half_ops.tsv";
const FIXTURE: &str = include_str!("../../../tools/parity/fixtures/half_ops.tsv");

const DTYPES: [DType; 6] = [DType::F64, DType::F32, DType::BF16, DType::F16, DType::I64, DType::U8];

// ---- the fixture -------------------------------------------------------------------------

/// One stored tensor: its dtype, shape and elements (float bits, or integers as `i64`).
struct Stored {
    dtype: DType,
    shape: Vec<usize>,
    words: Vec<u64>,
}

impl Stored {
    fn parse(dtype: &str, shape: &str, values: &str) -> Stored {
        let dtype = DTYPES
            .into_iter()
            .find(|d| d.name() == dtype)
            .unwrap_or_else(|| panic!("{FIXTURE_PATH}: unknown dtype {dtype:?}"));
        let shape =
            if shape == "0d" { vec![] } else { shape.split('x').map(|d| d.parse().expect("a dimension")).collect() };
        let words = values
            .split_whitespace()
            .map(|v| {
                if dtype.is_float() {
                    u64::from_str_radix(v, 16).expect("hex bits")
                } else {
                    v.parse::<i64>().expect("an integer") as u64
                }
            })
            .collect();
        Stored { dtype, shape, words }
    }

    fn tensor(&self) -> Tensor {
        let s = self.shape.as_slice();
        let w = &self.words;
        let t = match self.dtype {
            DType::F64 => Tensor::from_vec(w.iter().map(|&b| f64::from_bits(b)).collect::<Vec<_>>(), s),
            DType::F32 => Tensor::from_vec(w.iter().map(|&b| f32::from_bits(b as u32)).collect::<Vec<_>>(), s),
            DType::BF16 => Tensor::from_vec(w.iter().map(|&b| bf16::from_bits(b as u16)).collect::<Vec<_>>(), s),
            DType::F16 => Tensor::from_vec(w.iter().map(|&b| f16::from_bits(b as u16)).collect::<Vec<_>>(), s),
            DType::I64 => Tensor::from_vec(w.iter().map(|&b| b as i64).collect::<Vec<_>>(), s),
            DType::U8 => Tensor::from_vec(w.iter().map(|&b| b as u8).collect::<Vec<_>>(), s),
        };
        t.expect("a fixture tensor matches its shape")
    }

    /// The elements as `f64` (exact for every dtype the fixture stores but large `i64`).
    fn values(&self) -> Vec<f64> {
        self.tensor().to_dtype(DType::F64).to_vec::<f64>().expect("f64 values")
    }
}

/// One case in one low dtype.
#[derive(Default)]
struct Case {
    inputs: Vec<Stored>,
    outputs: Vec<Stored>,
    scales: Vec<Option<Stored>>,
    text: Option<String>,
}

struct Fixture {
    torch: String,
    /// By case name, then by the low dtype's name.
    cases: BTreeMap<String, BTreeMap<String, Case>>,
}

fn fixture() -> &'static Fixture {
    static PARSED: OnceLock<Fixture> = OnceLock::new();
    PARSED.get_or_init(|| {
        let mut lines = FIXTURE.lines();
        let torch = lines.next().and_then(|l| l.strip_prefix("torch\t")).expect("the torch version line").to_string();
        let mut cases: BTreeMap<String, BTreeMap<String, Case>> = BTreeMap::new();
        for line in lines {
            let f: Vec<&str> = line.splitn(4, '\t').collect();
            assert_eq!(f.len(), 4, "{FIXTURE_PATH}: a short line {line:?}");
            let case = cases.entry(f[0].to_string()).or_default().entry(f[1].to_string()).or_default();
            let body = f[3];
            if f[2] == "text" {
                case.text = Some(body.replace("\\n", "\n").replace("\\\\", "\\"));
                continue;
            }
            let t: Vec<&str> = body.splitn(3, '\t').collect();
            let stored = Stored::parse(t[0], t[1], t.get(2).copied().unwrap_or(""));
            match f[2] {
                "in" => case.inputs.push(stored),
                "out" => {
                    case.outputs.push(stored);
                    case.scales.push(None);
                }
                "scale" => *case.scales.last_mut().expect("a scale follows its output") = Some(stored),
                role => panic!("{FIXTURE_PATH}: unknown role {role:?}"),
            }
        }
        Fixture { torch, cases }
    })
}

// ---- the op tables -------------------------------------------------------------------------

type Unary = fn(&Tensor) -> Result<Tensor>;
type Binary = fn(&Tensor, &Tensor) -> Result<Tensor>;

/// The unary cases: the fixture's name after `unary/`, the table variant it covers and the
/// computation.
const UNARY: &[(&str, UnaryOp, Unary)] = &[
    ("neg", UnaryOp::Neg, |x| Ok(x.neg())),
    ("abs", UnaryOp::Abs, |x| Ok(x.abs())),
    ("sign", UnaryOp::Sign, |x| Ok(x.sign())),
    ("square", UnaryOp::Square, |x| Ok(x.square())),
    ("relu", UnaryOp::Relu, |x| Ok(x.relu())),
    ("exp", UnaryOp::Exp, |x| Ok(x.exp())),
    ("log", UnaryOp::Log, |x| Ok(x.log())),
    ("sqrt", UnaryOp::Sqrt, |x| Ok(x.sqrt())),
    ("rsqrt", UnaryOp::Rsqrt, |x| Ok(x.rsqrt())),
    ("sin", UnaryOp::Sin, |x| Ok(x.sin())),
    ("cos", UnaryOp::Cos, |x| Ok(x.cos())),
    ("tanh", UnaryOp::Tanh, |x| Ok(x.tanh())),
    ("sigmoid", UnaryOp::Sigmoid, |x| Ok(x.sigmoid())),
    ("gelu", UnaryOp::Gelu, |x| Ok(x.gelu())),
    ("gelu_tanh", UnaryOp::GeluTanh, |x| Ok(x.gelu_tanh())),
    ("silu", UnaryOp::Silu, |x| Ok(x.silu())),
    ("erf", UnaryOp::Erf, |x| Ok(x.erf())),
    ("log1p", UnaryOp::Log1p, |x| Ok(x.log1p())),
    ("expm1", UnaryOp::Expm1, |x| Ok(x.expm1())),
    ("recip", UnaryOp::Recip, |x| Ok(x.recip())),
    ("floor", UnaryOp::Floor, |x| Ok(x.floor())),
    ("ceil", UnaryOp::Ceil, |x| Ok(x.ceil())),
    ("round", UnaryOp::Round, |x| Ok(x.round())),
    ("softplus(1, 20)", UnaryOp::Softplus { beta: 1.0, threshold: 20.0 }, |x| Ok(x.softplus(1.0, 20.0))),
    ("softplus(2, 1)", UnaryOp::Softplus { beta: 2.0, threshold: 1.0 }, |x| Ok(x.softplus(2.0, 1.0))),
    ("leaky_relu(0.1)", UnaryOp::LeakyRelu(0.1), |x| Ok(x.leaky_relu(0.1))),
    ("elu(1.3)", UnaryOp::Elu(1.3), |x| Ok(x.elu(1.3))),
    ("clamp(-0.5, 0.7)", UnaryOp::Clamp { min: -0.5, max: 0.7 }, |x| Ok(x.clamp(Some(-0.5), Some(0.7)))),
    ("clamp(none, 0.4)", UnaryOp::Clamp { min: f64::NEG_INFINITY, max: 0.4 }, |x| Ok(x.clamp(None, Some(0.4)))),
    ("add_scalar(0.75)", UnaryOp::AddScalar(Float(0.75)), |x| Ok(x.add_scalar(0.75))),
    ("add_scalar(0.7)", UnaryOp::AddScalar(Float(0.7)), |x| Ok(x.add_scalar(0.7))),
    ("add_scalar(3i64)", UnaryOp::AddScalar(Int(3)), |x| Ok(x.add_scalar(3))),
    ("sub_scalar(0.7)", UnaryOp::SubScalar(Float(0.7)), |x| Ok(x.sub_scalar(0.7))),
    ("rsub_scalar(0.7)", UnaryOp::RSubScalar(Float(0.7)), |x| Ok(x.rsub_scalar(0.7))),
    ("mul_scalar(-1.3)", UnaryOp::MulScalar(Float(-1.3)), |x| Ok(x.mul_scalar(-1.3))),
    ("mul_scalar(3i64)", UnaryOp::MulScalar(Int(3)), |x| Ok(x.mul_scalar(3))),
    ("div_scalar(0.7)", UnaryOp::DivScalar(Float(0.7)), |x| Ok(x.div_scalar(0.7))),
    ("rdiv_scalar(1.7)", UnaryOp::RDivScalar(Float(1.7)), |x| Ok(x.rdiv_scalar(1.7))),
    ("rdiv_scalar(2)", UnaryOp::RDivScalar(Float(2.0)), |x| Ok(x.rdiv_scalar(2.0))),
    ("pow_scalar(2)", UnaryOp::PowScalar(Float(2.0)), |x| x.pow_scalar(2.0)),
    ("pow_scalar(0.5)", UnaryOp::PowScalar(Float(0.5)), |x| x.pow_scalar(0.5)),
    ("pow_scalar(-1.5)", UnaryOp::PowScalar(Float(-1.5)), |x| x.pow_scalar(-1.5)),
    ("pow_scalar(0.7)", UnaryOp::PowScalar(Float(0.7)), |x| x.pow_scalar(0.7)),
    ("pow_scalar(3i64)", UnaryOp::PowScalar(Int(3)), |x| x.pow_scalar(3)),
    ("rpow_scalar(2.5)", UnaryOp::RPowScalar(Float(2.5)), |x| Ok(x.rpow_scalar(2.5))),
    ("rpow_scalar(0.7)", UnaryOp::RPowScalar(Float(0.7)), |x| Ok(x.rpow_scalar(0.7))),
    ("maximum_scalar(0.2)", UnaryOp::MaximumScalar(Float(0.2)), |x| Ok(x.maximum_scalar(0.2))),
    ("minimum_scalar(-0.1)", UnaryOp::MinimumScalar(Float(-0.1)), |x| Ok(x.minimum_scalar(-0.1))),
];

/// The binary cases (`binary/<name>`), named like the table's methods.
const BINARY: &[(&str, Binary)] = &[
    ("add", |a, b| a.add(b)),
    ("sub", |a, b| a.sub(b)),
    ("mul", |a, b| a.mul(b)),
    ("div", |a, b| a.div(b)),
    ("pow", |a, b| a.pow(b)),
    ("maximum", |a, b| a.maximum(b)),
    ("minimum", |a, b| a.minimum(b)),
];

/// The comparison cases (`compare/<name>`): each method with a tensor and with the scalar 0.7.
const COMPARE: &[(&str, Binary)] = &[
    ("eq", |a, b| a.eq(b)),
    ("ne", |a, b| a.ne(b)),
    ("lt", |a, b| a.lt(b)),
    ("le", |a, b| a.le(b)),
    ("gt", |a, b| a.gt(b)),
    ("ge", |a, b| a.ge(b)),
    ("eq_scalar(0.7)", |a, _| Ok(a.eq_scalar(0.7))),
    ("ne_scalar(0.7)", |a, _| Ok(a.ne_scalar(0.7))),
    ("lt_scalar(0.7)", |a, _| Ok(a.lt_scalar(0.7))),
    ("le_scalar(0.7)", |a, _| Ok(a.le_scalar(0.7))),
    ("gt_scalar(0.7)", |a, _| Ok(a.gt_scalar(0.7))),
    ("ge_scalar(0.7)", |a, _| Ok(a.ge_scalar(0.7))),
];

/// The reductions (`reduce/<name>`): the table's variants along dimension 1, and the other
/// public reductions.
const REDUCE: &[(&str, Unary)] = &[
    ("sum", |x| x.sum(1, false)),
    ("prod", |x| x.prod(1, false)),
    ("max", |x| x.max(1, false)),
    ("min", |x| x.min(1, false)),
    ("argmax", |x| x.argmax(1, false)),
    ("argmin", |x| x.argmin(1, false)),
    ("sum_all", |x| Ok(x.sum_all())),
    ("mean", |x| x.mean(0, false)),
    ("var", |x| x.var(1, true, false)),
    ("std", |x| x.std(1, false, false)),
    ("logsumexp", |x| x.logsumexp(1, false)),
];

/// Collects the method names of a table's rows (`ember_tensor::*_table!` calls it with every
/// row), so that the completeness test follows the tables themselves.
macro_rules! binary_names {
    ($( $(#[$meta:meta])* $V:ident => $method:ident, cpu $cpu:tt, cuda $cuda:tt, tensor $tensor:tt, grad $grad:tt; )*) => {
        const BINARY_NAMES: &[&str] = &[$(stringify!($method)),*];
    };
}
macro_rules! compare_names {
    ($( $(#[$meta:meta])* $V:ident => $method:ident, $scalar:ident, $symbol:literal, cpu $cpu:tt, cuda $cuda:tt; )*) => {
        const COMPARE_NAMES: &[&str] = &[$(stringify!($method), stringify!($scalar)),*];
    };
}
macro_rules! reduce_names {
    ($( $(#[$meta:meta])* $V:ident => $method:ident, $kind:ident, cpu $cpu:tt, cuda $cuda:tt; )*) => {
        const REDUCE_NAMES: &[&str] = &[$(stringify!($method)),*];
    };
}
ember_tensor::binary_table!(binary_names);
ember_tensor::compare_table!(compare_names);
ember_tensor::reduce_table!(reduce_names);

/// The cases outside the tables, by fixture name.
const OTHERS: &[&str] = &[
    "where_cond",
    "softmax",
    "log_softmax",
    "matmul/2d",
    "matmul/batched",
    "conv2d",
    "conv_transpose2d",
    "max_pool2d",
    "avg_pool2d",
    "adaptive_avg_pool2d",
    "adaptive_max_pool2d",
    "channel_norm",
    "layer_norm",
    "group_norm",
    "attention",
    "attention/causal",
    "attention/mask",
    "lstm_cell",
    "lstm_sequence",
    "index_select",
    "gather",
    "scatter_add",
    "masked_fill",
    "cat",
];

fn lookup<F: Copy>(table: &[(&str, F)], name: &str) -> Option<F> {
    table.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

fn no_replay(name: &str) -> Error {
    Error::invalid("half_reference", format!("no replay for the fixture case {name:?}"))
}

/// ember's results of the case `name` from its operands `x`.
fn replay(name: &str, x: &[Tensor]) -> Result<Vec<Tensor>> {
    let (family, rest) = name.split_once('/').unwrap_or((name, ""));
    let one = |t: Tensor| Ok(vec![t]);
    match family {
        "unary" => {
            let f = UNARY.iter().find(|(n, _, _)| *n == rest).map(|c| c.2).ok_or_else(|| no_replay(name))?;
            return one(f(&x[0])?);
        }
        "binary" => return one(lookup(BINARY, rest).ok_or_else(|| no_replay(name))?(&x[0], &x[1])?),
        "compare" => {
            let f = lookup(COMPARE, rest).ok_or_else(|| no_replay(name))?;
            return one(f(&x[0], x.get(1).unwrap_or(&x[0]))?);
        }
        "reduce" => return one(lookup(REDUCE, rest).ok_or_else(|| no_replay(name))?(&x[0])?),
        "cast" => {
            let dst = rest.split_once("->").map(|(_, d)| d).ok_or_else(|| no_replay(name))?;
            let dst = DTYPES.into_iter().find(|d| d.name() == dst).ok_or_else(|| no_replay(name))?;
            return one(x[0].to_dtype(dst));
        }
        _ => {}
    }
    let scale = |e: usize| Attention::default_scale(e);
    match name {
        "where_cond" => one(x[0].where_cond(&x[1], &x[2])?),
        "softmax" => one(x[0].softmax(1)?),
        "log_softmax" => one(x[0].log_softmax(1)?),
        "matmul/2d" | "matmul/batched" => one(x[0].matmul(&x[1])?),
        "conv2d" => one(x[0].conv2d(&x[1], Some(&x[2]), &ConvArgs::default().stride(2).padding(1))?),
        "conv_transpose2d" => {
            let args = ConvTransposeArgs { stride: [2, 2], padding: [1, 1], ..Default::default() };
            one(x[0].conv_transpose2d(&x[1], Some(&x[2]), &args)?)
        }
        "max_pool2d" => one(x[0].max_pool2d(&MaxPoolArgs::new(3).stride(2).padding(1))?),
        "avg_pool2d" => one(x[0].avg_pool2d(&AvgPoolArgs::new(2))?),
        "adaptive_avg_pool2d" => one(x[0].adaptive_avg_pool2d([3, 2])?),
        "adaptive_max_pool2d" => one(x[0].adaptive_max_pool2d([3, 2])?),
        "channel_norm" => one(x[0].channel_norm(Some(&x[1]), Some(&x[2]), 1e-5)?.0),
        // Layer norm normalises each row: the rows are the channels of a batch of one.
        "layer_norm" => one(x[0].reshape([1, 6, 16])?.channel_norm(None, None, 1e-5)?.0.reshape([6, 16])?),
        // Group norm of [N, C, *] in G groups normalises [1, N * G, rest].
        "group_norm" => one(x[0].reshape([1, 4, 6])?.channel_norm(None, None, 1e-5)?.0.reshape([2, 4, 3])?),
        "attention" => one(x[0].attention(&x[1], &x[2], None, &Attention { scale: scale(8), causal: false })?.0),
        "attention/causal" => one(x[0].attention(&x[1], &x[2], None, &Attention { scale: scale(8), causal: true })?.0),
        "attention/mask" => {
            one(x[0].attention(&x[1], &x[2], Some(&x[3]), &Attention { scale: scale(8), causal: false })?.0)
        }
        "lstm_cell" => {
            // Operands gi, a = h @ w_hh^T, c; PyTorch's results c' and h' are slots 4 and 5.
            let y = Tensor::lstm_cell(&x[1], &x[0], &x[2])?;
            Ok(vec![y.select(0, 4)?, y.select(0, 5)?])
        }
        "lstm_sequence" => {
            // Every step's hidden state (slot 5) and the last step's cell state (slot 4).
            let y = Tensor::lstm_sequence(&x[0], &x[1], &x[2], &x[3], false)?;
            let steps = y.shape()[0];
            Ok(vec![y.select(1, 5)?, y.select(0, steps - 1)?.select(0, 4)?])
        }
        "index_select" => one(x[0].index_select(0, &x[1])?),
        "gather" => one(x[0].gather(1, &x[1])?),
        "scatter_add" => one(x[0].scatter_add(1, &x[1], &x[2])?),
        "masked_fill" => one(x[0].masked_fill(&x[1], 0.7)?),
        "cat" => one(Tensor::cat(&[&x[0], &x[1]], 0)?),
        _ => Err(no_replay(name)),
    }
}

// ---- tolerances ----------------------------------------------------------------------------

/// How far ember's result may be from PyTorch's: `ulps` ulps of the low dtype at the
/// expected value, plus `low` times the low dtype's unit roundoff `u` and `f32` times `f32`'s
/// (`2^-24`), both times the case's scale (or 1 where the case stores none: results of size
/// 1, like activations).
#[derive(Clone, Copy, Debug)]
struct Tol {
    ulps: f64,
    low: f64,
    f32: f64,
}

const EXACT: Tol = Tol { ulps: 0.0, low: 0.0, f32: 0.0 };
/// One rounding of an `f32` result that both libraries compute to within a few `f32` ulps.
const ONE_ROUNDING: Tol = Tol { ulps: 1.0, low: 0.0, f32: 0.0 };
/// One rounding of a sum both accumulate in `f32`, in different orders: at most `n 2^-24`
/// of the scale apart, with `n` the number of terms (below 64 in the fixture).
const F32_SUM: Tol = Tol { ulps: 1.0, low: 0.0, f32: 64.0 };

/// The tolerance of a case, with the reason.
fn tolerance(name: &str) -> Tol {
    let family = name.split_once('/').map_or(name, |(f, _)| f);
    match (family, name) {
        ("cast" | "compare", _) => EXACT,
        ("reduce", "reduce/max" | "reduce/min" | "reduce/argmax" | "reduce/argmin") => EXACT,
        (
            _,
            "index_select" | "gather" | "masked_fill" | "cat" | "where_cond" | "max_pool2d" | "adaptive_max_pool2d",
        ) => EXACT,
        // PyTorch computes `1.7 / x` as `reciprocal(x) * 1.7`, rounding `1 / x` to the low dtype
        // first: half an ulp of `1 / x`, scaled by 1.7 (below 2 ulps of the result), then the
        // result's own rounding.
        (_, "unary/rdiv_scalar(1.7)") => Tol { ulps: 2.0, ..EXACT },
        // `x / 2 * (1 + erf(x / sqrt 2))` cancels in `f32` for negative `x`: both libraries keep
        // their `erf`'s rounding error near -1, a few `2^-24`, times `|x| / 2` (the scale).
        (_, "unary/gelu" | "unary/gelu_tanh") => Tol { ulps: 1.0, low: 0.0, f32: 8.0 },
        ("unary" | "binary", _) | (_, "softmax") => ONE_ROUNDING,
        // PyTorch multiplies a low-precision product one factor at a time, rounding each of the
        // 8 products (ember rounds once): up to `8u` of the product's size.
        (_, "reduce/prod") => Tol { ulps: 1.0, low: 8.0, f32: 0.0 },
        ("reduce", _) | ("matmul", _) | (_, "log_softmax" | "conv2d") => F32_SUM,
        (_, "avg_pool2d" | "adaptive_avg_pool2d" | "layer_norm" | "group_norm" | "scatter_add") => F32_SUM,
        // PyTorch's f16 transposed convolution rounds the per-tap products it scatters (col2im)
        // and the sums of the taps that overlap an output (2 here, with stride 2 and a 3-wide
        // kernel): two roundings of the scale.
        (_, "conv_transpose2d") => Tol { ulps: 1.0, low: 2.0, f32: 64.0 },
        // PyTorch's low-precision batch norm computes `x * alpha + beta` with `alpha = w / sigma`
        // and `beta = b - mean * alpha` rounded to the low dtype: `u` of each term's size (the
        // scale), then the result's rounding.
        (_, "channel_norm") => Tol { ulps: 1.0, low: 2.0, f32: 64.0 },
        // PyTorch's CPU flash attention rounds the probabilities to the low dtype before the
        // product with the values: each weight is off by up to `u` relative, so the output by up
        // to `u` times `sum p |v|` (the scale).
        ("attention", _) => Tol { ulps: 1.0, low: 1.0, f32: 64.0 },
        // PyTorch adds the two gate products in the low dtype (ember in `f32`): each gate
        // pre-activation moves by half an ulp, `u` times its size (below 4 here), and each
        // activation by that times its slope (at most 1/4 for the sigmoids, 1 for tanh): `c' = f
        // c + i g` and `h' = o tanh c'` add up two or three such moves, below `2u`.
        (_, "lstm_cell") => Tol { ulps: 1.0, low: 2.0, f32: 0.0 },
        // The same moves in each of the 5 steps (PyTorch also rounds `h @ w_hh^T` to the low
        // dtype every step), carried but damped by the recurrence (the forget gates are below 1).
        (_, "lstm_sequence") => Tol { ulps: 1.0, low: 4.0, f32: 0.0 },
        _ => panic!("no tolerance for {name}"),
    }
}

/// The spacing of the low dtype's values at `w` (subnormals included): `2^(e - 7)` for
/// `bf16` and `2^(e - 10)` for `f16`, with `e` the exponent of `w`.
fn ulp(w: f64, low: DType) -> f64 {
    let (mantissa, min_exp) = if low == DType::BF16 { (7, -126) } else { (10, -14) };
    let e = if w == 0.0 { min_exp } else { (w.abs().log2().floor() as i32).max(min_exp) };
    2f64.powi(e - mantissa)
}

/// The unit roundoff of the low dtype: half an ulp of 1.
fn unit(low: DType) -> f64 {
    if low == DType::BF16 { 2f64.powi(-8) } else { 2f64.powi(-11) }
}

/// The problems of `got` against the stored expectation, at most a few per output.
fn compare(name: &str, low: DType, got: &Tensor, want: &Stored, scale: Option<&Stored>, tol: Tol) -> Vec<String> {
    let mut problems = vec![];
    if got.dtype() != want.dtype || got.shape().dims() != want.shape.as_slice() {
        return vec![format!(
            "{name} ({low}): got {} {:?}, PyTorch {} {:?}",
            got.dtype(),
            got.shape().dims(),
            want.dtype,
            want.shape
        )];
    }
    if want.dtype.is_float() && tol.ulps == 0.0 && tol.low == 0.0 && tol.f32 == 0.0 {
        // Bit for bit; any NaN matches any NaN (the payload is not specified).
        let got_bits = Stored::bits(got);
        for (i, (&g, &w)) in got_bits.iter().zip(&want.words).enumerate() {
            let nan = |b: u64| Stored::from_bits(want.dtype, b).is_nan();
            if g != w && !(nan(g) && nan(w)) {
                problems.push(format!("{name} ({low}): element {i} has bits {g:x}, PyTorch {w:x}"));
            }
        }
        return problems;
    }
    let g = got.to_dtype(DType::F64).to_vec::<f64>().expect("f64 values");
    let w = want.values();
    let s = scale.map_or_else(|| vec![1.0; w.len()], Stored::values);
    // The largest share of its tolerance an element uses (`--nocapture` prints it).
    let mut worst = 0.0f64;
    for i in 0..w.len() {
        let allowed = tol.ulps * ulp(w[i], low) + (tol.low * unit(low) + tol.f32 * 2f64.powi(-24)) * s[i];
        let ok =
            (g[i].is_nan() && w[i].is_nan()) || g[i] == w[i] || (w[i].is_finite() && (g[i] - w[i]).abs() <= allowed);
        if ok && g[i] != w[i] && w[i].is_finite() {
            worst = worst.max((g[i] - w[i]).abs() / allowed);
        }
        if !ok {
            problems.push(format!(
                "{name} ({low}): element {i} is {:e}, PyTorch {:e} (off by {:.2} ulp, allowed {:.2} ulp)",
                g[i],
                w[i],
                (g[i] - w[i]).abs() / ulp(w[i], low),
                allowed / ulp(w[i], low)
            ));
        }
    }
    println!("{name} ({low}): {:.2} of the tolerance used", worst);
    problems
}

impl Stored {
    /// A float tensor's elements as bits.
    fn bits(t: &Tensor) -> Vec<u64> {
        match t.dtype() {
            DType::F64 => t.to_vec::<f64>().expect("f64").iter().map(|v| v.to_bits()).collect(),
            DType::F32 => t.to_vec::<f32>().expect("f32").iter().map(|v| v.to_bits() as u64).collect(),
            DType::BF16 => t.to_vec::<bf16>().expect("bf16").iter().map(|v| v.to_bits() as u64).collect(),
            DType::F16 => t.to_vec::<f16>().expect("f16").iter().map(|v| v.to_bits() as u64).collect(),
            other => panic!("bits of a {other} tensor"),
        }
    }

    /// The value of the bits `b` in the float dtype `dtype`.
    fn from_bits(dtype: DType, b: u64) -> f64 {
        match dtype {
            DType::F64 => f64::from_bits(b),
            DType::F32 => f32::from_bits(b as u32) as f64,
            DType::BF16 => bf16::from_bits(b as u16).to_f64(),
            _ => f16::from_bits(b as u16).to_f64(),
        }
    }
}

/// Replays every case of `family` (a name prefix) in both low dtypes and panics listing
/// every problem.
#[track_caller]
fn replay_family(select: impl Fn(&str) -> bool) {
    ieee_subnormals();
    let fx = fixture();
    let mut problems = vec![];
    let mut replayed = 0;
    for (name, by_dtype) in fx.cases.iter().filter(|(n, _)| select(n)) {
        for (dname, case) in by_dtype {
            let low = if dname == "bf16" { DType::BF16 } else { DType::F16 };
            let inputs: Vec<Tensor> = case.inputs.iter().map(Stored::tensor).collect();
            let got = match replay(name, &inputs) {
                Ok(got) => got,
                Err(e) => {
                    problems.push(format!("{name} ({dname}): {e}"));
                    continue;
                }
            };
            assert_eq!(got.len(), case.outputs.len(), "{name}: number of results");
            for ((g, w), s) in got.iter().zip(&case.outputs).zip(&case.scales) {
                let mut p = compare(name, low, g, w, s.as_ref(), tolerance(name));
                let more = p.len().saturating_sub(4);
                p.truncate(4);
                if more > 0 {
                    p.push(format!("{name} ({dname}): ... and {more} more"));
                }
                problems.extend(p);
            }
            replayed += 1;
        }
    }
    assert!(replayed > 0, "no case selected");
    assert!(problems.is_empty(), "against torch {}:\n{}", fx.torch, problems.join("\n"));
}

// ---- the tests -----------------------------------------------------------------------------

/// Every variant of the unary, binary, comparison and reduction tables has a case here, and
/// every case of these tables has its fixture entry in both low dtypes.
#[test]
fn every_table_variant_has_a_low_precision_case() {
    let mut missing: Vec<String> = UnaryOp::NAMES
        .iter()
        .filter(|name| !UNARY.iter().any(|(_, op, _)| op.name() == **name))
        .map(|n| format!("unary {n}"))
        .collect();
    let prefixed = |table: &[&str], cases: &[&str], family: &str| -> Vec<String> {
        table
            .iter()
            .filter(|m| !cases.iter().any(|c| c == *m || c.starts_with(&format!("{m}("))))
            .map(|m| format!("{family} {m}"))
            .collect()
    };
    fn names(t: &[(&'static str, Binary)]) -> Vec<&'static str> {
        t.iter().map(|c| c.0).collect()
    }
    missing.extend(prefixed(BINARY_NAMES, &names(BINARY), "binary"));
    missing.extend(prefixed(COMPARE_NAMES, &names(COMPARE), "compare"));
    missing.extend(prefixed(REDUCE_NAMES, &REDUCE.iter().map(|c| c.0).collect::<Vec<_>>(), "reduce"));
    assert!(missing.is_empty(), "table variants without a bf16/f16 case: {missing:?}");
}

/// The fixture and this file list the same cases: every fixture case has a replay, every
/// replay a fixture case in both low dtypes (casts in the one they involve).
#[test]
fn fixture_and_replays_list_the_same_cases() {
    let fx = fixture();
    let mut ours: Vec<String> = vec![];
    ours.extend(UNARY.iter().map(|c| format!("unary/{}", c.0)));
    ours.extend(BINARY.iter().map(|c| format!("binary/{}", c.0)));
    ours.extend(COMPARE.iter().map(|c| format!("compare/{}", c.0)));
    ours.extend(REDUCE.iter().map(|c| format!("reduce/{}", c.0)));
    ours.extend(OTHERS.iter().map(|c| c.to_string()));
    for name in &ours {
        let dtypes = fx.cases.get(name).map(|d| d.len()).unwrap_or(0);
        assert_eq!(dtypes, 2, "{name}: the fixture has it in {dtypes} low dtypes, want bf16 and f16");
    }
    for (name, by_dtype) in &fx.cases {
        let known = ours.contains(name) || name.starts_with("cast/") || name.starts_with("print/");
        assert!(known, "{FIXTURE_PATH} has the case {name}, which this file does not replay");
        assert!(by_dtype.values().all(|c| !c.outputs.is_empty() || c.text.is_some()), "{name}: no result");
    }
    // Casts between every pair of dtypes that involves a low one.
    for src in DTYPES {
        for dst in DTYPES {
            let low = |d: DType| d == DType::BF16 || d == DType::F16;
            if src != dst && (low(src) || low(dst)) {
                let name = format!("cast/{}->{}", src.name(), dst.name());
                assert!(fx.cases.contains_key(&name), "{FIXTURE_PATH} has no case {name}");
            }
        }
    }
}

#[test]
fn unary_ops_match_pytorch() {
    replay_family(|n| n.starts_with("unary/"));
}

#[test]
fn binary_ops_match_pytorch() {
    replay_family(|n| n.starts_with("binary/") || n == "where_cond");
}

#[test]
fn comparisons_match_pytorch() {
    replay_family(|n| n.starts_with("compare/"));
}

#[test]
fn reductions_and_softmax_match_pytorch() {
    replay_family(|n| n.starts_with("reduce/") || n.ends_with("softmax"));
}

#[test]
fn matmul_and_convolutions_match_pytorch() {
    replay_family(|n| n.starts_with("matmul/") || n.starts_with("conv"));
}

#[test]
fn pooling_matches_pytorch() {
    replay_family(|n| n.contains("pool"));
}

#[test]
fn norms_match_pytorch() {
    replay_family(|n| n.ends_with("_norm"));
}

#[test]
fn attention_matches_pytorch() {
    replay_family(|n| n.starts_with("attention"));
}

#[test]
fn lstm_kernels_match_pytorch() {
    replay_family(|n| n.starts_with("lstm_"));
}

#[test]
fn indexing_and_joins_match_pytorch() {
    replay_family(|n| matches!(n, "index_select" | "gather" | "scatter_add" | "masked_fill" | "cat"));
}

/// Casts between every pair of dtypes involving `bf16` or `f16` agree with PyTorch bit for
/// bit: round to nearest even, overflow to infinity, subnormals, and the double rounding of
/// `f64` (and `i64`) values that PyTorch converts through `f32` first.
#[test]
fn casts_match_pytorch_bit_for_bit() {
    replay_family(|n| n.starts_with("cast/"));
}

/// The numbers ember prints for a `bf16` and an `f16` tensor are PyTorch's (ember writes an
/// integral value `1.0` where PyTorch writes `1.`).
#[test]
fn printing_matches_pytorch() {
    let fx = fixture();
    let mut problems = vec![];
    for (name, by_dtype) in fx.cases.iter().filter(|(n, _)| n.starts_with("print/")) {
        for (dname, case) in by_dtype {
            let t = case.inputs[0].tensor();
            let text = case.text.as_deref().expect("a printing case has its text");
            let theirs: Vec<String> = numbers(text.split("dtype=").next().unwrap_or(text))
                .into_iter()
                .map(|n| if n.ends_with('.') { format!("{n}0") } else { n })
                .collect();
            // `{:?}` is the printed values and a footer naming the dtype.
            let printed = format!("{t:?}");
            let (body, footer) = printed.split_once("\nTensor(").expect("ember's footer");
            if numbers(body) != theirs {
                problems.push(format!("{name} ({dname}): ember prints {body:?}, PyTorch {text:?}"));
            }
            if !footer.contains(&format!("dtype={dname}")) {
                problems.push(format!("{name} ({dname}): the footer says {footer:?}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The numbers of a printed tensor, in order.
fn numbers(s: &str) -> Vec<String> {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_digit() || c == '-') && w != &"-")
        .map(str::to_string)
        .collect()
}

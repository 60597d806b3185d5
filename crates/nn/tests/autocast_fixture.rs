//! Replays tools/parity/fixtures/autocast.tsv (written by tools/parity/autocast.py): the
//! output dtype of every operation with an autocast policy, and of a representative set
//! of others, under PyTorch's autocast on the CPU (bf16, f16) and on CUDA (f16, bf16),
//! for f32, lower-precision, mixed and f64 inputs. ember must give the same dtype on the
//! CPU and on `cuda:0` (the emulated device without the `cuda` feature), and refuse what
//! PyTorch refuses.

use ember_autograd::Var;
use ember_autograd::autocast::{AutocastGuard, DeviceType};
use ember_nn::functional as F;
use ember_nn::{CellOptions, RnnOptions};
use ember_nn::{
    CrossEntropyOptions, GRU, GRUCell, HuberOptions, LSTM, LSTMCell, Module, NllOptions, RNN, RNNCell, Reduction,
};
use ember_tensor::{Attention, ConvArgs, ConvTransposeArgs, DType, Device, Result, Tensor};

const FIXTURE: &str = include_str!("../../../tools/parity/fixtures/autocast.tsv");

/// Rows where PyTorch's answer is not its autocast policy, with the reason; every other
/// row is compared.
const NOT_POLICY: &[(&str, &str, &str, &str, &str)] = &[
    ("lstm", "cpu", "f16", "f32", "oneDNN's CPU LSTM has no f16 kernel for f32 inputs cast to f16"),
    ("lstm", "cpu", "f16", "mixed", "the same kernel limit: PyTorch falls back to f32, ember follows the policy"),
    ("lstm", "cuda", "f16", "*", "fake CUDA tensors fail inside _cudnn_rnn; the policy is the autocast list's"),
    ("gru", "cuda", "f16", "*", "fake CUDA tensors fail inside _cudnn_rnn"),
    ("rnn_tanh", "cuda", "f16", "*", "fake CUDA tensors fail inside _cudnn_rnn"),
    ("lstm", "cuda", "bf16", "*", "fake CUDA tensors fail inside _cudnn_rnn for f32 and f64 inputs"),
    ("gru", "cuda", "bf16", "*", "fake CUDA tensors fail inside _cudnn_rnn for f32 and f64 inputs"),
    ("rnn_tanh", "cuda", "bf16", "*", "fake CUDA tensors fail inside _cudnn_rnn for f32 and f64 inputs"),
    // Not autocast's: ember-tensor's `where` refuses two operands of one 16-bit dtype
    // ("expected operands of one dtype, got bf16 and bf16"), inside a region or not.
    ("where_cond", "cpu", "bf16", "low", "ember-tensor's where on two bf16 operands"),
    ("where_cond", "cpu", "f16", "low", "ember-tensor's where on two f16 operands"),
    ("where_cond", "cuda", "bf16", "low", "ember-tensor's where on two bf16 operands"),
    ("where_cond", "cuda", "f16", "low", "ember-tensor's where on two f16 operands"),
    ("logsumexp", "cpu", "bf16", "low", "its composition calls ember-tensor's where on bf16"),
    ("logsumexp", "cpu", "bf16", "mixed", "its composition calls ember-tensor's where on bf16"),
    ("logsumexp", "cpu", "f16", "low", "its composition calls ember-tensor's where on f16"),
    ("logsumexp", "cpu", "f16", "mixed", "its composition calls ember-tensor's where on f16"),
];

fn dtype(name: &str) -> DType {
    match name {
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        "f32" => DType::F32,
        "f64" => DType::F64,
        "i64" => DType::I64,
        other => panic!("the fixture names an unknown dtype {other}"),
    }
}

/// The inputs of one row: float input `pos` (0 first) of `shape`, in the row's dtype.
struct Inputs {
    device: Device,
    low: DType,
    kind: String,
}

impl Inputs {
    fn dtype(&self, pos: usize) -> DType {
        match self.kind.as_str() {
            "f32" => DType::F32,
            "low" => self.low,
            "f64" => DType::F64,
            _ if pos == 0 => self.low,
            _ => DType::F32,
        }
    }

    /// A parameter (a leaf that requires grad, as a layer's weight is).
    fn r(&self, pos: usize, shape: &[usize]) -> Result<Var> {
        let t = Tensor::randn(shape.to_vec())?.to_dtype(self.dtype(pos)).to_device(self.device)?;
        Ok(Var::param(t))
    }

    fn idx(&self, v: Vec<i64>) -> Result<Var> {
        let n = v.len();
        Ok(Var::new(Tensor::from_vec(v, [n])?.to_device(self.device)?))
    }

    fn module<M: Module>(&self, m: M) -> Result<M> {
        m.to_device(self.device)?;
        Ok(m)
    }
}

/// ember's call for the fixture's operation `op`.
fn run(op: &str, i: &Inputs) -> Result<Var> {
    let r = |pos, shape: &[usize]| i.r(pos, shape);
    let red = Reduction::Mean;
    Ok(match op {
        "matmul" => r(0, &[2, 3, 4])?.matmul(&r(1, &[4, 3])?)?,
        "linear" => r(0, &[2, 4])?.linear(&r(1, &[5, 4])?, Some(&r(2, &[5])?))?,
        "conv1d" => r(0, &[1, 2, 5])?.conv1d(&r(1, &[3, 2, 2])?, Some(&r(2, &[3])?), &ConvArgs::default())?,
        "conv2d" => r(0, &[1, 2, 5, 5])?.conv2d(&r(1, &[3, 2, 2, 2])?, Some(&r(2, &[3])?), &ConvArgs::default())?,
        "conv_transpose1d" => {
            r(0, &[1, 2, 5])?.conv_transpose1d(&r(1, &[2, 3, 2])?, Some(&r(2, &[3])?), &ConvTransposeArgs::default())?
        }
        "conv_transpose2d" => r(0, &[1, 2, 5, 5])?.conv_transpose2d(
            &r(1, &[2, 3, 2, 2])?,
            Some(&r(2, &[3])?),
            &ConvTransposeArgs::default(),
        )?,
        "scaled_dot_product_attention" => F::scaled_dot_product_attention(
            &r(0, &[1, 2, 3, 4])?,
            &r(1, &[1, 2, 3, 4])?,
            &r(2, &[1, 2, 3, 4])?,
            &F::SdpaArgs::default(),
        )?,
        "lstm" | "gru" | "rnn_tanh" => {
            let (x, h0) = (r(0, &[2, 1, 4])?, r(1, &[1, 1, 3])?);
            let o = RnnOptions::default().dtype(i.dtype(1));
            match op {
                "lstm" => i.module(LSTM::with_options(4, 3, o)?)?.run(&x, Some((&h0, &r(1, &[1, 1, 3])?)))?.output,
                "gru" => i.module(GRU::with_options(4, 3, o)?)?.run(&x, Some(&h0))?.output,
                _ => i.module(RNN::with_options(4, 3, o)?)?.run(&x, Some(&h0))?.output,
            }
        }
        "lstm_cell" | "gru_cell" | "rnn_tanh_cell" => {
            let (x, h) = (r(0, &[2, 4])?, r(1, &[2, 3])?);
            let o = CellOptions::default().dtype(i.dtype(1));
            match op {
                "lstm_cell" => {
                    let s = ember_nn::LstmState { h, c: r(1, &[2, 3])? };
                    i.module(LSTMCell::with_options(4, 3, o)?)?.run(&x, Some(&s))?.h
                }
                "gru_cell" => i.module(GRUCell::with_options(4, 3, o)?)?.run(&x, Some(&h))?,
                _ => i.module(RNNCell::with_options(4, 3, o)?)?.run(&x, Some(&h))?,
            }
        }
        "softmax" => r(0, &[2, 3])?.softmax(-1)?,
        "log_softmax" => r(0, &[2, 3])?.log_softmax(-1)?,
        "layer_norm" => F::layer_norm(&r(0, &[2, 4])?, &[4], Some(&r(1, &[4])?), Some(&r(2, &[4])?), 1e-5)?,
        "rms_norm" => F::rms_norm(&r(0, &[2, 4])?, &[4], Some(&r(1, &[4])?), None)?,
        "group_norm" => F::group_norm(&r(0, &[2, 4, 3])?, 2, Some(&r(1, &[4])?), Some(&r(2, &[4])?), 1e-5)?,
        "batch_norm" => {
            F::batch_norm(&r(0, &[2, 4, 3])?, None, None, Some(&r(1, &[4])?), Some(&r(2, &[4])?), true, 0.1, 1e-5)?
        }
        "instance_norm" => {
            F::instance_norm(&r(0, &[2, 4, 3])?, None, None, Some(&r(1, &[4])?), Some(&r(2, &[4])?), true, 0.1, 1e-5)?
        }
        "cross_entropy" => F::cross_entropy(&r(0, &[2, 3])?, i.idx(vec![0, 2])?, CrossEntropyOptions::default())?,
        "nll_loss" => F::nll_loss(&r(0, &[2, 3])?, i.idx(vec![0, 2])?, NllOptions::default())?,
        "mse_loss" => F::mse_loss(&r(0, &[2, 3])?, r(1, &[2, 3])?, red)?,
        "l1_loss" => F::l1_loss(&r(0, &[2, 3])?, r(1, &[2, 3])?, red)?,
        "huber_loss" => F::huber_loss(&r(0, &[2, 3])?, r(1, &[2, 3])?, HuberOptions::default())?,
        "binary_cross_entropy" => F::binary_cross_entropy(&r(0, &[2, 3])?.sigmoid(), r(1, &[2, 3])?.sigmoid(), red)?,
        "binary_cross_entropy_with_logits" => {
            F::binary_cross_entropy_with_logits(&r(0, &[2, 3])?, r(1, &[2, 3])?, red)?
        }
        "sum_all" => r(0, &[2, 3])?.sum_all(),
        "sum" => r(0, &[2, 3])?.sum(1, false)?,
        "mean" => r(0, &[2, 3])?.mean(1, false)?,
        "prod" => r(0, &[2, 3])?.prod(1, false)?,
        "logsumexp" => r(0, &[2, 3])?.logsumexp(1, false)?,
        "max" => r(0, &[2, 3])?.max(1, false)?,
        "var" => r(0, &[2, 3])?.var(1, true, false)?,
        "std" => r(0, &[2, 3])?.std(1, true, false)?,
        "exp" => r(0, &[2, 3])?.exp(),
        "log" => r(0, &[2, 3])?.log(),
        "log1p" => r(0, &[2, 3])?.log1p(),
        "expm1" => r(0, &[2, 3])?.expm1(),
        "rsqrt" => r(0, &[2, 3])?.rsqrt(),
        "recip" => r(0, &[2, 3])?.recip(),
        "softplus" => r(0, &[2, 3])?.softplus(1.0, 20.0),
        "pow_scalar" => r(0, &[2, 3])?.pow_scalar(2.0)?,
        "rpow_scalar" => r(0, &[2, 3])?.rpow_scalar(2.0),
        "pow" => r(0, &[2, 3])?.pow(&r(1, &[2, 3])?)?,
        "sqrt" => r(0, &[2, 3])?.sqrt(),
        "tanh" => r(0, &[2, 3])?.tanh(),
        "sigmoid" => r(0, &[2, 3])?.sigmoid(),
        "relu" => r(0, &[2, 3])?.relu(),
        "gelu" => r(0, &[2, 3])?.gelu(),
        "sin" => r(0, &[2, 3])?.sin(),
        "cos" => r(0, &[2, 3])?.cos(),
        "erf" => r(0, &[2, 3])?.erf(),
        "abs" => r(0, &[2, 3])?.abs(),
        "add" => r(0, &[2, 3])?.add(&r(1, &[2, 3])?)?,
        "sub" => r(0, &[2, 3])?.sub(&r(1, &[2, 3])?)?,
        "mul" => r(0, &[2, 3])?.mul(&r(1, &[2, 3])?)?,
        "div" => r(0, &[2, 3])?.div(&r(1, &[2, 3])?)?,
        "maximum" => r(0, &[2, 3])?.maximum(&r(1, &[2, 3])?)?,
        "cat" => Var::cat(&[&r(0, &[2, 3])?, &r(1, &[2, 3])?], 0)?,
        "stack" => Var::stack(&[&r(0, &[2, 3])?, &r(1, &[2, 3])?], 0)?,
        "scatter_add" => {
            let index = Var::new(Tensor::zeros([2, 3], DType::I64)?.to_device(i.device)?);
            r(0, &[2, 3])?.scatter_add(0, index, &r(1, &[2, 3])?)?
        }
        "index_select" => r(0, &[2, 3])?.index_select(0, i.idx(vec![1, 0])?)?,
        "gather" => r(0, &[2, 3])?.gather(0, Var::new(Tensor::zeros([2, 3], DType::I64)?.to_device(i.device)?))?,
        "where_cond" => {
            let mask = Var::new(Tensor::from_vec(vec![1u8, 0, 1], [3])?.to_device(i.device)?);
            mask.where_cond(&r(0, &[2, 3])?, &r(1, &[2, 3])?)?
        }
        "avg_pool2d" => r(0, &[1, 2, 4, 4])?.avg_pool2d(&F::AvgPoolArgs::new(2))?,
        "max_pool2d" => r(0, &[1, 2, 4, 4])?.max_pool2d(&F::MaxPoolArgs::new(2))?,
        "adaptive_avg_pool2d" => r(0, &[1, 2, 4, 4])?.adaptive_avg_pool2d([2, 2])?,
        "interpolate" => r(0, &[1, 2, 4, 4])?.interpolate(&F::InterpolateArgs::scale_factor(vec![2.0, 2.0]))?,
        "embedding" => F::embedding(&i.idx(vec![0, 2])?, &r(0, &[3, 4])?, None)?,
        other => panic!("the fixture has an operation this replay does not know: {other}"),
    })
}

fn excused(op: &str, device: &str, low: &str, kind: &str) -> bool {
    NOT_POLICY.iter().any(|&(o, d, l, k, _)| o == op && d == device && l == low && (k == "*" || k == kind))
}

/// Replays the rows of `device` ("cpu" or "cuda") on `on`; returns how many it compared.
fn replay(device: &str, on: Device) -> usize {
    let mut compared = 0;
    let mut wrong = Vec::new();
    for line in FIXTURE.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        let (op, dev, low, kind, expected) = (f[0], f[1], f[2], f[3], f[4]);
        if dev != device || excused(op, dev, low, kind) {
            continue;
        }
        let inputs = Inputs { device: on, low: dtype(low), kind: kind.to_string() };
        let got = {
            let _region = AutocastGuard::new(DeviceType::from(on), dtype(low)).unwrap();
            run(op, &inputs)
        };
        let got = match got {
            Ok(v) => v.dtype().name().to_string(),
            Err(e) => format!("error ({e})"),
        };
        if got.split(' ').next() != Some(expected) {
            wrong.push(format!("{op} on {dev} under {low} with {kind} inputs: PyTorch {expected}, ember {got}"));
        }
        compared += 1;
    }
    assert!(wrong.is_empty(), "{} of {compared} rows differ:\n{}", wrong.len(), wrong.join("\n"));
    compared
}

#[test]
fn cpu_autocast_gives_pytorchs_dtypes() {
    let n = replay("cpu", Device::Cpu);
    assert!(n >= 500, "compared only {n} rows");
}

#[test]
fn cuda_autocast_gives_pytorchs_dtypes() {
    let on = Device::Cuda(0);
    if !(Device::emulate_cuda() || on.is_available()) {
        return;
    }
    let n = replay("cuda", on);
    assert!(n >= 500, "compared only {n} rows");
}

/// The attention composition used with dropout agrees with the kernel's dtype.
#[test]
fn attention_weights_run_in_the_attention_dtype() -> Result<()> {
    let q = Var::param(Tensor::randn([1, 3, 4])?);
    let _region = AutocastGuard::new(DeviceType::Cpu, DType::BF16)?;
    let w = q.attention_weights(&q, None, &Attention { scale: 0.5, causal: false })?;
    assert_eq!(w.dtype(), DType::BF16);
    Ok(())
}

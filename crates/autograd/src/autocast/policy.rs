//! What autocast does to an operation's inputs: the policies, and each operation's pair
//! (CPU, CUDA), after PyTorch's lists in `aten/src/ATen/autocast_mode.cpp` as the
//! installed PyTorch applies them (`tools/parity/autocast.py` records its output dtypes;
//! `tests/autocast_fixture.rs` replays them).

/// How autocast treats the floating-point inputs of an operation on one device type.
/// Integer inputs (indices, masks) and `f64` inputs are never cast.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// No cast: the operation follows its inputs' dtypes (and the usual promotion).
    Follow,
    /// Cast to the region's lower-precision dtype (`bf16` or `f16`): matrix products,
    /// convolutions, attention, recurrent cells.
    Lower,
    /// Cast to `f32`: operations that lose too much in 16 bits (losses, and on CUDA
    /// softmax, norms, `exp`, `log`, `pow`, sums...).
    F32,
    /// Cast to the widest input dtype among `f16`, `bf16` and `f32`, with the region's
    /// dtype as the narrowest (`cat`, `stack`).
    Promote,
    /// Computed in `f32` when the float inputs' dtypes differ, and the result rounded to
    /// the first input's dtype: PyTorch's CPU norms, which take a `bf16` input with `f32`
    /// parameters and answer in `bf16`.
    FirstInput,
    /// Refused with an error: PyTorch's CUDA `binary_cross_entropy`, which is not safe to
    /// run in `f16` (use `binary_cross_entropy_with_logits`).
    Refuse,
}

/// An operation's name and its policy on each device type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpPolicy {
    /// The operation, for error messages.
    pub name: &'static str,
    /// Its policy on CPU tensors.
    pub cpu: Policy,
    /// Its policy on CUDA tensors.
    pub cuda: Policy,
}

impl OpPolicy {
    /// An operation with the policy `cpu` on the CPU and `cuda` on CUDA devices.
    pub const fn new(name: &'static str, cpu: Policy, cuda: Policy) -> OpPolicy {
        OpPolicy { name, cpu, cuda }
    }

    /// Whether autocast does anything to this operation on some device type. Constant for
    /// the generated operations, so that one without a policy keeps no check at all.
    pub const fn is_active(&self) -> bool {
        !matches!((self.cpu, self.cuda), (Policy::Follow, Policy::Follow))
    }
}

use Policy::{F32, FirstInput, Follow, Lower, Promote, Refuse};

/// `const` string equality, for [`unary`] and [`reduction`], which run at compile time.
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The policy of an elementwise function of one tensor (the unary table's methods) by its
/// method name: on CUDA, PyTorch runs these in `f32`; on the CPU they follow their input.
pub const fn unary(method: &'static str) -> OpPolicy {
    const CUDA_F32: [&str; 9] =
        ["exp", "log", "log1p", "expm1", "rsqrt", "recip", "softplus", "pow_scalar", "rpow_scalar"];
    let mut i = 0;
    while i < CUDA_F32.len() {
        if same(CUDA_F32[i], method) {
            return OpPolicy::new(method, Follow, F32);
        }
        i += 1;
    }
    OpPolicy::new(method, Follow, Follow)
}

/// The policy of a binary elementwise operation by its method name: `pow` of two tensors
/// runs in `f32` on CUDA; the rest follow their inputs' promotion.
pub const fn binary(method: &'static str) -> OpPolicy {
    if same(method, "pow") { OpPolicy::new(method, Follow, F32) } else { OpPolicy::new(method, Follow, Follow) }
}

/// Matrix products: `matmul`, `linear` (PyTorch's `mm`, `bmm`, `addmm`, `linear`...).
pub const MATMUL: OpPolicy = OpPolicy::new("matmul", Lower, Lower);
/// `linear`.
pub const LINEAR: OpPolicy = OpPolicy::new("linear", Lower, Lower);
/// Convolutions (`conv1d`, `conv2d`).
pub const CONV: OpPolicy = OpPolicy::new("conv", Lower, Lower);
/// Transposed convolutions.
pub const CONV_TRANSPOSE: OpPolicy = OpPolicy::new("conv_transpose", Lower, Lower);
/// `scaled_dot_product_attention`, and the attention weights its composed form computes
/// (inside PyTorch's lower-precision attention, so in the same dtype).
pub const ATTENTION: OpPolicy = OpPolicy::new("scaled_dot_product_attention", Lower, Lower);
/// The LSTM and Elman RNN layers (PyTorch's `mkldnn_rnn_layer` and `linear` on the CPU,
/// `_cudnn_rnn` on CUDA).
pub const RNN: OpPolicy = OpPolicy::new("rnn", Lower, Lower);
/// The GRU layer: lower precision on CUDA (`_cudnn_rnn`); on the CPU PyTorch runs it in
/// its inputs' widest dtype.
pub const GRU: OpPolicy = OpPolicy::new("gru", Promote, Lower);
/// The LSTM and GRU cells: lower precision on CUDA (`lstm_cell`, `gru_cell`); on the CPU
/// in the inputs' widest dtype.
pub const GATED_CELL: OpPolicy = OpPolicy::new("rnn_cell", Promote, Lower);
/// The Elman RNN cell: lower precision on both (on the CPU PyTorch composes it from
/// `linear`, which is on the list).
pub const RNN_CELL: OpPolicy = OpPolicy::new("rnn_tanh_cell", Lower, Lower);
/// `softmax` (in `f32` on CUDA; a `bf16` input stays `bf16` on the CPU).
pub const SOFTMAX: OpPolicy = OpPolicy::new("softmax", Follow, F32);
/// `log_softmax`.
pub const LOG_SOFTMAX: OpPolicy = OpPolicy::new("log_softmax", Follow, F32);
/// The classification losses of class indices (`cross_entropy`, `nll_loss`).
pub const CLASS_LOSS: OpPolicy = OpPolicy::new("class_loss", F32, F32);
/// The elementwise losses (`mse_loss`, `l1_loss`, `huber_loss`, `smooth_l1_loss`,
/// `binary_cross_entropy_with_logits`, `kl_div`).
pub const POINTWISE_LOSS: OpPolicy = OpPolicy::new("loss", F32, F32);
/// `binary_cross_entropy` of probabilities: `f32` on the CPU, refused on CUDA.
pub const BINARY_CROSS_ENTROPY: OpPolicy = OpPolicy::new("binary_cross_entropy", F32, Refuse);
/// `layer_norm` and `rms_norm`.
pub const LAYER_NORM: OpPolicy = OpPolicy::new("layer_norm", FirstInput, F32);
/// `group_norm`.
pub const GROUP_NORM: OpPolicy = OpPolicy::new("group_norm", FirstInput, F32);
/// `batch_norm` and `instance_norm`: neither list has them; their kernels take a
/// lower-precision input with `f32` parameters and answer in the input's dtype.
pub const BATCH_NORM: OpPolicy = OpPolicy::new("batch_norm", FirstInput, FirstInput);
/// `cat` and `stack`.
pub const JOIN: OpPolicy = OpPolicy::new("cat", Promote, Promote);
/// `interpolate` (PyTorch's `upsample_*` run in `f32` on CUDA).
pub const INTERPOLATE: OpPolicy = OpPolicy::new("interpolate", Follow, F32);
/// `scatter_add` (promotes on CUDA).
pub const SCATTER_ADD: OpPolicy = OpPolicy::new("scatter_add", Follow, Promote);

/// The policy of a reduction by its method name: `prod` runs in `f32` on both device
/// types, `sum` (PyTorch's `fp32_set_opt_dtype`) and `logsumexp` on CUDA; the others
/// (`mean`, `max`, `var`...) follow their input.
pub const fn reduction(method: &'static str) -> OpPolicy {
    if same(method, "prod") || same(method, "prod_all") {
        return OpPolicy::new(method, F32, F32);
    }
    const CUDA_F32: [&str; 3] = ["sum", "sum_all", "logsumexp"];
    let mut i = 0;
    while i < CUDA_F32.len() {
        if same(CUDA_F32[i], method) {
            return OpPolicy::new(method, Follow, F32);
        }
        i += 1;
    }
    OpPolicy::new(method, Follow, Follow)
}

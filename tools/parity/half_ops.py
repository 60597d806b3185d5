#!/usr/bin/env python3
"""PyTorch's side of the low-precision reference tests: every public Tensor op run by
PyTorch on the CPU in bfloat16 and in float16, on fixed inputs that are already values of
that dtype, written to tools/parity/fixtures/half_ops.tsv, which
crates/tensor/tests/half_reference.rs replays with ember and compares.

Regenerate (from the repository root, with any Python that has torch; CI never runs this):

    /work/venv-torch/bin/python tools/parity/half_ops.py

The first line records the torch version. Every other line is one tensor of one case:

    case <TAB> dtype <TAB> role <TAB> tensor dtype <TAB> shape <TAB> values

- `case` names the computation (`unary/exp`, `matmul/batched`, `cast/f64->bf16`, ...) and
  `dtype` the low-precision dtype it ran in (`bf16` or `f16`); the Rust test knows how to
  rebuild each case from its name.
- `role` is `in` (an operand, in order), `out` (PyTorch's result, in order), `scale` (for
  results that add many terms: the same computation in float64 on the magnitudes of the
  operands, the size the rounding error of a sum grows with; one per `out`, same shape) or
  `text` (for the printing cases: PyTorch's `repr`, with `\\n` for newlines).
- `shape` is the dimensions joined by `x` (`2x3`), `0d` for a 0-d tensor.
- `values` are row-major and space-separated: floating dtypes as the hexadecimal bits of
  their IEEE encoding (4 digits for bf16/f16, 8 for f32, 16 for f64), so that NaN, the
  infinities, -0 and every rounding are exact; integers in decimal.

Each case seeds torch with the CRC-32 of its name and dtype, so adding a case leaves the
others' numbers unchanged. Inputs are drawn in float32 and rounded to the case's dtype before
PyTorch sees them, so that both sides start from the same values.

Where ember deliberately differs from PyTorch the inputs avoid the difference, and the
comment at the case says why: `sign` of NaN (ember gives NaN, as NumPy; PyTorch 0), float
to integer casts outside the integer's range or of NaN (ember saturates like Rust's `as`;
PyTorch's result is undefined behaviour in C++).
"""

import math
import os
import zlib

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "half_ops.tsv")

LOW = {"bf16": torch.bfloat16, "f16": torch.float16}
ALL = {
    "f64": torch.float64,
    "f32": torch.float32,
    "bf16": torch.bfloat16,
    "f16": torch.float16,
    "i64": torch.int64,
    "u8": torch.uint8,
}
NAMES = {v: k for k, v in ALL.items()}
BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
WIDTH = {torch.float64: 16, torch.float32: 8, torch.bfloat16: 4, torch.float16: 4}

NAN, INF = float("nan"), float("inf")


def encode(t):
    """`dtype <TAB> shape <TAB> values` of a tensor (bool masks become u8, ember's masks)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    shape = "x".join(str(d) for d in t.shape) if t.dim() > 0 else "0d"
    flat = t.reshape(-1)
    if t.dtype in BITS:
        w = WIDTH[t.dtype]
        mask = (1 << (4 * w)) - 1
        vals = " ".join(f"{int(b) & mask:0{w}x}" for b in flat.view(BITS[t.dtype]).tolist())
    else:
        vals = " ".join(str(int(v)) for v in flat.tolist())
    return f"{NAMES[t.dtype]}\t{shape}\t{vals}"


class Case:
    """One case in one dtype: its operands, PyTorch's results and their scales."""

    def __init__(self, name, dname):
        self.name = name
        self.dname = dname
        self.dt = LOW[dname]
        self.lines = []
        torch.manual_seed(zlib.crc32(f"{name}/{dname}".encode()))

    def _line(self, role, body):
        self.lines.append(f"{self.name}\t{self.dname}\t{role}\t{body}\n")

    def randn(self, *shape, std=1.0, mean=0.0):
        """Normal samples rounded to the case's dtype."""
        return (torch.randn(*shape) * std + mean).to(self.dt)

    def low(self, values):
        """A 1-d tensor of `values`, rounded to the case's dtype."""
        return torch.tensor(values, dtype=torch.float32).to(self.dt)

    def inp(self, t):
        self._line("in", encode(t))
        return t

    def out(self, t, scale=None):
        self._line("out", encode(t))
        if scale is not None:
            assert scale.shape == t.shape, f"{self.name}: scale {scale.shape} for output {t.shape}"
            self._line("scale", encode(scale.to(torch.float64)))

    def text(self, s):
        self._line("text", s.replace("\\", "\\\\").replace("\n", "\\n"))


CASES = []


def case(name, dtypes=("bf16", "f16")):
    def register(f):
        CASES.append((name, dtypes, f))
        return f

    return register


def wide(t):
    """The float64 copy of a low-precision tensor (exact)."""
    return t.to(torch.float64)


# ---- elementwise functions of one tensor (ops/unary.rs, one case or more per variant) ------


def unary_inputs(c, domain="any", n=64):
    """Specials of the domain (zeros of both signs, halves for rounding, overflow of the
    low dtypes' range, infinities, NaN) and normal samples mapped into the domain."""
    big = 100.0 if c.dname == "bf16" else 12.0  # e^12 overflows f16; e^100 does not overflow bf16
    specials = {
        "any": [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0, -1.0, 3.0, 20.5, -30.0, big, -big, 1e-3, INF, -INF, NAN],
        "no_nan": [0.0, -0.0, 0.5, -0.5, 2.5, 1.0, -1.0, 1e-3, INF, -INF],
        "finite": [0.0, -0.0, 0.5, -0.5, 2.5, 1.0, -1.0, 1e-3, -3.5, -5.0, -6.0, 20.0, NAN],
        "positive": [0.5, 1.0, 2.0, 4.0, 1e-3, 100.0, INF, 0.0, NAN],
        "above_minus_one": [-0.5, -0.9, 0.0, 1e-3, 1.0, 10.0, INF, NAN],
    }[domain]
    x = torch.randn(n) * 3
    if domain == "positive":
        x = x.abs() + 0.05
    elif domain == "above_minus_one":
        x = x.abs() - 0.95
    x[: len(specials)] = torch.tensor(specials)
    return x.to(c.dt)


UNARY = [
    # (case name, domain, PyTorch's computation)
    ("neg", "any", lambda x: -x),
    ("abs", "any", torch.abs),
    # NaN left out: ember's sign keeps NaN (NumPy's convention), PyTorch's CPU kernel gives 0.
    ("sign", "no_nan", torch.sign),
    ("square", "any", torch.square),
    ("relu", "any", torch.relu),
    ("exp", "any", torch.exp),
    ("log", "positive", torch.log),
    ("sqrt", "positive", torch.sqrt),
    ("rsqrt", "positive", torch.rsqrt),
    ("sin", "any", torch.sin),
    ("cos", "any", torch.cos),
    ("tanh", "any", torch.tanh),
    ("sigmoid", "any", torch.sigmoid),
    # Infinities left out: PyTorch's vectorised bf16 GELU gives NaN for both (its float32
    # kernel, and ember, give inf and 0). The negative inputs reach the region where
    # `1 + erf(x / sqrt 2)` cancels in float32 (see `unary_scale`).
    ("gelu", "finite", F.gelu),
    ("gelu_tanh", "finite", lambda x: F.gelu(x, approximate="tanh")),
    ("silu", "any", F.silu),
    ("erf", "any", torch.erf),
    ("log1p", "above_minus_one", torch.log1p),
    ("expm1", "any", torch.expm1),
    ("recip", "any", torch.reciprocal),
    ("floor", "any", torch.floor),
    ("ceil", "any", torch.ceil),
    ("round", "any", torch.round),
    ("softplus(1, 20)", "any", lambda x: F.softplus(x, 1.0, 20.0)),
    ("softplus(2, 1)", "any", lambda x: F.softplus(x, 2.0, 1.0)),
    ("leaky_relu(0.1)", "any", lambda x: F.leaky_relu(x, 0.1)),
    ("elu(1.3)", "any", lambda x: F.elu(x, 1.3)),
    ("clamp(-0.5, 0.7)", "any", lambda x: torch.clamp(x, -0.5, 0.7)),
    ("clamp(none, 0.4)", "any", lambda x: torch.clamp(x, max=0.4)),
    # Scalars exactly representable in both dtypes, and scalars that are not (0.7, -1.3,
    # 1.7), where it shows whether the scalar is rounded to the tensor's dtype first.
    ("add_scalar(0.75)", "any", lambda x: x + 0.75),
    ("add_scalar(0.7)", "any", lambda x: x + 0.7),
    ("add_scalar(3i64)", "any", lambda x: x + 3),
    ("sub_scalar(0.7)", "any", lambda x: x - 0.7),
    ("rsub_scalar(0.7)", "any", lambda x: 0.7 - x),
    ("mul_scalar(-1.3)", "any", lambda x: x * -1.3),
    ("mul_scalar(3i64)", "any", lambda x: x * 3),
    ("div_scalar(0.7)", "any", lambda x: x / 0.7),
    ("rdiv_scalar(1.7)", "any", lambda x: 1.7 / x),
    ("rdiv_scalar(2)", "any", lambda x: 2.0 / x),
    ("pow_scalar(2)", "any", lambda x: torch.pow(x, 2.0)),
    ("pow_scalar(0.5)", "positive", lambda x: torch.pow(x, 0.5)),
    ("pow_scalar(-1.5)", "positive", lambda x: torch.pow(x, -1.5)),
    ("pow_scalar(0.7)", "positive", lambda x: torch.pow(x, 0.7)),
    ("pow_scalar(3i64)", "any", lambda x: torch.pow(x, 3)),
    ("rpow_scalar(2.5)", "any", lambda x: torch.pow(2.5, x)),
    ("rpow_scalar(0.7)", "any", lambda x: torch.pow(0.7, x)),
    ("maximum_scalar(0.2)", "any", lambda x: torch.maximum(x, torch.full_like(x, 0.2))),
    ("minimum_scalar(-0.1)", "any", lambda x: torch.minimum(x, torch.full_like(x, -0.1))),
]


def unary_scale(name, x):
    """For GELU, `|x| / 2`: both forms compute `x / 2 * (1 + erf(..))` (or `tanh`) in float32,
    where `1 + erf` cancels for negative `x` and keeps only the float32 rounding error of
    `erf` near -1, a few `2^-24` absolute; times `|x| / 2` that is the error of the result,
    which can be many ulps of a tiny GELU value. None for the other functions."""
    if name.startswith("gelu"):
        return wide(x).abs() / 2
    return None


def unary_case(name, domain, f):
    @case(f"unary/{name}")
    def run(c):
        x = c.inp(unary_inputs(c, domain))
        c.out(f(x), unary_scale(name, x))


for _name, _domain, _f in UNARY:
    unary_case(_name, _domain, _f)


# ---- elementwise functions of two tensors and comparisons ---------------------------------

BINARY = [
    ("add", lambda a, b: a + b),
    ("sub", lambda a, b: a - b),
    ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b),
    ("pow", torch.pow),
    ("maximum", torch.maximum),
    ("minimum", torch.minimum),
]


def binary_operands(c, name):
    """`[6, 8]` and a broadcast `[8]`, with ties, zeros and NaN in the first rows; pow gets
    positive bases."""
    a = c.randn(6, 8, std=2.0)
    b = c.randn(8, std=2.0)
    a[0, :4] = b[:4]  # ties for maximum/minimum and comparisons
    a[1, 0] = NAN
    a[1, 1] = 0.0
    b[2] = -0.0
    if name == "pow":
        a = a.abs() + 0.25
        a[1, 0] = NAN
    return a, b


def binary_case(name, f):
    @case(f"binary/{name}")
    def run(c):
        a, b = binary_operands(c, name)
        c.out(f(c.inp(a), c.inp(b)))


for _name, _f in BINARY:
    binary_case(_name, _f)

COMPARE = [
    ("eq", torch.eq),
    ("ne", torch.ne),
    ("lt", torch.lt),
    ("le", torch.le),
    ("gt", torch.gt),
    ("ge", torch.ge),
]


def compare_case(name, f):
    @case(f"compare/{name}")
    def run(c):
        a, b = binary_operands(c, name)
        c.out(f(c.inp(a), c.inp(b)))

    # The scalar is rounded to the tensor's dtype first, so 0.7 equals the element 0.7
    # rounded (PyTorch and ember alike).
    @case(f"compare/{name}_scalar(0.7)")
    def run_scalar(c):
        a = c.randn(5, 8)
        a[0, 0] = 0.7
        a[0, 1] = NAN
        c.out(f(c.inp(a), 0.7))


for _name, _f in COMPARE:
    compare_case(_name, _f)


@case("where_cond")
def where_cond(c):
    mask = c.inp(torch.rand(4, 6) > 0.5)
    a = c.inp(c.randn(4, 6))
    b = c.inp(c.randn(6))
    c.out(torch.where(mask.bool(), a, b))


# ---- reductions --------------------------------------------------------------------------


def reduction_input(c):
    """`[5, 40]`: rows long enough that accumulating in the low dtype would show; a tie for
    the arg reductions."""
    x = c.randn(5, 40, std=2.0, mean=0.3)
    x[1, 7] = x[1].max()  # ties: argmax takes the first
    x[2, 9] = x[2].min()
    return x


@case("reduce/sum")
def reduce_sum(c):
    x = c.inp(reduction_input(c))
    c.out(x.sum(1), wide(x).abs().sum(1))


@case("reduce/prod")
def reduce_prod(c):
    x = c.inp(c.randn(4, 9, std=0.5, mean=1.0))
    c.out(x.prod(1), wide(x).abs().prod(1))


@case("reduce/max")
def reduce_max(c):
    x = c.inp(reduction_input(c))
    c.out(x.amax(1))


@case("reduce/min")
def reduce_min(c):
    x = c.inp(reduction_input(c))
    c.out(x.amin(1))


@case("reduce/argmax")
def reduce_argmax(c):
    x = c.inp(reduction_input(c))
    c.out(x.argmax(1))


@case("reduce/argmin")
def reduce_argmin(c):
    x = c.inp(reduction_input(c))
    c.out(x.argmin(1))


@case("reduce/sum_all")
def reduce_sum_all(c):
    x = c.inp(reduction_input(c))
    c.out(x.sum(), wide(x).abs().sum())


@case("reduce/mean")
def reduce_mean(c):
    x = c.inp(reduction_input(c))
    c.out(x.mean(0), wide(x).abs().mean(0))


@case("reduce/var")
def reduce_var(c):
    x = c.inp(reduction_input(c))
    w = wide(x)
    c.out(x.var(1), (w * w).sum(1) / 39)


@case("reduce/std")
def reduce_std(c):
    x = c.inp(reduction_input(c))
    w = wide(x)
    c.out(x.std(1, correction=0), ((w * w).mean(1)).sqrt())


@case("reduce/logsumexp")
def reduce_logsumexp(c):
    x = c.inp(reduction_input(c))
    w = wide(x)
    c.out(torch.logsumexp(x, 1), w.logsumexp(1).abs() + w.abs().amax(1))


@case("softmax")
def softmax(c):
    x = c.inp(c.randn(4, 10, std=3.0))
    c.out(torch.softmax(x, 1))


@case("log_softmax")
def log_softmax(c):
    x = c.inp(c.randn(4, 10, std=3.0))
    w = wide(x)
    c.out(torch.log_softmax(x, 1), w.abs() + w.logsumexp(1, keepdim=True).abs())


# ---- products, convolutions, pooling ------------------------------------------------------


@case("matmul/2d")
def matmul_2d(c):
    a = c.inp(c.randn(7, 33))
    b = c.inp(c.randn(33, 5))
    c.out(a @ b, wide(a).abs() @ wide(b).abs())


@case("matmul/batched")
def matmul_batched(c):
    a = c.inp(c.randn(3, 4, 16))
    b = c.inp(c.randn(3, 16, 5))
    c.out(a @ b, wide(a).abs() @ wide(b).abs())


@case("conv2d")
def conv2d(c):
    x = c.inp(c.randn(2, 3, 7, 7))
    w = c.inp(c.randn(4, 3, 3, 3, std=0.5))
    b = c.inp(c.randn(4))
    y = F.conv2d(x, w, b, stride=2, padding=1)
    c.out(y, F.conv2d(wide(x).abs(), wide(w).abs(), wide(b).abs(), stride=2, padding=1))


@case("conv_transpose2d")
def conv_transpose2d(c):
    x = c.inp(c.randn(2, 3, 4, 4))
    w = c.inp(c.randn(3, 2, 3, 3, std=0.5))
    b = c.inp(c.randn(2))
    y = F.conv_transpose2d(x, w, b, stride=2, padding=1)
    s = F.conv_transpose2d(wide(x).abs(), wide(w).abs(), wide(b).abs(), stride=2, padding=1)
    c.out(y, s)


@case("max_pool2d")
def max_pool2d(c):
    x = c.inp(c.randn(2, 3, 7, 7))
    c.out(F.max_pool2d(x, 3, stride=2, padding=1))


@case("avg_pool2d")
def avg_pool2d(c):
    x = c.inp(c.randn(2, 3, 6, 6))
    c.out(F.avg_pool2d(x, 2), F.avg_pool2d(wide(x).abs(), 2))


@case("adaptive_avg_pool2d")
def adaptive_avg_pool2d(c):
    x = c.inp(c.randn(2, 3, 7, 5))
    c.out(F.adaptive_avg_pool2d(x, (3, 2)), F.adaptive_avg_pool2d(wide(x).abs(), (3, 2)))


@case("adaptive_max_pool2d")
def adaptive_max_pool2d(c):
    x = c.inp(c.randn(2, 3, 7, 5))
    c.out(F.adaptive_max_pool2d(x, (3, 2)))


# ---- norms, attention, LSTM ---------------------------------------------------------------


def norm_scale(x, dims, w=None, b=None):
    """`(|x| + |mean|) / sqrt(var + eps) * |w| + |b|` in float64: the size of the terms of
    `x * alpha + beta` (`alpha = w / sigma`, `beta = b - mean * alpha`), the form PyTorch's
    low-precision batch norm evaluates with `alpha` and `beta` rounded to the low dtype."""
    x = wide(x)
    mean = x.mean(dims, keepdim=True)
    y = (x.abs() + mean.abs()) / (x.var(dims, unbiased=False, keepdim=True) + 1e-5).sqrt()
    if w is not None:
        y = y * wide(w).abs() + wide(b).abs()
    return y


@case("channel_norm")
def channel_norm(c):
    """Batch norm's training forward (ember's `channel_norm` with weight and bias)."""
    x = c.inp(c.randn(4, 3, 5, std=2.0, mean=1.0))
    w = c.inp(c.randn(3))
    b = c.inp(c.randn(3))
    y = F.batch_norm(x, None, None, w, b, training=True, eps=1e-5)
    c.out(y, norm_scale(x, (0, 2), w.view(1, 3, 1), b.view(1, 3, 1)))


@case("layer_norm")
def layer_norm(c):
    """Layer norm over the last dimension without affine: ember's `channel_norm` of `x`
    read as `[1, rows, features]`."""
    x = c.inp(c.randn(6, 16, std=2.0, mean=1.0))
    c.out(F.layer_norm(x, (16,), eps=1e-5), norm_scale(x, (1,)))


@case("group_norm")
def group_norm(c):
    """Group norm of [2, 4, 3] in 2 groups without affine: `channel_norm` of `[1, 4, 6]`."""
    x = c.inp(c.randn(2, 4, 3, std=2.0, mean=1.0))
    y = F.group_norm(x, 2, eps=1e-5)
    c.out(y, norm_scale(x.reshape(2, 2, 6), (2,)).reshape(2, 4, 3))


def attention_scale(q, k, v, mask=None, causal=False):
    """softmax(q k^T / sqrt(E)) |v| in float64: the size of the weighted sum."""
    q, k, v = wide(q), wide(k), wide(v)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -INF)
    if mask is not None:
        s = s.masked_fill(~mask, -INF)
    return torch.softmax(s, -1) @ v.abs()


@case("attention")
def attention(c):
    q = c.inp(c.randn(2, 3, 5, 8))
    k = c.inp(c.randn(2, 3, 6, 8))
    v = c.inp(c.randn(2, 3, 6, 8))
    c.out(F.scaled_dot_product_attention(q, k, v), attention_scale(q, k, v))


@case("attention/causal")
def attention_causal(c):
    q = c.inp(c.randn(2, 6, 8))
    k = c.inp(c.randn(2, 6, 8))
    v = c.inp(c.randn(2, 6, 8))
    c.out(F.scaled_dot_product_attention(q, k, v, is_causal=True), attention_scale(q, k, v, causal=True))


@case("attention/mask")
def attention_mask(c):
    q = c.inp(c.randn(2, 5, 8))
    k = c.inp(c.randn(2, 6, 8))
    v = c.inp(c.randn(2, 6, 8))
    mask = torch.rand(5, 6) > 0.3
    mask[:, 0] = True
    c.inp(mask)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    c.out(y, attention_scale(q, k, v, mask=mask))


LSTM_B, LSTM_H, LSTM_T = 3, 4, 5


@case("lstm_cell")
def lstm_cell(c):
    """One LSTM step from its gate pre-activations. ember's kernel takes the recurrent
    product `a = h @ w_hh^T` and the input projection `gi` already computed; PyTorch's
    `lstm_cell` with `w_ih` the identity computes `gi @ I + h @ w_hh^T` (the first product is
    exact) and returns `(h', c')`, ember's slots 5 and 4."""
    gi = c.inp(c.randn(LSTM_B, 4 * LSTM_H))
    h = c.randn(LSTM_B, LSTM_H)
    w_hh = c.randn(4 * LSTM_H, LSTM_H, std=0.5)
    a = c.inp(h @ w_hh.T)
    cs = c.inp(c.randn(LSTM_B, LSTM_H))
    eye = torch.eye(4 * LSTM_H, dtype=c.dt)
    h1, c1 = torch.lstm_cell(gi, (h, cs), eye, w_hh)
    c.out(c1)
    c.out(h1)


@case("lstm_sequence")
def lstm_sequence(c):
    """One LSTM direction over `T` steps from the input projection `gi` (`[T, B, 4H]`), the
    recurrent weight and the initial state; PyTorch's `lstm` with `w_ih` the identity and no
    biases. Outputs: every step's hidden state `[T, B, H]` and the last cell state."""
    gi = c.inp(c.randn(LSTM_T, LSTM_B, 4 * LSTM_H))
    w_hh = c.inp(c.randn(4 * LSTM_H, LSTM_H, std=0.5))
    h0 = c.inp(c.randn(LSTM_B, LSTM_H))
    c0 = c.inp(c.randn(LSTM_B, LSTM_H))
    eye = torch.eye(4 * LSTM_H, dtype=c.dt)
    out, _, cn = torch._VF.lstm(gi, (h0[None], c0[None]), [eye, w_hh], False, 1, 0.0, False, False, False)
    c.out(out)
    c.out(cn[0])


# ---- indexing, masking, joins -------------------------------------------------------------


@case("index_select")
def index_select(c):
    x = c.inp(c.randn(5, 4))
    i = c.inp(torch.tensor([4, 0, 2, 2]))
    c.out(x.index_select(0, i))


@case("gather")
def gather(c):
    x = c.inp(c.randn(4, 5))
    i = c.inp(torch.randint(0, 5, (4, 3)))
    c.out(x.gather(1, i))


@case("scatter_add")
def scatter_add(c):
    """Repeated indices, so that several terms add into one element (in float32 on both
    sides: the tolerance scales with the sum of their magnitudes)."""
    x = c.inp(c.randn(3, 5))
    i = c.inp(torch.randint(0, 5, (3, 12)))
    src = c.inp(c.randn(3, 12))
    y = x.scatter_add(1, i, src)
    c.out(y, wide(x).abs().scatter_add(1, i, wide(src).abs()))


@case("masked_fill")
def masked_fill(c):
    x = c.inp(c.randn(4, 5))
    m = c.inp(torch.rand(4, 5) > 0.5)
    c.out(x.masked_fill(m, 0.7))


@case("cat")
def cat(c):
    a = c.inp(c.randn(2, 3))
    b = c.inp(c.randn(4, 3))
    c.out(torch.cat([a, b], 0))


# ---- casts --------------------------------------------------------------------------------


def ties_and_edges(dname):
    """float64 values that test the rounding to `dname`: exact values, ties between two
    neighbours (to even), values a hair above a tie that float32 rounds onto it (a double
    rounding when a float64 converts through float32), the largest finite value, overflow
    to inf, subnormals, underflow to zero, -0, the infinities and NaN."""
    if dname == "bf16":
        p, maxv, over, tiny = 8, 3.3895313892515355e38, 3.3961775292304e38, 9.183549615799121e-41
    else:
        p, maxv, over, tiny = 11, 65504.0, 65520.0, 5.960464477539063e-08
    u = 2.0**-p  # half an ulp of 1
    return [
        1.0, -1.0, 0.1, 1.0 / 3.0, 3.0,
        1 + u, 1 + 3 * u, -(1 + u), -(1 + 3 * u),  # ties: to even
        1 + u + 2.0**-40, 1 + 3 * u + 2.0**-40,  # above a tie, rounded onto it by float32
        1 + u - 2.0**-40,
        maxv, -maxv, over, -over, maxv * 1.0001,
        tiny, tiny * 0.5, tiny * 0.75, tiny * 0.25, 1e-50,
        0.0, -0.0, INF, -INF, NAN,
    ]


def cast_inputs(src, dst, dname_low):
    """The inputs of a cast from `src` to `dst`: the rounding cases of the low dtype among
    them for float sources; integers in range (ember's float to integer casts saturate
    where C++'s are undefined, so out-of-range and NaN values are left out)."""
    st = ALL[src]
    if st in (torch.int64,):
        # Integers near 2^24 + 2^16 round twice (to float32, then to bf16), as in PyTorch.
        vals = [0, 1, -1, 255, 256, 257, 2049, 65504, 65519, 65520, 100000, 2**24 + 1, 2**24 + 2**16 + 1, -(2**24 + 2**16 + 1), 2**40 + 2**32 + 1, 2**62]
        return torch.tensor(vals, dtype=torch.int64)
    if st == torch.uint8:
        return torch.arange(0, 256, dtype=torch.int64).to(torch.uint8)
    if st in (torch.float64, torch.float32):
        return torch.tensor(ties_and_edges(dname_low), dtype=torch.float64).to(st)
    # A low-precision source: every rounding case of the other low dtype, plus values for
    # integer destinations (truncation toward zero, in range).
    if ALL[dst] in (torch.int64, torch.uint8):
        vals = [0.0, 0.5, 1.0, 1.5, 2.75, 100.25, 255.0, 3.0, 0.9375]
        if ALL[dst] == torch.int64:
            vals += [-0.5, -1.5, -2.75, -100.25, 4096.0, -65504.0, 65504.0, 30000.0]
        return torch.tensor(vals, dtype=torch.float64).to(st)
    other = "f16" if src == "bf16" else "bf16"
    return torch.tensor(ties_and_edges(other) + ties_and_edges(src), dtype=torch.float64).to(st)


def cast_case(src, dst):
    low = src if src in LOW else dst

    @case(f"cast/{src}->{dst}", dtypes=(low,))
    def run(c):
        x = cast_inputs(src, dst, low)
        if ALL[dst] in (torch.int64, torch.uint8) and x.dtype.is_floating_point:
            lo, hi = (0.0, 255.0) if ALL[dst] == torch.uint8 else (-(2.0**62), 2.0**62)
            w = wide(x)
            assert bool(((w >= lo) & (w <= hi)).all()), f"cast/{src}->{dst}: an input out of range"
        c.inp(x)
        c.out(x.to(ALL[dst]))


for _src in ALL:
    for _dst in ALL:
        if _src != _dst and (_src in LOW or _dst in LOW):
            cast_case(_src, _dst)


# ---- printing ------------------------------------------------------------------------------


@case("print/fixed")
def print_fixed(c):
    """The printed digits are those of the stored value: 0.1 is 0.1001 in bf16 (four
    decimals) and 0.0999 in f16, which next to 100 switches to scientific notation."""
    x = c.inp(c.low([0.1, 1.0 / 3.0, 2.5, -1.75, 100.0, 0.0]))
    c.text(repr(x))


@case("print/scientific")
def print_scientific(c):
    x = c.inp(c.low([1e-3, 3.0, -2.5e3, 1.0 / 7.0]))
    c.text(repr(x))


@case("print/integral")
def print_integral(c):
    x = c.inp(c.low([1.0, -2.0, 300.0, 0.0]))
    c.text(repr(x))


def main():
    lines = [f"torch\t{torch.__version__}\n"]
    torch.set_num_threads(1)
    for name, dtypes, f in CASES:
        for dname in dtypes:
            c = Case(name, dname)
            f(c)
            assert any(line.split("\t")[2] in ("out", "text") for line in c.lines), f"{name}: no result"
            lines.extend(c.lines)
    with open(OUT, "w") as f:
        f.writelines(lines)
    print(f"wrote {len(CASES)} cases, {len(lines)} lines, to {OUT}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""ONNX parity of every ember layer, both ways (crates/onnx/tests/onnx_layers.rs).

Import. A small PyTorch twin of every layer ember has (fixed seeds, evaluation mode) is
exported by both of PyTorch's exporters:

- `<layer>.ts17.onnx`: the TorchScript-based exporter (`dynamo=False`), opset 17, constant
  folding on, dimension 0 of the first input and of the outputs dynamic (`batch`);
- `<layer>.dynamo17.onnx`: the dynamo exporter (`dynamo=True`), opset 17 (its graphs are
  written at opset 18 and converted down), static shapes;
- `<layer>.dynamo.onnx`: the dynamo exporter at its default opset (20 in PyTorch 2.15).

`<layer>.safetensors` holds the inputs (`input.0`, `input.1`, ...) and PyTorch's outputs
(`output.0`, ...). An exporter that fails on a twin is listed in `manifest.json` with its
error instead of a file (the Rust test checks that the manifest and the directory agree).
The Rust test runs every file and matches every output to 1e-5.

Handmade graphs. `<graph>.helper.onnx` are single operators (or short chains) built with
`onnx.helper` for what ONNX allows beyond PyTorch's use of them (`sequence_lens`, GRU's
`linear_before_reset = 0`, `layout = 1`, exclusive reverse `CumSum`, negative `Slice`
steps, ...; ONNX Runtime has no `layout = 1`); ONNX Runtime computes their expected outputs.

Export. `check-ember` lets ember write its own export of every layer
(`EMBER_ONNX_LAYERS_OUT=<dir> cargo test -p ember-onnx --test onnx_layers`), runs each file
through `onnx.checker` (full check) and ONNX Runtime on ember's inputs, compares with
ember's outputs (to 1e-5) and records the outcome in `ember_exports.json`, which the Rust
test reads (the operator list of each file must still be the one checked).

Regenerate (from the repository root; CI never runs this):

    /work/venv-torch/bin/python tools/parity/onnx_layers.py import      # twins, then handmade
    /work/venv-torch/bin/python tools/parity/onnx_layers.py handmade    # handmade graphs only
    /work/venv-torch/bin/python tools/parity/onnx_layers.py check-ember
"""

import json
import os
import subprocess
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
# tools/parity holds an onnx.py: without this, `import onnx` would import it.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

OUT = os.path.join(HERE, "fixtures", "onnx_layers")
ROOT = os.path.dirname(os.path.dirname(HERE))
TOLERANCE = 1e-5


class Call(nn.Module):
    """A module around a function of the inputs (for functional ops and tuple outputs)."""

    def __init__(self, f, **children):
        super().__init__()
        self.f = f
        for k, v in children.items():
            setattr(self, k, v)

    def forward(self, *xs):
        return self.f(self, *xs)


def flat(out):
    """The outputs as a flat tuple (an LSTM returns `(y, (h, c))`)."""
    if isinstance(out, torch.Tensor):
        return (out,)
    result = ()
    for o in out:
        result += flat(o)
    return result


class Flat(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, *xs):
        return flat(self.m(*xs))


def randomise_stats(m):
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):
                mod.running_mean.copy_(torch.randn_like(mod.running_mean) * 0.1)
                mod.running_var.copy_(torch.rand_like(mod.running_var) + 0.5)
            for name in ("weight", "bias"):
                p = getattr(mod, name, None)
                if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d, nn.GroupNorm, nn.InstanceNorm2d, nn.LayerNorm, nn.RMSNorm)) and isinstance(p, torch.Tensor):
                    p.copy_(torch.randn_like(p) * 0.2 + (1.0 if name == "weight" else 0.0))
    return m


def rnn_with_state(kind, bidirectional, layers):
    """A recurrent layer run from given initial states; returns every output and state."""
    m = getattr(nn, kind)(4, 5, num_layers=layers, bidirectional=bidirectional, batch_first=True)
    d = (2 if bidirectional else 1) * layers
    if kind == "LSTM":
        return Call(lambda s, x, h, c: flat(s.m(x, (h, c))), m=m), [(2, 3, 4), (d, 2, 5), (d, 2, 5)]
    return Call(lambda s, x, h: flat(s.m(x, h)), m=m), [(2, 3, 4), (d, 2, 5)]


def rotary(s, x):
    """Rotary position embedding as LLaMA writes it: `Range`, `Sin`, `Cos`, halves."""
    t = torch.arange(x.shape[1], dtype=torch.float32)
    freqs = torch.outer(t, s.inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * emb.cos() + rotated * emb.sin()


def causal_scores(s, x):
    """Masked attention scores as GPT-2 writes them: `Trilu`, `Less`/`Where`, softmax."""
    n = x.shape[1]
    scores = torch.einsum("bid,bjd->bij", x, x)
    mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def misc_elementwise(s, x):
    a = F.hardsigmoid(x) + F.softplus(x) + torch.clamp(x, -0.5, 0.5)
    b = torch.minimum(x, a) * torch.maximum(x, -a)
    c = torch.where((x > 0.1) & (x < 0.8), x, -x)
    return F.pad(a + b + c, (1, 2), value=0.25)


def cumsum_norm(s, x):
    return F.normalize(torch.cumsum(x, dim=1), dim=-1)


def scatter(s, x):
    y = x.clone()
    y[:, 1] = x[:, 0] * 2.0
    return y


def layers():
    """`(name, module, input shapes, dtype of the first input)` for every twin."""
    f32 = torch.float32
    seq = (2, 3, 4)
    yield "linear", nn.Linear(6, 4), [(2, 6)], f32
    yield "linear_3d", nn.Linear(6, 4, bias=False), [(2, 3, 6)], f32
    yield "conv1d", nn.Conv1d(3, 4, 3, padding=1), [(2, 3, 8)], f32
    yield "conv2d", nn.Conv2d(3, 4, 3, stride=2, padding=1), [(2, 3, 8, 8)], f32
    yield "conv2d_grouped", nn.Conv2d(4, 4, 3, groups=2, dilation=2, padding=2), [(2, 4, 7, 7)], f32
    yield "conv_transpose1d", nn.ConvTranspose1d(3, 2, 3, stride=2), [(2, 3, 5)], f32
    yield "conv_transpose2d", nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1), [(2, 3, 4, 4)], f32
    yield "max_pool1d", nn.MaxPool1d(2), [(2, 3, 8)], f32
    yield "max_pool2d", nn.MaxPool2d(3, stride=2, padding=1), [(2, 3, 7, 7)], f32
    yield "avg_pool1d", nn.AvgPool1d(2), [(2, 3, 8)], f32
    yield "avg_pool2d", nn.AvgPool2d(2), [(2, 3, 6, 6)], f32
    yield "adaptive_avg_pool2d", nn.AdaptiveAvgPool2d(1), [(2, 3, 5, 5)], f32
    yield "batch_norm1d", randomise_stats(nn.BatchNorm1d(4)), [(2, 4, 5)], f32
    yield "batch_norm2d", randomise_stats(nn.BatchNorm2d(4)), [(2, 4, 5, 5)], f32
    yield "layer_norm", randomise_stats(nn.LayerNorm(6)), [(2, 3, 6)], f32
    yield "group_norm", randomise_stats(nn.GroupNorm(2, 4)), [(2, 4, 5, 5)], f32
    yield "instance_norm2d", randomise_stats(nn.InstanceNorm2d(4, affine=True)), [(2, 4, 5, 5)], f32
    yield "rms_norm", randomise_stats(nn.RMSNorm(6, eps=1e-6)), [(2, 3, 6)], f32
    yield "embedding", nn.Embedding(10, 4), [(2, 5)], torch.int64
    for kind in ("RNN", "LSTM", "GRU"):
        yield kind.lower(), Flat(getattr(nn, kind)(4, 5, batch_first=True)), [seq], f32
        m, shapes = rnn_with_state(kind, True, 2)
        yield f"{kind.lower()}_bidirectional_2layer", m, shapes, f32
    yield "lstm_seq_first", Flat(nn.LSTM(4, 5)), [(3, 2, 4)], f32
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    yield "multihead_attention", Call(lambda s, x: s.m(x, x, x, need_weights=False)[0], m=mha), [(2, 3, 8)], f32
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    yield "multihead_attention_weights", Flat(mha), [(2, 3, 8), (2, 4, 8), (2, 4, 8)], f32
    yield (
        "transformer_encoder_layer",
        nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
        [(2, 3, 8)],
        f32,
    )
    yield (
        "transformer_decoder_layer",
        nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True, activation="gelu"),
        [(2, 3, 8), (2, 4, 8)],
        f32,
    )
    yield "upsample_nearest", nn.Upsample(scale_factor=2, mode="nearest"), [(2, 3, 4, 4)], f32
    yield "upsample_bilinear", nn.Upsample(scale_factor=2, mode="bilinear"), [(2, 3, 4, 4)], f32
    yield "upsample_linear_1d", nn.Upsample(size=7, mode="linear", align_corners=True), [(2, 3, 4)], f32
    for act in ("ReLU", "GELU", "SiLU", "Sigmoid", "Tanh", "LeakyReLU"):
        yield act.lower(), getattr(nn, act)(), [(2, 5)], f32
    yield "gelu_tanh", nn.GELU(approximate="tanh"), [(2, 5)], f32
    yield "softmax", nn.Softmax(dim=-1), [(2, 3, 5)], f32
    yield "log_softmax", nn.LogSoftmax(dim=1), [(2, 5)], f32
    yield "flatten", nn.Flatten(), [(2, 3, 2, 2)], f32
    yield "unflatten", nn.Unflatten(1, (2, 3)), [(2, 6)], f32
    yield "dropout", nn.Sequential(nn.Dropout(0.3), nn.Linear(5, 3)), [(2, 5)], f32
    norm_stack = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.GroupNorm(2, 4),
        nn.ReLU(),
        nn.Upsample(scale_factor=2, mode="nearest"),
        nn.ConvTranspose2d(4, 2, 2, stride=2),
    )
    yield "conv_groupnorm_upsample", randomise_stats(norm_stack), [(1, 3, 4, 4)], f32
    inv = 1.0 / (10000 ** (torch.arange(0, 4, 2, dtype=torch.float32) / 4))
    rot = Call(rotary)
    rot.register_buffer("inv_freq", inv)
    yield "rotary", rot, [(2, 5, 4)], f32
    yield "causal_scores", Call(causal_scores), [(2, 4, 3)], f32
    yield "elementwise_misc", Call(misc_elementwise), [(2, 5)], f32
    yield "cumsum_normalize", Call(cumsum_norm), [(2, 4, 3)], f32
    yield "scatter", Call(scatter), [(2, 3, 4)], f32


def handmade():
    """`(name, opset, nodes, inputs, constants)` for graphs no PyTorch exporter writes but
    ONNX allows: what the importer supports of each operator beyond PyTorch's use (ONNX
    Runtime computes the expected outputs)."""
    from onnx import helper

    def lens(*v):
        return np.array(v, dtype=np.int32)

    rnn_in = {"x": (3, 2, 3)}
    yield (
        "lstm_lengths_reverse",
        17,
        [helper.make_node("LSTM", ["x", "w", "r", "b", "lens", "h0", "c0"], ["y", "yh", "yc"], direction="bidirectional", hidden_size=2)],
        dict(rnn_in, w=(2, 8, 3), r=(2, 8, 2), b=(2, 16), h0=(2, 2, 2), c0=(2, 2, 2)),
        {"lens": lens(3, 1)},
    )
    yield (
        "gru_reset_before_linear",
        17,
        [helper.make_node("GRU", ["x", "w", "r", "b"], ["y", "yh"], hidden_size=2, linear_before_reset=0)],
        {"x": (3, 2, 3), "w": (1, 6, 3), "r": (1, 6, 2), "b": (1, 12)},
        {},
    )
    yield (
        "rnn_relu_reverse_lengths",
        17,
        [helper.make_node("RNN", ["x", "w", "r", "", "lens"], ["y", "yh"], hidden_size=2, activations=["Relu"], direction="reverse")],
        dict(rnn_in, w=(1, 2, 3), r=(1, 2, 2)),
        {"lens": lens(2, 3)},
    )
    yield (
        "cumsum_exclusive_reverse",
        17,
        [helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=1, reverse=1)],
        {"x": (2, 4)},
        {"axis": np.array(1, dtype=np.int64)},
    )
    yield (
        "einsum_implicit_ellipsis",
        17,
        [helper.make_node("Einsum", ["a", "b"], ["y"], equation="...ij,...jk")],
        {"a": (2, 2, 3), "b": (2, 3, 4)},
        {},
    )
    yield (
        "pad_axes_crop",
        18,
        [helper.make_node("Pad", ["x", "pads", "v", "axes"], ["y"])],
        {"x": (2, 3, 4)},
        {"pads": np.array([2, -1, 1, 0], dtype=np.int64), "v": np.array(0.5, dtype=np.float32), "axes": np.array([0, 2], dtype=np.int64)},
    )
    yield (
        "split_num_outputs_uneven",
        18,
        [helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)],
        {"x": (2, 7)},
        {},
    )
    yield (
        "trilu_lower_diagonal",
        17,
        [helper.make_node("Trilu", ["x", "k"], ["y"], upper=0)],
        {"x": (2, 3, 4)},
        {"k": np.array(1, dtype=np.int64)},
    )
    yield (
        "slice_negative_steps",
        17,
        [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
        {"x": (3, 6)},
        {
            "st": np.array([-1, 4], dtype=np.int64),
            "en": np.array([-10, 0], dtype=np.int64),
            "ax": np.array([0, 1], dtype=np.int64),
            "sp": np.array([-1, -2], dtype=np.int64),
        },
    )
    yield (
        "scatter_gather_nd",
        17,
        [
            helper.make_node("ScatterND", ["x", "i", "u"], ["s"]),
            helper.make_node("GatherND", ["s", "j"], ["y"]),
        ],
        {"x": (3, 2, 2), "u": (2, 2, 2)},
        {"i": np.array([[2], [0]], dtype=np.int64), "j": np.array([[0, 1], [2, 0], [1, 1]], dtype=np.int64)},
    )
    yield (
        "range_float_hardsigmoid",
        20,
        [
            helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
            helper.make_node("Mul", ["x", "r"], ["m"]),
            helper.make_node("HardSigmoid", ["m"], ["h"], alpha=0.3, beta=0.4),
            helper.make_node("Gelu", ["h"], ["y"], approximate="tanh"),
        ],
        {"x": (2, 5)},
        {"start": np.array(-1.0, dtype=np.float32), "limit": np.array(1.4, dtype=np.float32), "delta": np.array(0.5, dtype=np.float32)},
    )


def make_handmade(only=None):
    """Writes `<name>.helper.onnx` and `<name>.safetensors` for every handmade graph."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    path = os.path.join(OUT, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    rng = np.random.default_rng(5)
    for name, opset, nodes, inputs, constants in handmade():
        if only and name not in only:
            continue
        graph_inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v)) for k, v in inputs.items()]
        produced = {o for n in nodes for o in n.output}
        consumed = {i for n in nodes for i in n.input}
        outputs = [o for n in nodes for o in n.output if o and o not in consumed]
        graph_outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
        inits = [numpy_helper.from_array(v, k) for k, v in constants.items()]
        graph = helper.make_graph(nodes, name, graph_inputs, graph_outputs, inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
        # Shapes of the outputs are left to inference (the checker wants them declared, so
        # ONNX Runtime, which infers them, is the check).
        file = os.path.join(OUT, f"{name}.helper.onnx")
        onnx.save(model, file)
        xs = {k: (rng.standard_normal(v) * 0.5).astype(np.float32) for k, v in inputs.items()}
        session = ort.InferenceSession(file, providers=["CPUExecutionProvider"])
        ys = session.run(outputs, xs)
        tensors = {f"input.{i}": torch.from_numpy(x) for i, x in enumerate(xs.values())}
        tensors.update({f"output.{i}": torch.from_numpy(np.ascontiguousarray(y)) for i, y in enumerate(ys)})
        save_file(tensors, os.path.join(OUT, f"{name}.safetensors"))
        assert produced >= set(outputs)
        manifest[name] = {"helper": {"ops": sorted({n.op_type for n in nodes}), "opset": opset}}
        print(name, manifest[name], flush=True)
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


EXPORTERS = {
    "ts17": dict(dynamo=False, opset_version=17, do_constant_folding=True),
    "dynamo17": dict(dynamo=True, opset_version=17),
    "dynamo": dict(dynamo=True),
}


def make_inputs(shapes, dtype):
    xs = []
    for i, shape in enumerate(shapes):
        if i == 0 and dtype == torch.int64:
            xs.append(torch.randint(0, 10, shape))
        else:
            xs.append(torch.randn(shape))
    return xs


def export_one(name, kind, model, xs, n_out):
    path = os.path.join(OUT, f"{name}.{kind}.onnx")
    inputs = [f"input_{i}" for i in range(len(xs))]
    outputs = [f"output_{i}" for i in range(n_out)]
    options = dict(EXPORTERS[kind])
    if kind == "ts17":
        axes = {i: {0: "batch"} for i in inputs}
        axes.update({o: {0: "batch"} for o in outputs})
        # Recurrent states are not batch-first.
        if name.endswith("2layer") or name == "lstm_seq_first":
            axes = None
        options["dynamic_axes"] = axes
    else:
        options["external_data"] = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(xs), path, input_names=inputs, output_names=outputs, **options)
    graph = onnx.load(path)
    onnx.checker.check_model(graph)
    return sorted({n.op_type for n in graph.graph.node})


def import_fixtures(only=None):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "manifest.json")
    manifest = {}
    if only and os.path.exists(path):
        with open(path) as f:
            manifest = json.load(f)
    # Every twin is built first, from one seed, so that a partial run builds the same ones.
    torch.manual_seed(0)
    for index, (name, model, shapes, dtype) in enumerate(list(layers())):
        if only and name not in only:
            continue
        torch.manual_seed(1000 + index)
        for p in model.parameters():
            # Re-drawn from the seed so that each twin is independent of the others' order.
            with torch.no_grad():
                p.copy_(torch.randn_like(p) * 0.5 if p.dim() > 1 else p + 0.1 * torch.randn_like(p))
        model.eval()
        xs = make_inputs(shapes, dtype)
        with torch.no_grad():
            ys = flat(model(*xs))
        tensors = {f"input.{i}": x.clone().contiguous() for i, x in enumerate(xs)}
        tensors.update({f"output.{i}": y.clone().contiguous() for i, y in enumerate(ys)})
        save_file(tensors, os.path.join(OUT, f"{name}.safetensors"))
        entry = {}
        for kind in EXPORTERS:
            try:
                entry[kind] = {"ops": export_one(name, kind, model, xs, len(ys))}
            except Exception as e:  # noqa: BLE001 - an exporter's failure is recorded
                path = os.path.join(OUT, f"{name}.{kind}.onnx")
                if os.path.exists(path):
                    os.remove(path)
                entry[kind] = {"export_error": str(e).splitlines()[0][:300]}
            print(name, kind, entry[kind], flush=True)
        for kind, e in entry.items():
            # A failed export can leave a partial file behind, even after the error.
            stale = os.path.join(OUT, f"{name}.{kind}.onnx")
            if "export_error" in e and os.path.exists(stale):
                os.remove(stale)
        manifest[name] = entry
        with open(path, "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.write("\n")
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"{OUT}: {total} bytes")


def check_ember(folder=None):
    import onnxruntime as ort

    if folder is None:
        folder = tempfile.mkdtemp(prefix="ember_onnx_layers_")
        env = dict(os.environ, EMBER_ONNX_LAYERS_OUT=folder)
        cmd = ["cargo", "test", "-p", "ember-onnx", "--test", "onnx_layers", "--", "write_ember_exports"]
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)
    results = {}
    worst = 0.0
    for file in sorted(os.listdir(folder)):
        if not file.endswith(".onnx"):
            continue
        name = file[: -len(".onnx")]
        path = os.path.join(folder, file)
        model = onnx.load(path)
        onnx.checker.check_model(model, full_check=True)
        tensors = load_file(os.path.join(folder, f"{name}.safetensors"))
        xs = [tensors[f"input.{i}"] for i in range(len(model.graph.input))]
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = session.run(None, {i.name: x for i, x in zip(session.get_inputs(), xs)})
        diff = 0.0
        for i, g in enumerate(got):
            want = tensors[f"output.{i}"]
            assert g.shape == want.shape, f"{name} output {i}: {g.shape} vs {want.shape}"
            diff = max(diff, float(np.max(np.abs(g.astype(np.float64) - want.astype(np.float64)))))
        worst = max(worst, diff)
        results[name] = {
            "max_abs_diff": diff,
            "ok": diff <= TOLERANCE,
            "ops": [n.op_type for n in model.graph.node],
        }
        print(f"{name}: {diff:.3g}", flush=True)
    out = {
        "onnxruntime": ort.__version__,
        "onnx": onnx.__version__,
        "tolerance": TOLERANCE,
        "layers": results,
    }
    with open(os.path.join(OUT, "ember_exports.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"worst {worst:.3g} over {len(results)} layers")
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "import"
    if command == "import":
        import_fixtures(set(sys.argv[2:]) or None)
        make_handmade(set(sys.argv[2:]) or None)
    elif command == "handmade":
        make_handmade(set(sys.argv[2:]) or None)
    elif command == "check-ember":
        sys.exit(check_ember(sys.argv[2] if len(sys.argv) > 2 else None))
    else:
        sys.exit(f"unknown command {command} (import or check-ember)")

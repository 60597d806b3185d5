#!/usr/bin/env python3
"""ONNX round trip of the pretrained architectures (crates/onnx/tests/models_roundtrip.rs).

Every model is one of the tiny random checkpoints of `tools/parity/fixtures/models/`
(made by `tools/parity/models.py`), run on that fixture's own inputs, logits out, no KV
cache, fixed shapes:

- `gpt2`: `gpt2/tied` (`GPT2LMHeadModel`, tied head, `gelu_new`), ids [2, 10];
- `llama_gqa2_linear`: LLaMA with 4 heads on 2 kv heads, linear rope scaling, tied, ids [1, 7];
- `bert`: `bert/cls` (`BertForSequenceClassification`, 5 heads, `gelu_new`), ids [3, 7]
  (no attention mask, token types 0);
- `vit`: `vit/cls` (`ViTForImageClassification`), pixels [2, 3, 16, 16];
- `resnet`: `resnet/resnet18_w4.pth` (torchvision's layout, base width 4), images [2, 3, 32, 32].

ember's own export (`check-ember`) also covers `llama_gqa4_llama3` (8 heads on 2 kv heads,
llama3 rope scaling); its PyTorch twin's files are left out to keep the fixtures small.

Import (`import`). The transformers / torchvision-layout twin of each model is exported by
both of PyTorch's exporters into `fixtures/onnx_models/`:

- `<model>.ts17.onnx`: the TorchScript-based exporter (`dynamo=False`), opset 17;
- `<model>.dynamo.onnx`: the dynamo exporter (`dynamo=True`) at its default opset.

Decoders (GPT-2, LLaMA) are given an attention mask of ones beside their ids: without
one, transformers 5.24 looks for packed sequences with `torch.diff`, which the TorchScript
exporter refuses (`aten::diff`); the manifest records that under `ts17_ids_only`. Node
metadata (the dynamo exporter's Python stacks) is stripped to keep the files small.

`<model>.safetensors` holds the input (`input.0`) and PyTorch's logits (`output.0`). An
exporter that fails on a model is recorded in `manifest.json` with its error instead of a
file. The Rust test imports every file into ember and matches the logits to 1e-5.

Export (`check-ember`). The Rust test writes ember's own export of every model
(`EMBER_ONNX_MODELS_OUT=<dir> cargo test -p ember-onnx --test models_roundtrip`); each
file goes through `onnx.checker` (full check) and ONNX Runtime on ember's input, against
ember's logits (to 1e-5), and the outcome lands in `ember_exports.json`.

Regenerate (from the repository root; CI never runs this):

    /work/venv-torch/bin/python tools/parity/onnx_models.py import
    /work/venv-torch/bin/python tools/parity/onnx_models.py check-ember
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
from safetensors.numpy import load_file  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

MODELS_DIR = os.path.join(HERE, "fixtures", "models")
OUT = os.path.join(HERE, "fixtures", "onnx_models")
ROOT = os.path.dirname(os.path.dirname(HERE))
TOLERANCE = 1e-5

EXPORTERS = {
    "ts17": dict(dynamo=False, opset_version=17, do_constant_folding=True),
    "dynamo": dict(dynamo=True, external_data=False),
}


class Logits(torch.nn.Module):
    """A Hugging Face model as a function of one tensor returning the logits alone.

    With `ones_mask` the decoder is also given an attention mask of ones (what a tokenizer
    hands it for an unpadded batch): without one, transformers looks for packed sequences
    with `torch.diff`, which the TorchScript exporter cannot write.
    """

    def __init__(self, model, key, ones_mask=False, **kwargs):
        super().__init__()
        self.model = model
        self.key = key
        self.ones_mask = ones_mask
        self.kwargs = kwargs

    def forward(self, x):
        extra = dict(self.kwargs)
        if self.ones_mask:
            extra["attention_mask"] = torch.ones_like(x)
        return self.model(**{self.key: x}, **extra).logits


def fixture_tensors(path):
    from safetensors.torch import load_file as load_torch

    return load_torch(os.path.join(MODELS_DIR, path))


def models():
    """(name, twin, input) for every model."""
    import transformers as tf

    f32 = dict(dtype=torch.float32)
    m = tf.GPT2LMHeadModel.from_pretrained(os.path.join(MODELS_DIR, "gpt2/tied"), **f32).eval()
    ids = fixture_tensors("gpt2/tied_outputs.safetensors")["input_ids"]
    yield "gpt2", Logits(m, "input_ids", ones_mask=True, use_cache=False), ids
    name = "llama_gqa2_linear"
    m = tf.LlamaForCausalLM.from_pretrained(os.path.join(MODELS_DIR, "llama", name, "checkpoint"), **f32).eval()
    ids = fixture_tensors(f"llama/{name}/expected.safetensors")["input_ids"]
    yield name, Logits(m, "input_ids", ones_mask=True, use_cache=False), ids
    m = tf.BertForSequenceClassification.from_pretrained(os.path.join(MODELS_DIR, "bert/cls"), **f32).eval()
    yield "bert", Logits(m, "input_ids"), fixture_tensors("bert/cls/expected.safetensors")["input_ids"]
    m = tf.ViTForImageClassification.from_pretrained(os.path.join(MODELS_DIR, "vit/cls"), **f32).eval()
    yield "vit", Logits(m, "pixel_values"), fixture_tensors("vit/cls/expected.safetensors")["pixel_values"]

    sys.path.insert(0, HERE)
    from model_fixtures.resnet import BasicBlock, ResNet

    m = ResNet(BasicBlock, [2, 2, 2, 2], 7, width=4)
    m.load_state_dict(torch.load(os.path.join(MODELS_DIR, "resnet/resnet18_w4.pth"), weights_only=True))
    yield "resnet", m.eval(), fixture_tensors("resnet/expected.safetensors")["input"]


def export_one(name, kind, model, x):
    path = os.path.join(OUT, f"{name}.{kind}.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), path, input_names=["input"], output_names=["logits"], **EXPORTERS[kind])
    graph = onnx.load(path)
    # The dynamo exporter annotates every node with its Python stack; that is most of
    # the file and none of the graph.
    for node in graph.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    onnx.save(graph, path)
    onnx.checker.check_model(graph, full_check=True)
    # The exported file must compute the twin's logits before ember is asked to.
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        want = model(x).numpy()
    ort_diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    return {
        "opset": next(o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")),
        "ops": sorted({n.op_type for n in graph.graph.node}),
        "onnxruntime_max_abs_diff": ort_diff,
        "bytes": os.path.getsize(path),
    }


def import_fixtures(only=None):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "manifest.json")
    manifest = {}
    if only and os.path.exists(path):
        with open(path) as f:
            manifest = json.load(f)
    for name, model, x in models():
        if only and name not in only:
            continue
        with torch.no_grad():
            y = model(x)
        save_file({"input.0": x.contiguous(), "output.0": y.contiguous()}, os.path.join(OUT, f"{name}.safetensors"))
        entry = {}
        for kind in EXPORTERS:
            file = os.path.join(OUT, f"{name}.{kind}.onnx")
            try:
                entry[kind] = export_one(name, kind, model, x)
            except Exception as e:  # noqa: BLE001 - an exporter's failure is recorded
                entry[kind] = {"export_error": str(e).splitlines()[0][:300]}
                if os.path.exists(file):
                    os.remove(file)
            print(name, kind, entry[kind], flush=True)
        if isinstance(model, Logits) and model.ones_mask:
            # What the TorchScript exporter does with the decoder given its ids alone.
            model.ones_mask = False
            try:
                export_one(name, "ts17", model, x)
                entry["ts17_ids_only"] = {"exported": True}
            except Exception as e:  # noqa: BLE001 - an exporter's failure is recorded
                entry["ts17_ids_only"] = {"export_error": str(e).splitlines()[0][:300]}
            model.ones_mask = True
            print(name, "ts17_ids_only", entry["ts17_ids_only"], flush=True)
            stale = os.path.join(OUT, f"{name}.ts17.onnx")
            # The file of the twin with its mask is the fixture; write it again.
            if "export_error" not in entry["ts17"]:
                export_one(name, "ts17", model, x)
            elif os.path.exists(stale):
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
        folder = tempfile.mkdtemp(prefix="ember_onnx_models_")
        env = dict(os.environ, EMBER_ONNX_MODELS_OUT=folder)
        cmd = ["cargo", "test", "-p", "ember-onnx", "--test", "models_roundtrip", "--", "write_ember_exports"]
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
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        (got,) = session.run(None, {session.get_inputs()[0].name: tensors["input.0"]})
        want = tensors["output.0"]
        assert got.shape == want.shape, f"{name}: {got.shape} vs {want.shape}"
        diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
        worst = max(worst, diff)
        results[name] = {
            "max_abs_diff": diff,
            "ok": diff <= TOLERANCE,
            "ops": [n.op_type for n in model.graph.node],
        }
        print(f"{name}: {diff:.3g} ({len(model.graph.node)} nodes)", flush=True)
    out = {
        "onnxruntime": ort.__version__,
        "onnx": onnx.__version__,
        "tolerance": TOLERANCE,
        "models": results,
    }
    with open(os.path.join(OUT, "ember_exports.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"worst {worst:.3g} over {len(results)} models")
    return 0 if results and all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "import"
    if command == "import":
        import_fixtures(set(sys.argv[2:]) or None)
    elif command == "check-ember":
        sys.exit(check_ember(sys.argv[2] if len(sys.argv) > 2 else None))
    else:
        sys.exit(f"unknown command {command} (import or check-ember)")

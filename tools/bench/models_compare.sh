#!/usr/bin/env bash
# Inference speed of the pretrained models, ember vs PyTorch (transformers; for ResNet-50 a
# torchvision-layout twin), both at 2 threads, f32, in interleaved sets (tools/bench/sets.py):
#
#   tools/bench/models_compare.sh [SETS]      (default 3)
#
# Each set runs every workload of ember-models' `models_bench` example
# (crates/models/examples/models_bench.rs) and of tools/bench/models_torch.py back to back,
# one process per workload and side, ember first in odd sets:
#
# - GPT-2 layout, data/models/gpt2-shakespeare (3 layers, 128 wide, vocabulary 512): greedy
#   generation with the KV cache at batch 1, a 16-token prompt and exactly 128 new tokens;
# - GPT-2-small's shape (12 layers, 768 wide, 12 heads, vocabulary 50257), random weights:
#   the same with exactly 64 new tokens;
# - the same model: one forward of a 512-token prompt into an empty cache, the last
#   position's logits kept;
# - ResNet-50 (1000 classes, random weights), evaluation mode, a batch of 8 at 224x224.
#
# The report shows tokens/s (generation: new tokens over the whole call, the prompt's
# forward included; prompt: prompt tokens) or images/s per set, the ratio ember / PyTorch
# (above 1: ember is faster), the median and the minimum ratio, a host probe per set, and
# each side's median peak RSS per workload (one process per workload; PyTorch's includes
# the Python interpreter and torch). Not part of CI: it needs PyTorch and transformers
# (PYTHON, default .venv-torch/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
sets="${1:-3}"
python="${PYTHON:-.venv-torch/bin/python}"
workloads=(small-generate gpt2-generate gpt2-prompt resnet50)
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

cargo build --release -q -p ember-models --example models_bench
bin="${CARGO_TARGET_DIR:-target}/release/examples/models_bench"
for s in $(seq 1 "$sets"); do
    printf '%s\t%s\n' "$s" "$(python3 tools/bench/sets.py probe)" >>"$out/probes"
    for w in "${workloads[@]}"; do
        if (( s % 2 )); then
            "$bin" "$w" >>"$out/ember.$s"
            "$python" tools/bench/models_torch.py "$w" 2>/dev/null >>"$out/torch.$s"
        else
            "$python" tools/bench/models_torch.py "$w" 2>/dev/null >>"$out/torch.$s"
            "$bin" "$w" >>"$out/ember.$s"
        fi
    done
done

python3 - "$out" "$sets" <<'PY'
import re
import statistics
import sys

sys.path.insert(0, "tools/bench")
import sets  # noqa: E402

out, n = sys.argv[1], int(sys.argv[2])
LABELS = {
    "small-generate": "gpt2-shakespeare (3x128, vocab 512), generate 16 + 128 tokens, batch 1 (tokens/s)",
    "gpt2-generate": "GPT-2-small shape (12x768, vocab 50257), generate 16 + 64 tokens, batch 1 (tokens/s)",
    "gpt2-prompt": "GPT-2-small shape, one forward of a 512-token prompt into the cache (tokens/s)",
    "resnet50": "ResNet-50, eval, batch 8, 224x224 (images/s)",
}


def load(path):
    """workload -> (per_s, peak_rss_mb) from lines `WORKLOAD per_s=... peak_rss_mb=...`."""
    vals = {}
    for line in open(path):
        m = re.match(r"(\S+) per_s=([\d.]+) .*peak_rss_mb=([\d.]+)", line)
        if m:
            vals[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return vals


table = sets.Table("tokens/s or images/s", higher_is_better=True, command=f"tools/bench/models_compare.sh {n}")
rss = {}
for s in range(1, n + 1):
    ember, torch = load(f"{out}/ember.{s}"), load(f"{out}/torch.{s}")
    for w, label in LABELS.items():
        table.add(label, ember[w][0], torch[w][0])
        rss.setdefault(label, []).append((ember[w][1], torch[w][1]))
for line in open(f"{out}/probes"):
    number, alone, together = line.split("\t")
    table.set_probe(int(number), sets.Probe(float(alone), float(together)))
table.print()
print("\npeak RSS, median over the sets (MiB):\n")
print("| workload | ember | PyTorch |")
print("|---|---|---|")
for label, pairs in rss.items():
    print(f"| {label} | {statistics.median(e for e, _ in pairs):,.0f} | {statistics.median(t for _, t in pairs):,.0f} |")
PY

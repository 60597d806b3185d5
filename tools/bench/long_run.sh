#!/usr/bin/env bash
# Long training runs of the quick-start MLP, ember vs PyTorch, window by window, both on 2
# threads, in interleaved sets (tools/bench/sets.py):
#
#   tools/bench/long_run.sh [STEPS] [WINDOW] [SETS]      (defaults 10000 1000 3)
#
# For each configuration DATA:BATCH:OPTIM (CONFIGS, default every combination of random and
# mnist data, batch 64 and 256, adam and sgd) a set runs ember's `long_run` example and
# tools/bench/long_run.py with the same flags back to back, ember first in odd sets; the
# sets are rounds over all configurations. A run's figure is its median window (samples/s
# over WINDOW steps); the report first shows, per configuration, each set's median window
# on both sides and its ratio ember / PyTorch (above 1: ember is faster), then the median
# and the minimum ratio over the sets. Then Markdown tables: samples/s per window (median
# over the sets) with the ember / PyTorch ratio, the median window, the slowest / fastest
# of those medians and within each run (the median and the worst run), the whole run and
# the peak resident memory; then Adam's throughput over SGD's where both ran. Before each
# set it measures the host itself for PROBE_SECONDS (default 30; 0 skips it) with the
# `host_steadiness --throughput` example, two threads of vector multiply-adds that share
# nothing, and reports how many of those 0.5 s windows fell below 90% of the fastest next to
# the same count for the runs' windows: the host's own floor for the spread of any
# compute-bound program. Not part of CI: it needs PyTorch (PYTHON, default
# .venv-torch/bin/python). LONG_RUN_OUT=DIR keeps the raw outputs there (files
# SIDE.DATA:BATCH:OPTIM.SET and host.SET); REPORT_ONLY=1 prints the report again from the
# outputs already in LONG_RUN_OUT without running anything.
#
#   CONFIGS="random:64:adam mnist:256:sgd" tools/bench/long_run.sh 2000 500
set -euo pipefail
cd "$(dirname "$0")/../.."
steps="${1:-10000}"
window="${2:-1000}"
sets="${3:-3}"
python="${PYTHON:-.venv-torch/bin/python}"
probe_seconds="${PROBE_SECONDS:-30}"
configs="${CONFIGS:-random:64:adam random:256:adam mnist:64:adam mnist:256:adam random:64:sgd random:256:sgd mnist:64:sgd mnist:256:sgd}"
if [[ -n "${LONG_RUN_OUT:-}" ]]; then
    out="$LONG_RUN_OUT"
    mkdir -p "$out"
else
    out="$(mktemp -d)"
    trap 'rm -rf "$out"' EXIT
fi

if [[ -n "${REPORT_ONLY:-}" ]]; then
    sets=0
else
    cargo build --release -q -p ember --example long_run --example host_steadiness
fi
bin="${CARGO_TARGET_DIR:-target}/release/examples/long_run"
probe="${CARGO_TARGET_DIR:-target}/release/examples/host_steadiness"
for r in $(seq 1 "$sets"); do
    if (( probe_seconds > 0 )); then
        "$probe" --throughput --seconds "$probe_seconds" --window 0.5 >"$out/host.$r"
    fi
    for config in $configs; do
        IFS=: read -r data batch optim <<<"$config"
        flags=(--steps "$steps" --window "$window" --batch "$batch" --data "$data" --optim "$optim" --threads 2)
        ember=("$bin" "${flags[@]}")
        torch=("$python" tools/bench/long_run.py "${flags[@]}")
        if (( r % 2 )); then
            "${ember[@]}" >"$out/ember.$config.$r"
            "${torch[@]}" >"$out/pytorch.$config.$r"
        else
            "${torch[@]}" >"$out/pytorch.$config.$r"
            "${ember[@]}" >"$out/ember.$config.$r"
        fi
    done
done

if [[ -n "${REPORT_ONLY:-}" ]]; then
    command="REPORT_ONLY=1 LONG_RUN_OUT=$out tools/bench/long_run.sh $steps $window"
else
    command="tools/bench/long_run.sh $steps $window $sets"
    [[ "$probe_seconds" == 30 ]] || command="PROBE_SECONDS=$probe_seconds $command"
fi
[[ -z "${CONFIGS:-}" ]] || command="CONFIGS=\"$configs\" $command"
python3 - "$out" "$configs" "$window" "$command" <<'PY'
import glob
import os
import statistics
import sys

sys.path.insert(0, "tools/bench")
import sets  # noqa: E402

out, configs, window, command = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), sys.argv[4]


def parse(path):
    windows, total, rss = {}, None, None
    for line in open(path):
        f = line.split()
        if not f or f[0].startswith("#"):
            continue
        if f[0] == "window":
            windows[(int(f[1]), int(f[2]))] = float(f[3])
        elif f[0] == "total":
            total = float(f[3])
        elif f[0] == "peak_rss_bytes":
            rss = int(f[1])
    return windows, total, rss


def set_number(path):
    return int(path.rsplit(".", 1)[1])


def runs(side, config):
    """set number -> parsed run, in set order."""
    paths = sorted(glob.glob(os.path.join(out, f"{side}.{config}.*")), key=set_number)
    return {set_number(p): parse(p) for p in paths}


def below_90(windows):
    """Windows below 90% of their run's fastest, and all windows, over several runs."""
    below = sum(sum(v < 0.9 * max(w.values()) for v in w.values()) for w in windows if w)
    return below, sum(len(w) for w in windows if w)


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


names = {"random": "random data", "mnist": "MNIST", "adam": "Adam", "sgd": "SGD"}
table = sets.Table("samples/s", higher_is_better=True, command=command)
for config in configs:
    data, batch, optim = config.split(":")
    ember, torch = runs("ember", config), runs("pytorch", config)
    for s in sorted(ember.keys() & torch.keys()):
        (e, _, _), (p, _, _) = ember[s], torch[s]
        if e and p:
            label = f"long run, {names[data]}, batch {batch}, {names[optim]} (median {window:,}-step window)"
            table.add(label, statistics.median(e.values()), statistics.median(p.values()))
if table.rows:
    table.print()

summary = {}
for config in configs:
    data, batch, optim = config.split(":")
    sides = {side: list(runs(side, config).values()) for side in ("ember", "pytorch")}
    if not all(sides.values()):
        continue
    keys = sorted(set().union(*(w for w, _, _ in sides["ember"])))
    rate = {s: {k: med([w.get(k) for w, _, _ in r]) for k in keys} for s, r in sides.items()}
    print(f"\n### {data} data, batch {batch}, {optim} ({len(sides['ember'])} set(s), samples/s)\n")
    print("| steps | ember | PyTorch | ember / PyTorch |")
    print("|---|---|---|---|")
    for k in keys:
        e, p = rate["ember"][k], rate["pytorch"][k]
        print(f"| {k[0]:,}–{k[1]:,} | {e:,.0f} | {p:,.0f} | {e / p:.2f}x |")
    stats = {}
    for s in ("ember", "pytorch"):
        values = list(rate[s].values())
        # Each run's own slowest / fastest window: a single run sees the host's slow
        # stretches, which the median over sets smooths away.
        per_run = [min(w.values()) / max(w.values()) for w, _, _ in sides[s] if w]
        stats[s] = {
            "median": statistics.median(values),
            "spread": min(values) / max(values),
            "run_spread": f"{statistics.median(per_run):.2f} / {min(per_run):.2f}",
            "below": "{} of {}".format(*below_90([w for w, _, _ in sides[s]])),
            "total": med([t for _, t, _ in sides[s]]),
            "rss": med([m for _, _, m in sides[s]]) / 2**20,
        }
    e, p = stats["ember"], stats["pytorch"]
    ratio = e["median"] / p["median"]
    print(f"| median of the windows' medians | {e['median']:,.0f} | {p['median']:,.0f} | {ratio:.2f}x |")
    print(f"| slowest / fastest of the windows' medians | {e['spread']:.2f} | {p['spread']:.2f} | |")
    print(f"| slowest / fastest window within one run (median / worst) | {e['run_spread']} | {p['run_spread']} | |")
    print(f"| windows below 90% of their run's fastest | {e['below']} | {p['below']} | |")
    print(f"| whole run | {e['total']:,.0f} | {p['total']:,.0f} | {e['total'] / p['total']:.2f}x |")
    print(f"| peak RSS | {e['rss']:,.0f} MiB | {p['rss']:,.0f} MiB | |")
    summary[(data, batch, optim)] = (e["median"], p["median"])

probes = []
for path in sorted(glob.glob(os.path.join(out, "host.*")), key=set_number):
    rate = float("nan")
    for line in open(path):
        if line.startswith("both threads:"):
            # "both threads: R billion multiply-adds/s in the median window, ..."
            rate = float(line.split()[2])
        if line.startswith("sum:"):
            # "sum: slowest / fastest S, median / fastest M, windows below 90%: B of N"
            f = line.replace(",", "").split()
            probes.append((set_number(path), rate, float(f[4]), int(f[-3]), int(f[-1])))
if probes:
    print("\n### The host alone (`host_steadiness --throughput`, 0.5 s windows, one probe per set)\n")
    print("| set | median window, billion multiply-adds/s | slowest / fastest | windows below 90% of the fastest |")
    print("|---|---|---|---|")
    for i, rate, spread, below, n in probes:
        print(f"| {i} | {rate:.2f} | {spread:.2f} | {below} of {n} |")

pairs = sorted({(d, b) for d, b, o in summary if (d, b, "adam") in summary and (d, b, "sgd") in summary})
if pairs:
    print("\n### Adam / SGD (median windows)\n")
    print("| data | batch | ember Adam / SGD | PyTorch Adam / SGD |")
    print("|---|---|---|---|")
    for d, b in pairs:
        (ea, pa), (es, ps) = summary[(d, b, "adam")], summary[(d, b, "sgd")]
        print(f"| {d} | {b} | {ea / es:.2f} | {pa / ps:.2f} |")
PY

#!/usr/bin/env python3
"""ember's bf16 and f16 matrix products against ember's f32 product and PyTorch's bf16
torch.matmul, at 1 and 2 threads, in interleaved sets (tools/bench/sets.py's protocol):

    tools/bench/matmul_lowp/compare.py [SETS]          (default 5 sets; from anywhere)

Each set runs, for 1 and then 2 threads, one process per kind: ember bf16, f32 and f16,
gemm's own f16 product (1 thread only: the alternative to ember's widened f16 kernel), and
PyTorch bf16; ember's kinds come first in odd sets, PyTorch in even ones, and ember's kinds
rotate. A process times each size (SIZES, default 256,512,1024,2048) REPS times (default 7)
after one untimed product and reports the median GFLOP/s. ember runs with
EMBER_THREAD_TUNING=0, so that 2 threads always compute with both. The 2-thread processes
run under /usr/bin/time -v, and their user and wall times are reported (user/wall near 2:
both threads busy), as is the share of all CPUs other processes took during each run.
Environment: PYTHON (default /work/venv-torch/bin/python or
.venv-torch/bin/python), SIZES, REPS, CARGO_TARGET_DIR as usual. Not part of CI.
"""

import os
import re
import resource
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
import sets  # noqa: E402

HERE = os.path.join(ROOT, "tools", "bench", "matmul_lowp")


def python():
    if "PYTHON" in os.environ:
        return os.environ["PYTHON"]
    for candidate in ("/work/venv-torch/bin/python", os.path.join(ROOT, ".venv-torch", "bin", "python")):
        if os.path.exists(candidate):
            return candidate
    sys.exit("no PyTorch interpreter: set PYTHON")


def busy_ticks():
    """CPU time all processes have used since boot, in clock ticks (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4]


def run(cmd, threads, env):
    """Runs one process; returns ({n: GFLOP/s}, (user s, wall s) or None, the percentage of
    all CPUs that other processes used meanwhile)."""
    timed = threads > 1
    full = (["/usr/bin/time", "-v"] if timed else []) + cmd
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    ticks, start = busy_ticks(), time.monotonic()
    proc = subprocess.run(full, capture_output=True, text=True, env=env, check=True)
    elapsed = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    busy = (busy_ticks() - ticks) / os.sysconf("SC_CLK_TCK")
    foreign = max(0.0, 100 * (busy - own) / (elapsed * os.cpu_count()))
    figures = {}
    for line in proc.stdout.splitlines():
        _, _, n, median, _ = line.split("\t")
        figures[int(n)] = float(median)
    times = None
    if timed:
        user = float(re.search(r"User time \(seconds\): ([\d.]+)", proc.stderr).group(1))
        wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", proc.stderr).group(1)
        secs = 0.0
        for part in wall.split(":"):
            secs = secs * 60 + float(part)
        times = (user, secs)
    return figures, times, foreign


def main():
    n_sets = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    sizes = os.environ.get("SIZES", "256,512,1024,2048")
    reps = os.environ.get("REPS", "7")
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(HERE, "target"))
    manifest = os.path.join(HERE, "Cargo.toml")
    subprocess.run(["cargo", "build", "--release", "-q", "--manifest-path", manifest], check=True)
    binary = os.path.join(target, "release", "matmul_lowp")
    env = dict(os.environ, EMBER_THREAD_TUNING="0")
    torch_script = os.path.join(HERE, "matmul_torch.py")

    command = f"tools/bench/matmul_lowp/compare.py {n_sets}"
    if sizes != "256,512,1024,2048" or reps != "7":
        command = f"SIZES={sizes} REPS={reps} {command}"
    vs_torch = sets.Table("GFLOP/s", True, command, "ember bf16", "PyTorch bf16")
    vs_f32 = sets.Table("GFLOP/s", True, command, "ember bf16", "ember f32")
    f16_vs_f32 = sets.Table("GFLOP/s", True, command, "ember f16", "ember f32")
    f16_vs_gemm = sets.Table("GFLOP/s", True, command, "ember f16", "gemm f16")
    times = []
    loads = []

    for s in range(1, n_sets + 1):
        for threads in (1, 2):
            kinds = ["bf16", "f32", "f16"] + (["gemm-f16"] if threads == 1 else [])
            shift = (s - 1) % len(kinds)
            kinds = kinds[shift:] + kinds[:shift]
            jobs = [(k, [binary, "--kind", k]) for k in kinds]
            torch_job = ("torch-bf16", [python(), torch_script, "--kind", "bf16"])
            jobs = jobs + [torch_job] if s % 2 else [torch_job] + jobs
            got = {}
            for kind, cmd in jobs:
                cmd = cmd + ["--threads", str(threads), "--sizes", sizes, "--reps", reps]
                got[kind], t, foreign = run(cmd, threads, env)
                loads.append((s, threads, kind, foreign))
                if t:
                    times.append((s, kind, t))
                print(f"set {s}, {threads} thread(s), {kind}: {got[kind]}, other load {foreign:.0f}%", file=sys.stderr, flush=True)
            for n in sorted(got["bf16"]):
                workload = f"[{n}, {n}] @ [{n}, {n}], {threads} thread{'s' if threads > 1 else ''}"
                vs_torch.add(workload, got["bf16"][n], got["torch-bf16"][n])
                vs_f32.add(workload, got["bf16"][n], got["f32"][n])
                f16_vs_f32.add(workload, got["f16"][n], got["f32"][n])
                if threads == 1:
                    f16_vs_gemm.add(workload, got["f16"][n], got["gemm-f16"][n])

    vs_torch.print()
    for table in (vs_f32, f16_vs_f32, f16_vs_gemm):
        table.print(with_header=False)
    print("\n2-thread processes (all sizes, setup included): user s / wall s = user/wall\n")
    print("| set | kind | user s | wall s | user/wall |")
    print("|---|---|---|---|---|")
    for s, kind, (user, wall) in times:
        print(f"| {s} | {kind} | {user:.2f} | {wall:.2f} | {user / max(wall, 0.01):.2f} |")
    print("\nShare of all CPUs that other processes used during each run (percent), per set:\n")
    for threads in (1, 2):
        for kind in ("bf16", "f32", "f16", "gemm-f16", "torch-bf16"):
            row = [f"{f:.0f}" for s, t, k, f in loads if t == threads and k == kind]
            if row:
                print(f"- {threads} thread(s), {kind}: {' / '.join(row)}")


if __name__ == "__main__":
    main()

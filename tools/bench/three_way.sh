# Shared by matmul_threads.sh and linear_products.sh (sourced, not run): the PyTorch
# interpreter and the interleaved runs of ember at 2 threads, ember at 1 thread and PyTorch
# at 2 threads.

# Sets `python` from PYTHON, else the first of /work/venv-torch and .venv-torch that exists;
# exits naming SCRIPT when there is none.
find_python() { # SCRIPT
    python="${PYTHON:-}"
    if [[ -z "$python" ]]; then
        for candidate in /work/venv-torch/bin/python .venv-torch/bin/python; do
            [[ -x "$candidate" ]] && python="$candidate" && break
        done
    fi
    [[ -n "$python" ]] || { echo "$1: no PyTorch interpreter: set PYTHON" >&2; exit 1; }
}

# RUNS runs, each after a host probe (OUT/probe.R): ember's BIN at 2 and 1 threads
# (OUT/ember2.R, OUT/ember1.R) and TORCH_SCRIPT at 2 threads (OUT/torch.R), all given ARGS;
# ember first in odd runs, PyTorch first in even ones.
three_way_runs() { # OUT RUNS BIN TORCH_SCRIPT ARGS...
    local out="$1" runs="$2" bin="$3" script="$4"
    shift 4
    local r
    for r in $(seq 1 "$runs"); do
        python3 tools/bench/sets.py probe >"$out/probe.$r"
        if (( r % 2 )); then
            "$bin" --threads 2 "$@" >"$out/ember2.$r"
            "$bin" --threads 1 "$@" >"$out/ember1.$r"
            "$python" "$script" --threads 2 "$@" >"$out/torch.$r"
        else
            "$python" "$script" --threads 2 "$@" >"$out/torch.$r"
            "$bin" --threads 1 "$@" >"$out/ember1.$r"
            "$bin" --threads 2 "$@" >"$out/ember2.$r"
        fi
        echo "run $r of $runs done" >&2
    done
}

# The loop the *_grid.sh scripts share (sourced, not run): every shape of the caller's
# `shapes` array once per set, ember's `$bin` and PyTorch's script back to back (ember first
# in odd sets), a host probe per set, then one table through tools/bench/sets.py.
#
#   grid_sets TORCH_SCRIPT COMMAND
#
# The caller sets `sets`, `python`, `out` and `bin`, and defines `grid_shape FIELDS...`, which
# reads one entry of `shapes` (its last field the timed steps, already scaled by REPS_SCALE)
# and sets `args` (the options both sides take), `name` (the table's row) and `batch`.

# The timed steps of a shape, times REPS_SCALE (at least 1).
grid_reps() {
    python3 -c 'import sys; print(max(1, round(int(sys.argv[1]) * float(sys.argv[2]))))' "$1" "${REPS_SCALE:-1}"
}

grid_sets() {
    local torch_script="$1" command="$2" s shape fields
    step_ms() { sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' "$1"; }
    for s in $(seq 1 "$sets"); do
        printf '#probe\t%s\t%s\n' "$s" "$(python3 tools/bench/sets.py probe)" >>"$out/sets.tsv"
        for shape in "${shapes[@]}"; do
            read -r -a fields <<<"$shape"
            fields[-1]=$(grid_reps "${fields[-1]}")
            grid_shape "${fields[@]}"
            if (( s % 2 )); then
                "$bin" "${args[@]}" >"$out/ember"
                "$python" "$torch_script" "${args[@]}" >"$out/torch"
            else
                "$python" "$torch_script" "${args[@]}" >"$out/torch"
                "$bin" "${args[@]}" >"$out/ember"
            fi
            # samples/s from the median step time, as the *_compare.sh scripts report it
            python3 -c 'import sys; b, e, t = map(float, sys.argv[2:]); print(f"{sys.argv[1]}\t{b * 1e3 / e}\t{b * 1e3 / t}")' \
                "$name" "$batch" "$(step_ms "$out/ember")" "$(step_ms "$out/torch")" >>"$out/sets.tsv"
        done
    done
    python3 tools/bench/sets.py summarise --unit samples/s --command "$command" "$out/sets.tsv"
}

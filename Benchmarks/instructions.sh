#!/usr/bin/env bash
# Instructions per operation, measured with valgrind's callgrind (deterministic
# to about ±0.1%, unlike wall-clock time on shared VMs). This is the gate for
# the performance targets in Benchmarks/README.md.
#
#   ./instructions.sh            # every scenario
#   ./instructions.sh 5 11       # scenarios 5 and 11 (see `InstructionCounts list`)
#   ITERATIONS=2000 ./instructions.sh
#   ROW_TIME_LIMIT=3600 ./instructions.sh   # seconds one valgrind run may take
#
# Counts only the instructions inside `measure(_:_:)` (between its callgrind
# client requests) — or, for teardown rows, inside the dying object's deinit
# (--toggle-collect); for asynchronous rows, the whole process — divided by
# the operations it ran.
#
# No row can hang the gate (issue 31, item 19): each valgrind run is bounded
# by `timeout`, and the scenario by its own watchdog (each wait, and the whole
# run: see Sources/Scenarios/Watchdog.swift). A run that fails or overruns is
# tried once more; a row that fails twice prints FAILED with the reason, the
# other rows still run, and the script exits with status 1 naming the failed
# rows.
set -euo pipefail
cd "$(dirname "$0")"
command -v valgrind >/dev/null || { echo "instructions.sh needs valgrind (apt-get install valgrind)"; exit 1; }
iterations=${ITERATIONS:-1000}
# Generous: callgrind runs about fifty times slower than native, and the
# slowest rows take minutes under it.
row_limit=${ROW_TIME_LIMIT:-1800}
export BENCHMARK_TIME_LIMIT=$((row_limit > 120 ? row_limit - 60 : row_limit))  # the scenario's own report first
export BENCHMARK_WAIT_LIMIT=${BENCHMARK_WAIT_LIMIT:-300}
# The scenarios are recompiled every time: an incremental build once kept
# a scenario module compiled against the library's old layout of a generic
# class it specializes (its instance size from before a field was added),
# and the binary wrote past the objects it allocated.
touch Sources/*/*.swift
swift build -c release --product InstructionCounts >&2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# valgrind 3.19 cannot read the DWARF 5 the toolchain emits: count a copy
# without debug info (the symbols callgrind needs stay).
binary="$out/InstructionCounts"
cp .build/release/InstructionCounts "$binary"
strip --strip-debug "$binary"

printf '%-48s %-40s %12s\n' "operation" "peer" "instr/op"
count() {  # instructions for `run $1 $2` inside the function matching $3
    # ("": the region `measure` brackets; "*": the whole process); on failure,
    # prints nothing and returns non-zero, the reason in "$out/reason"
    local toggle=(--toggle-collect="$3")
    # Whole-process rows hand work between threads. Valgrind runs one thread
    # at a time, and by default whichever thread grabs its lock runs next,
    # so how many jobs a row's changes take (thousands of instructions
    # each) varied from run to run: the same binary measured 5,972 and
    # 13,930 instructions per change. --fair-sched=yes hands the lock round
    # in turn: consecutive runs on an idle machine agree within about 3%.
    [ "$3" = "*" ] && toggle=(--fair-sched=yes)
    [ -z "$3" ] && toggle=(--collect-atstart=no)
    local status=0
    timeout --kill-after=30 "$row_limit" valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
        "${toggle[@]}" "$binary" run "$1" "$2" >/dev/null 2>"$out/log" || status=$?
    if [ "$status" -ne 0 ]; then
        if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
            echo "timed out after $row_limit s (ROW_TIME_LIMIT)" >"$out/reason"
        else
            { grep -h 'FAILED' "$out/log" || tail -3 "$out/log"; } | tail -3 >"$out/reason"
            echo "exit status $status" >>"$out/reason"
        fi
        return 1
    fi
    grep -E '^(summary|totals):' "$out/cg" | head -1 | awk '{print $2}'
}

count_retrying() {  # count, tried once more if it fails
    count "$@" && return 0
    echo "instructions.sh: run $1 $2 failed ($(tr '\n' ' ' <"$out/reason")); trying once more" >&2
    count "$@"
}

: >"$out/failed"
while IFS=$'\t' read -r index per operation peer collect; do
    if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$index"; then continue; fi
    # Differential: (I(3n) - I(n)) / 2n cancels one-time costs (first-call
    # binding, metadata instantiation, cache warm-up).
    runs=$iterations
    [ "$per" -ge 1000 ] && runs=2   # teardown scenarios: each run is 1,000 relations
    if ! small=$(count_retrying "$index" "$runs" "$collect") ||
        ! large=$(count_retrying "$index" $((runs * 3)) "$collect"); then
        printf '%-48s %-40s %12s\n' "$operation" "$peer" "FAILED"
        echo "instructions.sh: row $index ($operation — $peer) FAILED: $(tr '\n' ' ' <"$out/reason")" >&2
        echo "$index ($operation — $peer)" >>"$out/failed"
        continue
    fi
    awk -v a="$small" -v b="$large" -v n="$runs" -v p="$per" -v o="$operation" -v q="$peer" \
        'BEGIN { printf "%-48s %-40s %12.1f\n", o, q, (b - a) / (2 * n * p) }'
done < <("$binary" list)

echo
for memoryCase in 0 1 2 3 4 5; do "$binary" memory "$memoryCase"; done

if [ -s "$out/failed" ]; then
    echo "instructions.sh: $(wc -l <"$out/failed") row(s) FAILED:" >&2
    sed 's/^/  /' "$out/failed" >&2
    exit 1
fi

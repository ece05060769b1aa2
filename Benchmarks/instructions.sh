#!/usr/bin/env bash
# Instructions per operation, measured with valgrind's callgrind (deterministic
# to about ±0.1%, unlike wall-clock time on shared VMs). This is the gate for
# the performance targets in Benchmarks/README.md.
#
#   ./instructions.sh            # every scenario
#   ./instructions.sh 5 11       # scenarios 5 and 11 (see `InstructionCounts list`)
#   ITERATIONS=2000 ./instructions.sh
#
# Counts only the instructions inside `measure(_:_:)` (between its callgrind
# client requests) — or, for teardown rows, inside the dying object's deinit
# (--toggle-collect); for asynchronous rows, the whole process — divided by
# the operations it ran.
set -euo pipefail
cd "$(dirname "$0")"
command -v valgrind >/dev/null || { echo "instructions.sh needs valgrind (apt-get install valgrind)"; exit 1; }
iterations=${ITERATIONS:-1000}
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
    # ("": the region `measure` brackets; "*": the whole process)
    local toggle=(--toggle-collect="$3")
    [ "$3" = "*" ] && toggle=()
    [ -z "$3" ] && toggle=(--collect-atstart=no)
    valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
        "${toggle[@]}" "$binary" run "$1" "$2" >/dev/null 2>"$out/log"
    grep -E '^(summary|totals):' "$out/cg" | head -1 | awk '{print $2}'
}

"$binary" list | while IFS=$'\t' read -r index per operation peer collect; do
    if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$index"; then continue; fi
    # Differential: (I(3n) - I(n)) / 2n cancels one-time costs (first-call
    # binding, metadata instantiation, cache warm-up).
    runs=$iterations
    [ "$per" -ge 1000 ] && runs=2   # teardown scenarios: each run is 1,000 relations
    small=$(count "$index" "$runs" "$collect")
    large=$(count "$index" $((runs * 3)) "$collect")
    awk -v a="$small" -v b="$large" -v n="$runs" -v p="$per" -v o="$operation" -v q="$peer" \
        'BEGIN { printf "%-48s %-40s %12.1f\n", o, q, (b - a) / (2 * n * p) }'
done

echo
for memoryCase in 0 1 2 3; do "$binary" memory "$memoryCase"; done

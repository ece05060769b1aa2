#!/usr/bin/env bash
# Fuzzes SafeObserve against the reference model with libFuzzer.
#   Fuzz/run.sh [SECONDS]   (default 60)
# Builds SafeObserveFuzz with -sanitize=fuzzer (plus address) into .build-fuzz,
# then runs it on a scratch copy of the committed seed corpus (Fuzz/Corpus),
# for at most SECONDS. A failing input is written to .build-fuzz/artifacts/ and
# the shrunk operation sequence is printed; replay it with
#   swift run SafeObserveFuzz .build-fuzz/artifacts/crash-…
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}

swift build -c release --product SafeObserveFuzz --scratch-path .build-fuzz \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING -Xswiftc -DSAFEOBSERVE_INTERNAL_CHECKS \
    -Xswiftc -Xclang-linker -Xswiftc -fuse-ld=lld  # gold fails on this link

corpus=.build-fuzz/corpus
mkdir -p "$corpus" .build-fuzz/artifacts
cp Fuzz/Corpus/* "$corpus"/
LSAN_OPTIONS="suppressions=$PWD/.ci/lsan.supp:print_suppressions=0" \
    .build-fuzz/release/SafeObserveFuzz "$corpus" \
    -max_total_time="$seconds" -max_len=512 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix=.build-fuzz/artifacts/ -print_final_stats=1

#!/usr/bin/env bash
# fuzz_kineto.sh: fuzzes the Kineto trace reader (+ HTA analyses) with libFuzzer for a given time.
# Usage: bench/fuzz_kineto.sh [SECONDS=600] [BUILD_DIR=/tmp/ft-fuzz-build]
# Needs clang++ and libclang-rt-14-dev (scripts/deps.sh all). Seeds: tests/data/kineto and small
# slices of ../shared/traces/hta. Crashes, leaks and timeouts (>10 s per input) fail the run;
# the reproducer lands in $WORK/artifacts (add it to tests/kineto_reader_test.cpp).
set -euo pipefail
secs="${1:-600}"
build="${2:-/tmp/ft-fuzz-build}"
root="$(cd "$(dirname "$0")/.." && pwd)"
work="${FT_FUZZ_WORK:-/tmp/ft-fuzz-kineto}"
mkdir -p "$work/corpus" "$work/artifacts"

cmake -S "$root" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DFT_FUZZ=ON -DFT_BUILD_TESTS=OFF \
  -DFT_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j2 --target kineto_reader_fuzz >/dev/null

# Seeds: the committed samples, small shared traces whole, large ones as 16 KiB slices.
cp "$root"/tests/data/kineto/*.json "$work/corpus/" 2>/dev/null || true
shared="$root/../shared/traces/hta"
if [[ -d "$shared" ]]; then
  i=0
  while IFS= read -r -d '' f; do
    i=$((i + 1))
    if [[ "$f" == *.gz ]]; then cat_cmd=(zcat "$f"); else cat_cmd=(cat "$f"); fi
    "${cat_cmd[@]}" | head -c 16384 > "$work/corpus/shared_$i.json" || true
  done < <(find "$shared" -name '*.json*' ! -name hta_outputs.json -print0)
fi

echo "fuzz_kineto: ${secs}s, corpus $(ls "$work/corpus" | wc -l) files, artifacts in $work/artifacts"
set +e
"$build/tests/fuzz/kineto_reader_fuzz" "$work/corpus" -max_total_time="$secs" -max_len=65536 \
  -timeout=10 -rss_limit_mb=2048 -detect_leaks=1 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" 2>&1 | tail -n 25
status=${PIPESTATUS[0]}
set -e
if ((status != 0)); then
  echo "fuzz_kineto: FAILED (exit $status); reproducers:" >&2
  ls -l "$work/artifacts" >&2
  exit "$status"
fi
echo "fuzz_kineto: clean"

#!/usr/bin/env bash
# fuzz_kineto.sh: libFuzzer run of tests/fuzz/kineto_reader_fuzz for a given time: the Kineto
# reader, HTA analyses, prepare_kineto_trace, diagnose(), ft's trace reader, the report.json
# reader and every report writer (tests/fuzz/fuzz_body.h). scripts/test.sh runs it for 60 s.
# Usage: bench/fuzz_kineto.sh [SECONDS=600] [BUILD_DIR=build-fuzz]
# Needs clang++ and libclang-rt-14-dev (scripts/deps.sh all). Seeds: tests/data/kineto/*.json,
# tests/data/golden/*.json, tests/data/fuzz/* and 16 KiB slices of the tests/data/hta traces.
# A crash, leak or timeout (>10 s per input) fails the run and prints the reproducer: copy it
# into tests/data/fuzz/ (fuzz_regression_test runs every file there) with the fix.
# FT_FUZZ_JOBS: build parallelism (default nproc); FT_FUZZ_FLAGS: more libFuzzer flags.
set -euo pipefail
secs="${1:-600}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${2:-$root/build-fuzz}"
jobs="${FT_FUZZ_JOBS:-$(nproc)}"

cmake -S "$root" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFT_FUZZ=ON -DFT_BUILD_TESTS=OFF -DFT_BUILD_BENCH=OFF -DFT_WITH_CUDA=OFF -DFT_WITH_MPI=OFF \
  >/dev/null
cmake --build "$build" -j"$jobs" --target kineto_reader_fuzz >/dev/null

work="$(mktemp -d "${TMPDIR:-/tmp}/ft-fuzz.XXXXXX")"
mkdir -p "$work/corpus" "$work/artifacts"
# Seeds: the committed samples and fuzz inputs whole, the HTA traces as 16 KiB slices.
for f in "$root"/tests/data/kineto/*.json "$root"/tests/data/golden/*.json "$root"/tests/data/fuzz/*; do
  [[ -f "$f" && "$f" != */README.md ]] && cp "$f" "$work/corpus/$(basename "$(dirname "$f")")_$(basename "$f")"
done
i=0
while IFS= read -r -d '' f; do
  i=$((i + 1))
  if [[ "$f" == *.gz ]]; then
    { zcat "$f" 2>/dev/null || true; } | head -c 16384 >"$work/corpus/hta_$i.json"
  else
    head -c 16384 "$f" >"$work/corpus/hta_$i.json"
  fi
done < <(find "$root/tests/data/hta" -name '*.json*' ! -name hta_outputs.json -print0 2>/dev/null)

echo "fuzz: ${secs} s, corpus $(find "$work/corpus" -type f | wc -l) seeds"
set +e
"$build/tests/fuzz/kineto_reader_fuzz" "$work/corpus" -max_total_time="$secs" -max_len=65536 \
  -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -dict="$root/tests/fuzz/kineto.dict" \
  -artifact_prefix="$work/artifacts/" ${FT_FUZZ_FLAGS:-} >"$work/log" 2>&1
status=$?
set -e
execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n 1)"
if ((status != 0)) || [[ -n "$(ls -A "$work/artifacts")" ]]; then
  tail -n 60 "$work/log" >&2
  echo "fuzz: CRASH after ${execs:-?} execs (exit $status); reproducer(s):" >&2
  for a in "$work"/artifacts/*; do [[ -e "$a" ]] && echo "  $a" >&2; done
  echo "fuzz: rerun one with $build/tests/fuzz/kineto_reader_fuzz FILE; copy it into" \
    "$root/tests/data/fuzz/ (fuzz_regression_test runs it) with the fix. Log: $work/log" >&2
  exit 1
fi
cov="$(grep -o 'cov: [0-9]*' "$work/log" | tail -n 1 | grep -o '[0-9]*' || true)"
echo "fuzz: ${secs} s, ${execs:-?} execs, ${cov:-?} edges covered, no crash"
rm -rf "$work"

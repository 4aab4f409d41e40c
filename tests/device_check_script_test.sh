#!/usr/bin/env bash
# device_check_script_test.sh: scripts/device-check.sh's CPU-side logic: the plan (--dry-run), the
# clean "no device" exit, and the parsing and table of device_check_report.py on fixture results.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
T=$(mktemp -d /tmp/ft-devcheck-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
REPORT="python3 $ROOT/scripts/device_check_report.py"

# 1. The plan names every stage and touches nothing.
plan=$(OUT="$T/o1" FT_CHECK_WORK="$T/w1" bash "$ROOT/scripts/device-check.sh" --dry-run --budget 300)
for stage in probe gpu_tests gemm_peak bench overhead pcie table "budget 300s"; do
  grep -q -- "$stage" <<< "$plan" || fail "the plan lacks '$stage': $plan"
done
[[ ! -e "$T/o1/table.txt" ]] || fail "--dry-run wrote results"

# 2. Without a GPU: "no device", status 0, a table saying nothing was measured, within seconds.
if command -v nvidia-smi > /dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU' || [[ -e /dev/nvidia0 ]]; then
  echo "skip: a GPU is present"
else
  t0=$(date +%s)
  out=$(OUT="$T/o2" FT_CHECK_WORK="$T/w2" bash "$ROOT/scripts/device-check.sh")
  (( $(date +%s) - t0 < 30 )) || fail "the no-device exit took too long"
  grep -q "no device" <<< "$out" || fail "no 'no device' in: $out"
  grep -q "not measured: no device" "$T/o2/table.txt" || fail "table: $(cat "$T/o2/table.txt")"
  [[ -s "$T/o2/summary.json" && -s "$T/o2/logs.tar.gz" ]] || fail "summary.json / logs.tar.gz missing"
  python3 -c "import json,sys; d=json.load(open('$T/o2/summary.json')); assert d['results']['device'].startswith('no device'), d"
fi

# 3. Parsing and the table on fixture results.
F="$T/fx"
mkdir -p "$F"
cat > "$F/gtest_a.json" <<'J'
{"testsuites": [{"name": "H2DGpu", "testsuite": [
  {"name": "a", "result": "COMPLETED"}, {"name": "b", "result": "SKIPPED"},
  {"name": "c", "result": "COMPLETED", "failures": [{"failure": "x"}]}]}]}
J
cat > "$F/gtest_b.json" <<'J'
{"testsuites": [{"name": "S", "testsuite": [{"name": "d", "result": "COMPLETED"}]}]}
J
echo "garbage" > "$F/gtest_crashed.json"
[[ $($REPORT gtest-counts "$F/gtest_a.json" "$F/gtest_b.json") == "2 1 1" ]] || fail "gtest counts"
[[ $($REPORT gtest-counts "$F/gtest_a.json" "$F/gtest_crashed.json") == "1 1 2" ]] || fail "a crashed binary counts as failed"
cat > "$F/ctest.log" <<'L'
 1/4 Test  #1: H2DGpu.BytesArriveIntact/pinned .........   Passed    0.52 sec
 2/4 Test  #2: H2DGpu.BytesArriveIntact/pageable .......***Skipped   0.01 sec
 3/4 Test  #3: nccl_communicator_mpi_test_np2 ..........***Failed    3.10 sec
 4/4 Test  #4: PcieScenario.X ..........................***Timeout 300.00 sec
L
[[ $($REPORT ctest-counts "$F/ctest.log") == "1 1 2" ]] || fail "ctest counts: $($REPORT ctest-counts "$F/ctest.log")"
for s in 0 1 2 3 4 5; do
  echo "{\"step\": $s, \"tokens_per_s\": $((100000 + s * 1000)), \"mfu\": 0.$((40 + s)), \"step_ms\": 10.0}"
done > "$F/m.jsonl"
read -r tps mfu ms n < <($REPORT metrics "$F/m.jsonl" 3)
[[ $tps == 104000.0 && $mfu == 0.440000 && $n == 3 ]] || fail "metrics: $tps $mfu $ms $n"
echo '{"micro_batch": 32, "tokens_per_s": 41234.5, "mfu_vs_measured_gemm_peak": 0.51, "gemm_peak_tflops": 780.5}' > "$F/bench.json"
[[ $($REPORT bench-json "$F/bench.json") == "32 41234.5 0.51 780.5" ]] || fail "bench json"
echo '{"gemm_peak_tflops": 780.5}' > "$F/peak_only.json"
[[ $($REPORT bench-json "$F/peak_only.json") == "- - - 780.5" ]] || fail "bench json, peak only"
printf 'build\tok\t201\t330\ngpu_tests\tfailed (status 1)\t40\t150\npcie\tskipped: budget spent\t0\t\n' > "$F/stages.tsv"
cat > "$F/results.env" <<'E'
device=GPU 0: NVIDIA H200
mode=bundle
tests_passed=30
tests_skipped=2
tests_failed=1
bench_micro_batch=32
bench_tokens_per_s=412345.6
bench_mfu=0.523
gemm_peak_tflops=781.2
profiler_overhead_pct=3.14
E
table=$(bash "$ROOT/scripts/device-check.sh" --table-from "$F")
for want in "30/2/1" "412,346" "52.3%" "781 TFLOP/s" "\\+3\\.1%" "stage build" "skipped: budget spent" \
            "PCIe scenario  *not measured"; do
  grep -Eq -- "$want" <<< "$table" || fail "table lacks '$want': $table"
done
[[ -s "$F/summary.json" ]] || fail "no summary.json"
echo "ok"

#!/usr/bin/env bash
# device-check.sh: one call on a GPU machine: build, GPU tests, GPT-2 124M benchmark, profiler overhead, PCIe scenario; a table last.
#
#   bash scripts/device-check.sh [--dry-run] [--budget S] [--jobs N] [--build-dir DIR] [--force]
#   bash scripts/device-check.sh --table-from WORKDIR     # reprint the table of an earlier check
#
# Binaries: .device-bundle/ (made on a build machine by scripts/device-bundle.sh and carried
# along) when present, else a Release build from source (CUDA, CUPTI, NCCL, NVTX, MPI) in
# --build-dir, which needs ft's build dependencies on this machine. Every stage has its own
# timeout, all of them share --budget seconds (default 470: the check must end within 8
# minutes), and a stage that fails or runs out of time does not stop the others: the table
# says what was and was not measured. Logs and results go to a work directory, then to $OUT
# (logs.tar.gz, table.txt, summary.json: few files, as the device tool brings back at most 8).
# Without a GPU it says "no device" and exits 0 having measured nothing.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1

DRY=0 FORCE=0 BUDGET=${FT_CHECK_BUDGET_S:-470} JOBS=$(nproc) BUILD="$ROOT/build-device"
TABLE_FROM=""
while (($#)); do
  case "$1" in
    --dry-run) DRY=1 ;;
    --force) FORCE=1 ;;  # run even when no GPU is detected (to see what fails)
    --budget) BUDGET=$2; shift ;;
    --jobs) JOBS=$2; shift ;;
    --build-dir) BUILD=$(realpath -m "$2"); shift ;;
    --table-from) TABLE_FROM=$2; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "device-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
# Python (the report, torch, the shard) runs without the bundle's libraries on its path.
PY="env -u LD_LIBRARY_PATH python3"
REPORT="$PY $ROOT/scripts/device_check_report.py"
if [[ -n "$TABLE_FROM" ]]; then exec $REPORT table "$TABLE_FROM"; fi

OUT=${OUT:-$ROOT/out}
W=${FT_CHECK_WORK:-$(mktemp -d /tmp/ft-device-check.XXXXXX)}
mkdir -p "$OUT" "$W"
START=$(date +%s)
END=$((START + BUDGET))
: > "$W/stages.tsv"
: > "$W/results.env"
result() { echo "$1=$2" >> "$W/results.env"; }

# ---- binaries: a carried bundle, or a build from source ------------------------------------
BUNDLE="$ROOT/.device-bundle"
if [[ -f "$ROOT/.device-bundle.tar.xz" ]]; then MODE=bundle-archive  # replaces an unpacked one
elif [[ -d "$BUNDLE/bin" ]]; then MODE=bundle
else MODE=source; fi
if [[ $MODE == source ]]; then BIN="$BUILD"; GPU_TESTS="$BUILD/tests/gpu"
else BIN="$BUNDLE/bin"; GPU_TESTS="$BUNDLE/bin/gpu_tests"; fi
TARGETS="ft-train ft-diagnose ft-diagnose-run"
for f in tests/gpu/*_test.cpp; do TARGETS+=" $(basename "$f" .cpp)"; done
CONFIGURE=(cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DFT_WERROR=OFF
           -DFT_WITH_CUDA=ON -DFT_WITH_CUPTI=ON -DFT_WITH_NCCL=ON -DFT_WITH_NVTX=ON -DFT_WITH_MPI=ON)
command -v ninja > /dev/null && CONFIGURE+=(-G Ninja)
# GPT-2 124M at T=1024 in bf16 (the issue's benchmark), on random GPT-2 token ids.
GPT2="--device cuda --layers 12 --heads 12 --channels 768 --vocab 50257 --seq-len 1024 --precision bf16 --loader-workers 2 --val-batches 0 --quiet"
BATCHES="96 64 48 32 24 16 8 4"

plan() {
  cat <<EOF
device-check plan (budget ${BUDGET}s, work dir $W, results to $OUT)
  0 probe       nvidia-smi -L (no GPU: say "no device", exit 0)
EOF
  if [[ $MODE == source ]]; then
    echo "  1 configure   ${CONFIGURE[*]}   [limit 90s; retried with AUTO backends if that fails]"
    echo "  1 build       cmake --build $BUILD -j$JOBS --target $TARGETS [cuda_train_bench]   [limit 330s]"
  else
    echo "  1 bundle      $MODE: binaries from $BIN (made by scripts/device-bundle.sh)   [limit 60s]"
  fi
  cat <<EOF
  2 gpu_tests   source build: ctest -L gpu -E PcieScenario; bundle: every test binary in $GPU_TESTS but the PCIe scenario (--gtest_output=json)   [limit 150s]
  3 shard       random GPT-2 token ids as an llm.c shard (python3)   [limit 60s]
  4 bench       cuda_train_bench --mode all --json (cuBLASLt bf16 GEMM peak, then GPT-2 124M T=1024 bf16 at the largest micro-batch that fits)   [limit 195s]
                without it: gemm_peak (8192^3 bf16 torch.matmul, limit 45s), then ft-train $GPT2 --micro-batch B for B in $BATCHES until one fits, --peak-gflops = that peak   [limit 150s]
  5 overhead    the benchmark run without and with --trace (CUPTI on), steps 3+ tokens/s   [limit 120s]
  6 pcie        pcie_scenario_gpu_test: --h2d pageable vs pinned through ft-diagnose run   [limit 120s]
  7 table       scripts/device_check_report.py table; logs.tar.gz, table.txt, summary.json to \$OUT
EOF
}

if ((DRY)); then plan; exit 0; fi

# run_stage NAME LIMIT CMD...: runs CMD under the smaller of LIMIT and the budget left, logging
# to W/NAME.log and a row of W/stages.tsv; returns CMD's status (99 when no time was left).
run_stage() {
  local name=$1 limit=$2; shift 2
  local left=$((END - $(date +%s)))
  local t=$((limit < left ? limit : left))
  if ((t < 10)); then
    printf '%s\tskipped: budget spent\t0\t\n' "$name" >> "$W/stages.tsv"
    return 99
  fi
  echo "device-check: $name (limit ${t}s)"
  local t0 rc status
  t0=$(date +%s)
  timeout --kill-after=10 "$t" "$@" > "$W/$name.log" 2>&1
  rc=$?
  case $rc in
    0) status=ok ;;
    124|137) status="timed out" ;;
    *) status="failed (status $rc)" ;;
  esac
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$(($(date +%s) - t0))" "$t" >> "$W/stages.tsv"
  return $rc
}

finish() {
  $REPORT table "$W" | tee "$W/table.txt"
  cp "$W/table.txt" "$W/summary.json" "$OUT/" 2>/dev/null
  # Logs (and small traces) in one archive: the device tool returns at most 8 files from $OUT.
  (cd "$W" && find . -type f -size -8M ! -name '*.bin' -print0 |
     tar --null -czf "$OUT/logs.tar.gz" -T -) 2>/dev/null
  exit 0
}

# ---- 0: is there a device? -----------------------------------------------------------------
probe() {
  if command -v nvidia-smi > /dev/null && nvidia-smi -L > "$W/nvidia-smi.txt" 2>&1 &&
     grep -q '^GPU' "$W/nvidia-smi.txt"; then
    result device "$(head -1 "$W/nvidia-smi.txt" | sed 's/ (UUID.*//')"
    return 0
  fi
  [[ -e /dev/nvidia0 ]] && { result device "/dev/nvidia0 (no nvidia-smi)"; return 0; }
  return 1
}
if ! probe && ((!FORCE)); then
  why="no nvidia-smi GPU and no /dev/nvidia0"
  echo "device-check: no device ($why): nothing was measured"
  result device "no device ($why)"
  result why_not_measured "not measured: no device"
  finish
fi
result mode "$MODE"

# ---- 1: binaries ---------------------------------------------------------------------------
build_from_source() {
  if ! run_stage configure 90 "${CONFIGURE[@]}"; then
    # A backend missing here (e.g. MPI): take what is found rather than nothing.
    local auto=("${CONFIGURE[@]//-DFT_WITH_MPI=ON/-DFT_WITH_MPI=AUTO}")
    auto=("${auto[@]//-DFT_WITH_NCCL=ON/-DFT_WITH_NCCL=AUTO}")
    auto=("${auto[@]//-DFT_WITH_CUPTI=ON/-DFT_WITH_CUPTI=AUTO}")
    run_stage configure_auto 60 "${auto[@]}" || return 1
  fi
  local targets=$TARGETS
  local help  # (grep -q on a pipe under pipefail: cmake's SIGPIPE would read as "no target")
  help=$(cmake --build "$BUILD" --target help 2>/dev/null)
  grep -q cuda_train_bench <<< "$help" && targets+=" cuda_train_bench"
  run_stage build 330 cmake --build "$BUILD" -j"$JOBS" --target $targets
}
unpack_bundle() {
  if [[ $MODE == bundle-archive ]]; then
    rm -rf "$BUNDLE"
    run_stage bundle 60 tar -xJf "$ROOT/.device-bundle.tar.xz" -C "$ROOT" || return 1
  fi
  [[ -x "$BIN/ft-train" ]] || { echo "device-check: $BIN/ft-train missing" > "$W/bundle.log"; return 1; }
  export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
# CUDA libraries ft links dynamically (cuBLASLt, CUPTI, NCCL) from the toolkit or pip wheels.
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/extras/CUPTI/lib64 \
         $($PY -c 'import nvidia, os; print(" ".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in os.listdir(p)))' 2>/dev/null); do
  [[ -d $d ]] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
export LD_LIBRARY_PATH
if [[ $MODE == source ]]; then build_from_source; else unpack_bundle; fi
built=$?
export FT_BINARY_DIR="$BIN"  # where the scenario test finds ft-diagnose and ft-train
BENCH_BIN=""
for b in "$BIN/bench/cuda_train_bench" "$BIN/cuda_train_bench"; do [[ -x $b ]] && BENCH_BIN=$b && break; done

# ---- 2: GPU tests --------------------------------------------------------------------------
gpu_tests() {
  local n=0
  for t in "$GPU_TESTS"/*_test; do
    [[ -x $t ]] || continue
    [[ $(basename "$t") == pcie_scenario_gpu_test ]] && continue
    echo "== $(basename "$t")"
    timeout 120 "$t" --gtest_output=json:"$W/gtest_$(basename "$t").json" || true
    n=$((n + 1))
  done
  ((n > 0)) || { echo "no GPU test binaries in $GPU_TESTS"; return 1; }
}
if ((built == 0)) && [[ $MODE == source ]]; then
  # ctest -L gpu: also the mpirun registrations (nccl_communicator_mpi_test_np1/np2).
  run_stage gpu_tests 150 ctest --test-dir "$BUILD" -L gpu -E PcieScenario --timeout 120 \
    --output-on-failure
  read -r p s f < <($REPORT ctest-counts "$W/gpu_tests.log")
  result tests_passed "$p"; result tests_skipped "$s"; result tests_failed "$f"
elif ((built == 0)); then
  run_stage gpu_tests 150 bash -c "$(declare -f gpu_tests); W='$W' GPU_TESTS='$GPU_TESTS' gpu_tests"
  read -r p s f < <($REPORT gtest-counts "$W"/gtest_*.json)
  result tests_passed "$p"; result tests_skipped "$s"; result tests_failed "$f"
else
  result why_not_measured "not measured: the build failed (see build.log)"
fi

# ---- 3, 4: bf16 GEMM peak and the training benchmark ---------------------------------------
# cuda_train_bench (bench/, when built) measures both: the cuBLASLt bf16 GEMM peak, then GPT-2
# 124M at the largest micro-batch that fits, MFU against that peak (--json). Without it: a
# torch.matmul peak and ft-train --device cuda at descending micro-batches.
gemm_peak_torch() {
  env -u LD_LIBRARY_PATH python3 - <<'PY'
import time, torch
n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(3): a @ b
torch.cuda.synchronize()
reps = 20
t0 = time.perf_counter()
for _ in range(reps): a @ b
torch.cuda.synchronize()
dt = time.perf_counter() - t0
print("GEMM_PEAK_TFLOPS %.1f" % (2 * n**3 * reps / dt / 1e12))
PY
}
SHARD="$W/gpt2_random.bin"
make_shard() {  # llm.c shard (magic 20240520, version 1, uint16 ids) of random GPT-2 tokens
  env -u LD_LIBRARY_PATH python3 - "$SHARD" <<'PY'
import random, sys, array
n = 1 << 23
random.seed(1337)
tok = array.array("H", (random.randrange(50257) for _ in range(n)))
hdr = array.array("i", [20240520, 1, n] + [0] * 253)
with open(sys.argv[1], "wb") as f:
    f.write(hdr.tobytes()); f.write(tok.tobytes())
PY
}
bench_ft_train() {  # the largest micro-batch that fits, then its tokens/s and MFU
  local peak_flag=""
  [[ -n ${PEAK:-} ]] && peak_flag="--peak-gflops $(awk -v p="$PEAK" 'BEGIN { printf "%.0f", p * 1000 }')"
  for B in $BATCHES; do
    echo "== micro-batch $B"
    if "$BIN/ft-train" $GPT2 --micro-batch "$B" --steps 10 --warmup-excluded 3 --data "$SHARD" \
         --metrics "$W/bench_B$B.jsonl" $peak_flag; then
      echo "BENCH_MICRO_BATCH $B"
      return 0
    fi
  done
  return 1
}
if ((built == 0)); then
  run_stage shard 60 bash -c "$(declare -f make_shard); SHARD='$SHARD' make_shard"
  if [[ -n $BENCH_BIN ]]; then
    run_stage bench 195 "$BENCH_BIN" --mode all --json "$W/bench.json"
    read -r mb tps mfu peak < <($REPORT bench-json "$W/bench.json" || echo "- - - -")
    for v in mb tps mfu peak; do [[ ${!v} == - ]] && printf -v "$v" '%s' ""; done
  else
    run_stage gemm_peak 45 bash -c "$(declare -f gemm_peak_torch); gemm_peak_torch"
    peak=$(grep -oE 'GEMM_PEAK_TFLOPS [0-9.]+' "$W/gemm_peak.log" | tail -1 | grep -oE '[0-9.]+$')
    run_stage bench 150 bash -c "$(declare -f bench_ft_train); BIN='$BIN' GPT2='$GPT2' BATCHES='$BATCHES' SHARD='$SHARD' W='$W' PEAK='${peak:-}' bench_ft_train"
    mb=$(grep -oE 'BENCH_MICRO_BATCH [0-9]+' "$W/bench.log" | tail -1 | grep -oE '[0-9]+$')
    if [[ -n $mb ]]; then read -r tps mfu _ _ < <($REPORT metrics "$W/bench_B$mb.jsonl" 3); fi
  fi
  [[ -n ${peak:-} ]] && result gemm_peak_tflops "$peak"
  [[ -n ${mb:-} ]] && result bench_micro_batch "$mb"
  [[ -n ${tps:-} ]] && result bench_tokens_per_s "$tps"
  if [[ -n ${mfu:-} && -n ${peak:-} ]]; then result bench_mfu "$mfu"
  elif [[ -n ${mfu:-} ]]; then result bench_mfu "$mfu (vs ft's stated peak: GEMM peak not measured)"; fi
fi

# ---- 5: profiler overhead (CUPTI on) ---------------------------------------------------------
overhead() {  # the same run without and with --trace; steps 3+ of each (B halved if it OOMs)
  local b=$MB
  while ((b >= 1)); do
    echo "== micro-batch $b"
    if "$BIN/ft-train" $GPT2 --micro-batch "$b" --steps 12 --warmup-excluded 3 --data "$SHARD" \
         --metrics "$W/overhead_off.jsonl"; then
      "$BIN/ft-train" $GPT2 --micro-batch "$b" --steps 12 --warmup-excluded 3 --data "$SHARD" \
        --metrics "$W/overhead_on.jsonl" --trace "$W/overhead_trace.json" --profile-steps 3-11
      return
    fi
    b=$((b / 2))
  done
  return 1
}
if ((built == 0)) && [[ -n ${mb:-} ]]; then
  run_stage overhead 120 bash -c "$(declare -f overhead); BIN='$BIN' GPT2='$GPT2' MB='$mb' SHARD='$SHARD' W='$W' overhead"
  read -r off _ < <($REPORT metrics "$W/overhead_off.jsonl" 3)
  read -r on _ < <($REPORT metrics "$W/overhead_on.jsonl" 3)
  if [[ -n ${off:-} && -n ${on:-} ]]; then
    result profiler_overhead_pct "$(awk -v a="$off" -v b="$on" 'BEGIN { printf "%.2f", 100 * (a / b - 1) }')"
  fi
  grep -o '"device_activity":"[^"]*"' "$W/overhead_trace.json" 2>/dev/null | head -1 >> "$W/overhead.log"
fi

# ---- 6: the PCIe scenario --------------------------------------------------------------------
if ((built == 0)); then
  run_stage pcie 120 "$GPU_TESTS/pcie_scenario_gpu_test" --gtest_output=json:"$W/pcie.json"
  rc=$?
  v=$(grep -oE 'PCIE_VERDICT .*' "$W/pcie.log" | tail -1)
  read -r pp ps pf < <($REPORT gtest-counts "$W/pcie.json")
  if ((pf > 0)); then verdict="FAIL ${v#PCIE_VERDICT }"
  elif ((ps > 0)); then verdict="skipped: $(grep -m1 -oE 'needs a CUDA device.*|ft-train has no --device.*' "$W/pcie.log")"
  elif ((pp > 0)); then verdict="ok: ${v#PCIE_VERDICT }"
  else verdict="not run (status $rc)"; fi
  result pcie_verdict "$verdict"
fi

finish

#!/usr/bin/env bash
# memory_model_bench.sh: the memory model's predicted peak against the allocator's measured peak
# (ft-train's metrics summary, mem_peak, every rank) for one process and for 2 ranks under DP and
# ZeRO 1-3. The allocator is deterministic for a configuration: one run each.
# usage: bench/memory_model_bench.sh [BUILD_DIR]   MODEL overrides the model/batch flags
# (default: bench/dp_bench.sh's L4 C256 T128 B4, --bucket-mb 1).
set -euo pipefail
build=${1:-build}
model=${MODEL:-"--layers 4 --heads 4 --channels 256 --seq-len 128 --micro-batch 4 --bucket-mb 1"}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
common="$model --threads 1 --steps 3 --val-batches 0 --loader-workers 0 --data kjv -q"
peak() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().strip().split('\n')[-1])['summary']['mem_peak'])" "$1"; }
row() {  # name, predicted, measured files...
  local name=$1 pred=$2; shift 2
  for f in "$@"; do
    local m; m=$(peak "$f")
    python3 -c "import sys; p,m=int(sys.argv[2]),int(sys.argv[3]); print(f'| {sys.argv[1]} | {p:,} | {m:,} | {100*(p/m-1):+.2f}% |')" "$name ($(basename "$f" .jsonl))" "$pred" "$m"
  done
}
echo "model: $model"
echo "| run | predicted | measured | error |"
echo "|---|---:|---:|---:|"
"$build/ft-train" $common --metrics "$tmp/one.jsonl" > /dev/null
row "1 process" "$("$build/bench/memory_predict" $common | sed -n 's/^predicted \([0-9]*\).*/\1/p')" "$tmp/one.jsonl"
for z in 0 1 2 3; do
  mpirun -np 2 --bind-to core "$build/ft-train" $common --dp 2 --zero $z --metrics "$tmp/z$z.jsonl" > /dev/null
  pred=$("$build/bench/memory_predict" $common --dp 2 --zero $z | sed -n 's/^predicted \([0-9]*\).*/\1/p')
  row "2 ranks, zero $z" "$pred" "$tmp/z$z.rank0.jsonl" "$tmp/z$z.rank1.jsonl"
done

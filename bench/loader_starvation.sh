#!/usr/bin/env bash
# loader_starvation.sh: ft-train's default config at 0/1/2 loader workers, with and without
# preprocessing cost; prints mean and worst data-wait share of step time (from --metrics).
# usage: bench/loader_starvation.sh [BUILD_DIR] [STEPS] [COSTS...]   (default: build 40 0 2000)
set -euo pipefail
build=${1:-build}; steps=${2:-40}; shift $(( $# > 2 ? 2 : $# )) || true
costs=("$@"); [ ${#costs[@]} -eq 0 ] && costs=(0 2000)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| preprocess-cost | workers | step ms | data wait ms | wait share | worst step | steps > 5% wait | preprocess ms |"
echo "|---|---|---|---|---|---|---|---|"
for cost in "${costs[@]}"; do for w in 0 1 2; do
  OMP_WAIT_POLICY=passive "$build/ft-train" --layers 4 --heads 4 --channels 128 --seq-len 128 \
    --micro-batch 8 --steps "$steps" --warmup 10 --lr 2e-3 --val-batches 0 -q \
    --loader-workers "$w" --preprocess-cost "$cost" --metrics "$tmp/m.jsonl" > /dev/null
  python3 - "$cost" "$w" "$tmp/m.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[3])]
rows = [r for r in rows if "step" in r][2:]  # the first two steps create GEMM primitives
st = sum(r["step_ms"] for r in rows); wt = sum(r["data_wait_ms"] for r in rows)
worst = max(r["data_wait_ms"] / r["step_ms"] for r in rows)
starved = sum(1 for r in rows if r["data_wait_ms"] > 0.05 * r["step_ms"])
pre = sum(r["data_preprocess_ms"] for r in rows) / len(rows)
print(f"| {sys.argv[1]} | {sys.argv[2]} | {st/len(rows):.1f} | {wt/len(rows):.3f} | {100*wt/st:.2f}% "
      f"| {100*worst:.1f}% | {starved}/{len(rows)} | {pre:.3f} |")
PY
done; done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

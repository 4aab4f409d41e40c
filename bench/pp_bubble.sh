#!/usr/bin/env bash
# pp_bubble.sh: the measured 1F1B pipeline bubble of PP=2 for m = 1, 2, 4, 8 micro-batches
# against the (p-1)/m theory, from ft-train's per-stage timers (pp_wait_ms / pp_busy_ms per step).
# Usage: bench/pp_bubble.sh [BUILD_DIR]   env: OUT, ROUNDS (0: analyse OUT again), STEPS, MS,
#        MODEL (the ft-train model flags)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=${OUT:-/tmp/ft_pp_bubble}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-12}
MS=${MS:-"1 2 4 8"}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# Two stages of two blocks each; the last stage also runs the LM head (V=256: ~8% more work).
read -r -a model <<< "${MODEL:---layers 4 --heads 4 --channels 128 --seq-len 64 --micro-batch 4}"
flags=("${model[@]}" --threads 1 --loader-workers 0 --val-batches 0 -q --warmup 2 --steps "$STEPS")
mkdir -p "$OUT"
if [[ "$ROUNDS" -gt 0 ]]; then rm -f "$OUT"/m*.jsonl; fi  # ROUNDS=0: analyse the runs in OUT again
echo "load before: $(cat /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  for m in $MS; do  # alternating: each m once per round
    mpirun -np 2 --oversubscribe "$BUILD/ft-train" "${flags[@]}" --pp 2 --micro-batches "$m" \
      --metrics "$OUT/m$m.r$r.jsonl" > /dev/null
  done
done
echo "load after: $(cat /proc/loadavg)"
python3 - "$OUT" "$STEPS" $MS <<'EOF'
import glob, json, statistics, sys
out, steps, ms = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3:]]
p = 2
print(f"p={p}, steps 2..{steps - 1} of each run; bubble = wait / busy per stage "
      "(median over runs, [min, max])")
# Balanced theory: (p-1)/m. With the measured per-micro-batch stage times a (stage 0)
# and c (stage 1), a 2-stage 1F1B step takes m*max(a,c) + min(a,c), so stage s
# idles that minus m*own: the slower stage (p-1)/m of the faster's time, the faster
# stage also m*|a-c| (imbalance).
print("| m | theory (p-1)/m | theory, measured stage times s0, s1 | measured s0 | measured s1 "
      "| busy ms/step s0, s1 | wait ms/step s0, s1 |")
print("|---|---|---|---|---|---|---|")
for m in ms:
    cols, busy, wait = [], [], []
    for stage in range(p):
        ratios, b_all, w_all = [], [], []
        for f in sorted(glob.glob(f"{out}/m{m}.r*.rank{stage}.jsonl")):
            rows = [json.loads(l) for l in open(f)]
            rows = [r for r in rows if "step" in r and r["step"] >= 2]
            b = sum(r["pp_busy_ms"] for r in rows)
            w = sum(r["pp_wait_ms"] for r in rows)
            ratios.append(w / b)
            b_all.append(b / len(rows))
            w_all.append(w / len(rows))
        cols.append(f"{statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]")
        busy.append(statistics.median(b_all))
        wait.append(statistics.median(w_all))
    a, c = busy[0] / m, busy[1] / m
    span = m * max(a, c) + min(a, c)
    adj = [(span - m * a) / (m * a), (span - m * c) / (m * c)]
    print(f"| {m} | {(p - 1) / m:.3f} | {adj[0]:.3f}, {adj[1]:.3f} | {cols[0]} | {cols[1]} "
          f"| {busy[0]:.1f}, {busy[1]:.1f} | {wait[0]:.1f}, {wait[1]:.1f} |")
EOF

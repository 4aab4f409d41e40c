#!/usr/bin/env bash
# dp_bench.sh: data-parallel scaling on 2 ranks against 1 (1 thread each, same per-rank micro-batch)
# and the exposed communication share with and without overlap; alternating runs, medians. Two
# independent 1-rank processes run at once as well: on a shared machine they show what two
# processes can get at all, which separates machine contention from DP's own overhead.
# usage: bench/dp_bench.sh [BUILD_DIR] [ROUNDS] [STEPS]   (default: build 3 12)
# MODEL overrides the model/batch flags (default: L4 C256 T128 B4); DATA the corpus (kjv);
# BUCKET_MB the gradient bucket size (default 1: one block per bucket, 5 buckets; the 25 MiB
# default would make the whole 13 MB model one bucket, ready only when backward ends).
set -euo pipefail
build=${1:-build}; rounds=${2:-3}; steps=${3:-12}
model=${MODEL:-"--layers 4 --heads 4 --channels 256 --seq-len 128 --micro-batch 4"}
data=${DATA:-kjv}
bucket=${BUCKET_MB:-1}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
common="$model --threads 1 --steps $steps --warmup 2 --val-batches 0 --loader-workers 0 --data $data --bucket-mb $bucket -q"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: $model, --bucket-mb $bucket, $steps steps (first 2 excluded), $rounds rounds alternating"
for r in $(seq 1 "$rounds"); do
  "$build/ft-train" $common --metrics "$tmp/one.$r.jsonl" > /dev/null
  mpirun -np 2 --bind-to core "$build/ft-train" $common --dp 2 --metrics "$tmp/ovl.$r.jsonl" > /dev/null
  mpirun -np 2 --bind-to core "$build/ft-train" $common --dp 2 --no-overlap --metrics "$tmp/seq.$r.jsonl" > /dev/null
  for z in 1 2 3; do
    mpirun -np 2 --bind-to core "$build/ft-train" $common --dp 2 --zero $z --metrics "$tmp/z$z.$r.jsonl" > /dev/null
  done
  "$build/ft-train" $common --metrics "$tmp/one_b.$r.jsonl" > /dev/null  # 1 rank again: brackets drift
  # Two independent 1-rank processes at once (no MPI): what the machine gives two processes.
  taskset -c 0 "$build/ft-train" $common --metrics "$tmp/pair.$r.rank0.jsonl" > /dev/null &
  taskset -c 1 "$build/ft-train" $common --metrics "$tmp/pair.$r.rank1.jsonl" > /dev/null
  wait
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp" "$rounds" <<'PY'
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
def summary(path):
    return [json.loads(l) for l in open(path)][-1]["summary"]
kinds = ["one", "one_b", "pair", "ovl", "seq", "z1", "z2", "z3"]
names = {"one": "1 rank", "one_b": "1 rank (again)", "pair": "2 independent 1-rank processes at once (sum)",
         "ovl": "2 ranks, overlap", "seq": "2 ranks, --no-overlap", "z1": "2 ranks, ZeRO-1 (overlap)",
         "z2": "2 ranks, ZeRO-2 (overlap)", "z3": "2 ranks, ZeRO-3 (prefetch one block ahead)"}
rows = {k: [] for k in kinds}  # per round: (tokens/s, step ms, comm ms, comm share, peak bytes, held at start)
for r in range(1, rounds + 1):
    for k in kinds:
        files = [f"{tmp}/{k}.{r}.jsonl"] if k.startswith("one") else \
                [f"{tmp}/{k}.{r}.rank0.jsonl", f"{tmp}/{k}.{r}.rank1.jsonl"]
        ss = [summary(f) for f in files]
        tok = sum(s["mean_tokens_per_s"] for s in ss) if k == "pair" else ss[0]["mean_tokens_per_s"]
        rows[k].append((tok, ss[0]["mean_step_ms"], statistics.mean(s["mean_comm_ms"] for s in ss),
                        statistics.mean(s["comm_exposed_share"] for s in ss), max(s["mem_peak"] for s in ss),
                        max(s["mem_at_start"] for s in ss)))
med = lambda xs: statistics.median(xs)
# Ratios are taken within a round (runs minutes apart drift on a shared machine), then the median.
one = [(a[0] + b[0]) / 2 for a, b in zip(rows["one"], rows["one_b"])]
print("| run | tokens/s | step ms | comm ms (blocked) | exposed comm share | efficiency: tok/s / (2 x 1 rank) | tok/s / 2 independent processes | peak memory (max over ranks) | held before step 0 |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for k in kinds:
    v = rows[k]
    eff = "" if k.startswith("one") else f"{med([x[0] / (2 * o) for x, o in zip(v, one)]):.2f}"
    rel = "" if k.startswith("one") or k == "pair" else f"{med([x[0] / p[0] for x, p in zip(v, rows['pair'])]):.2f}"
    print(f"| {names[k]} | {med([x[0] for x in v]):.0f} | {med([x[1] for x in v]):.1f} | {med([x[2] for x in v]):.2f} "
          f"| {100 * med([x[3] for x in v]):.1f}% | {eff} | {rel} | {med([x[4] for x in v]) / 2**20:.1f} MiB "
          f"| {med([x[5] for x in v]) / 2**20:.1f} MiB |")
print("medians over rounds; per-round tokens/s:", {k: [round(x[0]) for x in v] for k, v in rows.items()})
PY

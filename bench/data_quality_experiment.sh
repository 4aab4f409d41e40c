#!/usr/bin/env bash
# data_quality_experiment.sh: trains the same small byte-level model on a raw corpus (KJV +
# fortunes with injected duplicates and noise) and on its `ft-data clean` output at the same
# token budget, validating on a clean held-out set; reports tokens to a target held-out loss.
# Usage: bench/data_quality_experiment.sh [BUILD_DIR]   env: OUT, SEEDS, STEPS, VAL_EVERY
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=${OUT:-/tmp/ft_data_quality_experiment}
SEEDS=${SEEDS:-"1 2 3"}
STEPS=${STEPS:-2000}
VAL_EVERY=${VAL_EVERY:-50}
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive
MODEL=(--layers 2 --heads 2 --channels 64 --seq-len 128 --micro-batch 8 --lr 3e-3 --min-lr 3e-4
       --warmup 50 --threads 2)
mkdir -p "$OUT"
echo "load before: $(cat /proc/loadavg)" | tee "$OUT/load.txt"

cache=${FT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ft}
if [[ ! -f "$cache/kjv.txt" ]]; then  # ft-train generates the cached KJV text on first use
  "$BUILD/ft-train" --data kjv --steps 1 --layers 1 --heads 1 --channels 16 --seq-len 16 \
    --micro-batch 1 --val-batches 0 -q > /dev/null
fi
python3 bench/make_raw_corpus.py --kjv "$cache/kjv.txt" --out "$OUT" --seed 7
"$BUILD/ft-data" clean "$OUT/raw.txt" --out "$OUT/clean.txt" --stats "$OUT/clean_stats.json"

held_bytes=$(stat -c %s "$OUT/heldout.txt")
VAL_BATCHES=$(( (held_bytes - 1) / (8 * 128) ))  # the whole held-out set, once
for seed in $SEEDS; do
  for set in raw clean; do
    echo "== $set, seed $seed"
    "$BUILD/ft-train" "${MODEL[@]}" --data "$OUT/$set.txt" --val-data "$OUT/heldout.txt" \
      --val-every "$VAL_EVERY" --val-batches "$VAL_BATCHES" --steps "$STEPS" --seed "$seed" \
      --metrics "$OUT/$set.$seed.jsonl" -q | tail -1
  done
done
echo "load after: $(cat /proc/loadavg)" | tee -a "$OUT/load.txt"

python3 - "$OUT" "$SEEDS" <<'PY'
import json, sys
out, seeds = sys.argv[1], sys.argv[2].split()
def curve(path):
    pts = []
    for line in open(path):
        j = json.loads(line)
        if "step" in j and j.get("val_loss") is not None:
            pts.append(((j["step"] + 1) * 8 * 128, j["val_loss"]))
    return pts
runs = {(s, k): curve(f"{out}/{k}.{s}.jsonl") for s in seeds for k in ("raw", "clean")}
# Target: the lowest held-out loss every run reaches (max over runs of each run's minimum).
target = max(min(v for _, v in pts) for pts in runs.values())
def tokens_to(pts, t):
    prev = (0, float("inf"))
    for tok, v in pts:
        if v <= t:
            if prev[1] == float("inf"):
                return tok
            return prev[0] + (tok - prev[0]) * (prev[1] - t) / (prev[1] - v)  # interpolated
        prev = (tok, v)
    return None
# Also two easier targets, to show how the ratio depends on the level chosen.
targets = [target, target + 0.1, target + 0.2]
rows = []
for s in seeds:
    for t in targets:
        r, c = tokens_to(runs[(s, "raw")], t), tokens_to(runs[(s, "clean")], t)
        rows.append({"seed": int(s), "target": t, "raw_tokens": r, "clean_tokens": c, "ratio": r / c,
                     "raw_final_val": runs[(s, "raw")][-1][1],
                     "clean_final_val": runs[(s, "clean")][-1][1]})
mean = {t: sum(x["ratio"] for x in rows if x["target"] == t) / len(seeds) for t in targets}
summary = {"target_val_loss": target, "runs": rows,
           "mean_ratio": {f"{t:.4f}": v for t, v in mean.items()}}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
print(f"main target: held-out loss {target:.4f} (the lowest loss every run reaches); +0.1, +0.2 also shown")
print("| seed | target loss | raw: tokens to target | clean: tokens to target | raw/clean | final val raw | final val clean |")
print("|---|---|---|---|---|---|---|")
for x in rows:
    print(f"| {x['seed']} | {x['target']:.4f} | {x['raw_tokens']:.0f} | {x['clean_tokens']:.0f} | "
          f"{x['ratio']:.2f}x | {x['raw_final_val']:.4f} | {x['clean_final_val']:.4f} |")
import math
# 95% interval of the ratio over seeds: Student's t on the log ratios (geometric mean).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
for t, v in mean.items():
    logs = [math.log(x["ratio"]) for x in rows if x["target"] == t]
    n = len(logs)
    g = math.exp(sum(logs) / n)
    if n > 1:
        sd = math.sqrt(sum((l - sum(logs) / n) ** 2 for l in logs) / (n - 1))
        half = T975.get(n - 1, 1.96) * sd / math.sqrt(n)
        lo, hi = math.exp(math.log(g) - half), math.exp(math.log(g) + half)
        summary.setdefault("interval95", {})[f"{t:.4f}"] = [lo, hi]
        print(f"mean raw/clean ratio at {t:.4f}: {v:.2f}x; geometric mean {g:.2f}x, 95% interval "
              f"[{lo:.2f}, {hi:.2f}] over {n} seeds")
    else:
        print(f"mean raw/clean ratio at {t:.4f}: {v:.2f}x (one seed: no interval)")
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
PY

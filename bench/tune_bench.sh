#!/usr/bin/env bash
# tune_bench.sh: ft-tune guided vs grid on the diagnosis scenarios, then tuned vs default
# side by side. Usage: bench/tune_bench.sh [BUILD_DIR] [OUT_DIR]
# Prints one Markdown table row per scenario; the sweeps' reports stay in OUT_DIR.
set -u
BUILD=${1:-build}
OUT=${2:-/tmp/ft_tune_bench}
TRIAL_STEPS=${TRIAL_STEPS:-6}
VERIFY_STEPS=${VERIFY_STEPS:-40}
REPEATS=${REPEATS:-3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
TUNE="$BUILD/ft-tune"
TRAIN="$BUILD/ft-train"
mkdir -p "$OUT"
HELP=$("$TRAIN" --help)
has_flag() { grep -q -- "--$1 " <<<"$HELP"; }

DATA="--data kjv"
MODEL="--layers 2 --heads 4 --channels 128 --seq-len 64 --threads 2"
declare -A SCEN
SCEN[compute-fp32]="$DATA $MODEL --micro-batch 8 --grad-accum 1"
SCEN[underfilled-batch]="$DATA $MODEL --micro-batch 1 --grad-accum 8"
if has_flag preprocess-cost && has_flag loader-workers; then
  SCEN[data-bound]="$DATA $MODEL --micro-batch 8 --loader-workers 0 --preprocess-cost 2000"
else
  echo "data-bound: SKIPPED: ft-train has no --loader-workers/--preprocess-cost (issue 3 loader not merged)" >&2
fi
DIAG="${FT_DIAGNOSE:-$BUILD/ft-diagnose}"

# Median tokens/s over REPEATS alternating 16-step runs of two ft-train config files.
tps() { "$TRAIN" --config "$1" --steps 16 -q --metrics "$OUT/sbs.jsonl" >/dev/null 2>&1 &&
  tail -1 "$OUT/sbs.jsonl" | python3 -c 'import json,sys;print(json.load(sys.stdin)["summary"]["mean_tokens_per_s"])'; }
side_by_side() {  # $1 $2 config files; prints "median1 median2"
  local a=() b=()
  for r in $(seq "$REPEATS"); do a+=("$(tps "$1")"); b+=("$(tps "$2")"); done
  python3 -c "import statistics,sys; a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]; print(statistics.median(a), statistics.median(b))" "${a[*]}" "${b[*]}"
}
# The baseline flags as a config file (from the sweep's report.json).
default_cfg() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1]+"/report.json")); print("\n".join(f"{k} = {v or \"true\"}" for k,v in r["baseline"].items()))' "$1" > "$1/default.cfg"; }

summary() {  # $1 sweep dir -> "trials best_tps change verified_base verified_best"
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1] + "/report.json"))
v = r.get("verified", {})
print(json.dumps({"trials": r["trials_run"], "best_tps": r.get("best_tokens_per_s", 0),
                  "change": r["best_change"], "stop": r["stop_reason"],
                  "base_loss": v.get("baseline_smoothed_loss"), "best_loss": v.get("best_smoothed_loss")}))
PY
}

echo "| scenario | strategy | trials | best change | sweep best tok/s | default tok/s (side by side) | tuned tok/s (side by side) | speed-up | smoothed loss default / tuned |"
echo "|---|---|---:|---|---:|---:|---:|---:|---|"
for name in "${!SCEN[@]}"; do
  flags=${SCEN[$name]}
  for strategy in ${STRATEGIES:-grid guided}; do
    dir="$OUT/$name-$strategy"
    [[ -n ${KEEP_GRID:-} && $strategy == grid && -f $dir/report.json ]] && { echo "| $name | grid | (kept from an earlier run: $dir) |"; continue; }
    rm -rf "$dir"
    if [[ $strategy == guided && ! -x $DIAG ]]; then
      echo "| $name | guided | - | SKIPPED: no ft-diagnose at $DIAG (issue 4 not merged) | | | | | |"
      continue
    fi
    start=$(date +%s)
    FT_DIAGNOSE=$DIAG "$TUNE" --out "$dir" --strategy "$strategy" --trial-steps "$TRIAL_STEPS" \
      --verify-steps "$VERIFY_STEPS" $flags 2>"$dir.progress.log" >"$dir.log"
    rc=$?
    if [[ $rc != 0 ]]; then
      echo "| $name | $strategy | - | FAILED (exit $rc): $(tail -1 "$dir.progress.log") | | | | | |"
      continue
    fi
    s=$(summary "$dir")
    default_cfg "$dir"
    read -r base tuned <<<"$(side_by_side "$dir/default.cfg" "$dir/best.cfg")"
    python3 - "$name" "$strategy" "$s" "$base" "$tuned" "$(( $(date +%s) - start ))" <<'PY'
import json, sys
name, strategy, s, base, tuned, secs = sys.argv[1:]
s = json.loads(s); base = float(base); tuned = float(tuned)
loss = "-" if s["base_loss"] is None else f'{s["base_loss"]:.4f} / {s["best_loss"]:.4f}'
print(f'| {name} | {strategy} | {s["trials"]} | {s["change"]} | {s["best_tps"]:.0f} | {base:.0f} | '
      f'{tuned:.0f} | {tuned / base:.2f}x | {loss} |  <!-- {secs} s; stop: {s["stop"]} -->')
PY
  done
  g="$OUT/$name-grid/best.cfg"; h="$OUT/$name-guided/best.cfg"
  if [[ -f $g && -f $h ]]; then
    read -r gt ht <<<"$(side_by_side "$g" "$h")"
    python3 -c "import sys; g,h=map(float,sys.argv[2:]); print(f'| {sys.argv[1]} | guided vs grid best, side by side | | | | {g:.0f} (grid) | {h:.0f} (guided) | guided/grid {h/g:.2f} | |')" "$name" "$gt" "$ht"
  fi
done

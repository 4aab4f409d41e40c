#!/usr/bin/env bash
# prediction_errors.sh: how right are the findings' predicted step times? Runs ft-tune guided on
# the engine's diagnosis scenarios (those of bench/tune_bench.sh) and on the PyTorch example
# (examples/pytorch/spec.json), then pools every checked prediction (report.json "predictions":
# a finding's predicted step against its knob's side-by-side measurement) and prints the table
# and the median |error| per finding class.
# Usage: bench/prediction_errors.sh [BUILD_DIR] [OUT_DIR]; env SCENARIOS (default: data-bound
# compute-fp32 underfilled memory pytorch), KEEP=1 reuses finished sweeps.
set -u
BUILD=${1:-build}
OUT=${2:-/tmp/ft_prediction_errors}
SCENARIOS=${SCENARIOS:-"data-bound compute-fp32 underfilled memory pytorch"}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export FT_DIAGNOSE=${FT_DIAGNOSE:-$BUILD/ft-diagnose}
mkdir -p "$OUT"
COMMON="--data kjv --threads 1 --seed 1337"
declare -A SCEN
SCEN[data-bound]="--layers 2 --heads 2 --channels 64 --seq-len 64 --micro-batch 8 --precision bf16 --loader-workers 0 --preprocess-cost 4000 --trial-steps 24"
SCEN[compute-fp32]="--layers 2 --heads 2 --channels 128 --seq-len 64 --micro-batch 16"
SCEN[underfilled]="--layers 2 --heads 2 --channels 64 --seq-len 32 --micro-batch 1 --grad-accum 4 --precision bf16"
SCEN[memory]="--layers 2 --heads 2 --channels 32 --seq-len 128 --micro-batch 16 --precision bf16 --memory-limit 64M --allocator-caching false"
for name in $SCENARIOS; do
  dir="$OUT/$name"
  if [[ -n ${KEEP:-} && -f $dir/report.json ]]; then continue; fi
  rm -rf "$dir"
  if [[ $name == pytorch ]]; then
    "$BUILD/ft-tune" --spec "$ROOT/examples/pytorch/spec.json" --out "$dir" --strategy guided \
      --repeats 3 --confirm-rounds 0 --trial-steps 12 --verify-steps 16 >"$dir.log" 2>&1
  else
    [[ -n ${SCEN[$name]:-} ]] || { echo "prediction_errors: unknown scenario '$name'" >&2; exit 2; }
    # shellcheck disable=SC2086
    "$BUILD/ft-tune" --out "$dir" --strategy guided --confirm-rounds 0 --verify-steps 40 \
      $COMMON ${SCEN[$name]} >"$dir.log" 2>&1
  fi
  rc=$?
  [[ $rc == 0 ]] || echo "prediction_errors: $name failed (exit $rc): $(tail -1 "$dir.log")" >&2
done
python3 - "$OUT" $SCENARIOS <<'PY'
import json, os, statistics, sys
out, names = sys.argv[1], sys.argv[2:]
by = {}
print("| sweep | finding class | knob | predicted ms/step | measured ms/step | error |")
print("|---|---|---|---|---|---|")
for n in names:
    p = os.path.join(out, n, "report.json")
    if not os.path.exists(p):
        continue
    for x in json.load(open(p)).get("predictions", []):
        by.setdefault(x["class"], []).append(abs(x["error"]))
        print(f"| {n} | {x['class']} | {x['knob']} | {x['predicted_step_ms']:.2f} | "
              f"{x['measured_step_ms']:.2f} | {100 * x['error']:+.1f}% |")
print()
allv = [v for vs in by.values() for v in vs]
for c, vs in sorted(by.items()):
    print(f"median |error| {c}: {100 * statistics.median(vs):.1f}% (n={len(vs)})")
if allv:
    print(f"median |error| all: {100 * statistics.median(allv):.1f}% (n={len(allv)})")
PY

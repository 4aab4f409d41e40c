#!/usr/bin/env bash
# tune_bench.sh: ft-tune guided vs grid on the diagnosis scenarios, then the default, grid's best
# and guided's best measured side by side. Usage: bench/tune_bench.sh [BUILD_DIR] [OUT_DIR]
#
# Both strategies get the same space (--knobs with every dimension: guided then skips a knob
# outside it), seed and trial length. Each sweep ends in its own confirmation round. Afterwards
# the three configurations run ROUNDS times each, alternating (A B C, C B A, ...), and every
# ratio is a median of per-round ratios, so drift in machine load cancels. Prints a Markdown
# table; OUT_DIR keeps the sweeps and OUT_DIR/summary.json the numbers.
# Env: SCENARIOS, TRIAL_SECONDS (1: ft-tune --trial-seconds, each trial measures about that much
# of the baseline's steps; 0: fixed --trial-steps), TRIAL_STEPS (the floor, or the fixed length:
# 10; data-bound 24, so a trial spans two of the in-line loader's chunk bursts), VERIFY_STEPS
# (40), ROUNDS (9), SBS_SECONDS (2: the side-by-side runs measure about that much of the
# default's steps; 0: SBS_STEPS), SBS_STEPS (34, the floor), KEEP=1 (reuse finished sweeps).
set -u
BUILD=${1:-build}
OUT=${2:-/tmp/ft_tune_bench}
TRIAL_STEPS=${TRIAL_STEPS:-}
TRIAL_SECONDS=${TRIAL_SECONDS:-1}
SBS_SECONDS=${SBS_SECONDS:-2}
VERIFY_STEPS=${VERIFY_STEPS:-40}
ROUNDS=${ROUNDS:-9}
SBS_STEPS=${SBS_STEPS:-34}
SCENARIOS=${SCENARIOS:-"data-bound compute-fp32 underfilled memory"}
KNOBS=precision,checkpoint,batch,loader,allocator,attention
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
TUNE="$BUILD/ft-tune"
TRAIN="$BUILD/ft-train"
export FT_DIAGNOSE=${FT_DIAGNOSE:-$BUILD/ft-diagnose}
mkdir -p "$OUT"
for f in "$TUNE" "$TRAIN" "$FT_DIAGNOSE"; do
  [[ -x $f ]] || { echo "tune_bench: $f is missing (build first)" >&2; exit 1; }
done

# The scenarios of tests/diagnose_scenarios_test.cpp (models and the knob each one needs).
COMMON="--data kjv --threads 1 --seed 1337"
declare -A SCEN
SCEN[data-bound]="--layers 2 --heads 2 --channels 64 --seq-len 64 --micro-batch 8 --precision bf16 --loader-workers 0 --preprocess-cost 4000"
SCEN[compute-fp32]="--layers 2 --heads 2 --channels 128 --seq-len 64 --micro-batch 16"
SCEN[underfilled]="--layers 2 --heads 2 --channels 64 --seq-len 32 --micro-batch 1 --grad-accum 4 --precision bf16"
declare -A STEPS=([data-bound]=24)
SCEN[memory]="--layers 2 --heads 2 --channels 32 --seq-len 128 --micro-batch 16 --precision bf16 --memory-limit 64M --allocator-caching false"

for name in $SCENARIOS; do
  [[ -n ${SCEN[$name]:-} ]] || { echo "tune_bench: unknown scenario '$name'" >&2; exit 2; }
  for strategy in grid guided; do
    dir="$OUT/$name-$strategy"
    if [[ -n ${KEEP:-} && -f $dir/report.json ]]; then continue; fi
    rm -rf "$dir"
    steps=${TRIAL_STEPS:-${STEPS[$name]:-10}}
    start=$(date +%s)
    # shellcheck disable=SC2086
    "$TUNE" --out "$dir" --strategy "$strategy" --knobs "$KNOBS" --trial-steps "$steps" \
      --trial-seconds "$TRIAL_SECONDS" --verify-steps "$VERIFY_STEPS" $COMMON ${SCEN[$name]} >"$dir.log" 2>"$dir.progress.log"
    rc=$?
    echo "$(( $(date +%s) - start )) $rc $(cut -d' ' -f1-3 /proc/loadavg)" >"$dir.time"
    [[ $rc == 0 ]] || echo "tune_bench: $name $strategy failed (exit $rc): $(tail -1 "$dir.progress.log")" >&2
  done
done

# Side by side: default, grid best, guided best; ROUNDS rounds in alternating order.
python3 - "$TRAIN" "$OUT" "$ROUNDS" "$SBS_STEPS" "$SBS_SECONDS" $SCENARIOS <<'PY'
import json, os, statistics, subprocess, sys

train, out, rounds, min_steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sbs_seconds = float(sys.argv[5])
names = sys.argv[6:]
steps = min_steps

def tokens_per_s(metrics, warmup=2):
    """The tuner's measure: tokens over time of the steps after the warm-up."""
    tok = ms = 0.0
    rows = [json.loads(l) for l in open(metrics) if l.strip()]
    rows = [r for r in rows if "loss" in r]
    for r in rows[warmup:] if len(rows) > warmup else rows:
        tok += round(r["tokens_per_s"] * r["step_ms"] / 1000.0)
        ms += r["step_ms"]
    return tok / (ms / 1000.0)

def run(cfg, tag, n=None):
    m = f"{cfg}.{tag}.jsonl"
    subprocess.run([train, "--config", cfg, "--steps", str(n or steps), "-q", "--metrics", m],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return tokens_per_s(m)

def step_ms(metrics, warmup=2):
    rows = [json.loads(l) for l in open(metrics) if l.strip()]
    ms = [r["step_ms"] for r in rows if "loss" in r][warmup:]
    return sum(ms) / len(ms)

def cfg_text(flags):
    return "".join(f"{k} = {v or 'true'}\n" for k, v in flags.items())

def med(v):
    return statistics.median(v) if v else float("nan")

def median_ci(v, level=0.9):
    """Distribution-free interval for the median: order statistics x(k), x(n+1-k) with the
    largest k whose coverage 1 - 2 P(Binomial(n, 1/2) < k) is at least `level`."""
    from math import comb
    x = sorted(v)
    n = len(x)
    best = 1
    for k in range(1, n // 2 + 1):
        if 1 - 2 * sum(comb(n, i) for i in range(k)) / 2 ** n >= level:
            best = k
    cover = 1 - 2 * sum(comb(n, i) for i in range(best)) / 2 ** n
    return x[best - 1], x[n - best], cover

rows = []
for name in names:
    rep = {}
    for s in ("grid", "guided"):
        p = f"{out}/{name}-{s}/report.json"
        rep[s] = json.load(open(p)) if os.path.exists(p) else None
    if not rep["grid"] or not rep["guided"]:
        rows.append({"scenario": name, "error": "a sweep failed"})
        continue
    d = f"{out}/{name}-sbs"
    os.makedirs(d, exist_ok=True)
    cfgs = {"default": rep["grid"]["baseline"], "grid": rep["grid"]["best"],
            "guided": rep["guided"]["best"]}
    paths = {}
    for k, flags in cfgs.items():
        paths[k] = f"{d}/{k}.cfg"
        open(paths[k], "w").write(cfg_text(flags))
    steps = min_steps
    if sbs_seconds > 0:  # the default's step time sets the length: ~sbs_seconds of its steps
        run(paths["default"], "calibrate", min_steps)
        ms = step_ms(f"{paths['default']}.calibrate.jsonl")
        steps = max(min_steps, int(sbs_seconds * 1000 / ms + 0.999) + 2)
    order = ["default", "grid", "guided"]
    tps = {k: [] for k in order}
    load_before = open("/proc/loadavg").read().split()[0]
    for r in range(rounds):
        for k in (order if r % 2 == 0 else order[::-1]):
            tps[k].append(run(paths[k], f"r{r}"))
    ratio = lambda a, b: [x / y for x, y in zip(tps[a], tps[b])]
    row = {"scenario": name, "rounds": rounds, "steps": steps,
           "loadavg": f"{load_before} -> {open('/proc/loadavg').read().split()[0]}",
           "median_tps": {k: med(v) for k, v in tps.items()}, "tps": tps,
           "grid_vs_default": med(ratio("grid", "default")),
           "guided_vs_default": med(ratio("guided", "default")),
           "guided_vs_grid": med(ratio("guided", "grid")),
           "guided_vs_grid_rounds": ratio("guided", "grid"),
           "guided_vs_grid_ci": median_ci(ratio("guided", "grid")),
           "same_config": cfgs["grid"] == cfgs["guided"]}
    for s in ("grid", "guided"):
        r = rep[s]
        t = open(f"{out}/{name}-{s}.time").read().split()
        row[s] = {"trials": r["trials_run"], "diagnoses": r["diagnoses"],
                  "best_change": r["best_change"], "confirmed_ratio": r.get("confirmed_ratio"),
                  "stop": r["stop_reason"], "verified": r.get("verified"),
                  "wall_s": int(t[0]), "loadavg_end": " ".join(t[2:5])}
    rows.append(row)
json.dump(rows, open(f"{out}/summary.json", "w"), indent=1)

print("| scenario | strategy | trials (+ diagnoses) | best change | confirmed in sweep | "
      "side by side vs default | smoothed loss default / tuned (limit) |")
print("|---|---|---:|---|---:|---:|---|")
for row in rows:
    if "error" in row:
        print(f"| {row['scenario']} | - | - | {row['error']} | | | |")
        continue
    for s in ("grid", "guided"):
        g = row[s]
        v = g["verified"]
        loss = (f"{v['baseline_smoothed_loss']:.4f} / {v['best_smoothed_loss']:.4f} "
                f"({v['limit']:.4f})") if v else "- (default kept)"
        conf = g["confirmed_ratio"] or 0
        print(f"| {row['scenario']} | {s} | {g['trials']}"
              f"{' + ' + str(g['diagnoses']) if g['diagnoses'] else ''} | {g['best_change']} | "
              f"{'x%.3f' % conf if conf else 'unconfirmed'} | x{row[s + '_vs_default']:.3f} | "
              f"{loss} |")
print()
print("| scenario | guided / grid trials | guided / grid throughput: median of per-round ratios "
      "[interval, coverage] | per-round ratios | load average | 5% / 25% target |")
print("|---|---:|---:|---|---|---|")
for row in rows:
    if "error" in row:
        continue
    gt = row["guided"]["trials"] + row["guided"]["diagnoses"]
    share = gt / row["grid"]["trials"]
    q = row["guided_vs_grid"]
    lo, hi, cover = row["guided_vs_grid_ci"]
    per = " ".join(f"{x:.3f}" for x in row["guided_vs_grid_rounds"])
    # Judged on the interval: met when even its low end is within 5%, not met when even its
    # high end falls short, otherwise the noise leaves it undecided.
    if share > 0.25 or hi < 0.95:
        met = "NOT met"
    elif lo >= 0.95:
        met = "met"
    else:
        met = "undecided at this noise"
    if row["same_config"]:
        met += " (both chose the same configuration, so this row measures the noise)"
    print(f"| {row['scenario']} | {gt} / {row['grid']['trials']} ({100 * share:.0f}%) | "
          f"{q:.3f} [{lo:.3f}, {hi:.3f}, {100 * cover:.0f}%] | {per} | {row['loadavg']} | {met} |")
PY

#!/usr/bin/env bash
# run_vs_torch.sh: ft-train vs the same GPT-2 in PyTorch, alternating runs in one tuned environment.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/run_vs_torch.sh [options]
  --rounds R        alternating ft/torch rounds per (config, precision) (default 2)
  --steps N         training steps per run (default 12)
  --warmup W        leading steps excluded from the mean; also the LR warm-up (default 2)
  --threads T       threads for both (default 2)
  --seed S          (default 1337)
  --configs "A B"   which configs: A = GPT-2 124M B4 T64, B = L4 NH4 C256 B8 T256 (default "A B")
  --precisions "fp32 bf16"   (default "fp32 bf16")
  --torch-only      skip ft-train (also automatic, with a warning, when $FT_TRAIN is missing)
  --no-tune         run both in the plain environment (no OpenBLAS core fix, no jemalloc)
  --out FILE        JSON output (default bench/results/vs_torch.json, *_untuned.json with --no-tune)
  --timeout S       per-run time limit in seconds (default 3600)
Environment: FT_TRAIN (default build/ft-train), PYTHON (default /usr/bin/python3, needs torch),
  FT_OPENBLAS_CORETYPE (default SkylakeX on an AVX-512 CPU, else Haswell: OpenBLAS 0.3.21 falls
  back to Prescott on CPUs it does not know, and SkylakeX kernels die of SIGILL without AVX-512).
EOF
  exit "${1:-0}"
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEFAULT_CORETYPE=Haswell
grep -qw avx512f /proc/cpuinfo 2>/dev/null && DEFAULT_CORETYPE=SkylakeX
cd "$ROOT"
ROUNDS=2 STEPS=12 WARMUP=2 THREADS=2 SEED=1337 CONFIGS="A B" PRECISIONS="fp32 bf16"
TORCH_ONLY=0 TUNE=1 OUT="" TIMEOUT=3600
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --configs) CONFIGS="$2"; shift 2 ;;
    --precisions) PRECISIONS="$2"; shift 2 ;;
    --torch-only) TORCH_ONLY=1; shift ;;
    --no-tune) TUNE=0; shift ;;
    --out) OUT="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "unknown option: $1" >&2; usage 2 ;;
  esac
done
if [[ -z "$OUT" ]]; then
  OUT=bench/results/vs_torch.json
  [[ $TUNE == 1 ]] || OUT=bench/results/vs_torch_untuned.json
fi
FT_TRAIN="${FT_TRAIN:-build/ft-train}"
PYTHON="${PYTHON:-/usr/bin/python3}"
LR=6e-4 MIN_LR=6e-5 WEIGHT_DECAY=0.1 CLIP=1.0

if [[ $TORCH_ONLY == 0 && ! -x "$FT_TRAIN" ]]; then
  echo "############################################################################" >&2
  echo "# ft-train NOT FOUND at '$FT_TRAIN' (set FT_TRAIN or build the ft-train target)." >&2
  echo "# Running the PyTorch side only; the ft columns will be empty."              >&2
  echo "############################################################################" >&2
  TORCH_ONLY=1
fi

# ---- environment for BOTH programs (only ever applied to the commands below) ----------------
# A missing package must not end the script silently (set -e with pipefail): say what to install.
OPENBLAS_DIR="$(dpkg -L libopenblas0-openmp 2>/dev/null | grep '/libopenblas\.so\.0$' | head -1 | xargs -r dirname || true)"
OPENBLAS_DIR="${OPENBLAS_DIR:-/usr/lib/x86_64-linux-gnu/openblas-openmp}"
JEMALLOC="$(dpkg -L libjemalloc2 2>/dev/null | grep '/libjemalloc\.so\.2$' | head -1 || true)"
JEMALLOC="${JEMALLOC:-/usr/lib/x86_64-linux-gnu/libjemalloc.so.2}"
if [[ $TUNE == 1 ]]; then
  [[ -f "$JEMALLOC" ]] || { echo "jemalloc not found at $JEMALLOC (bash scripts/deps.sh all)" >&2; exit 1; }
  [[ -d "$OPENBLAS_DIR" ]] || { echo "OpenBLAS (OpenMP) not found at $OPENBLAS_DIR (bash scripts/deps.sh all)" >&2; exit 1; }
  RUN_ENV=(env -u OPENBLAS_L2_SIZE -u OPENBLAS_NUM_THREADS
           "OPENBLAS_CORETYPE=${FT_OPENBLAS_CORETYPE:-$DEFAULT_CORETYPE}"
           "LD_LIBRARY_PATH=$OPENBLAS_DIR"
           "LD_PRELOAD=$JEMALLOC"
           "MALLOC_CONF=retain:true,dirty_decay_ms:-1,muzzy_decay_ms:-1"
           "OMP_NUM_THREADS=$THREADS" "OMP_PROC_BIND=close" "OMP_PLACES=cores")
else
  RUN_ENV=(env -u OPENBLAS_L2_SIZE -u OPENBLAS_CORETYPE -u LD_PRELOAD -u MALLOC_CONF
           -u LD_LIBRARY_PATH "OMP_NUM_THREADS=$THREADS")
fi

WORK="$(mktemp -d /tmp/ft_vs_torch.XXXXXX)"
RECORDS="$WORK/records.jsonl"
: > "$RECORDS"
echo "work dir: $WORK" >&2
echo "environment: ${RUN_ENV[*]}" >&2

# ---- verify what torch actually loads in that environment ----------------------------------
"${RUN_ENV[@]}" "$PYTHON" - > "$WORK/env_check.json" <<'PYEOF'
import ctypes, json, os, re
import torch
torch.mm(torch.randn(64, 64), torch.randn(64, 64))  # make sure BLAS is initialised
libs = set()
with open("/proc/self/maps") as f:
    for ln in f:
        m = re.search(r"(/\S*(blas|lapack|jemalloc|gomp|dnnl)\S*)", ln)
        if m:
            libs.add(os.path.realpath(m.group(1)))
core = config = None
for lib in sorted(libs):
    if "openblas" in lib:
        try:
            h = ctypes.CDLL(lib)
            h.openblas_get_corename.restype = ctypes.c_char_p
            h.openblas_get_config.restype = ctypes.c_char_p
            core = h.openblas_get_corename().decode()
            config = h.openblas_get_config().decode()
        except (OSError, AttributeError):
            pass
cfg = [l.strip() for l in torch.__config__.show().splitlines()
       if re.search(r"BLAS|LAPACK|MKL|oneDNN|OpenMP|CPU capability", l)]
cfg = [re.sub(r"CXX_FLAGS=.*?, (LAPACK_INFO)", r"\1", l) for l in cfg]
print(json.dumps({"torch_version": torch.__version__, "torch_config": cfg,
                  "loaded_libs": sorted(libs), "openblas_core": core, "openblas_config": config,
                  "jemalloc_loaded": any("jemalloc" in l for l in libs),
                  "torch_threads": torch.get_num_threads()}))
PYEOF
echo "torch environment check:" >&2
"$PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1])); [print("  %s: %s" % kv, file=sys.stderr) for kv in d.items()]' "$WORK/env_check.json"

# ---- configs --------------------------------------------------------------------------------
config_args() {  # prints the shared model/batch flags for config $1
  case "$1" in
    A) echo "--layers 12 --heads 12 --channels 768 --vocab 50257 --micro-batch 4 --seq-len 64" ;;
    B) echo "--layers 4 --heads 4 --channels 256 --vocab 50257 --micro-batch 8 --seq-len 256" ;;
    *) echo "unknown config $1" >&2; exit 2 ;;
  esac
}

# Appends one record: mean step_ms / tokens/s over the per-step JSONL lines after the first WARMUP.
record() {  # impl config precision round metrics_file rc log_file
  "$PYTHON" - "$@" "$WARMUP" >> "$RECORDS" <<'PYEOF'
import json, os, sys
impl, cfg, prec, rnd, metrics, rc, log, warm = sys.argv[1:9]
rec = {"impl": impl, "config": cfg, "precision": prec, "round": int(rnd), "rc": int(rc),
       "loadavg_after": os.getloadavg()}
steps, summary = [], None
try:
    for ln in open(metrics):
        ln = ln.strip()
        if not ln:
            continue
        d = json.loads(ln)
        if "summary" in d:
            summary = d["summary"]
        elif "step_ms" in d:
            steps.append(d)
except (OSError, ValueError) as e:
    rec["error"] = "metrics: %s" % e
steps.sort(key=lambda s: s["step"])
timed = steps[int(warm):] or steps  # by position: works whether ft counts steps from 0 or 1
if timed:
    ms = sum(s["step_ms"] for s in timed) / len(timed)
    # tokens / time over the timed steps (not a mean of per-step rates, which outliers skew).
    tps = sum(s["tokens_per_s"] * s["step_ms"] for s in timed) / sum(s["step_ms"] for s in timed)
    rec.update(mean_step_ms=ms, tokens_per_s=tps, steps_timed=len(timed),
               final_loss=steps[-1]["loss"])
    if all("cpu_ms" in s for s in timed):
        rec["mean_cpu_ms"] = sum(s["cpu_ms"] for s in timed) / len(timed)
if summary:
    rec["summary"] = summary
if int(rc) != 0 or not timed:
    try:
        tail = open(log, errors="replace").read()[-400:]
    except OSError:
        tail = "(no log)"
    rec["error"] = "exit %s; %s; log tail: %s" % (rc, rec.get("error", "no timed steps"), tail)
print(json.dumps(rec))
PYEOF
}

run_ft() {  # config precision round
  local tag="ft_$1_$2_r$3" rc=0
  # shellcheck disable=SC2046
  timeout "$TIMEOUT" "${RUN_ENV[@]}" "$FT_TRAIN" $(config_args "$1") --grad-accum 1 \
    --steps "$STEPS" --lr "$LR" --min-lr "$MIN_LR" --warmup "$WARMUP" \
    --weight-decay "$WEIGHT_DECAY" --clip "$CLIP" --precision "$2" --checkpoint none \
    --threads "$THREADS" --data kjv --seed "$SEED" --metrics "$WORK/$tag.jsonl" \
    > "$WORK/$tag.log" 2>&1 || rc=$?
  record ft "$1" "$2" "$3" "$WORK/$tag.jsonl" "$rc" "$WORK/$tag.log"
}

run_torch() {  # config precision round
  local tag="torch_$1_$2_r$3" rc=0
  # shellcheck disable=SC2046
  timeout "$TIMEOUT" "${RUN_ENV[@]}" "$PYTHON" bench/torch_gpt.py $(config_args "$1") \
    --grad-accum 1 --steps "$STEPS" --warmup-steps "$WARMUP" --lr-warmup "$WARMUP" \
    --lr "$LR" --min-lr "$MIN_LR" --weight-decay "$WEIGHT_DECAY" --clip "$CLIP" \
    --precision "$2" --threads "$THREADS" --data kjv --seed "$SEED" \
    --metrics "$WORK/$tag.jsonl" > "$WORK/$tag.out" 2> "$WORK/$tag.log" || rc=$?
  record torch "$1" "$2" "$3" "$WORK/$tag.jsonl" "$rc" "$WORK/$tag.log"
}

for cfg in $CONFIGS; do
  for prec in $PRECISIONS; do
    for ((r = 0; r < ROUNDS; r++)); do
      # Alternate which side goes first so drift on a shared machine hits both equally.
      if [[ $TORCH_ONLY == 1 ]]; then
        run_torch "$cfg" "$prec" "$r"
      elif (( r % 2 == 0 )); then
        run_ft "$cfg" "$prec" "$r"; run_torch "$cfg" "$prec" "$r"
      else
        run_torch "$cfg" "$prec" "$r"; run_ft "$cfg" "$prec" "$r"
      fi
      tail -n "$([[ $TORCH_ONLY == 1 ]] && echo 1 || echo 2)" "$RECORDS" | "$PYTHON" -c '
import json, sys
for l in sys.stdin:
    d = json.loads(l)
    print("  %-5s %s %-4s round %d: %s" % (d["impl"], d["config"], d["precision"], d["round"],
          "%.1f ms/step, %.0f tok/s, loss %.3f, load %.1f" % (d["mean_step_ms"], d["tokens_per_s"], d["final_loss"], d["loadavg_after"][0])
          if "mean_step_ms" in d else "FAILED " + d.get("error", "")[:300]), file=sys.stderr)'
    done
  done
done

# ---- table + JSON ---------------------------------------------------------------------------
mkdir -p "$(dirname "$OUT")"
"$PYTHON" - "$RECORDS" "$WORK/env_check.json" "$OUT" "$TUNE" "$ROUNDS" "$STEPS" "$WARMUP" \
  "$THREADS" "$SEED" "$TORCH_ONLY" "$FT_TRAIN" "${RUN_ENV[*]}" <<'PYEOF'
import json, statistics, sys, time
(records, env_check, out, tune, rounds, steps, warm, threads, seed, torch_only, ft_train,
 run_env) = sys.argv[1:13]
recs = [json.loads(l) for l in open(records) if l.strip()]
rows = []
for cfg in sorted({r["config"] for r in recs}):
    for prec in ("fp32", "bf16"):
        row = {"config": cfg, "precision": prec}
        for impl in ("ft", "torch"):
            ok = [r for r in recs if r["config"] == cfg and r["precision"] == prec
                  and r["impl"] == impl and "mean_step_ms" in r]
            bad = [r for r in recs if r["config"] == cfg and r["precision"] == prec
                   and r["impl"] == impl and "mean_step_ms" not in r]
            row[impl] = {"ms_per_step": statistics.median(r["mean_step_ms"] for r in ok) if ok else None,
                         "tokens_per_s": statistics.median(r["tokens_per_s"] for r in ok) if ok else None,
                         "rounds_ms": [round(r["mean_step_ms"], 2) for r in ok],
                         "final_loss": [round(r["final_loss"], 4) for r in ok],
                         "errors": [r.get("error", "")[:400] for r in bad]}
        if any(row[i]["ms_per_step"] or row[i]["errors"] for i in ("ft", "torch")):
            f, t = row["ft"]["ms_per_step"], row["torch"]["ms_per_step"]
            row["ratio_ft_over_torch_ms"] = f / t if f and t else None
            rows.append(row)
names = {"A": "A (124M, B4 T64)", "B": "B (L4 C256, B8 T256)"}
fmt = lambda v, p=1: "n/a" if v is None else ("%.*f" % (p, v))
print("| config | precision | ft ms/step | ft tokens/s | torch ms/step | torch tokens/s | ft/torch (ms) |")
print("|---|---|---:|---:|---:|---:|---:|")
for r in rows:
    print("| %s | %s | %s | %s | %s | %s | %s |" % (
        names.get(r["config"], r["config"]), r["precision"], fmt(r["ft"]["ms_per_step"]),
        fmt(r["ft"]["tokens_per_s"], 0), fmt(r["torch"]["ms_per_step"]),
        fmt(r["torch"]["tokens_per_s"], 0), fmt(r["ratio_ft_over_torch_ms"], 2)))
for r in rows:
    for impl in ("ft", "torch"):
        for e in r[impl]["errors"]:
            print("\n%s %s %s failed: %s" % (impl, r["config"], r["precision"], e))
result = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "tuned_env": tune == "1",
          "env": run_env, "rounds": int(rounds), "steps": int(steps), "warmup_steps": int(warm),
          "threads": int(threads), "seed": int(seed), "torch_only": torch_only == "1",
          "ft_train": ft_train, "torch_env_check": json.load(open(env_check)),
          "rows": rows, "runs": recs}
with open(out, "w") as f:
    json.dump(result, f, indent=1)
print("\nwrote %s" % out)
PYEOF

#!/usr/bin/env bash
# qlora_bench.sh: QLoRA against full fine-tuning of a KJV-pretrained model on Debian's fortunes,
# side by side: validation loss before and after, model-state memory (the allocator's bytes held
# before step 0), peak allocator memory, peak RSS and step time.
# Usage: bash bench/qlora_bench.sh [BUILD_DIR] [OUT_DIR]   (needs bible-kjv and fortunes)
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-/tmp/ft_qlora_bench}
FT="$BUILD/ft-train"
SHAPE=${SHAPE:-"--layers 4 --heads 4 --channels 256 --seq-len 128 --micro-batch 8"}
PRE_STEPS=${PRE_STEPS:-400}
FT_STEPS=${FT_STEPS:-150}
mkdir -p "$OUT"
FORT=/usr/share/games/fortunes
[ -d "$FORT" ] || { echo "qlora_bench: $FORT missing (apt-get install fortunes)" >&2; exit 1; }
cat "$FORT"/computers "$FORT"/science "$FORT"/people "$FORT"/work "$FORT"/politics > "$OUT/fortunes.txt"
if [ ! -f "$OUT/kjv.bin" ]; then
  "$FT" $SHAPE --data kjv --steps "$PRE_STEPS" --lr 3e-3 --warmup 20 --quiet \
    --export-llmc "$OUT/kjv.bin" --metrics "$OUT/pretrain.jsonl" > "$OUT/pretrain.log"
fi
COMMON="$SHAPE --data $OUT/fortunes.txt --init-from $OUT/kjv.bin --val-batches 32 --quiet"
run() {  # name, extra args
  local name=$1; shift
  /usr/bin/time -f "%M" -o "$OUT/$name.rss" "$FT" $COMMON "$@" --metrics "$OUT/$name.jsonl" > "$OUT/$name.log"
}
run base_full --steps 1 --lr 1e-30 --min-lr 0
run base_qlora --steps 1 --lr 1e-30 --min-lr 0 --qlora
run full --steps "$FT_STEPS" --lr 1e-3 --warmup 10
run qlora --steps "$FT_STEPS" --lr 3e-3 --warmup 10 --qlora --lora-rank 16 --lora-alpha 32
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def summ(n):
    return [json.loads(l) for l in open(f"{out}/{n}.jsonl")][-1]["summary"]
def rss(n):
    return int(open(f"{out}/{n}.rss").read().split()[-1]) / 1024
pre = summ("pretrain")
print(f"pretrained on KJV: val loss {pre['val_loss']:.4f}")
print("| run | fortunes val loss before | after | model states (held before step 0) | peak allocator | peak RSS | ms/step |")
print("|---|---|---|---|---|---|---|")
for n, b in (("full", "base_full"), ("qlora", "base_qlora")):
    s, s0 = summ(n), summ(b)
    print(f"| {n} | {s0['val_loss']:.4f} | {s['val_loss']:.4f} | {s['mem_at_start']/2**20:.2f} MiB | "
          f"{s['mem_peak']/2**20:.1f} MiB | {rss(n):.0f} MiB | {s['mean_step_ms']:.1f} |")
f, q = summ("full"), summ("qlora")
print(f"model states: full / qlora = {f['mem_at_start']/q['mem_at_start']:.2f}x; "
      f"peak allocator {f['mem_peak']/q['mem_peak']:.2f}x; step time qlora / full = "
      f"{q['mean_step_ms']/f['mean_step_ms']:.2f}")
PY

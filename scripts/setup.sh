#!/usr/bin/env bash
# setup.sh: set-up command 1 — install missing Debian packages, build ft, and train the embedded default model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh all
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
# The main job on the embedded default: a small byte-level GPT on the King James Bible.
exec build/ft-train --layers 4 --heads 4 --channels 128 --seq-len 128 --micro-batch 8 \
  --steps 60 --warmup 10 --lr 2e-3 --val-every 20 --metrics build/ft-train-metrics.jsonl "$@"

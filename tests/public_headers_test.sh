#!/usr/bin/env bash
# public_headers_test.sh: no public header (include/ft/) includes a vendor GPU header (CUDA runtime
# or driver, cuBLAS/cuBLASLt, CUPTI, NCCL, NVTX, CUDA's bf16/fp16 types) or ft's private CUDA
# headers (trainer/cuda/), so code that includes ft's headers builds without a CUDA toolkit.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
pattern='^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](cuda[^/">]*|cupti[^">]*|nccl[^">]*|cublas[^">]*|nvtx3/[^">]*|nvToolsExt[^">]*|nvml[^">]*|trainer/cuda/[^">]*)[">]'
if hits=$(grep -rnE "$pattern" "$root/include/ft"); then
  echo "FAIL: public headers include GPU vendor or private CUDA headers:"
  echo "$hits"
  exit 1
fi
# The check itself must catch a leak.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#pragma once\n#include <cuda_runtime.h>\n' > "$tmp/leak.h"
printf '#pragma once\n  #include "nccl.h"\n' > "$tmp/leak2.h"
[[ $(grep -rlE "$pattern" "$tmp" | wc -l) == 2 ]] || { echo "FAIL: the pattern misses a leak"; exit 1; }
echo "ok: $(find "$root/include/ft" -name '*.h' | wc -l) public headers, no GPU vendor header"

#!/usr/bin/env bash
# test.sh: set-up command 2 — install missing packages, build with -Werror, run the whole test suite through ctest.
# FT_SANITIZE=1 builds and tests under AddressSanitizer + UndefinedBehaviorSanitizer instead.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
scripts/deps.sh core
build=build
flags=(-DCMAKE_BUILD_TYPE=Release -DFT_WERROR=ON)
if [[ "${FT_SANITIZE:-0}" == 1 ]]; then
  build=build-asan
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DFT_WERROR=ON -DFT_SANITIZE=ON)
fi
cmake -S . -B "$build" "${flags[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)"
cd "$build"
ctest --output-on-failure -j"$(nproc)" --timeout 600 "$@"

# Fuzzing (issue 18): 30 s of libFuzzer (60 s until CI neared its 20-minute budget) over the trace readers, analyses and report writers
# (bench/fuzz_kineto.sh; build-fuzz/, clang only). A crash fails the run and names the
# reproducer to copy into tests/data/fuzz/. FT_FUZZ_SECONDS=0 skips it.
cd "$root"
fuzz_secs="${FT_FUZZ_SECONDS:-30}"
if ((fuzz_secs > 0)) && command -v clang++ >/dev/null 2>&1; then
  if [[ -f "$(clang++ -print-file-name=libclang_rt.fuzzer-x86_64.a)" ]]; then
    bench/fuzz_kineto.sh "$fuzz_secs" "$root/build-fuzz"
  else
    echo "fuzz: skipped (clang++ has no libFuzzer runtime: apt-get install libclang-rt-14-dev)"
  fi
elif ((fuzz_secs > 0)); then
  echo "fuzz: skipped (no clang++; scripts/deps.sh all installs clang and libclang-rt-14-dev)"
fi

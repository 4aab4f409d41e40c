#!/usr/bin/env bash
# test.sh: set-up command 2 — install missing packages, build with -Werror, run the whole test suite through ctest.
# FT_SANITIZE=1 builds and tests under AddressSanitizer + UndefinedBehaviorSanitizer instead.
set -euo pipefail
cd "$(dirname "$0")/.."
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

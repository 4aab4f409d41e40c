#!/usr/bin/env bash
# device-bundle.sh: builds the GPU check's binaries on this machine and packs them, with the shared libraries a bare GPU machine lacks, for scripts/device-check.sh.
#
#   bash scripts/device-bundle.sh [BUILD_DIR]      # default build-bundle; writes .device-bundle.tar.xz
#
# The lent GPU machine has the CUDA toolkit, CMake and PyTorch but not ft's build dependencies
# (fmt, Boost, oneDNN, ICU, GoogleTest, ...), and can fetch nothing. So the binaries are built
# here (portable: no -march=native; no MPI, whose launcher and plugins would not travel) and
# packed with their non-system libraries into .device-bundle.tar.xz (git-ignored). Carry that
# file in the device call; device-check.sh unpacks it and takes the CUDA libraries (cuBLASLt,
# CUPTI, NCCL) from the machine's toolkit or its Python wheels.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUILD=${1:-build-bundle}
STAGE=.device-bundle
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DFT_NATIVE=OFF -DFT_WERROR=OFF \
  -DFT_WITH_CUDA=ON -DFT_WITH_CUPTI=ON -DFT_WITH_NCCL=ON -DFT_WITH_NVTX=ON -DFT_WITH_MPI=OFF \
  -DFT_BUILD_TESTS=ON -DFT_BUILD_BENCH=ON > /dev/null
targets="ft-train ft-diagnose ft-diagnose-run"
gpu_tests=()
for f in tests/gpu/*_test.cpp; do gpu_tests+=("$(basename "$f" .cpp)"); done
targets+=" ${gpu_tests[*]}"
# (grep -q on the pipe would end it early: under pipefail cmake's SIGPIPE reads as "no target")
help=$(cmake --build "$BUILD" --target help)
if grep -q cuda_train_bench <<< "$help"; then targets+=" cuda_train_bench"; fi
cmake --build "$BUILD" -j"$(nproc)" --target $targets
rm -rf "$STAGE" .device-bundle.tar.xz
mkdir -p "$STAGE/bin/gpu_tests" "$STAGE/lib"
bins=("$BUILD/ft-train" "$BUILD/ft-diagnose" "$BUILD/ft-diagnose-run")
cp "$BUILD/ft-train" "$BUILD/ft-diagnose" "$BUILD/ft-diagnose-run" "$STAGE/bin/"
for t in "${gpu_tests[@]}"; do
  [[ -x "$BUILD/tests/gpu/$t" ]] && cp "$BUILD/tests/gpu/$t" "$STAGE/bin/gpu_tests/" && bins+=("$BUILD/tests/gpu/$t")
done
if [[ -x "$BUILD/bench/cuda_train_bench" ]]; then
  cp "$BUILD/bench/cuda_train_bench" "$STAGE/bin/"
  bins+=("$BUILD/bench/cuda_train_bench")
fi
strip "$STAGE"/bin/* "$STAGE"/bin/gpu_tests/* 2>/dev/null || true
# Non-system libraries: everything ldd resolves except glibc, libstdc++/libgcc_s (the GPU
# machine's are newer, and PyTorch there needs them) and the CUDA driver/toolkit libraries.
# libgomp travels: a machine without GCC may lack it (PyTorch's own has another name).
skip='/(libc|libm|libpthread|libdl|librt|libutil|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libnvidia[^/]*|libcublas[^/]*|libcublasLt|libcupti|libnccl|libcudart|libnvrtc|libnvJitLink)\.so'
for b in "${bins[@]}"; do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u | grep -Ev "$skip" |
  while read -r lib; do cp -L "$lib" "$STAGE/lib/"; done
tar -cJf .device-bundle.tar.xz "$STAGE"
rm -rf "$STAGE"
size=$(stat -c %s .device-bundle.tar.xz)
echo "device-bundle: .device-bundle.tar.xz $((size / 1048576)) MiB (${#bins[@]} binaries, libraries: $(tar -tJf .device-bundle.tar.xz | grep -c '/lib/.'))"
if ((size > 56 * 1048576)); then
  echo "device-bundle: warning: over 56 MiB; the device tool carries 64 MiB with the working tree" >&2
fi

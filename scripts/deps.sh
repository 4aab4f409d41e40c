#!/usr/bin/env bash
# deps.sh: installs the Debian packages ft needs that are missing (or prints the apt-get line when not root).
# Usage: scripts/deps.sh [core|all]   core = build + tests; all = also benchmarks' peers (PyTorch, OpenBLAS, jemalloc, HTA's pandas, plotly, networkx, psutil, yaml).
set -euo pipefail
set_name="${1:-core}"
core=(build-essential cmake pkg-config git libdnnl-dev libfmt-dev libboost-program-options-dev
      nlohmann-json3-dev libsimdjson-dev zlib1g-dev libgtest-dev googletest bible-kjv libxxhash-dev libicu-dev
      chromium)  # chromium: headless check of report.html (tests/report_html_browser_test.cpp)
core+=(libopenmpi-dev openmpi-bin)  # distributed training (FT_WITH_MPI) and its mpirun tests
core+=(python3 python3-torch)  # tests/torch_client_test.cpp: a real PyTorch client (/usr/bin/python3)
extra=(python3 python3-torch python3-numpy python3-pandas python3-plotly python3-networkx python3-psutil python3-yaml libopenblas0-openmp libopenblas-dev libjemalloc2 hyperfine fortunes
       clang libclang-rt-14-dev)
pkgs=("${core[@]}")
if [[ "$set_name" == "all" ]]; then pkgs+=("${extra[@]}"); fi
# Accelerators the build detects and does without (FT_WITH_ISAL=AUTO falls back to zlib):
# installed when possible, never a reason to stop.
optional=(libisal-dev)

opt_missing=()
for p in "${optional[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    opt_missing+=("$p")
  fi
done
if ((${#opt_missing[@]} > 0)); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "ft: installing optional ${opt_missing[*]}" >&2
    if ! (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq >/dev/null &&
          apt-get install -y -qq --no-install-recommends "${opt_missing[@]}" >/dev/null); then
      echo "ft: warning: could not install ${opt_missing[*]}; building without them" >&2
    fi
  else
    echo "ft: optional packages missing (faster gzip): apt-get install ${opt_missing[*]}" >&2
  fi
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
line="apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "ft: missing Debian packages. Run as root:" >&2
  echo "  apt-get update && $line" >&2
  exit 1
fi
echo "ft: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

#!/usr/bin/env bash
# layering_test.sh: the layers hold (docs/design.md). core includes only core; profiler and reports
# never include or link trainer, tuner or the app glue; trainer never includes profiler, tuner,
# reports or app. Checks sources, CMake link lines and (given a build dir) the archives' undefined
# symbols, then proves each check catches a planted violation.
# usage: layering_test.sh [ROOT [BUILD_DIR]]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
build="${2:-}"

inc() {  # inc DIR... -- PATTERN: lines in DIR that include an ft header matching PATTERN
  local pattern="${*: -1}" dirs=("${@:1:$#-2}") d
  for d in "${dirs[@]}"; do
    [[ -d "$d" ]] || continue
    grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]ft/($pattern)/" "$d" || true
  done
}

check_sources() {  # check_sources ROOT: prints every violation
  local r="$1"
  inc "$r/src/core" "$r/include/ft/core" -- 'trainer|profiler|reports|tuner|app'
  inc "$r/profiler" "$r/include/ft/profiler" "$r/reports" "$r/include/ft/reports" -- 'trainer|tuner|app'
  inc "$r/trainer" "$r/include/ft/trainer" -- 'profiler|reports|tuner|app'
  # Link lines: ft_core links no ft library; ft_profiler and ft_reports link neither the engine,
  # the tuner nor the glue.
  grep -nE 'target_link_libraries\((ft_core|ft_profiler|ft_reports)[[:space:]][^)]*\b(ft_trainer|ft_tuner|ft_app)\b' \
    "$r/CMakeLists.txt" || true
  grep -nE 'target_link_libraries\(ft_trainer[[:space:]][^)]*\b(ft_profiler|ft_reports|ft_tuner|ft_app)\b' \
    "$r/CMakeLists.txt" || true
}

check_archive() {  # check_archive LIB.a NAMESPACE_REGEX: undefined symbols from forbidden layers
  nm -C --undefined-only "$1" 2>/dev/null | grep -E " U .*\b($2)::" || true
}

fail=0
if out=$(check_sources "$root") && [[ -n "$out" ]]; then
  echo "FAIL: forbidden include or link:"; echo "$out"; fail=1
fi
if [[ -n "$build" ]]; then
  for lib in ft_profiler ft_reports; do
    a="$build/lib$lib.a"
    [[ -f "$a" ]] || { echo "FAIL: $a not built"; fail=1; continue; }
    if out=$(check_archive "$a" 'ft::trainer|ft::tuner|ft::app') && [[ -n "$out" ]]; then
      echo "FAIL: $lib needs symbols of the engine, the tuner or the glue:"; echo "$out" | head -20
      fail=1
    fi
  done
fi
[[ $fail == 0 ]] || exit 1

# Each check must catch a planted violation.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for plant in profiler/x.cpp reports/x.cpp trainer/x.cpp src/core/x.cpp; do
  rm -rf "$tmp/r" && mkdir -p "$tmp/r/$(dirname "$plant")" && touch "$tmp/r/CMakeLists.txt"
  case "$plant" in
    trainer/*) printf '#include "ft/profiler/trace_reader.h"\n' > "$tmp/r/$plant" ;;
    *) printf '  #include "ft/trainer/trainer.h"\n' > "$tmp/r/$plant" ;;
  esac
  [[ -n "$(check_sources "$tmp/r")" ]] || { echo "FAIL: a planted include in $plant is not caught"; exit 1; }
done
rm -rf "$tmp/r" && mkdir -p "$tmp/r"
printf 'target_link_libraries(ft_profiler PUBLIC ft_core ft_trainer)\n' > "$tmp/r/CMakeLists.txt"
[[ -n "$(check_sources "$tmp/r")" ]] || { echo "FAIL: a planted link is not caught"; exit 1; }
if [[ -n "$build" ]] && command -v c++ >/dev/null; then
  printf 'namespace ft::trainer { int engine(); }\nint probe() { return ft::trainer::engine(); }\n' > "$tmp/p.cpp"
  c++ -c "$tmp/p.cpp" -o "$tmp/p.o" && ar rcs "$tmp/libplanted.a" "$tmp/p.o"
  [[ -n "$(check_archive "$tmp/libplanted.a" 'ft::trainer')" ]] || { echo "FAIL: a planted symbol is not caught"; exit 1; }
fi
echo "ok: layers hold (sources, link lines${build:+, archives}); planted violations are caught"

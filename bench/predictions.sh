#!/bin/bash
# bench/predictions.sh BUILD TRACE...: each finding's share and predicted step time (report.json's
# `predicted_step_ms` and `prediction`) for each trace or folder of ranks, via ft-diagnose.
set -euo pipefail
build=${1:?usage: bench/predictions.sh BUILD TRACE...}
shift
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for t in "$@"; do
  echo "== $t"
  if ! "$build/ft-diagnose" "$t" --out "$out" >/dev/null 2>"$out/err"; then
    echo "ft-diagnose failed:" >&2
    cat "$out/err" >&2
    exit 1
  fi
  python3 - "$out/report.json" <<'PY'
import json, sys
for f in json.load(open(sys.argv[1])).get("findings", []):
    if f.get("share", 0) > 0:
        print(f"  {f['class']:9s} {100 * f['share']:5.1f}%  predicted {f.get('predicted_step_ms', -1):9.2f} ms  {f.get('prediction', '')}")
PY
done

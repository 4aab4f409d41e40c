#!/usr/bin/env bash
# tp_bench.sh: tensor parallel TP=2 (2 ranks x 1 thread) against one process (1 thread), alternating;
# tokens/s per pair, then one traced pair: GEMM time per rank and the TP all-reduce split into
# transfer (shortest duration of the same collective over the ranks) and waiting for the peer.
# usage: bench/tp_bench.sh [BUILD_DIR] [PAIRS] [ft-train model flags...]
#        (default: build 3 --layers 4 --heads 4 --channels 256 --seq-len 128 --micro-batch 8)
set -euo pipefail
build=${1:-build}; pairs=${2:-3}; shift $(( $# > 2 ? 2 : $# )) || true
model=("$@"); [ ${#model[@]} -eq 0 ] && model=(--layers 4 --heads 4 --channels 256 --seq-len 128 --micro-batch 8)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
python3 -c "
t=''.join('In the beginning God created the heaven and the earth. %d\n\n' % (i % 7) for i in range(400))
open('$tmp/c.txt', 'w').write(t)"
common=(--data "$tmp/c.txt" "${model[@]}" --threads 1 --steps 14 --loader-workers 0 --val-batches 1 --quiet)
one() { "$build/ft-train" "${common[@]}" "$@"; }
tp2() { mpirun -np 2 --oversubscribe "$build/ft-train" "${common[@]}" --tp 2 "$@"; }
# Reads all of its input (an early exit would SIGPIPE mpirun under pipefail).
tok() { awk '/^summary/ && !done { sub(/.*mean /, ""); sub(/ tok\/s.*/, ""); print; done = 1 }'; }
echo "model: ${model[*]}  load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| pair | one process tok/s | TP=2 tok/s | TP=2 / one |"
echo "|---|---:|---:|---:|"
for i in $(seq 1 "$pairs"); do
  a=$(one 2>&1 | tok); b=$(tp2 2>&1 | tok)
  echo "| $i | $a | $b | $(python3 -c "print(f'{$b/$a:.2f}')") |"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
one --profile-steps 4-11 --trace "$tmp/one.json" > /dev/null 2>&1
tp2 --profile-steps 4-11 --trace "$tmp/tp.json" > /dev/null 2>&1
python3 - "$tmp/one.json" "$tmp/tp.rank0.json" "$tmp/tp.rank1.json" <<'PY'
import json, sys
def load(f):
    t = json.load(open(f)); return t['traceEvents'] if isinstance(t, dict) else t
def per_step(ev, name):
    n = sum(1 for e in ev if str(e.get('name', '')).startswith('ProfilerStep#') and e.get('ph') == 'X')
    return sum(e['dur'] for e in ev if e.get('name') == name and e.get('ph') == 'X') / n / 1000, n
ranks = [load(f) for f in sys.argv[1:]]
for label, ev in zip(['one process', 'TP rank 0', 'TP rank 1'], ranks):
    steps = [e for e in ev if str(e.get('name', '')).startswith('ProfilerStep#') and e.get('ph') == 'X']
    st = sum(e['dur'] for e in steps) / len(steps) / 1000
    mm = per_step(ev, 'matmul.fwd')[0] + per_step(ev, 'matmul.bwd')[0]
    ar = per_step(ev, 'comm.all_reduce')[0]
    cnt = sum(1 for e in ev if e.get('name') == 'comm.all_reduce') / len(steps)
    print(f"{label}: step {st:.1f} ms, GEMMs {mm:.1f} ms, all-reduce {ar:.1f} ms ({100*ar/st:.1f}%, {cnt:.0f} per step)")
# The same collective on both ranks (matched by its group + sequence-number arg).
per = [{e['args']['arg']: e['dur'] for e in ev if e.get('name') == 'comm.all_reduce' and e.get('ph') == 'X'} for ev in ranks[1:]]
common = set(per[0]) & set(per[1])
nsteps = sum(1 for e in ranks[1] if str(e.get('name', '')).startswith('ProfilerStep#') and e.get('ph') == 'X')
transfer = sum(min(p[a] for p in per) for a in common) / nsteps / 1000
waits = [(sum(p[a] for a in common) / nsteps / 1000 - transfer) for p in per]
print(f"TP all-reduce per step: transfer (shortest of the two ranks) {transfer:.1f} ms, waiting for the peer "
      f"{waits[0]:.1f} / {waits[1]:.1f} ms (rank 0 / 1)")
PY
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

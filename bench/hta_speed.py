#!/usr/bin/env python3
"""hta_speed.py: HTA against ft-diagnose and ft-hta on one trace, in alternating rounds.

usage: /usr/bin/python3 bench/hta_speed.py HTA_SRC BUILD_DIR TRACE ROUNDS
Each round runs, in turn, HTA (TraceAnalysis load, then its temporal, idle-time, comm/comp
overlap, kernel, queue-length and launch-statistics analyses on every rank, as in issue 20's
table), `ft-diagnose TRACE --out TMP` (load, classify, every analysis, reports) and `ft-hta TRACE
--hta-json TMP --no-time-series`, each as a child under /usr/bin/time (CPU and peak RSS), timed
from its spawn to its exit. Prints per tool the median
wall and CPU seconds and peak RSS, ft's ratios to HTA (wall, and per round), and MB/s of
decompressed JSON per second of CPU.
"""
import gzip
import os
import statistics
import subprocess
import sys
import tempfile
import time

HTA_SCRIPT = r"""
import logging, sys
logging.disable(logging.CRITICAL)
sys.path.insert(0, sys.argv[1])
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[2])
ranks = sorted(a.t.traces.keys())
a.get_temporal_breakdown(visualize=False)
a.get_idle_time_breakdown(ranks=ranks, visualize=False)
a.get_comm_comp_overlap(visualize=False)
a.get_gpu_kernel_breakdown(visualize=False)
a.get_queue_length_summary(ranks=ranks)
a.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
"""


def json_bytes(trace):
    files = [trace] if os.path.isfile(trace) else [
        os.path.join(trace, f) for f in sorted(os.listdir(trace))
        if f.endswith(".json") or f.endswith(".json.gz")]
    total = 0
    for f in files:
        with (gzip.open(f, "rb") if f.endswith(".gz") else open(f, "rb")) as h:
            while True:
                b = h.read(1 << 24)
                if not b:
                    break
                total += len(b)
    return total


def timed(cmd):
    """Wall seconds (perf_counter around the run: /usr/bin/time's %e has 10 ms steps), CPU seconds
    and peak RSS in MiB (from /usr/bin/time: a child of this Python would count Python's pages in
    its peak, which exec keeps)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t:
        t0 = time.perf_counter()
        r = subprocess.run(["/usr/bin/time", "-o", t.name, "-f", "%U %S %M"] + cmd,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
        user, sys_, rss = t.read().split()
        return wall, float(user) + float(sys_), int(rss) / 1024.0


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    hta, build, trace, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    hta_dir = trace if os.path.isdir(trace) else os.path.dirname(os.path.abspath(trace))
    mb = json_bytes(trace) / 1e6
    out = tempfile.mkdtemp(prefix="hta_speed_")
    tools = {
        "HTA": ["/usr/bin/python3", "-c", HTA_SCRIPT, hta, hta_dir],
        "ft-diagnose": [os.path.join(build, "ft-diagnose"), trace, "--out", out],
        "ft-hta": [os.path.join(build, "ft-hta"), trace, "--hta-json",
                   os.path.join(out, "hta.json"), "--no-time-series"],
    }
    runs = {k: [] for k in tools}
    for r in range(rounds):
        order = list(tools) if r % 2 == 0 else list(reversed(list(tools)))
        for k in order:
            runs[k].append(timed(tools[k]))
    print(f"trace {trace}: {mb:.1f} MB of JSON, {rounds} rounds, {os.cpu_count()} CPUs")
    med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in runs.items()}
    for k, (wall, cpu, rss) in med.items():
        line = f"{k:12s} wall {wall:7.3f} s  cpu {cpu:7.3f} s  {mb / cpu:7.1f} MB/s/core  rss {rss:7.1f} MiB"
        if k != "HTA":
            ratios = [h[0] / f[0] for h, f in zip(runs["HTA"], runs[k])]
            line += (f"  HTA/ft wall {med['HTA'][0] / wall:5.1f}x"
                     f" (rounds {', '.join(f'{x:.1f}' for x in ratios)})"
                     f"  rss {100 * rss / med['HTA'][2]:.1f}% of HTA's")
        print(line)


if __name__ == "__main__":
    main()

"""HTA's kernel table, queue-length and memory-bandwidth analyses: the reference for ft's.

usage: /usr/bin/python3 bench/hta_counters.py HTA_SRC TRACES_ROOT OUT.json KEY ...
Runs, on every rank of TRACES_ROOT/KEY (Debian's pandas), HTA's
get_gpu_kernel_breakdown(include_memory_kernels=True), get_queue_length_time_series,
get_time_spent_blocked_on_full_queue, get_memory_bw_time_series and get_memory_bw_summary,
and writes {KEY: {analysis: rows}}. A time series is kept per rank as a digest of each column
(n, sum, and the index-weighted sum, which catches reordering; names as their counts) plus the
whole column when it has at most 200 points. A KEY whose analysis raises gets {"error": ...}.
"""
import json
import logging
import math
import os
import sys


def clean(v):
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def rows_of(df):
    if df is None:
        return []
    out = []
    for _, row in df.reset_index().iterrows():
        out.append({str(k) if not isinstance(k, tuple) else "/".join(map(str, k)): clean(v)
                    for k, v in row.items() if k != "index"})
    return out


def digest(values):
    if values and isinstance(values[0], str):
        counts = {}
        for v in values:
            counts[v] = counts.get(v, 0) + 1
        d = {"n": len(values), "counts": counts}
    else:
        d = {"n": len(values), "sum": sum(values),
             "isum": sum(i * v for i, v in enumerate(values))}
    if len(values) <= 200:
        d["values"] = values
    return d


def columns_of(series, cols):
    return {str(rank): {c: digest([clean(v) for v in df[c].tolist()]) for c in cols}
            for rank, df in series.items()}


def main():
    if len(sys.argv) < 5:
        print(__doc__)
        sys.exit(2)
    logging.disable(logging.CRITICAL)
    sys.path.insert(0, sys.argv[1])
    from hta.trace_analysis import TraceAnalysis  # noqa: E402
    out = {}
    for key in sys.argv[4:]:
        a = TraceAnalysis(trace_dir=os.path.join(sys.argv[2], key))
        ranks = sorted(a.t.traces.keys())
        entry = {}
        try:
            _, kernels = a.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
            entry["kernel_breakdown"] = rows_of(kernels)
        except Exception as e:  # noqa: BLE001
            entry["kernel_breakdown"] = {"error": repr(e)}
        try:
            ql = a.get_queue_length_time_series(ranks)
            entry["queue_length_time_series"] = columns_of(ql, ["ts", "stream", "queue_length"])
            entry["time_blocked_on_full_queue"] = rows_of(a.get_time_spent_blocked_on_full_queue(ql))
            entry["time_blocked_on_full_queue_4"] = rows_of(
                a.get_time_spent_blocked_on_full_queue(a.get_queue_length_time_series(ranks), 4))
        except Exception as e:  # noqa: BLE001
            entry["queue_length_time_series"] = {"error": repr(e)}
        try:
            bw = a.get_memory_bw_time_series(ranks)
            entry["memory_bw_time_series"] = columns_of(bw, ["ts", "name", "memory_bw_gbps"])
            entry["memory_bw_summary"] = rows_of(a.get_memory_bw_summary(ranks))
        except Exception as e:  # noqa: BLE001
            entry["memory_bw_time_series"] = {"error": repr(e)}
        out[key] = entry
    with open(sys.argv[3], "w") as f:
        json.dump(out, f, indent=None, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()

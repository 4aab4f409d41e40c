"""HTA's get_cupti_counter_data_with_operators: the reference for ft's (tests/data/hta_cupti_counters.json).

usage: /usr/bin/python3 bench/hta_cupti_counters.py HTA_SRC TRACE_DIR OUT.json
Runs HTA (Debian's pandas) on rank 0 of TRACE_DIR and writes its rows: name, ts, dur, op_stack,
top_level_op, bottom_level_op and every performance-counter column.
"""
import json
import logging
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    logging.disable(logging.CRITICAL)
    sys.path.insert(0, sys.argv[1])
    from hta.trace_analysis import TraceAnalysis  # noqa: E402
    a = TraceAnalysis(trace_dir=sys.argv[2])
    frames = a.get_cupti_counter_data_with_operators(ranks=[0])
    rows = []
    for df in frames:
        counters = [c for c in df.columns if "." in c]  # "dram__bytes_read.sum", ...
        for _, r in df.iterrows():
            row = {k: r[k] for k in ["name", "ts", "dur", "top_level_op", "bottom_level_op"]}
            row["op_stack"] = list(r["op_stack"])
            for c in counters:
                row[c] = r[c]
            rows.append({k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()})
    with open(sys.argv[3], "w") as f:
        json.dump(rows, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()

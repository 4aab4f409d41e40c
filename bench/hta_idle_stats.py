"""HTA's idle-interval statistics, the reference for ft's (tests/data/hta_idle_interval_stats.json).

usage: /usr/bin/python3 bench/hta_idle_stats.py HTA_SRC TRACES_ROOT OUT.json KEY:RANK ...
Runs HTA's get_idle_time_breakdown(ranks=[RANK], show_idle_interval_stats=True) on
TRACES_ROOT/KEY for each KEY:RANK (Debian's pandas) and writes {KEY: [rows]}.
"""
import json
import logging
import os
import sys


def main():
    if len(sys.argv) < 5:
        print(__doc__)
        sys.exit(2)
    logging.disable(logging.CRITICAL)
    sys.path.insert(0, sys.argv[1])
    from hta.trace_analysis import TraceAnalysis  # noqa: E402
    out = {}
    for spec in sys.argv[4:]:
        key, rank = spec.rsplit(":", 1)
        a = TraceAnalysis(trace_dir=os.path.join(sys.argv[2], key))
        _, stats = a.get_idle_time_breakdown(ranks=[int(rank)], visualize=False,
                                             show_idle_interval_stats=True)
        rows = []
        for _, row in stats.reset_index().iterrows():
            rows.append({k: (None if isinstance(v, float) and v != v else
                             (int(v) if k in ("rank", "stream") else v))
                         for k, v in row.items()})
        out[key] = rows
    with open(sys.argv[3], "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()

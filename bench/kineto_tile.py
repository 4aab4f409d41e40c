#!/usr/bin/env python3
"""kineto_tile.py: tiles a Kineto trace N times in time into one big trace (for kineto_bench).

Usage: bench/kineto_tile.py IN.json[.gz] OUT.json N
Copy k is shifted by k x (trace span + 1 ms); correlation, flow and External ids are offset so
they stay unique, ProfilerStep numbers continue. Written compactly, one event per line, so the
output is about N x the compact size of the input. Write OUT outside the repository (/tmp)."""
import gzip
import json
import re
import sys


def main():
    src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    op = gzip.open if src.endswith(".gz") else open
    with op(src, "rt") as f:
        doc = json.load(f)
    events = doc.pop("traceEvents")
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    ends = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(ends) - min(ts) + 1000
    max_id = 0
    steps = 0
    for e in events:
        a = e.get("args") or {}
        for k in ("correlation", "External id"):
            if isinstance(a.get(k), int):
                max_id = max(max_id, a[k])
        if isinstance(e.get("id"), int):
            max_id = max(max_id, e["id"])
        m = re.match(r"ProfilerStep#(\d+)$", e.get("name", ""))
        if m:
            steps = max(steps, int(m.group(1)) + 1)
    max_id += 1
    with open(dst, "w") as out:
        head = json.dumps(doc, separators=(",", ":"))
        out.write(head[:-1] + (',' if len(doc) else '') + '"traceEvents":[\n')
        first = True
        for k in range(n):
            for e in events:
                if e.get("ph") == "M" and k > 0:
                    continue
                c = dict(e)
                if isinstance(c.get("ts"), (int, float)):
                    c["ts"] = round(c["ts"] + k * span, 3)
                if isinstance(c.get("id"), int):
                    c["id"] = c["id"] + k * max_id
                a = c.get("args")
                if isinstance(a, dict) and k > 0:
                    a = dict(a)
                    for key in ("correlation", "External id"):
                        if isinstance(a.get(key), int) and a[key] > 0:
                            a[key] += k * max_id
                    c["args"] = a
                m = re.match(r"ProfilerStep#(\d+)$", c.get("name", ""))
                if m and k > 0:
                    c["name"] = "ProfilerStep#%d" % (int(m.group(1)) + k * steps)
                out.write(("" if first else ",\n") + json.dumps(c, separators=(",", ":")))
                first = False
        out.write("\n]}\n")


if __name__ == "__main__":
    main()

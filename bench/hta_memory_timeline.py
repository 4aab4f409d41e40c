"""HTA's MemoryAnalysis on a raw memory timeline: the reference for ft's (tests/data/hta_memory_timeline.json).

usage: /usr/bin/python3 bench/hta_memory_timeline.py HTA_SRC TIMELINE.json.gz OUT.json
Writes HTA's _process_raw_events result: {"times": [...], "sizes": [[bytes per category]...]}.
"""
import json
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.path.insert(0, sys.argv[1])
    from hta.memory_analysis import MemoryAnalysis  # noqa: E402
    times, sizes = MemoryAnalysis(sys.argv[2])._process_raw_events()
    with open(sys.argv[3], "w") as f:
        json.dump({"times": times, "sizes": sizes}, f)
        f.write("\n")


if __name__ == "__main__":
    main()

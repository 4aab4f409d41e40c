#!/usr/bin/env python3
"""side_by_side.py: ft-train flag variants measured in alternating rounds (A B C, C B A, ...).

Usage: bench/side_by_side.py FT_TRAIN ROUNDS STEPS "COMMON FLAGS" "VARIANT 1" "VARIANT 2" ...
Prints, per variant, the median tokens/s and the median and per-round ratios to variant 1
(tokens over time of the steps after 2 warm-up steps, as ft-tune measures). Use "-" for a
variant with no extra flags.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile


def tokens_per_s(metrics, warmup=2):
    rows = [json.loads(line) for line in open(metrics) if line.strip()]
    rows = [r for r in rows if "loss" in r]
    rows = rows[warmup:] if len(rows) > warmup else rows
    tokens = sum(round(r["tokens_per_s"] * r["step_ms"] / 1000) for r in rows)
    return tokens / (sum(r["step_ms"] for r in rows) / 1000)


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    train, rounds, steps, common = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    variants = [[] if v == "-" else v.split() for v in sys.argv[5:]]
    tps = [[] for _ in variants]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = list(range(len(variants)))
            for i in order if r % 2 == 0 else order[::-1]:
                metrics = os.path.join(tmp, f"m{i}.jsonl")
                subprocess.run([train] + common.split() + variants[i] +
                               ["--steps", str(steps), "-q", "--metrics", metrics], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                tps[i].append(tokens_per_s(metrics))
    for i, v in enumerate(variants):
        ratios = [a / b for a, b in zip(tps[i], tps[0])]
        print(f"{' '.join(v) or '(common flags only)'}: median {statistics.median(tps[i]):.0f} "
              f"tokens/s, ratio median {statistics.median(ratios):.3f}, per round "
              + " ".join(f"{x:.2f}" for x in ratios))


if __name__ == "__main__":
    main()

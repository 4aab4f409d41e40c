#!/usr/bin/env python3
"""device_check_report.py: the parsing and the final table of scripts/device-check.sh (stdlib only).

Subcommands (paths are the check's work directory W and files in it):
  gtest-counts FILE...      passed skipped failed, from GoogleTest JSON reports (--gtest_output=json)
  ctest-counts LOG          passed skipped failed, from a ctest log
  metrics FILE SKIP         mean tokens_per_s, mfu and step_ms of a metrics JSONL over steps >= SKIP
  bench-json FILE           micro_batch tokens_per_s mfu gemm_peak_tflops from cuda_train_bench --json
                            ("-" for a missing value)
  table W                   the table (stdout) and W/summary.json, from W/stages.tsv and W/results.env
"""
import json
import re
import sys


def gtest_counts(paths):
    passed = skipped = failed = 0
    for path in paths:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            failed += 1  # a binary that crashed before writing its report
            continue
        for suite in doc.get("testsuites", []):
            for t in suite.get("testsuite", []):
                if t.get("failures"):
                    failed += 1
                elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                    skipped += 1
                else:
                    passed += 1
    return passed, skipped, failed


def ctest_counts(path):
    passed = skipped = failed = 0
    line_re = re.compile(r"^\s*\d+/\d+ Test\s+#\d+: \S+ \.*\s*(\*{0,3})(Passed|Skipped|Failed|"
                         r"Not Run|Timeout|Exception|SEGFAULT|Subprocess aborted)")
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = line_re.match(line)
                if not m:
                    continue
                word = m.group(2)
                if word == "Passed":
                    passed += 1
                elif word in ("Skipped", "Not Run"):
                    skipped += 1
                else:
                    failed += 1
    except OSError:
        pass
    return passed, skipped, failed


def metrics(path, skip):
    tps, mfu, ms = [], [], []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    m = json.loads(line)
                except ValueError:
                    continue
                if m.get("step", 0) < skip or "tokens_per_s" not in m:
                    continue
                tps.append(float(m["tokens_per_s"]))
                mfu.append(float(m.get("mfu", 0.0)))
                ms.append(float(m.get("step_ms", 0.0)))
    except OSError:
        pass
    if not tps:
        return None
    mean = lambda v: sum(v) / len(v)
    return mean(tps), mean(mfu), mean(ms), len(tps)


def bench_json(path):
    try:
        with open(path) as f:
            j = json.load(f)
    except (OSError, ValueError):
        return None
    keys = ("micro_batch", "tokens_per_s", "mfu_vs_measured_gemm_peak", "gemm_peak_tflops")
    return ["-" if j.get(k) in (None, "") else str(j[k]) for k in keys]


def read_env(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    out[k.strip()] = v.strip()
    except OSError:
        pass
    return out


def read_stages(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 3:
                    rows.append(parts + [""] * (4 - len(parts)))
    except OSError:
        pass
    return rows


def table(work):
    env = read_env(work + "/results.env")
    stages = read_stages(work + "/stages.tsv")
    na = env.get("why_not_measured", "not measured")

    def val(key, fmt="{}", suffix=""):
        v = env.get(key)
        if v in (None, ""):
            return na
        try:
            return fmt.format(float(v)) + suffix
        except ValueError:
            return v

    rows = [
        ("device", env.get("device", na)),
        ("binaries", env.get("mode", na)),
        ("gpu tests (pass/skip/fail)",
         "{}/{}/{}".format(env["tests_passed"], env["tests_skipped"], env["tests_failed"])
         if "tests_passed" in env else na),
        ("GPT-2 124M T=1024 bf16 micro-batch", env.get("bench_micro_batch", na)),
        ("tokens/s", val("bench_tokens_per_s", "{:,.0f}")),
        ("MFU (vs measured bf16 GEMM peak)", val("bench_mfu", "{:.1%}")),
        ("bf16 GEMM peak", val("gemm_peak_tflops", "{:.0f}", " TFLOP/s")),
        ("profiler overhead (CUPTI on)", val("profiler_overhead_pct", "{:+.1f}", "%")),
        ("PCIe scenario", env.get("pcie_verdict", na)),
    ]
    width = max(len(r[0]) for r in rows)
    lines = ["", "== device check =="]
    for name, status, secs, limit in stages:
        lines.append("  stage {:<12} {:<28} {:>4}s{}".format(
            name, status, secs, " (limit {}s)".format(limit) if limit else ""))
    lines.append("")
    for k, v in rows:
        lines.append("{:<{w}}  {}".format(k, v, w=width))
    print("\n".join(lines))
    summary = {"results": env, "stages": [
        {"stage": s[0], "status": s[1], "seconds": s[2], "limit_s": s[3]} for s in stages]}
    with open(work + "/summary.json", "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    return 0


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd = argv[1]
    if cmd == "gtest-counts":
        print(*gtest_counts(argv[2:]))
    elif cmd == "ctest-counts" and len(argv) == 3:
        print(*ctest_counts(argv[2]))
    elif cmd == "metrics" and len(argv) == 4:
        r = metrics(argv[2], int(argv[3]))
        if r is None:
            return 1
        print("{:.1f} {:.6f} {:.3f} {}".format(*r))
    elif cmd == "bench-json" and len(argv) == 3:
        r = bench_json(argv[2])
        if r is None:
            return 1
        print(*r)
    elif cmd == "table" and len(argv) == 3:
        return table(argv[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

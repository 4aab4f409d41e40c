#!/usr/bin/env python3
"""cut_samples.py: cuts the tiny Kineto samples in this folder from ../shared/traces/hta.

Run from the repository root: python3 tests/data/kineto/cut_samples.py. current.json(.gz) takes
real events from critical_path/simple_add (one launch of each kind with its GPU event and ac2g
flows, a cuda_sync, ProfilerSteps), an NCCL kernel and a gpu_user_annotation from
nccl_parser_config and [memory] instants from df_index_resolver. kineto_2021.json and
legacy.json are written in those formats (see the test for what each field exercises)."""
import gzip
import json
import os

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "traces", "hta")
OUT = os.path.dirname(os.path.abspath(__file__))


def load(rel):
    with gzip.open(os.path.join(ROOT, rel)) as f:
        return json.load(f)["traceEvents"]


def main():
    ev = load("critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz")
    keep = []
    steps = [e for e in ev if e.get("name", "").startswith("ProfilerStep#")][:2]
    keep += steps
    want = {"cudaLaunchKernel": 1, "cudaMemcpyAsync": 1, "cudaMemsetAsync": 1}
    corr = set()
    for e in ev:
        n = e.get("name")
        if e.get("cat") == "cuda_runtime" and want.get(n, 0) > 0:
            want[n] -= 1
            keep.append(e)
            corr.add(e["args"]["correlation"])
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"].get("correlation") in corr:
            keep.append(e)
        if e.get("cat") == "ac2g" and e.get("id") in corr:
            keep.append(e)
    keep += [e for e in ev if e.get("cat") == "cuda_sync"][:1]
    keep += [e for e in ev if e.get("cat") == "cpu_op"][:3]
    keep += [e for e in ev if e.get("ph") == "M"][:4]
    nccl = load("nccl_parser_config/nccl_data.json.gz")
    keep += [e for e in nccl if e.get("cat") == "kernel" and "ncclKernel" in e["name"]][:1]
    keep += [e for e in nccl if e.get("cat") == "gpu_user_annotation"][:1]
    keep += [e for e in nccl if e.get("name", "").startswith("ProfilerStep#")][:2]
    dfi = load("df_index_resolver/df_index_resolver.json.gz")
    keep += [e for e in dfi if e.get("name") == "[memory]"][:2]
    doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 4},
           "traceEvents": keep}
    text = json.dumps(doc, indent=1)
    with open(os.path.join(OUT, "current.json"), "w") as f:
        f.write(text + "\n")
    with gzip.open(os.path.join(OUT, "current.json.gz"), "wt") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""gpu_scenarios.py: labelled GPU training traces in PyTorch 2.x's Kineto format, one known cause
each, with the expected top finding and saving computed by construction.

  python3 bench/gpu_scenarios.py OUT_DIR            writes OUT_DIR/<scenario>/rank*.json and
                                                    OUT_DIR/expected.json
  python3 bench/gpu_scenarios.py OUT_DIR --hta DIR  also runs HTA (source in DIR) on each and
                                                    prints its idle share against the construction

Times are integer microseconds. Each scenario is 6 ProfilerSteps (one without: "no_profiler_step")
of a host thread that launches kernels on stream 7 of device 0; launches, kernels, copies and
syncs are linked by correlation ids and ac2g flows as Kineto writes them. Expected values per
steady step (the first step is the profiler's warm-up): the cause's device-idle time and the step
time, so the predicted step is step - saving.
"""
import json
import os
import sys

PID, TID, DEV, STREAM, COMM_STREAM = 4242, 4242, 0, 7, 20


class Trace:
    def __init__(self, rank=0, world=1):
        self.ev, self.corr, self.ext = [], 1000, 1
        self.rank, self.world = rank, world

    def span(self, cat, name, ts, dur, tid=TID, args=None):
        e = {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur,
             "args": dict(args or {})}
        if cat in ("cpu_op", "user_annotation"):
            e["args"]["External id"] = self.ext
            self.ext += 1
        self.ev.append(e)
        return e

    def _device(self, cat, name, ts, dur, stream, corr, args=None):
        a = {"device": DEV, "context": 1, "stream": stream, "correlation": corr}
        a.update(args or {})
        self.ev.append({"ph": "X", "cat": cat, "name": name, "pid": DEV, "tid": stream,
                        "ts": ts, "dur": dur, "args": a})
        self.ev.append({"ph": "s", "id": corr, "pid": PID, "tid": TID, "ts": ts, "cat": "ac2g",
                        "name": "ac2g"})
        self.ev.append({"ph": "f", "id": corr, "pid": DEV, "tid": stream, "ts": ts, "cat": "ac2g",
                        "name": "ac2g", "bp": "e"})

    def launch(self, ts, kts, kdur, name="ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn",
               stream=STREAM, ldur=5):
        """cudaLaunchKernel at ts (ldur µs) and its kernel at kts."""
        self.corr += 1
        self.span("cuda_runtime", "cudaLaunchKernel", ts, ldur, args={"correlation": self.corr})
        self._device("kernel", name, kts, kdur, stream, self.corr,
                     {"grid": [108, 1, 1], "block": [128, 1, 1]})
        return kts + kdur

    def memcpy(self, ts, dur, kts, kdur, kind, nbytes):
        """cudaMemcpyAsync at ts blocking dur µs; its copy at kts."""
        self.corr += 1
        self.span("cuda_runtime", "cudaMemcpyAsync", ts, dur, args={"correlation": self.corr})
        self._device("gpu_memcpy", kind, kts, kdur, STREAM, self.corr,
                     {"bytes": nbytes, "memory bandwidth (GB/s)": round(nbytes / kdur / 1e3, 3)})

    def runtime(self, name, ts, dur):
        self.corr += 1
        self.span("cuda_runtime", name, ts, dur, args={"correlation": self.corr})

    def write(self, path):
        doc = {"schemaVersion": 1,
               "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB",
                                     "totalGlobalMem": 85899345920, "computeMajor": 8,
                                     "computeMinor": 0, "numSms": 108}],
               "distributedInfo": {"backend": "nccl", "rank": self.rank,
                                   "world_size": self.world},
               "traceEvents": [
                   {"name": "process_name", "ph": "M", "pid": PID, "tid": 0,
                    "args": {"name": "python3"}},
                   {"name": "process_name", "ph": "M", "pid": DEV, "tid": 0,
                    "args": {"name": "GPU 0"}},
                   {"name": "thread_name", "ph": "M", "pid": PID, "tid": TID,
                    "args": {"name": "thread 4242 (python3)"}}] + self.ev,
               "traceName": os.path.basename(path), "displayTimeUnit": "ms",
               "baseTimeNanoseconds": 1700000000000000000}
        with open(path, "w") as f:
            json.dump(doc, f)


STEPS = 6


def steps(t, body, step_us, name="ProfilerStep#{}"):
    """Runs body(t, base) for each step and wraps it in its step annotation."""
    for i in range(STEPS):
        base = 1_000 + i * step_us
        if name:
            t.span("user_annotation", name.format(i), base, step_us)
        body(t, base)


def kernels(t, ts, n, kdur, gap_host=20, ldur=5, start=None, name=None):
    """n launches every gap_host µs from ts; kernels back to back from `start` (or launch + 5)."""
    dev = start if start is not None else ts + ldur
    for k in range(n):
        lts = ts + k * gap_host
        kts = max(dev, lts + ldur)
        dev = t.launch(lts, kts, kdur, ldur=ldur, **({"name": name} if name else {}))
    return dev


def data_starvation():
    # 30 ms in the DataLoader, then 20 ms of kernels (10 x 2 ms): the device idles 30 of 50 ms.
    t = Trace()
    def body(t, b):
        t.span("user_annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
               b + 10, 30_000)
        kernels(t, b + 30_020, 10, 2_000)
    steps(t, body, 50_000)
    return [t], {"top": "data", "saving_ms": 30.0, "step_ms": 50.0}


def pageable_h2d():
    # A 64 MiB pageable upload blocks the host 10 ms (the copy itself 10 ms on the stream), then
    # 30 ms of kernels; the device idles only while the host stages (~0), busy on the copy 10 ms.
    t = Trace()
    def body(t, b):
        t.memcpy(b + 10, 10_000, b + 15, 9_990, "Memcpy HtoD (Pageable -> Device)", 64 << 20)
        kernels(t, b + 10_020, 15, 2_000)
    steps(t, body, 40_100)
    return [t], {"top": "pcie", "saving_ms": 10.0, "step_ms": 40.1}


def readback(t, start, end):
    """loss.item() at `start`: aten::item -> _local_scalar_dense -> a 4-byte DtoH copy whose call
    blocks until the queue drains at `end`."""
    t.span("cpu_op", "aten::item", start, end - start + 12)
    t.span("cpu_op", "aten::_local_scalar_dense", start + 1, end - (start + 1) + 10)
    t.memcpy(start + 5, end - (start + 5) + 5, end, 2, "Memcpy DtoH (Device -> Pageable)", 4)


def readback_busy():
    # 20 kernels of 2 ms launched in 0.4 ms, then loss.item(): a 4-byte read-back that blocks
    # the host until the queue drains (~39.6 ms); the next step launches at once: the device
    # never idles for it.
    t = Trace()
    def body(t, b):
        end = kernels(t, b + 10, 20, 2_000)
        readback(t, b + 420, end)
    steps(t, body, 40_060)
    return [t], {"top": None, "saving_ms": 0.0, "step_ms": 40.06}


def readback_starving():
    # The same read-back, then 20 ms of Python work before the next step's launches: with the
    # read-back the host cannot run ahead, so the device idles 20 ms per step behind it.
    t = Trace()
    def body(t, b):
        end = kernels(t, b + 10, 10, 2_000)
        readback(t, b + 220, end)
        t.span("python_function", "train.py(88): log_metrics", end + 20, 19_900)
    steps(t, body, 40_030)
    return [t], {"top": "sync", "saving_ms": 20.0, "step_ms": 40.03}


def launch_bound():
    # 100 tiny kernels (5 µs) launched every 20 µs: the device is busy 0.5 of 2 ms.
    t = Trace()
    def body(t, b):
        kernels(t, b + 10, 100, 5, gap_host=20, ldur=15,
                name="void at::native::vectorized_elementwise_kernel<4>")
    steps(t, body, 2_000)
    return [t], {"top": "host", "saving_ms": 1.5, "step_ms": 2.0}


def allocator_churn():
    # The caching allocator misses every step: cudaFree (device sync) 4 ms and cudaMalloc 4 ms
    # while the queue is empty, then 20 ms of kernels.
    t = Trace()
    def body(t, b):
        t.span("cpu_op", "aten::empty", b + 10, 8_020)
        t.runtime("cudaFree", b + 15, 4_000)
        t.runtime("cudaMalloc", b + 4_020, 4_000)
        kernels(t, b + 8_040, 10, 2_000)
    steps(t, body, 28_060)
    return [t], {"top": "memory", "saving_ms": 8.0, "step_ms": 28.06}


def exposed_allreduce():
    # 2 ranks, the same work: 20 ms of backward kernels, then a 10 ms all-reduce on the NCCL
    # stream that nothing overlaps, then the optimizer (4 ms, waiting for the all-reduce), then
    # loss.item(). Bucketed during backward, the all-reduce would hide behind its 20 ms.
    ranks = []
    for r in range(2):
        t = Trace(r, 2)
        def body(t, b):
            end = kernels(t, b + 10, 10, 2_000)
            t.launch(b + 250, end, 10_000, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                     stream=COMM_STREAM)
            end = kernels(t, b + 300, 2, 2_000, start=end + 10_000)
            readback(t, b + 400, end)
        steps(t, body, 34_040)
        ranks.append(t)
    return ranks, {"top": "comm", "saving_ms": 10.0, "step_ms": 34.04}


def gpu_straggler():
    # 2 ranks; rank 1 spends 15 ms on the CPU (a slow data path) before launching, so rank 0's
    # all-reduce starts 15 ms earlier and waits for it; each step ends on loss.item() after the
    # all-reduce. Without the slow path both ranks take 22 ms: 15 ms saved.
    ranks = []
    for r in range(2):
        t = Trace(r, 2)
        delay = 15_000 if r == 1 else 0
        def body(t, b, delay=delay):
            if delay:
                t.span("user_annotation", "slow_augmentation", b + 5, delay)
            end = kernels(t, b + 10 + delay, 10, 2_000)
            other = b + 10 + 15_000 + 5 + 10 * 2_000  # when the later rank's backward ends
            end = t.launch(b + 250 + delay, end, max(other, end) - end + 2_000,
                           name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL", stream=COMM_STREAM)
            readback(t, b + 300 + delay, end)
        steps(t, body, 37_040)
        ranks.append(t)
    return ranks, {"top": "parallel", "straggler": 1, "saving_ms": 15.0, "step_ms": 37.04,
                   "rank": 0}


def healthy():
    # Launches run ahead; kernels back to back: nothing to fix.
    t = Trace()
    def body(t, b):
        kernels(t, b + 10, 20, 2_000, gap_host=30)
    steps(t, body, 40_010)
    return [t], {"top": None, "saving_ms": 0.0, "step_ms": 40.01}


def no_profiler_step():
    # The data-starved loop annotated by the program (record_function("train_step")) only.
    t = Trace()
    def body(t, b):
        t.span("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
               b + 10, 30_000)
        kernels(t, b + 30_020, 10, 2_000)
    steps(t, body, 50_000, name="train_step")
    return [t], {"top": "data", "saving_ms": 30.0, "step_ms": 50.0,
                 "steps_rule": "train_step"}


def fp32_gemms():
    # Launches run ahead, the GEMMs are SIMT fp32 kernels: 16 of 2 ms per 40 ms step (80%), the
    # rest 8 elementwise kernels of 1 ms; the step ends on loss.item(), which waits for the
    # queue to drain. With tensor cores at the stated 4x the GEMMs would take 8 ms and the
    # read-back would return 24 ms sooner: 24 ms saved.
    t = Trace()
    def body(t, b):
        end = kernels(t, b + 10, 16, 2_000, gap_host=30, name="ampere_sgemm_128x64_nn")
        end = kernels(t, b + 600, 8, 1_000, gap_host=30, start=end,
                      name="void at::native::vectorized_elementwise_kernel<4>")
        readback(t, b + 850, end)
    steps(t, body, 40_030)
    return [t], {"top": "precision", "saving_ms": 24.0, "step_ms": 40.03}


SCENARIOS = [data_starvation, pageable_h2d, readback_busy, readback_starving, launch_bound,
             allocator_churn, exposed_allreduce, gpu_straggler, healthy, no_profiler_step,
             fp32_gemms]


def idle_pct(t):
    """Device idle share as HTA's temporal breakdown defines it: over the steps it keeps (all
    but the last; everything without ProfilerSteps), from the first device event's start to the
    last one's end."""
    starts = sorted(e["ts"] for e in t.ev
                    if e["cat"] == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    cut = starts[-1] if len(starts) > 1 else float("inf")  # no ProfilerStep: HTA keeps all
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in t.ev
                   if e.get("pid") == DEV and e["ph"] == "X" and e["ts"] < cut)
    lo, hi = spans[0][0], max(b for _, b in spans)
    busy, cur = 0, lo
    for a, b in spans:
        a = max(a, cur)
        if b > a:
            busy += b - a
            cur = b
    return 100.0 * (1 - busy / (hi - lo))


def run_hta(hta_src, folder):
    sys.path.insert(0, hta_src)
    from hta.trace_analysis import TraceAnalysis  # noqa: E402
    analyzer = TraceAnalysis(trace_dir=folder)
    df = analyzer.get_temporal_breakdown(visualize=False)
    return float(df["idle_time_pctg"].iloc[0])


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    out = sys.argv[1]
    hta = sys.argv[sys.argv.index("--hta") + 1] if "--hta" in sys.argv else None
    expected = {}
    for make in SCENARIOS:
        ranks, exp = make()
        folder = os.path.join(out, make.__name__)
        os.makedirs(folder, exist_ok=True)
        for t in ranks:
            t.write(os.path.join(folder, f"rank{t.rank}.json"))
        exp["idle_pct"] = round(idle_pct(ranks[0]), 3)
        expected[make.__name__] = exp
        if hta:
            idle = run_hta(hta, folder)
            print(f"{make.__name__}: HTA idle {idle:.2f}% (construction {exp['idle_pct']:.2f}%)")
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()

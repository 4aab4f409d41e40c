#!/usr/bin/env python3
"""torch_gpu_traces.py: real PyTorch profiler (Kineto) traces of one training loop on a GPU, one
known cause of waiting per variant, for checking ft-diagnose against what an expert reads there.

  python3 bench/torch_gpu_traces.py OUT_DIR [--variants a,b,...] [--steps N]

Writes OUT_DIR/<variant>.json.gz (torch.profiler, ProfilerStep per step) and OUT_DIR/truth.json
(per variant: what was done, the mean step wall time measured with CUDA events outside the
profiler, and the cause's own time measured in isolation). The model is an 8-layer bf16 MLP,
4096 wide, batch 8192 (~6.6 TFLOP per step: GPU-bound on any current GPU). Variants:

  baseline      inputs already on the GPU, no host sync inside the loop
  item_sync     loss.item() every step (a 4-byte blocking read-back while the GPU is busy):
                the host waits for the step, the GPU stays busy; not a PCIe problem
  pageable_h2d  each step copies its 128 MiB fp32 batch from pageable host memory (.to(cuda)):
                a real copy stall; the fix is pinned memory + non_blocking on a side stream
  slow_loader   each step builds its batch on the CPU first (torch CPU ops, ~the step's length),
                then copies it pinned: the GPU idles while the host prepares data
"""
import gzip
import json
import os
import shutil
import sys
import time

import torch

WIDTH, LAYERS, BATCH = 4096, 8, 8192


def model_and_opt():
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()]
    m = torch.nn.Sequential(*layers).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, foreach=True)
    return m, opt


def cpu_batch_work(x):
    # Host-side preprocessing standing in for a slow loader: real CPU arithmetic on the batch.
    for _ in range(3):
        x = torch.tanh(x * 1.0001 + 0.001)
    return x


def run_variant(name, steps, out_dir):
    torch.manual_seed(0)
    m, opt = model_and_opt()
    gpu_x = torch.randn(BATCH, WIDTH, device="cuda")
    host_pool = [torch.randn(BATCH, WIDTH) for _ in range(2)]  # pageable
    pinned = torch.empty(BATCH, WIDTH).pin_memory()
    losses = []

    def step(i):
        if name == "pageable_h2d":
            x = host_pool[i % 2].to("cuda")
        elif name == "slow_loader":
            pinned.copy_(cpu_batch_work(host_pool[i % 2]))
            x = pinned.to("cuda", non_blocking=True)
        else:
            x = gpu_x
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = m(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if name == "item_sync":
            losses.append(loss.item())

    for i in range(3):  # warm-up (cuBLAS handles, allocator)
        step(i)
    torch.cuda.synchronize()
    # Unprofiled step time: CUDA events around `steps` steps.
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    e0.record()
    for i in range(steps):
        step(i)
    e1.record()
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3 / steps
    gpu_ms = e0.elapsed_time(e1) / steps

    sched = torch.profiler.schedule(wait=1, warmup=1, active=steps)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    raw = os.path.join(out_dir, name + ".json")
    with torch.profiler.profile(activities=acts, schedule=sched) as prof:
        for i in range(steps + 2):
            step(i)
            prof.step()
    torch.cuda.synchronize()
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb", compresslevel=6) as g:
        shutil.copyfileobj(f, g)
    os.remove(raw)

    # The cause's own cost, in isolation.
    cause = {}
    if name == "pageable_h2d":
        torch.cuda.synchronize()
        t = time.perf_counter()
        for i in range(5):
            host_pool[i % 2].to("cuda")
        torch.cuda.synchronize()
        cause["pageable_copy_ms"] = (time.perf_counter() - t) * 1e3 / 5
        t = time.perf_counter()
        for i in range(5):
            pinned.to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        cause["pinned_copy_ms"] = (time.perf_counter() - t) * 1e3 / 5
    if name == "slow_loader":
        t = time.perf_counter()
        for i in range(5):
            pinned.copy_(cpu_batch_work(host_pool[i % 2]))
        cause["cpu_batch_ms"] = (time.perf_counter() - t) * 1e3 / 5
    del m, opt
    torch.cuda.empty_cache()
    return {"step_wall_ms": round(wall_ms, 3), "step_gpu_events_ms": round(gpu_ms, 3),
            "steps_profiled": steps, **{k: round(v, 3) for k, v in cause.items()}}


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    out = sys.argv[1]
    variants = ["baseline", "item_sync", "pageable_h2d", "slow_loader"]
    steps = 8
    args = sys.argv[2:]
    while args:
        a = args.pop(0)
        if a == "--variants":
            variants = args.pop(0).split(",")
        elif a == "--steps":
            steps = int(args.pop(0))
        else:
            print(f"torch_gpu_traces: unknown argument {a}", file=sys.stderr)
            return 2
    if not torch.cuda.is_available():
        print("torch_gpu_traces: no CUDA device", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    truth = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
             "model": f"{LAYERS}x Linear({WIDTH}) + GELU, bf16 autocast, batch {BATCH}"}
    for v in variants:
        truth[v] = run_variant(v, steps, out)
        print(v, truth[v], flush=True)
    with open(os.path.join(out, "truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""torch_gpt.py: the ft GPT-2 written in plain PyTorch (CPU), timed per step for side-by-side runs."""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

KJV_CACHE = "/tmp/ft_kjv.txt"


def parse_args():
    p = argparse.ArgumentParser(description="GPT-2 training step benchmark in PyTorch")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--channels", type=int, default=256)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup-steps", type=int, default=2,
                   help="leading steps excluded from the timing mean")
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--min-lr", type=float, default=6e-5)
    p.add_argument("--lr-warmup", type=int, default=None,
                   help="linear LR warm-up steps (ft-train --warmup); default = --warmup-steps")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--data", default="kjv", help="kjv, random, or a path to a byte file")
    p.add_argument("--val-batches", type=int, default=2)
    p.add_argument("--metrics", default=None, help="optional per-step JSONL file")
    return p.parse_args()


# ---------------------------------------------------------------- model ----

class CausalSelfAttention(nn.Module):
    def __init__(self, c, nh):
        super().__init__()
        self.nh = nh
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        hs = c // self.nh
        q = q.view(b, t, self.nh, hs).transpose(1, 2)  # (B, NH, T, hs)
        k = k.view(b, t, self.nh, hs).transpose(1, 2)
        v = v.view(b, t, self.nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c, 4 * c)
        self.c_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c, nh):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c)
        self.attn = CausalSelfAttention(c, nh)
        self.ln_2 = nn.LayerNorm(c)
        self.mlp = Mlp(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, layers, heads, channels, vocab, max_t):
        super().__init__()
        self.wte = nn.Embedding(vocab, channels)
        self.wpe = nn.Embedding(max_t, channels)
        self.blocks = nn.ModuleList([Block(channels, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(channels)
        self.lm_head = nn.Linear(channels, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        # GPT-2 init: N(0, 0.02), residual projections scaled by 1/sqrt(2L), zero biases.
        for name, prm in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(prm)
            elif prm.dim() == 2:
                std = 0.02
                if name.endswith("c_proj.weight"):
                    std = 0.02 / math.sqrt(2 * layers)
                nn.init.normal_(prm, mean=0.0, std=std)

    def forward(self, idx, targets):
        b, t = idx.shape
        pos = torch.arange(t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        x = self.ln_f(x)
        logits = self.lm_head(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


# ----------------------------------------------------------------- data ----

def ft_kjv_path():
    """ft's cached KJV text (verse references stripped), so both engines see the same bytes."""
    for base in (os.environ.get("FT_CACHE_DIR"),
                 os.path.join(os.environ["XDG_CACHE_HOME"], "ft") if os.environ.get("XDG_CACHE_HOME") else None,
                 os.path.join(os.path.expanduser("~"), ".cache", "ft")):
        if base and os.path.exists(os.path.join(base, "kjv.txt")):
            return os.path.join(base, "kjv.txt")
    return None


def load_kjv():
    ft_path = ft_kjv_path()
    if ft_path:
        with open(ft_path, "rb") as f:
            return f.read()
    print("torch_gpt: ft's kjv.txt cache not found; using raw `bible` output (losses not comparable)",
          file=sys.stderr)
    if not os.path.exists(KJV_CACHE) or os.path.getsize(KJV_CACHE) == 0:
        text = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True,
                              capture_output=True).stdout
        tmp = KJV_CACHE + ".%d" % os.getpid()
        with open(tmp, "wb") as f:
            f.write(text)
        os.replace(tmp, KJV_CACHE)
    with open(KJV_CACHE, "rb") as f:
        return f.read()


def load_tokens(args):
    if args.data == "random":
        g = torch.Generator().manual_seed(args.seed)
        return torch.randint(0, args.vocab, (1 << 22,), generator=g, dtype=torch.long)
    raw = load_kjv() if args.data == "kjv" else open(args.data, "rb").read()
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()


class Batches:
    """Sequential non-overlapping (B, T) windows over a token stream; wraps around."""

    def __init__(self, tokens, b, t):
        self.tokens, self.b, self.t, self.pos = tokens, b, t, 0

    def next(self):
        n = self.b * self.t
        if self.pos + n + 1 > len(self.tokens):
            self.pos = 0
        buf = self.tokens[self.pos:self.pos + n + 1]
        self.pos += n
        return buf[:-1].view(self.b, self.t), buf[1:].view(self.b, self.t)


# ------------------------------------------------------------- training ----

def lr_at(step, args):
    """Linear warm-up to --lr, then cosine decay to --min-lr at the last step (llm.c style)."""
    warm = args.lr_warmup
    if step < warm:
        return args.lr * (step + 1) / warm
    if args.steps <= warm:
        return args.lr
    ratio = min(1.0, (step - warm) / max(1, args.steps - 1 - warm))  # as ft: min-lr at the last step
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return args.min_lr + coeff * (args.lr - args.min_lr)


def blas_info():
    cfg = torch.__config__.show()
    lines = []
    for ln in cfg.splitlines():
        ln = ln.strip()
        if ln.startswith("- Build settings:"):  # keep only the BLAS/LAPACK/MKL settings
            lines += [kv.strip() for kv in ln.split(",") if re.search(r"BLAS|LAPACK|MKL", kv)]
        elif re.search(r"BLAS|LAPACK|MKL|oneDNN|OpenMP|CPU capability", ln):
            lines.append(ln)
    loaded = set()
    with open("/proc/self/maps") as f:
        for ln in f:
            m = re.search(r"(/\S*(blas|lapack|mkl|dnnl|jemalloc|gomp|iomp)\S*)", ln)
            if m:
                loaded.add(os.path.realpath(m.group(1)))
    return lines, sorted(loaded)


def main():
    args = parse_args()
    if args.lr_warmup is None:
        args.lr_warmup = args.warmup_steps
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.threads)
    torch.manual_seed(args.seed)

    tokens = load_tokens(args)
    split = int(len(tokens) * 0.9)
    train = Batches(tokens[:split], args.micro_batch, args.seq_len)
    val = Batches(tokens[split:], args.micro_batch, args.seq_len)

    model = Gpt(args.layers, args.heads, args.channels, args.vocab, args.seq_len)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    bf16 = args.precision == "bf16"
    tokens_per_step = args.micro_batch * args.seq_len * args.grad_accum
    n_params = sum(p.numel() for p in model.parameters())

    metrics = open(args.metrics, "w") if args.metrics else None
    step_ms, cpu_ms, losses = [], [], []
    for step in range(args.steps):
        t0 = time.perf_counter()
        c0 = time.process_time()
        lr = lr_at(step, args)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss_acc = 0.0
        for _ in range(args.grad_accum):
            x, y = train.next()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = model(x, y) / args.grad_accum
            loss.backward()
            loss_acc += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        dt = (time.perf_counter() - t0) * 1e3
        dc = (time.process_time() - c0) * 1e3  # CPU time of all threads: shows contention
        step_ms.append(dt)
        cpu_ms.append(dc)
        losses.append(loss_acc)
        if metrics:
            metrics.write(json.dumps({"step": step, "loss": loss_acc, "lr": lr,
                                      "grad_norm": float(norm), "step_ms": dt, "cpu_ms": dc,
                                      "tokens_per_s": tokens_per_step / dt * 1e3}) + "\n")
        print("step %3d loss %.4f lr %.2e norm %.3f %.1f ms" % (step, loss_acc, lr, float(norm), dt),
              file=sys.stderr)

    val_loss = None
    if args.val_batches > 0:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            val_loss = sum(model(*val.next()).item() for _ in range(args.val_batches)) / args.val_batches

    timed = step_ms[args.warmup_steps:] or step_ms
    mean_ms = sum(timed) / len(timed)
    timed_cpu = cpu_ms[args.warmup_steps:] or cpu_ms
    blas_lines, loaded = blas_info()
    out = {
        "impl": "torch",
        "config": {"layers": args.layers, "heads": args.heads, "channels": args.channels,
                   "vocab": args.vocab, "seq_len": args.seq_len, "micro_batch": args.micro_batch,
                   "grad_accum": args.grad_accum, "steps": args.steps,
                   "warmup_steps": args.warmup_steps, "precision": args.precision,
                   "lr": args.lr, "min_lr": args.min_lr, "lr_warmup": args.lr_warmup,
                   "weight_decay": args.weight_decay, "clip": args.clip, "seed": args.seed,
                   "data": args.data, "params": n_params},
        "mean_step_ms": mean_ms,
        "min_step_ms": min(timed),
        "mean_cpu_ms": sum(timed_cpu) / len(timed_cpu),
        "loadavg_end": os.getloadavg(),
        "tokens_per_s": tokens_per_step / mean_ms * 1e3,
        "final_loss": losses[-1],
        "val_loss": val_loss,
        "torch_version": torch.__version__,
        "blas": blas_lines,
        "loaded_libs": loaded,
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "LD_PRELOAD", "LD_LIBRARY_PATH",
                                               "MALLOC_CONF", "OPENBLAS_CORETYPE")},
    }
    if metrics:
        metrics.write(json.dumps({"summary": {"mean_tokens_per_s": out["tokens_per_s"],
                                              "mean_step_ms": mean_ms, "val_loss": val_loss}}) + "\n")
        metrics.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""A small GPT trained with plain PyTorch: the program ft-tune tunes in examples/pytorch/spec.json.

usage: python3 train_gpt.py [--steps N] [--batch-size B] [--workers W] [--pin-memory]
                            [--bf16] [--checkpoint] [--grad-accum K] [--prep-work N]
                            [--prep-shortcut] [--trace-dir DIR] [--metrics FILE] [--data FILE]

What it has that a real training script has, and that ft's diagnosis reads from its trace:
  - a Dataset whose __getitem__ does real per-sample Python work (--prep-work loop iterations of
    a byte-level augmentation hash), served by a DataLoader with num_workers and pin_memory;
  - torch.autocast bf16 (--bf16), activation checkpointing of every block (--checkpoint) and
    gradient accumulation (--grad-accum micro-batches per optimizer step);
  - torch.profiler with a schedule (wait 1, warm-up 1, then every remaining step active),
    exporting the trace to DIR/trace.json, and a metrics JSONL with step, loss and tokens.
--prep-shortcut skips the preprocessing and feeds random bytes instead: faster, and the loss
no longer learns the text; ft-tune's verification must refuse it.
The corpus is the KJV Bible from Debian's bible-kjv (`bible`), or --data FILE.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, Dataset

VOCAB = 256  # bytes


def kjv_text():
    try:
        raw = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"train_gpt.py: the KJV corpus needs Debian's bible-kjv (`bible`): {e}; "
                 "or pass --data FILE")
    # "Ge1:1 In the beginning ..." -> the verse text
    return "\n".join(line.split(" ", 1)[1] for line in raw.splitlines() if " " in line)


class ByteWindows(Dataset):
    """Windows of seq_len + 1 bytes; item i starts at a fixed pseudo-random offset."""

    def __init__(self, data, seq_len, n_items, prep_work, shortcut, seed):
        self.data = data
        self.seq_len = seq_len
        self.n_items = n_items
        self.prep_work = prep_work
        self.shortcut = shortcut
        self.seed = seed

    def __len__(self):
        return self.n_items

    def __getitem__(self, i):
        h = (i * 2654435761 + self.seed) % 4294967296
        start = h % (len(self.data) - self.seq_len - 1)
        if self.shortcut:
            g = torch.Generator().manual_seed(h)
            return torch.randint(0, VOCAB, (self.seq_len + 1,), generator=g)
        window = self.data[start:start + self.seq_len + 1]
        # Per-sample preprocessing in pure Python (an augmentation's hash chain): the cost a
        # tokenizer or decoder adds in a real loader. The result does not change the window.
        acc = 0
        for k in range(self.prep_work):
            acc = (acc * 1103515245 + window[k % len(window)] + 12345) % 2147483648
        if acc < 0:  # never: keeps the loop from being dead code
            window = bytes(len(window))
        return torch.tensor(list(window), dtype=torch.long)


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(),
                                       torch.nn.Linear(4 * d, d))

    def forward(self, x):
        t = x.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(torch.nn.Module):
    def __init__(self, seq_len, d, heads, layers, use_checkpoint):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, d)
        self.pos = torch.nn.Embedding(seq_len, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, VOCAB, bias=False)
        self.use_checkpoint = use_checkpoint

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for b in self.blocks:
            x = checkpoint(b, x) if self.use_checkpoint and self.training else b(x)
        return self.head(self.ln(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40, help="optimizer steps")
    ap.add_argument("--batch-size", type=int, default=8, help="sequences per micro-batch")
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    ap.add_argument("--pin-memory", action="store_true")
    ap.add_argument("--bf16", action="store_true", help="torch.autocast bf16")
    ap.add_argument("--checkpoint", action="store_true", help="activation checkpointing")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--prep-work", type=int, default=4000,
                    help="preprocessing loop iterations per sample")
    ap.add_argument("--prep-shortcut", action="store_true",
                    help="skip preprocessing, feed random bytes (breaks learning)")
    ap.add_argument("--trace-dir", default="", help="write the profiler trace here")
    ap.add_argument("--metrics", default="", help="write a metrics JSONL here")
    ap.add_argument("--data", default="", help="a text file (default: the KJV Bible)")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    args = ap.parse_args()
    if args.steps < 1 or args.batch_size < 1 or args.grad_accum < 1 or args.workers < 0:
        sys.exit("train_gpt.py: --steps, --batch-size, --grad-accum must be >= 1, --workers >= 0")

    torch.set_num_threads(max(1, args.threads))
    torch.manual_seed(args.seed)
    text = open(args.data, encoding="utf-8").read() if args.data else kjv_text()
    data = text.encode("utf-8")
    micro_steps = args.steps * args.grad_accum
    ds = ByteWindows(data, args.seq_len, micro_steps * args.batch_size, args.prep_work,
                     args.prep_shortcut, args.seed)
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=False, num_workers=args.workers,
                        pin_memory=args.pin_memory, drop_last=True,
                        persistent_workers=args.workers > 0)
    model = GPT(args.seq_len, args.channels, args.heads, args.layers, args.checkpoint)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)

    if args.metrics and os.path.dirname(args.metrics):
        os.makedirs(os.path.dirname(args.metrics), exist_ok=True)
    metrics = open(args.metrics, "w") if args.metrics else None
    prof = None
    if args.trace_dir:
        os.makedirs(args.trace_dir, exist_ok=True)
        path = os.path.join(args.trace_dir, "trace.json")
        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=max(1, args.steps - 2)),
            on_trace_ready=lambda p: p.export_chrome_trace(path))
        prof.start()
    batches = iter(loader)
    tokens = 0
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for _ in range(args.grad_accum):
            seq = next(batches)
            x, y = seq[:, :-1], seq[:, 1:]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                logits = model(x)
                loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB),
                                                         y.reshape(-1))
            (loss / args.grad_accum).backward()
            loss_sum += loss.item()
            tokens += x.numel()
        opt.step()
        ms = (time.perf_counter() - t0) * 1000  # before the profiler's step, which may export
        if prof is not None:
            prof.step()
        loss = loss_sum / args.grad_accum
        if not math.isfinite(loss):
            sys.exit(f"train_gpt.py: the loss is {loss} at step {step}")
        if metrics:
            metrics.write(json.dumps({"step": step, "loss": loss, "tokens": tokens,
                                      "step_ms": ms}) + "\n")
            metrics.flush()
    if prof is not None:
        prof.stop()
    if metrics:
        metrics.close()


if __name__ == "__main__":
    main()

"""A small PyTorch training run under the profiler, for ft-diagnose's real-client test.

usage: /usr/bin/python3 torch_client.py OUT_TRACE.json --dataset slow|fast [--steps N]

The slow dataset does real Python work per sample in __getitem__ (an LCG hash loop over the
sample's index), so the data loader dominates each step; the fast one returns precomputed
batches (the whole batch is one tensor slice, so the DataLoader does no per-sample collation:
its share of the step is well under 1% by construction, not a timing accident; per-sample
collation of 32 rows took 6% of a 6 ms step on a loaded 2-core host, and even without collation
the DataLoader's own Python took 0.4 ms of a 6 ms batch-32 step under a parallel ctest, so the
test runs it with --batch 256). num_workers=0, so loading happens on the training thread inside the DataLoader's
`enumerate(DataLoader)#...__next__` span. Each step is a `ProfilerStep#N` record_function
(PyTorch builds without Kineto, like Debian's 1.13, have no torch.profiler.schedule steps).
"""
import argparse
import sys

import torch
from torch.utils.data import DataLoader, Dataset

FEATURES = 64
CLASSES = 8


class SlowDataset(Dataset):
    def __init__(self, n, work):
        self.n = n
        self.work = work

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        # Real per-sample preprocessing in pure Python: a hash chain over the index.
        h = i * 2654435761 % 4294967296
        acc = [0.0] * FEATURES
        for k in range(self.work):
            h = (h * 1103515245 + 12345) % 2147483648
            acc[k % FEATURES] += (h >> 8) / 8388608.0
        x = torch.tensor(acc, dtype=torch.float32) / (self.work / FEATURES)
        return x, int(h % CLASSES)


class FastDataset(Dataset):
    """Precomputed batches: item i is batch i, read with DataLoader(batch_size=None)."""

    def __init__(self, n, batch):
        g = torch.Generator().manual_seed(0)
        self.batch = batch
        self.x = torch.randn(n, FEATURES, generator=g)
        self.y = torch.randint(0, CLASSES, (n,), generator=g)

    def __len__(self):
        return self.x.shape[0] // self.batch

    def __getitem__(self, i):
        lo = i * self.batch
        return self.x[lo:lo + self.batch], self.y[lo:lo + self.batch]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--dataset", choices=["slow", "fast"], required=True)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--work", type=int, default=8000, help="loop iterations per slow sample")
    args = ap.parse_args()

    torch.set_num_threads(2)
    torch.manual_seed(0)
    n = args.steps * args.batch
    if args.dataset == "slow":
        loader = DataLoader(SlowDataset(n, args.work), batch_size=args.batch, shuffle=False,
                            num_workers=0)
    else:
        loader = DataLoader(FastDataset(n, args.batch), batch_size=None, shuffle=False,
                            num_workers=0)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    losses = []
    with torch.autograd.profiler.profile(record_shapes=False) as prof:
        it = iter(loader)
        for step in range(args.steps):
            with torch.autograd.profiler.record_function("ProfilerStep#%d" % step):
                x, y = next(it)
                opt.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                opt.step()
                losses.append(float(loss))
    prof.export_chrome_trace(args.out)
    print("steps %d loss %.4f -> %.4f" % (args.steps, losses[0], losses[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

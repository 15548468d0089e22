#!/usr/bin/env python3
"""PyTorch DDP reference for bench/embedding.py: a token embedding model
trained with torch.nn.parallel.DistributedDataParallel (gloo, CPU), the way
a PyTorch user writes it.

    python embedding_torch.py WEIGHTS.npz IDS.npy LABELS.npy OUT.npz \\
        --ranks 2 --batch 4 --steps 20 --lr 0.5 --momentum 0.9 [--tied]

Model: nn.Embedding(V, D) -> mean over the S tokens -> nn.Linear(D, C)
(--tied: logits = pooled @ embedding.weight^T, the output head reuses the
table). Weights start from WEIGHTS.npz (E [V, D]; W [D, C] and b [C] as in
the ONNX Gemm, so nn.Linear's weight is W^T). Rank r of step s trains on
rows [(s * ranks + r) * batch, ... + batch), ddpc's order with
--no-shuffle; DDP averages the gradients over ranks; torch.optim.SGD.
Rank 0 writes the trained weights (E, W, b) to OUT.npz.
"""
import argparse
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


class TokenModel(nn.Module):
    def __init__(self, weights, tied):
        super().__init__()
        v, d = weights["E"].shape
        self.embed = nn.Embedding(v, d)
        self.embed.weight.data = torch.from_numpy(weights["E"].copy())
        self.tied = tied
        if not tied:
            c = weights["W"].shape[1]
            self.head = nn.Linear(d, c)
            self.head.weight.data = torch.from_numpy(weights["W"].T.copy())
            self.head.bias.data = torch.from_numpy(weights["b"].copy())

    def forward(self, ids):
        pooled = self.embed(ids).mean(1)
        if self.tied:
            return pooled @ self.embed.weight.t()
        return self.head(pooled)


def worker(rank, args):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.set_num_threads(1)
    weights = dict(np.load(args.weights))
    ids = torch.from_numpy(np.load(args.ids).astype(np.int64))
    labels = torch.from_numpy(np.load(args.labels).astype(np.int64))
    model = nn.parallel.DistributedDataParallel(TokenModel(weights, args.tied))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()
    for s in range(args.steps):
        lo = (s * args.ranks + rank) * args.batch
        opt.zero_grad()
        loss = loss_fn(model(ids[lo : lo + args.batch]), labels[lo : lo + args.batch])
        loss.backward()
        opt.step()
    if rank == 0:
        m = model.module
        out = {"E": m.embed.weight.detach().numpy()}
        if not args.tied:
            out["W"] = m.head.weight.detach().numpy().T
            out["b"] = m.head.bias.detach().numpy()
        np.savez(args.out, **out)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    for name in ("weights", "ids", "labels", "out"):
        p.add_argument(name)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--port", type=int, default=29533)
    args = p.parse_args()
    mp.spawn(worker, args=(args,), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()

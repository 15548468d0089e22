"""PyTorch's losses for the learning-rate schedule and gradient clipping test
(test/e2e/test_torch_schedules.py), which runs without PyTorch.

Run it with a Python that has torch (`make bench` installs it):

    bench/.venv/bin/python test/torch_schedules/make_reference.py

It writes, next to this file:
  fmnist.npz   x (uint8 [400, 1, 28, 28]), y (int64 [400]): the first 400
               images of Fashion-MNIST's training set, in step order;
               val_x, val_y: the first 100 of its test set
               (Debian's dataset-fashion-mnist, /usr/share/datasets/fashion-mnist
               or $FASHION_MNIST_DIR)
  fmnist.json  per case: the compile and run flags, and PyTorch's per-step
               lr, loss and pre-clip gradient norm, and the validation loss
               and accuracy after the last step

The model is examples/fashion_mnist/fmnist_cnn.onnx with its initial
weights, trained for STEPS steps at global batch BATCH over x in file order
(2 ranks x 4 under ddpc): cross-entropy, torch.nn.utils.clip_grad_norm_(1.0),
torch.optim.SGD or AdamW, and the schedule ddpc's --lr-schedule cosine
--warmup-steps W documents: SequentialLR(LinearLR(start_factor=1/(W+1),
total_iters=W), CosineAnnealingLR(T_max=max(1, STEPS-W)), milestones=[W]).
"""

import gzip
import json
import math
import os
import pathlib

import numpy as np
import onnx
import torch
import torch.nn as nn
from onnx import numpy_helper

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATA = pathlib.Path(
    os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
)
STEPS, BATCH, N_VAL = 50, 8, 100
MEAN, STD = 0.2860, 0.3530  # as examples/fashion_mnist/demo.py
CLIP = 1.0
CASES = {
    "adamw-warmup10": dict(optimizer="adamw", lr=0.002, weight_decay=0.01, warmup=10),
    "sgd-warmup100": dict(optimizer="sgd", lr=0.05, momentum=0.9, warmup=100),
}


def normalize(x_uint8):
    """The float32 images both sides train on (the test computes the same)."""
    return (x_uint8.astype(np.float32) / np.float32(255) - np.float32(MEAN)) / (
        np.float32(STD)
    )


def read_idx(name, offset):
    with gzip.open(DATA / name) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


class Cnn(nn.Module):
    """examples/fashion_mnist/make_model.py's graph."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(1568, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        h = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        h = torch.max_pool2d(torch.relu(self.conv2(h)), 2)
        return self.fc2(torch.relu(self.fc1(h.flatten(1))))


def closed_form(t, base, warmup, total):
    """The rate ddpc documents (LrSchedule.h) for cosine with warm-up."""
    if t < warmup:
        f = 1 / (warmup + 1)
        return base * (f + (1 - f) * t / warmup)
    d = max(1, total - warmup)
    return base * (1 + math.cos(math.pi * min(t - warmup, d) / d)) / 2


def run_case(spec, x, y, vx, vy):
    torch.manual_seed(0)
    model = Cnn()
    inits = {
        t.name: numpy_helper.to_array(t)
        for t in onnx.load(
            ROOT / "examples/fashion_mnist/fmnist_cnn.onnx"
        ).graph.initializer
    }
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(inits[name].copy()))
    if spec["optimizer"] == "adamw":
        opt = torch.optim.AdamW(
            model.parameters(), lr=spec["lr"], weight_decay=spec["weight_decay"]
        )
    else:
        opt = torch.optim.SGD(
            model.parameters(), lr=spec["lr"], momentum=spec["momentum"]
        )
    w = spec["warmup"]
    sched = torch.optim.lr_scheduler.SequentialLR(
        opt,
        [
            torch.optim.lr_scheduler.LinearLR(
                opt, start_factor=1 / (w + 1), end_factor=1.0, total_iters=w
            ),
            torch.optim.lr_scheduler.CosineAnnealingLR(
                opt, T_max=max(1, STEPS - w), eta_min=0.0
            ),
        ],
        milestones=[w],
    )
    xs, ys = torch.from_numpy(normalize(x)), torch.from_numpy(y)
    lrs, losses, norms = [], [], []
    for t in range(STEPS):
        lr = opt.param_groups[0]["lr"]
        want = closed_form(t, spec["lr"], w, STEPS)
        assert abs(lr - want) <= 1e-12 * spec["lr"], (t, lr, want)
        xb, yb = xs[t * BATCH : (t + 1) * BATCH], ys[t * BATCH : (t + 1) * BATCH]
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        sched.step()
        lrs.append(lr)
        losses.append(loss.item())
        norms.append(norm.item())
    with torch.no_grad():
        logits = model(torch.from_numpy(normalize(vx)))
        val_loss = nn.functional.cross_entropy(logits, torch.from_numpy(vy)).item()
        val_acc = (logits.argmax(1).numpy() == vy).mean().item()
    return dict(
        lr=lrs, loss=losses, grad_norm=norms, val_loss=val_loss, val_acc=val_acc
    )


def main():
    x = read_idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
    y = read_idx("train-labels-idx1-ubyte.gz", 8).astype(np.int64)
    vx = read_idx("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
    vy = read_idx("t10k-labels-idx1-ubyte.gz", 8).astype(np.int64)
    n = STEPS * BATCH
    x, y, vx, vy = x[:n], y[:n], vx[:N_VAL], vy[:N_VAL]
    np.savez_compressed(HERE / "fmnist.npz", x=x, y=y, val_x=vx, val_y=vy)
    out = {"steps": STEPS, "global_batch": BATCH, "clip": CLIP, "cases": {}}
    for name, spec in CASES.items():
        out["cases"][name] = dict(spec=spec, **run_case(spec, x, y, vx, vy))
        r = out["cases"][name]
        clipped = sum(g > CLIP for g in r["grad_norm"])
        print(
            f"{name}: loss {r['loss'][0]:.4f} -> {r['loss'][-1]:.4f}, "
            f"{clipped}/{STEPS} steps clipped, val {r['val_loss']:.4f} {r['val_acc']:.2f}"
        )
    with open(HERE / "fmnist.json", "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

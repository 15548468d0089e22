"""Models exported by PyTorch's own exporter, with PyTorch's training losses
on them: the oracle of test/e2e/test_torch_exports.py, which runs without
PyTorch.

Run it with a Python that has torch (`make bench` installs one):

    bench/.venv/bin/python test/torch_exports/make_exports.py

For each model it writes, next to this file:
  NAME.<form>.onnx  the export (forms: `eval`, and `train` / `train-opset12`
                    from torch.onnx.export(training=TrainingMode.TRAINING),
                    TorchScript exporter; opset 12 writes BatchNormalization
                    with the five outputs of opsets 9-13)
  NAME.npz          x, y (the training data, in step order) and eval_x
  NAME.json         PyTorch's per-step losses: {"sgd": [...], "adamw": [...]}
                    of STEPS steps at global batch BATCH over x in file order,
                    and eval_y, the eval-mode outputs on eval_x after the SGD
                    run (float lists); "ddp2" the same of SGD under
                    DistributedDataParallel at 2 ranks (gloo)

Sizes are small so the test compiles and trains each form in seconds.
"""

import copy
import json
import pathlib

import numpy as np
import onnx
import torch
import torch.nn as nn
from onnx import numpy_helper

HERE = pathlib.Path(__file__).resolve().parent
STEPS, BATCH = 10, 8
SGD = dict(lr=0.05, momentum=0.9)
ADAMW = dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


class ConvBN(nn.Module):
    """Conv -> BatchNorm -> ReLU -> Dropout(0) -> Conv -> BatchNorm -> ReLU
    -> global average pool -> Linear: BatchNorm's training outputs and
    Dropout's training_mode input and mask output, as exported."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.0)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        h = self.drop(torch.relu(self.b1(self.c1(x))))
        h = torch.relu(self.b2(self.c2(h)))
        return self.fc(h.mean(dim=(2, 3)))


MODELS = {
    "convbn": (ConvBN, (3, 8, 8), 5),
}


def export(model, sample, path, training, opset):
    """Exports a copy of `model`. Tracing in training mode runs a forward
    that updates the copy's BatchNorm buffers, and those are what the file
    gets: they are put back to `model`'s, so that the file starts where
    PyTorch's training does."""
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    model = copy.deepcopy(model)
    model.train(training)
    mode = (
        torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    )
    torch.onnx.export(
        model,
        (sample,),
        str(path),
        training=mode,
        dynamo=False,
        opset_version=opset,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "N"}, "y": {0: "N"}},
    )
    m = onnx.load(str(path))
    for t in m.graph.initializer:
        if t.name in state:
            t.CopyFrom(numpy_helper.from_array(state[t.name], t.name))
    onnx.save(m, str(path))


def train(model, x, y, opt_name):
    model = copy.deepcopy(model)
    model.train()
    opt = (
        torch.optim.SGD(model.parameters(), **SGD)
        if opt_name == "sgd"
        else torch.optim.AdamW(model.parameters(), **ADAMW)
    )
    losses = []
    for s in range(STEPS):
        xb = torch.from_numpy(x[s * BATCH : (s + 1) * BATCH])
        yb = torch.from_numpy(y[s * BATCH : (s + 1) * BATCH])
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return model, losses


def _ddp_worker(rank, world, model, x, y, port, out):
    """One rank of DistributedDataParallel (gloo): DistributedSampler's
    assignment without shuffling (rank r takes samples r, r + world, ...),
    BATCH / world per rank, SGD; rank 0 records the mean of the ranks'
    losses per step and its eval-mode outputs at the end (DDP broadcasts
    rank 0's BatchNorm buffers)."""
    import os

    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    ddp = nn.parallel.DistributedDataParallel(copy.deepcopy(model))
    ddp.train()
    opt = torch.optim.SGD(ddp.parameters(), **SGD)
    idx = np.arange(rank, len(x), world)  # DistributedSampler(shuffle=False)
    b = BATCH // world
    losses = []
    for s in range(STEPS):
        rows = idx[s * b : (s + 1) * b]
        loss = nn.functional.cross_entropy(
            ddp(torch.from_numpy(x[rows])), torch.from_numpy(y[rows])
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(float(mean) / world)
    if rank == 0:
        ddp.module.eval()
        with torch.no_grad():
            eval_y = ddp.module(torch.from_numpy(out["eval_x"])).numpy()
        np.savez(out["path"], losses=np.array(losses), eval_y=eval_y)
    dist.destroy_process_group()


def train_ddp(model, x, y, eval_x, world=2):
    import tempfile

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/ddp.npz"
        port = 29500 + int(np.random.default_rng().integers(0, 1000))
        mp.spawn(
            _ddp_worker,
            args=(world, model, x, y, port, {"eval_x": eval_x, "path": path}),
            nprocs=world,
        )
        r = np.load(path)
        return r["losses"].tolist(), r["eval_y"].tolist()


def main():
    torch.manual_seed(0)
    for name, (cls, shape, classes) in MODELS.items():
        model = cls()
        rng = np.random.default_rng(0)
        x = rng.standard_normal((STEPS * BATCH, *shape)).astype(np.float32)
        y = rng.integers(0, classes, STEPS * BATCH).astype(np.int64)
        eval_x = rng.standard_normal((4, *shape)).astype(np.float32)
        sample = torch.from_numpy(x[:BATCH])
        export(model, sample, HERE / f"{name}.eval.onnx", False, 17)
        export(model, sample, HERE / f"{name}.train.onnx", True, 17)
        export(model, sample, HERE / f"{name}.train-opset12.onnx", True, 12)
        np.savez(HERE / f"{name}.npz", x=x, y=y, eval_x=eval_x)
        trained, sgd = train(model, x, y, "sgd")
        _, adamw = train(model, x, y, "adamw")
        ddp_losses, ddp_eval_y = train_ddp(model, x, y, eval_x)
        trained.eval()
        with torch.no_grad():
            eval_y = trained(torch.from_numpy(eval_x)).numpy()
        ref = {
            "torch": torch.__version__,
            "steps": STEPS,
            "batch": BATCH,
            "sgd_options": SGD,
            "adamw_options": {**ADAMW, "betas": list(ADAMW["betas"])},
            "losses": {"sgd": sgd, "adamw": adamw},
            "eval_y": eval_y.tolist(),
            # 2 ranks of DistributedDataParallel, SGD, BATCH / 2 per rank.
            "ddp2": {"losses": ddp_losses, "eval_y": ddp_eval_y},
        }
        (HERE / f"{name}.json").write_text(json.dumps(ref, indent=1) + "\n")
        print(f"{name}: sgd {sgd[0]:.4f} -> {sgd[-1]:.4f}")


if __name__ == "__main__":
    main()

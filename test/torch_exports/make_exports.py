"""Models exported by PyTorch's own exporter, with PyTorch's training losses
on them: the oracle of test/e2e/test_torch_exports.py, which runs without
PyTorch.

Run it with a Python that has torch and torchvision (`make bench` installs
them):

    bench/.venv/bin/python test/torch_exports/make_exports.py [NAME ...]

With names (e.g. `resnet50 mobilenetv3`) it writes only those models' files,
so the others stay as checked in.

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
import torchvision
from onnx import numpy_helper
from torchvision.models.resnet import Bottleneck, ResNet

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


class ResNet50Narrow(ResNet):
    """torchvision's ResNet-50 (ResNet with Bottleneck blocks, layers
    [3, 4, 6, 3]: 53 Conv + BatchNorm, 16 residual Adds, MaxPool, global
    average pool, Flatten, Linear) with every width divided by 16 to keep
    the file small: stem 4 channels instead of 64, bottleneck widths
    4/8/16/32 instead of 64/128/256/512 (outputs 16/32/64/128 instead of
    256/512/1024/2048), 5 classes; 106k parameters instead of 25.6M. Depth,
    strides, kernel sizes and torchvision's initialization are ResNet-50's.
    On 3x16x16 images (small, so the data file is) layer3 and layer4 run
    at 1x1."""

    DIV = 16

    def __init__(self):
        # zero_init_residual (torchvision's option): each block starts as
        # the identity. Without it this narrow, deep net at 1x1 is chaotic
        # (PyTorch's float32 and float64 losses differ by 26% in 10 steps).
        super().__init__(
            Bottleneck, [3, 4, 6, 3], num_classes=5, zero_init_residual=True
        )
        # The stem was built at width 64 before _make_layer narrowed the
        # rest: rebuild it narrow, initialized as ResNet.__init__ does.
        width = 64 // self.DIV
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        nn.init.kaiming_normal_(self.conv1.weight, mode="fan_out", nonlinearity="relu")
        self.bn1 = nn.BatchNorm2d(width)
        self.fc = nn.Linear(512 // self.DIV * Bottleneck.expansion, 5)

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
        if planes == 64:  # layer1: its input is the narrow stem
            self.inplanes = 64 // self.DIV
        return super()._make_layer(block, planes // self.DIV, blocks, stride, dilate)


def mobilenetv3():
    """torchvision's mobilenet_v3_small at width_mult 0.25 with its
    reduced_tail option (the last stage and the classifier's hidden layer
    at half width), classifier dropout 0 (PyTorch's random masks cannot be
    reproduced), 5 classes: 61k parameters instead of 2.5M. It has
    Hardswish, Hardsigmoid, squeeze-excitation (global average pool, 1x1
    Convs, Mul), depthwise Convs and BatchNorm with eps 1e-3, momentum
    0.01."""
    return torchvision.models.mobilenet_v3_small(
        width_mult=0.25, reduced_tail=True, dropout=0.0, num_classes=5
    )


# name: (constructor, image shape, classes, training-mode export forms).
MODELS = {
    "convbn": (ConvBN, (3, 8, 8), 5, {"train": 17, "train-opset12": 12}),
    "resnet50": (ResNet50Narrow, (3, 16, 16), 5, {"train": 17}),
    "mobilenetv3": (mobilenetv3, (3, 16, 16), 5, {"train": 17}),
}

# Transformers: vocabulary, sequence length, width, heads, layers, classes.
V, T, D, HEADS, LAYERS, CLASSES = 50, 8, 16, 2, 2, 3


class SelfAttention(nn.Module):
    """Multi-head self-attention written out (Q K^T / sqrt(d) + bias,
    softmax, V), as GPT-2's and BERT's reference code does."""

    def __init__(self):
        super().__init__()
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.drop = nn.Dropout(0.0)

    def forward(self, x, bias):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split(D, dim=-1)
        heads = [z.view(b, t, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v)]
        att = heads[0] @ heads[1].transpose(-2, -1) / (D // HEADS) ** 0.5
        att = self.drop(torch.softmax(att + bias, dim=-1))
        return self.proj((att @ heads[2]).transpose(1, 2).reshape(b, t, D))


class Block(nn.Module):
    """A transformer layer: pre-LayerNorm (GPT-2) or post-LayerNorm (BERT),
    GELU MLP."""

    def __init__(self, pre_norm):
        super().__init__()
        self.pre_norm = pre_norm
        self.attn, self.ln1, self.ln2 = (
            SelfAttention(),
            nn.LayerNorm(D),
            nn.LayerNorm(D),
        )
        self.mlp = nn.Sequential(
            nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D), nn.Dropout(0.0)
        )

    def forward(self, x, bias):
        if self.pre_norm:
            x = x + self.attn(self.ln1(x), bias)
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x, bias))
        return self.ln2(x + self.mlp(x))


class BertStyle(nn.Module):
    """Token + position embeddings, an additive attention-mask bias from an
    int64 attention_mask (1 = token, 0 = padding) as BERT computes it,
    post-LN layers, a classifier on the first token."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        self.register_buffer("position_ids", torch.arange(T)[None, :])
        self.ln = nn.LayerNorm(D)
        self.blocks = nn.ModuleList(Block(False) for _ in range(LAYERS))
        self.cls = nn.Linear(D, CLASSES)

    def forward(self, input_ids, attention_mask):
        h = self.ln(self.tok(input_ids) + self.pos(self.position_ids))
        bias = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        for blk in self.blocks:
            h = blk(h, bias)
        return self.cls(h[:, 0])


class GptStyle(nn.Module):
    """Token + position embeddings, a causal mask (a bool buffer), pre-LN
    layers, the output head tied to the token embedding, and the
    next-token cross-entropy as the first output (labels an input)."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        self.register_buffer("position_ids", torch.arange(T)[None, :])
        self.register_buffer("causal", torch.tril(torch.ones(T, T, dtype=torch.bool)))
        self.blocks = nn.ModuleList(Block(True) for _ in range(LAYERS))
        self.ln = nn.LayerNorm(D)

    def forward(self, input_ids, labels):
        h = self.tok(input_ids) + self.pos(self.position_ids)
        bias = torch.zeros(T, T).masked_fill(~self.causal, float("-inf"))
        for blk in self.blocks:
            h = blk(h, bias)
        logits = self.ln(h) @ self.tok.weight.t()
        loss = nn.functional.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
        return loss, logits


class VitStyle(nn.Module):
    """A vision transformer: 4x4 patches of a 3x16x16 image embedded by a
    strided Conv, a class token and learned position embeddings
    (parameters), pre-LN layers, a classifier on the class token."""

    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, D, 4, stride=4)
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, D))
        self.pos = nn.Parameter(0.02 * torch.randn(1, 17, D))
        self.blocks = nn.ModuleList(Block(True) for _ in range(LAYERS))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x):
        h = self.patch(x).flatten(2).transpose(1, 2)  # [N, 16, D]
        h = torch.cat([self.cls_token.expand(h.shape[0], -1, -1), h], dim=1)
        h = h + self.pos
        bias = torch.zeros(1)
        for blk in self.blocks:
            h = blk(h, bias)
        return self.head(self.ln(h)[:, 0])


def vit_data(rng, n):
    x = rng.standard_normal((n, 3, 16, 16)).astype(np.float32)
    return {"x": x}, rng.integers(0, CLASSES, n)


def bert_data(rng, n):
    ids = rng.integers(1, V, (n, T))
    lengths = rng.integers(T // 2, T + 1, n)
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64)
    ids = np.where(mask == 1, ids, 0)  # padding token 0
    return {"input_ids": ids, "attention_mask": mask}, rng.integers(0, CLASSES, n)


def gpt_data(rng, n):
    seq = rng.integers(0, V, (n, T + 1))
    return {"input_ids": seq[:, :-1], "labels": seq[:, 1:]}, None


# name: (class, data maker, output names). A model whose first output is
# its loss ("lm") takes its labels as an input; the others are classifiers
# trained with cross-entropy on labels y.
LANGUAGE_MODELS = {
    "bert": (BertStyle, bert_data, ["logits"]),
    "gpt": (GptStyle, gpt_data, ["loss", "logits"]),
    "vit": (VitStyle, vit_data, ["logits"]),
}


def step_loss(model, inputs, y, rows):
    """The training loss on samples `rows`: `inputs` one array or a dict of
    the model's inputs; cross-entropy against y, or (y None) the model's
    own loss, its first output."""
    xs = inputs.values() if isinstance(inputs, dict) else [inputs]
    out = model(*(torch.from_numpy(v[rows]) for v in xs))
    if y is None:
        return out[0]
    return nn.functional.cross_entropy(out, torch.from_numpy(y[rows]))


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
        loss = step_loss(model, x, y, slice(s * BATCH, (s + 1) * BATCH))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return model, losses


def _ddp_worker(rank, world, model, x, y, port, out):
    """One rank of DistributedDataParallel (gloo): DistributedSampler's
    assignment without shuffling (rank r takes samples r, r + world, ...),
    BATCH / world per rank, SGD; rank 0 records the mean of the ranks'
    losses per step and, given eval_x, its eval-mode outputs at the end (DDP
    broadcasts rank 0's BatchNorm buffers). `x` and the loss as in
    step_loss."""
    import os

    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    ddp = nn.parallel.DistributedDataParallel(copy.deepcopy(model))
    ddp.train()
    opt = torch.optim.SGD(ddp.parameters(), **SGD)
    n = len(next(iter(x.values()))) if isinstance(x, dict) else len(x)
    idx = np.arange(rank, n, world)  # DistributedSampler(shuffle=False)
    b = BATCH // world
    losses = []
    for s in range(STEPS):
        loss = step_loss(ddp, x, y, idx[s * b : (s + 1) * b])
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(float(mean) / world)
    if rank == 0:
        ddp.module.eval()
        eval_y = np.zeros(0)
        if out["eval_x"] is not None:
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


def export_lm(model, sample, path, training, outputs):
    """torch.onnx.export of a language model (opset 17, batch dim N)."""
    model = copy.deepcopy(model)
    model.train(training)
    mode = (
        torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    )
    names = list(sample)
    torch.onnx.export(
        model,
        tuple(torch.from_numpy(v) for v in sample.values()),
        str(path),
        training=mode,
        dynamo=False,
        opset_version=17,
        input_names=names,
        output_names=outputs,
        dynamic_axes={n: {0: "N"} for n in names + [o for o in outputs if o != "loss"]},
    )


def make_language_models(names):
    for name, (cls, make_data, outputs) in LANGUAGE_MODELS.items():
        if name not in names:
            continue
        torch.manual_seed(0)
        model = cls()
        rng = np.random.default_rng(0)
        inputs, y = make_data(rng, STEPS * BATCH)
        eval_inputs, _ = make_data(rng, 4)
        sample = {k: v[:BATCH] for k, v in inputs.items()}
        export_lm(model, sample, HERE / f"{name}.eval.onnx", False, outputs)
        export_lm(model, sample, HERE / f"{name}.train.onnx", True, outputs)
        arrays = {f"in_{k}": v for k, v in inputs.items()}
        arrays.update({f"eval_{k}": v for k, v in eval_inputs.items()})
        if y is not None:
            arrays["y"] = y
        np.savez(HERE / f"{name}.npz", **arrays)
        trained, sgd = train(model, inputs, y, "sgd")
        _, adamw = train(model, inputs, y, "adamw")
        trained.eval()
        with torch.no_grad():
            out = trained(*(torch.from_numpy(v) for v in eval_inputs.values()))
        eval_y = out if y is not None else out[1]
        ref = {
            "torch": torch.__version__,
            "steps": STEPS,
            "batch": BATCH,
            "inputs": list(inputs),
            # The model's first output is its loss, its labels an input.
            "label_input": None if y is not None else "labels",
            "sgd_options": SGD,
            "adamw_options": {**ADAMW, "betas": list(ADAMW["betas"])},
            "losses": {"sgd": sgd, "adamw": adamw},
            "eval_y": eval_y.numpy().tolist(),
            "ddp2": {"losses": train_ddp(model, inputs, y, None)[0]},
        }
        (HERE / f"{name}.json").write_text(json.dumps(ref, indent=1) + "\n")
        print(f"{name}: sgd {sgd[0]:.4f} -> {sgd[-1]:.4f}")


def main(names):
    make_language_models(names)
    for name, (cls, shape, classes, train_forms) in MODELS.items():
        if name not in names:
            continue
        # Each model from seed 0, whichever models this run makes.
        torch.manual_seed(0)
        model = cls()
        rng = np.random.default_rng(0)
        x = rng.standard_normal((STEPS * BATCH, *shape)).astype(np.float32)
        y = rng.integers(0, classes, STEPS * BATCH).astype(np.int64)
        eval_x = rng.standard_normal((4, *shape)).astype(np.float32)
        sample = torch.from_numpy(x[:BATCH])
        export(model, sample, HERE / f"{name}.eval.onnx", False, 17)
        for form, opset in train_forms.items():
            export(model, sample, HERE / f"{name}.{form}.onnx", True, opset)
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
    import sys

    known = [*LANGUAGE_MODELS, *MODELS]
    unknown = [n for n in sys.argv[1:] if n not in known]
    if unknown:
        sys.exit(f"unknown model {unknown[0]!r}; known: {' '.join(known)}")
    main(sys.argv[1:] or known)

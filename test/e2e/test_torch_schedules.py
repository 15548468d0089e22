"""--lr-schedule, --warmup-steps and --clip-grad-norm of compiled training
programs against PyTorch: the Fashion-MNIST CNN of examples/fashion_mnist at
2 ranks (mpirun) x batch 4 for 50 steps in file order (--no-shuffle, so the
global batch of step t is samples 8t..8t+7, as the reference reads them),
with --lr-schedule cosine, warm-up shorter and longer than the run, and
clipping at norm 1.0. test/torch_schedules/make_reference.py recorded
PyTorch's per-step learning rates, losses and pre-clip gradient norms
(torch.optim.lr_scheduler.SequentialLR of LinearLR and CosineAnnealingLR,
torch.nn.utils.clip_grad_norm_) and the validation metrics after the last
step; this test needs no PyTorch."""

import json
import pathlib

import numpy as np
import pytest

from ddpc_testing import MPIRUN, ROOT, compile_train, run_train

REF = ROOT / "test" / "torch_schedules"
MODEL = ROOT / "examples" / "fashion_mnist" / "fmnist_cnn.onnx"
MEAN, STD = 0.2860, 0.3530  # make_reference.py's normalization
RANKS, BATCH = 2, 4


def reference():
    return json.loads((REF / "fmnist.json").read_text())


def write_data(tmp_path: pathlib.Path) -> None:
    """x.npy, y.npy, vx.npy, vy.npy: the reference's float32 images."""
    d = np.load(REF / "fmnist.npz")
    norm = lambda a: (a.astype(np.float32) / np.float32(255) - np.float32(MEAN)) / (
        np.float32(STD)
    )
    np.save(tmp_path / "x.npy", norm(d["x"]))
    np.save(tmp_path / "y.npy", d["y"])
    np.save(tmp_path / "vx.npy", norm(d["val_x"]))
    np.save(tmp_path / "vy.npy", d["val_y"])


def optimizer_flags(spec):
    """`ddpc compile` flags of the reference's optimizer."""
    extra = ("weight_decay", "--weight-decay")
    if spec["optimizer"] == "sgd":
        extra = ("momentum", "--momentum")
    flags = ["--optimizer", spec["optimizer"], "--lr", str(spec["lr"])]
    return flags + [extra[1], str(spec[extra[0]])]


def train(ddpc, tmp_path, spec, target, *extra):
    """The 2-rank run of `spec`; returns its --log-json records."""
    write_data(tmp_path)
    flags = optimizer_flags(spec) + (["--target", target] if target != "cpu" else [])
    prog = compile_train(ddpc, MODEL, tmp_path / "train", BATCH, *flags)
    log = tmp_path / "log.jsonl"
    run_train(
        prog,
        tmp_path,
        RANKS,
        "--epochs",
        "1",
        "--no-shuffle",
        "--val-data",
        "vx.npy",
        "--val-labels",
        "vy.npy",
        "--lr-schedule",
        "cosine",
        "--warmup-steps",
        str(spec["warmup"]),
        "--log-json",
        str(log),
        *extra,
    )
    return [json.loads(line) for line in open(log)]


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.abs(b)))


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
@pytest.mark.parametrize("case", ["adamw-warmup10", "sgd-warmup100"])
def test_matches_pytorch_step_by_step(ddpc, tmp_path, case, target):
    """Per-step lr (float32), loss (<= 1e-4 relative) and pre-clip gradient
    norm for 50 steps; the clip coefficient is torch's min(1, 1 / (norm +
    1e-6)); the last record's validation loss and accuracy are PyTorch's
    after the run."""
    ref = reference()
    want = ref["cases"][case]
    log = train(
        ddpc, tmp_path, want["spec"], target, "--clip-grad-norm", str(ref["clip"])
    )
    assert [r["step"] for r in log] == list(range(1, ref["steps"] + 1))
    assert rel([r["lr"] for r in log], want["lr"]) <= 1e-6
    assert rel([r["loss"] for r in log], want["loss"]) <= 1e-4
    assert rel([r["grad_norm"] for r in log], want["grad_norm"]) <= 1e-3
    coef = np.minimum(1.0, ref["clip"] / (np.array(want["grad_norm"]) + 1e-6))
    assert rel([r["clip_coef"] for r in log], coef) <= 1e-3
    assert all("val_loss" not in r for r in log[:-1])
    assert log[-1]["val_loss"] == pytest.approx(want["val_loss"], rel=1e-4)
    assert log[-1]["val_acc"] == pytest.approx(want["val_acc"], abs=1e-9)


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_reference_needs_the_clipping(ddpc, tmp_path):
    """Without --clip-grad-norm the same run leaves the reference (the
    comparison above can tell clipping from none)."""
    want = reference()["cases"]["adamw-warmup10"]
    log = train(ddpc, tmp_path, want["spec"], "cpu")
    assert "clip_coef" not in log[0]
    assert rel([r["loss"] for r in log], want["loss"]) > 1e-2

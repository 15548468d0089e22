"""--lr-schedule, --warmup-steps and --clip-grad-norm of the training runtime
(lib/Runtime/LrSchedule.cpp, TrainMain.cpp) with the fixture model of
unittests/Runtime/FakeTrainModel.cpp (SGD with momentum, default lr 0.1):
each schedule's per-step learning rate in --log-json against the
torch.optim.lr_scheduler closed forms written out here in numpy; a resumed
run continues the schedule; clipping against a numpy oracle; bad values
are refused. The fixture sums gradients over ranks inside its update, after
the norm, so the clipping of allreduced gradients at 2 ranks is checked
with a compiled model against PyTorch in test/e2e/test_torch_schedules.py."""

import json
import subprocess

import numpy as np
import pytest

from ddpc_testing import run_env, MPIRUN, UNITTEST_DIR, weights

N, B = 64, 4  # samples, the fixture's per-rank batch
EPOCHS = 2
STEPS = EPOCHS * N // B  # 32 optimizer steps at 1 rank
BASE = 0.1  # the fixture's compiled --lr


def fixture(name="ddpc-train-fixture"):
    path = UNITTEST_DIR / name
    if not path.exists():
        pytest.fail(f"{path} not found: build the ddpc-train-fixture* targets")
    return str(path)


def data(tmp_path):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(N, 4)).astype(np.float32)
    y = rng.integers(0, 3, N).astype(np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)


def train(tmp_path, *args, ranks=1, program="ddpc-train-fixture", log="log.jsonl"):
    """Runs the fixture on tmp_path's data; returns (process, log records)."""
    data(tmp_path)
    cmd = [fixture(program), "--data", "x.npy", "--labels", "y.npy"]
    cmd += ["--epochs", str(EPOCHS), "--log-json", log, *map(str, args)]
    if ranks > 1:
        if MPIRUN is None:
            pytest.skip("mpirun not installed")
        cmd = [MPIRUN, "--oversubscribe", "-np", str(ranks), *cmd]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, env=run_env(), cwd=tmp_path
    )
    path = tmp_path / log
    records = [json.loads(l) for l in open(path)] if path.exists() else []
    return proc, records


def warmup(t, w, f):
    return BASE * (f + (1 - f) * t / w)


def expected(kind, w=0, f=None, size=None, gamma=0.1, eta=0.0, d=None):
    """torch.optim.lr_scheduler's rate of steps 0..STEPS-1: LinearLR warm-up
    for w steps, then (SequentialLR) the schedule from its own step 0."""
    t = np.arange(STEPS, dtype=np.float64)
    u = t - w
    d = d or max(1, STEPS - w)
    v = np.clip(u, 0, d)
    after = {
        "constant": np.full(STEPS, BASE),
        "step": BASE * gamma ** np.floor(np.maximum(u, 0) / (size or 1)),
        "cosine": eta + (BASE - eta) * (1 + np.cos(np.pi * v / d)) / 2,
        "linear": BASE * (1 - v / d),
    }[kind]
    f = 1 / (w + 1) if f is None else f
    return np.where(t < w, warmup(t, max(w, 1), f), after)


SCHEDULES = {
    "constant": ([], expected("constant")),
    "constant-warmup": (
        ["--warmup-steps", 5, "--warmup-factor", 0.25],
        expected("constant", w=5, f=0.25),
    ),
    "step": (
        ["--lr-step-size", 5, "--lr-gamma", 0.5, "--warmup-steps", 3],
        expected("step", w=3, size=5, gamma=0.5),
    ),
    "step-default-gamma": (["--lr-step-size", 7], expected("step", size=7)),
    "cosine": (
        ["--warmup-steps", 4, "--lr-min", 0.01],
        expected("cosine", w=4, eta=0.01),
    ),
    "cosine-decay-steps": (
        ["--lr-decay-steps", 10, "--lr-min", 0.02],
        expected("cosine", d=10, eta=0.02),
    ),
    "linear": ([], expected("linear")),
    "linear-warmup-decay-steps": (
        ["--warmup-steps", 6, "--lr-decay-steps", 20],
        expected("linear", w=6, d=20),
    ),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_lr_of_every_step(tmp_path, name):
    """The lr of each --log-json record (float32) is the closed form's."""
    args, want = SCHEDULES[name]
    kind = name.split("-")[0]
    proc, log = train(tmp_path, "--lr-schedule", kind, *args)
    assert proc.returncode == 0, proc.stderr
    assert [r["step"] for r in log] == list(range(1, STEPS + 1))
    got = np.array([r["lr"] for r in log])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
    # The progress line shows the step's rate.
    line = next(l for l in proc.stdout.splitlines() if "step 2/16" in l)
    assert f"lr {want[1]:.4g}" in line, line


def test_warmup_longer_than_the_run(tmp_path):
    """W > steps: the whole run warms up (the decay never starts)."""
    proc, log = train(tmp_path, "--lr-schedule", "cosine", "--warmup-steps", 100)
    assert proc.returncode == 0, proc.stderr
    t = np.arange(STEPS)
    want = BASE * (1 / 101 + (100 / 101) * t / 100)
    np.testing.assert_allclose([r["lr"] for r in log], want, rtol=1e-6)


def test_stop_after_steps_keeps_the_schedule(tmp_path):
    """The schedule spans --epochs, not --stop-after-steps, so that a run
    stopped early and resumed follows the uninterrupted run's rates."""
    args = ["--lr-schedule", "linear", "--stop-after-steps", 10]
    proc, log = train(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose([r["lr"] for r in log], expected("linear")[:10])


@pytest.mark.parametrize("ranks", [1, 2])
def test_resume_continues_the_schedule(tmp_path, ranks):
    """12 steps + checkpoint + --resume to the end == the uninterrupted run:
    the same rate at every step (the step count is in the checkpoint) and
    bitwise the same weights, with warm-up, cosine decay and clipping."""
    sched = ["--lr-schedule", "cosine", "--warmup-steps", 5, "--clip-grad-norm", 0.3]
    full_proc, full = train(
        tmp_path, *sched, "--save", "full.onnx", ranks=ranks, log="full.jsonl"
    )
    assert full_proc.returncode == 0, full_proc.stderr
    first, _ = train(
        tmp_path,
        *sched,
        "--stop-after-steps",
        12,
        "--checkpoint",
        "ckpt.bin",
        ranks=ranks,
        log="parts.jsonl",
    )
    assert first.returncode == 0, first.stderr
    second, parts = train(
        tmp_path,
        *sched,
        "--resume",
        "ckpt.bin",
        "--save",
        "resumed.onnx",
        ranks=ranks,
        log="parts.jsonl",
    )
    assert second.returncode == 0, second.stderr
    assert [r["step"] for r in parts] == [r["step"] for r in full]
    for key in ("lr", "loss", "grad_norm", "clip_coef"):
        assert [r[key] for r in parts] == [r[key] for r in full], key
    a, b = weights(tmp_path / "full.onnx"), weights(tmp_path / "resumed.onnx")
    assert all(a[k].tobytes() == b[k].tobytes() for k in a)


def oracle(x, y, steps, clip, lrs, batch=8):
    """FakeTrainModel's softmax regression (logits = x W + b) under
    torch.optim.SGD(momentum=0.9, weight_decay=1e-4) in float64, with
    torch.nn.utils.clip_grad_norm_(clip) before each step, batches in file
    order. Returns W, b and the per-step pre-clip norms."""
    w = (0.05 * ((np.arange(12) * 7) % 11 - 5)).reshape(4, 3)
    b = 0.01 * np.arange(3.0)
    mw, mb = np.zeros_like(w), np.zeros_like(b)
    norms = []
    for t in range(steps):
        xb = x[t * batch : (t + 1) * batch].astype(np.float64)
        yb = y[t * batch : (t + 1) * batch]
        z = xb @ w + b
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(batch), yb] -= 1
        gw, gb = xb.T @ p / batch, p.mean(0)
        norm = np.sqrt((gw**2).sum() + (gb**2).sum())
        norms.append(norm)
        coef = min(1.0, clip / (norm + 1e-6))
        gw, gb = gw * coef + 1e-4 * w, gb * coef + 1e-4 * b
        mw, mb = 0.9 * mw + gw, 0.9 * mb + gb
        w, b = w - lrs[t] * mw, b - lrs[t] * mb
    return w, b, np.array(norms)


def test_clipping_matches_numpy(tmp_path):
    """--clip-grad-norm with a cosine schedule: the weights are the numpy
    oracle's, the logged norm is the pre-clip one, the logged coefficient
    torch's min(1, MAX / (norm + 1e-6)); most steps are clipped, and the
    unclipped run ends elsewhere."""
    sched = ["--lr-schedule", "cosine", "--warmup-steps", 3, "--no-shuffle"]
    prog = "ddpc-train-fixture-b8"
    proc, log = train(
        tmp_path, *sched, "--clip-grad-norm", 0.2, "--save", "c.onnx", program=prog
    )
    assert proc.returncode == 0, proc.stderr
    steps = EPOCHS * N // 8
    t = np.arange(steps)
    cosine = BASE * (1 + np.cos(np.pi * np.clip(t - 3, 0, None) / (steps - 3))) / 2
    lrs = np.where(t < 3, warmup(t, 3, 1 / 4), cosine)
    np.testing.assert_allclose([r["lr"] for r in log], lrs, rtol=1e-6)
    x, y = np.load(tmp_path / "x.npy"), np.load(tmp_path / "y.npy")
    epoch = lambda a: np.concatenate([a] * EPOCHS)
    w, b, norms = oracle(epoch(x), epoch(y), steps, 0.2, lrs)
    got = weights(tmp_path / "c.onnx")
    np.testing.assert_allclose(got["W"], w, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got["b"], b, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose([r["grad_norm"] for r in log], norms, rtol=1e-5)
    coef = np.array([r["clip_coef"] for r in log])
    np.testing.assert_allclose(coef, np.minimum(1, 0.2 / (norms + 1e-6)), rtol=1e-5)
    assert (coef < 1).sum() > steps // 2, coef
    proc, _ = train(tmp_path, *sched, "--save", "u.onnx", program=prog, log="u.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert np.max(np.abs(weights(tmp_path / "u.onnx")["W"] - w)) > 1e-3


@pytest.mark.parametrize(
    "args, message",
    [
        (["--lr-schedule", "step"], "--lr-schedule step needs --lr-step-size"),
        (
            ["--lr-schedule", "cosine", "--lr-gamma", 0.5],
            "--lr-gamma applies to --lr-schedule step only (this run: "
            "--lr-schedule cosine)",
        ),
        (["--lr-min", 0.1], "--lr-min applies to --lr-schedule cosine only"),
        (
            ["--lr-schedule", "step", "--lr-step-size", 2, "--lr-decay-steps", 3],
            "--lr-decay-steps applies to --lr-schedule cosine and linear only",
        ),
        (["--lr-step-size", 3], "--lr-step-size applies to --lr-schedule step"),
        (["--warmup-factor", 0.5], "--warmup-factor needs --warmup-steps W > 0"),
        (
            ["--warmup-steps", 2, "--warmup-factor", 0],
            "--warmup-factor must be in (0, 1], got '0'",
        ),
        (
            ["--warmup-steps", 2, "--warmup-factor", 1.5],
            "--warmup-factor must be in (0, 1]",
        ),
        (["--clip-grad-norm", 0], "--clip-grad-norm must be a number > 0"),
        (["--clip-grad-norm", -1], "--clip-grad-norm must be a number > 0"),
        (["--lr-schedule", "exp"], "--lr-schedule"),
        (["--warmup-steps", -1], "--warmup-steps"),
        (["--lr-schedule", "cosine", "--lr-min", "-0.1"], "--lr-min must be"),
    ],
)
def test_bad_values_are_refused(tmp_path, args, message):
    proc, log = train(tmp_path, *args)
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not log


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_ranks_with_different_schedules_are_refused(tmp_path):
    """Every rank must run the same schedule: one message, every rank exits."""
    data(tmp_path)
    common = ["--data", "x.npy", "--labels", "y.npy", "--epochs", "1"]
    cmd = [MPIRUN, "--oversubscribe", "-np", "1", fixture(), *common]
    cmd += ["--lr-schedule", "cosine", "--clip-grad-norm", "1"]
    cmd += [":", "-np", "1", fixture(), *common]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, env=run_env(), cwd=tmp_path
    )
    assert proc.returncode != 0
    assert "--lr-schedule: cosine on rank 0, constant on rank 1" in proc.stderr
    assert "--clip-grad-norm: 1 on rank 0, 0 on rank 1" in proc.stderr


def test_help_names_the_options():
    out = subprocess.run(
        [fixture(), "--help"], capture_output=True, text=True, env=run_env()
    ).stdout
    for flag in (
        "--lr-schedule S",
        "--warmup-steps W",
        "--warmup-factor F",
        "--lr-step-size N",
        "--lr-gamma G",
        "--lr-min LR",
        "--lr-decay-steps N",
        "--clip-grad-norm MAX",
    ):
        assert flag in out, flag
    assert "SequentialLR" in out and "clip_grad_norm_" in out

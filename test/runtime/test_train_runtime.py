"""End-to-end tests of the training runtime (lib/Runtime/Train*.cpp) with the
hand-written fixture model of unittests/Runtime/FakeTrainModel.cpp; numpy is
the oracle. Tests that need mpirun skip when it is absent."""

import json
import os
import pathlib
import re
import signal
import subprocess
import time

import numpy as np
import pytest

from ddpc_testing import (
    run_env,
    MPIRUN,
    MT19937_64,
    ROOT,
    UNITTEST_DIR,
    permutation,
    weights,
)

# The fixture programs are the training main() linked with
# unittests/Runtime/FakeTrainModel.cpp (softmax regression, SGD with
# momentum); oracle_train below is numpy's version of their training.
MOMENTUM, WEIGHT_DECAY, BUFFER_MOMENTUM, DEFAULT_LR = 0.9, 1e-4, 0.1, 0.1
F, C = 4, 3  # features, classes


def fixture_path(name: str = "ddpc-train-fixture") -> str:
    path = UNITTEST_DIR / name
    if not path.exists():
        pytest.fail(
            f"{path} not found: build the ddpc-train-fixture* targets "
            "(or set DDPC_UNITTEST_DIR)"
        )
    return str(path)


def run_train(
    args, ranks=1, program="ddpc-train-fixture", env=None, timeout=60, plain=False
):
    """Runs a fixture; ranks > 1 (or plain=False) goes through mpirun."""
    full_env = run_env(env)
    cmd = [fixture_path(program), *map(str, args)]
    if not plain:
        if MPIRUN is None:
            pytest.skip("mpirun not found")
        cmd = [MPIRUN, "--oversubscribe", "-np", str(ranks), *cmd]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=full_env
    )


def initial_params():
    i = np.arange(F * C)
    w = (0.05 * ((i * 7) % 11 - 5)).astype(np.float32).reshape(F, C)
    b = (0.01 * np.arange(C)).astype(np.float32)
    return w, b


def make_dataset(path: pathlib.Path, n=64, seed=0, label_dtype=np.int64):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, F)).astype(np.float32)
    y = np.argmax(x @ rng.normal(size=(F, C)) + 0.3 * rng.normal(size=(n, C)), 1)
    xp, yp = path / f"x{seed}.npy", path / f"y{seed}.npy"
    np.save(xp, x)
    np.save(yp, y.astype(label_dtype))
    return x, y.astype(np.int64), xp, yp


def oracle_train(
    x,
    y,
    global_batch,
    accum,
    epochs,
    seed=0,
    shuffle=True,
    lr=DEFAULT_LR,
    max_steps=None,
):
    """The runtime's step loop for FakeTrainModel on one rank, in float64.
    Returns (W, b, running_mean, per-step losses)."""
    w, b = (p.astype(np.float64) for p in initial_params())
    mom_w, mom_b = np.zeros_like(w), np.zeros_like(b)
    rmean = np.zeros(F)
    n = len(x)
    steps = n // (global_batch * accum)
    losses = []
    for epoch in range(epochs):
        order = permutation(n, seed + epoch) if shuffle else list(range(n))
        for s in range(steps):
            if max_steps is not None and len(losses) >= max_steps:
                return w, b, rmean, losses
            gw, gb, loss = np.zeros_like(w), np.zeros_like(b), 0.0
            for k in range(accum):
                idx = order[(s * accum + k) * global_batch :][:global_batch]
                xb, yb = x[idx].astype(np.float64), y[idx]
                logits = xb @ w + b
                logits -= logits.max(1, keepdims=True)
                p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
                loss += -np.log(p[np.arange(len(yb)), yb]).mean()
                d = p.copy()
                d[np.arange(len(yb)), yb] -= 1
                d /= len(yb)
                gw += xb.T @ d
                gb += d.sum(0)
                rmean = (1 - BUFFER_MOMENTUM) * rmean + BUFFER_MOMENTUM * xb.mean(0)
            gw, gb = gw / accum + WEIGHT_DECAY * w, gb / accum + WEIGHT_DECAY * b
            mom_w, mom_b = MOMENTUM * mom_w + gw, MOMENTUM * mom_b + gb
            w, b = w - lr * mom_w, b - lr * mom_b
            losses.append(loss / accum)
    return w, b, rmean, losses


def assert_ok(proc):
    assert proc.returncode == 0, proc.stdout + proc.stderr


def rel_diff(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-12))


def test_mt19937_64_oracle():
    # The C++ standard's check value: the 10000th output for the default seed.
    engine = MT19937_64(5489)
    for _ in range(9999):
        engine()
    assert engine() == 9981545732273789042
    assert sorted(permutation(50, 3)) == list(range(50))


@pytest.mark.parametrize("shuffle", [True, False])
def test_single_rank_matches_numpy(tmp_path, shuffle):
    """A plain ./train (MPI singleton) follows the sampler and step loop."""
    x, y, xp, yp = make_dataset(tmp_path, n=70)  # 70 = 17 steps of 4 + 2 dropped
    log = tmp_path / "steps.jsonl"
    args = [
        "--data",
        xp,
        "--labels",
        yp,
        "--epochs",
        3,
        "--save",
        tmp_path / "t.onnx",
        "--log-json",
        log,
        "--lr",
        0.05,
    ]
    args += ["--shuffle-seed", 11] if shuffle else ["--no-shuffle"]
    proc = run_train(args, plain=True)
    assert_ok(proc)
    w, b, rmean, losses = oracle_train(x, y, 4, 1, 3, seed=11, shuffle=shuffle, lr=0.05)
    got = weights(tmp_path / "t.onnx")
    assert rel_diff(got["W"], w) < 1e-5
    assert rel_diff(got["b"], b) < 1e-5
    assert rel_diff(got["running_mean"], rmean) < 1e-5
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, 52))
    assert records[17]["epoch"] == 2 and records[16]["epoch"] == 1
    assert abs(records[0]["lr"] - 0.05) < 1e-7
    np.testing.assert_allclose([r["loss"] for r in records], losses, rtol=1e-5)
    epoch_lines = [
        l for l in proc.stdout.splitlines() if l.startswith("epoch 3/3  loss")
    ]
    assert len(epoch_lines) == 1 and "train-acc" in epoch_lines[0], proc.stdout


def test_data_parallel_invariant(tmp_path):
    """2 ranks x batch 4 == 1 rank x batch 8 == 1 rank x batch 4 x 2
    micro-batches; rank 1's different initial saved are overwritten by rank
    0's broadcast."""
    x, y, xp, yp = make_dataset(tmp_path, n=80)
    common = ["--data", xp, "--labels", yp, "--epochs", 3, "--shuffle-seed", 5]
    runs = {
        "np2_b4": dict(
            ranks=2,
            program="ddpc-train-fixture",
            env={"DDPC_FIXTURE_PERTURB_INIT": "1"},
        ),
        "np1_b8": dict(ranks=1, program="ddpc-train-fixture-b8", plain=True),
        "np1_b4_k2": dict(ranks=1, program="ddpc-train-fixture-k2", plain=True),
    }
    saved = {}
    for name, kw in runs.items():
        out = tmp_path / f"{name}.onnx"
        assert_ok(run_train(common + ["--save", out], **kw))
        saved[name] = weights(out)
    w, b, rmean, _ = oracle_train(x, y, 8, 1, 3, seed=5)
    ref = saved["np1_b8"]
    assert rel_diff(ref["W"], w) < 1e-5
    for name in ("np2_b4", "np1_b4_k2"):
        for p in ("W", "b"):
            assert rel_diff(saved[name][p], ref[p]) <= 1e-5, (name, p)
    # Buffers are averaged over ranks after each step: linear statistics match.
    assert rel_diff(saved["np2_b4"]["running_mean"], ref["running_mean"]) <= 1e-5
    # 2 ranks with K=2 see the same global batches (16 per step).
    out = tmp_path / "np2_k2.onnx"
    assert_ok(
        run_train(common + ["--save", out], ranks=2, program="ddpc-train-fixture-k2")
    )
    w16, b16, _, _ = oracle_train(x, y, 8, 2, 3, seed=5)
    got = weights(out)
    assert rel_diff(got["W"], w16) < 1e-5 and rel_diff(got["b"], b16) < 1e-5


@pytest.mark.parametrize("ranks", [1, 2])
def test_resume_is_bitwise_identical(tmp_path, ranks):
    """20 steps == 10 steps + checkpoint + resume to 20 (crossing an epoch
    boundary: 64 samples / (4 x ranks) steps per epoch)."""
    x, y, xp, yp = make_dataset(tmp_path, n=64)
    common = [
        "--data",
        xp,
        "--labels",
        yp,
        "--epochs",
        4,
        "--shuffle-seed",
        3,
        "--stop-after-steps",
        20,
    ]
    plain = ranks == 1
    assert_ok(
        run_train(common + ["--save", tmp_path / "full.onnx"], ranks=ranks, plain=plain)
    )
    ckpt = tmp_path / "ckpt.bin"
    first = common[:-1] + [10, "--checkpoint", ckpt, "--checkpoint-every", 4]
    assert_ok(run_train(first, ranks=ranks, plain=plain))
    assert ckpt.exists() and not list(tmp_path.glob("ckpt.bin.tmp*"))
    proc = run_train(
        common + ["--resume", ckpt, "--save", tmp_path / "resumed.onnx"],
        ranks=ranks,
        plain=plain,
    )
    assert_ok(proc)
    assert "resumed from" in proc.stdout
    full = weights(tmp_path / "full.onnx")
    resumed = weights(tmp_path / "resumed.onnx")
    for name in ("W", "b", "running_mean"):
        assert full[name].tobytes() == resumed[name].tobytes(), name
    # A checkpoint of another model's optimizer is refused with a reason.
    bad = bytearray(ckpt.read_bytes())
    pos = bad.find(b"momentum=0.9")
    bad[pos + 9] = ord("8")
    (tmp_path / "bad.bin").write_bytes(bytes(bad))
    proc = run_train(common + ["--resume", tmp_path / "bad.bin"], plain=True)
    assert proc.returncode == 1 and "bad.bin" in proc.stderr, proc.stderr


def test_resume_keeps_sample_assignment_and_buffer_sync(tmp_path):
    """A checkpoint records --sample-assignment and --buffer-sync: resuming
    without them continues the run bitwise; naming others is refused."""
    x, y, xp, yp = make_dataset(tmp_path, n=64)
    common = ["--data", xp, "--labels", yp, "--epochs", 3, "--shuffle-seed", 2]
    ddp = ["--sample-assignment", "strided", "--buffer-sync", "broadcast"]
    full = tmp_path / "full.onnx"
    assert_ok(run_train(common + ddp + ["--save", full], ranks=2))
    ckpt = tmp_path / "ckpt.bin"
    first = common + ddp + ["--stop-after-steps", 5, "--checkpoint", ckpt]
    assert_ok(run_train(first, ranks=2))
    resumed = tmp_path / "resumed.onnx"
    assert_ok(run_train(common + ["--resume", ckpt, "--save", resumed], ranks=2))
    a, b = weights(full), weights(resumed)
    for name in ("W", "b", "running_mean"):
        assert a[name].tobytes() == b[name].tobytes(), name
    # The defaults give other weights, so the comparison above can fail.
    other = tmp_path / "other.onnx"
    assert_ok(run_train(common + ["--save", other], ranks=2))
    assert weights(other)["W"].tobytes() != a["W"].tobytes()
    for flag, value in (
        ("--sample-assignment", "contiguous"),
        ("--buffer-sync", "average"),
    ):
        proc = run_train(common + ["--resume", ckpt, flag, value], ranks=2)
        assert proc.returncode != 0, proc.stdout
        assert (
            f"{flag} {value}" in proc.stderr and "ckpt.bin" in proc.stderr
        ), proc.stderr


def test_resume_at_the_end_of_an_epoch_of_smaller_data_is_refused(tmp_path):
    """A checkpoint 2 steps into an epoch of 16 samples, resumed on 8 (2
    steps per epoch): the position is past the data. It crashed (it read
    past the sample order)."""
    _, _, xp, yp = make_dataset(tmp_path, n=64)
    ckpt = tmp_path / "ckpt.bin"
    first = ["--data", xp, "--labels", yp, "--epochs", 1, "--no-shuffle"]
    assert_ok(
        run_train(first + ["--stop-after-steps", 2, "--checkpoint", ckpt], plain=True)
    )
    _, _, sxp, syp = make_dataset(tmp_path, n=8, seed=1)
    proc = run_train(
        ["--data", sxp, "--labels", syp, "--epochs", 2, "--resume", ckpt], plain=True
    )
    assert proc.returncode == 1, proc.stderr
    assert "is outside this data set (2 steps per epoch)" in proc.stderr, proc.stderr


def test_saved_onnx_runs_in_onnxruntime(tmp_path):
    import onnx
    import onnxruntime as ort

    x, y, xp, yp = make_dataset(tmp_path, n=48)
    out = tmp_path / "trained.onnx"
    assert_ok(
        run_train(
            [
                "--data",
                xp,
                "--labels",
                yp,
                "--epochs",
                2,
                "--save",
                out,
                "--val-data",
                xp,
                "--val-labels",
                yp,
            ],
            plain=True,
        )
    )
    model = onnx.load(str(out))
    onnx.checker.check_model(model)
    params = weights(out)
    assert set(params) == {"W", "b", "running_mean"}
    w, b, rmean, _ = oracle_train(x, y, 4, 1, 2)
    assert rel_diff(params["W"], w) < 1e-5
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    probs, mean_out = sess.run(None, {"x": x})
    logits = x.astype(np.float64) @ params["W"] + params["b"]
    expect = np.exp(logits - logits.max(1, keepdims=True))
    expect /= expect.sum(1, keepdims=True)
    np.testing.assert_allclose(probs, expect, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(mean_out, params["running_mean"])


def rank_pids(parent_pid, rank):
    """Pids of processes below `parent_pid` whose OMPI_COMM_WORLD_RANK is rank."""
    found, frontier = [], [parent_pid]
    while frontier:
        pid = frontier.pop()
        try:
            children = (
                pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            )
        except OSError:
            continue
        for child in map(int, children):
            frontier.append(child)
            try:
                env = pathlib.Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
                found.append(child)
    return found


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_dead_rank_ends_job(tmp_path, sig):
    """SIGKILL: mpirun notices and names rank 1. SIGSTOP (a hung peer that
    mpirun cannot see): rank 0's collective watchdog fires after --timeout."""
    if MPIRUN is None:
        pytest.skip("mpirun not found")
    x, y, xp, yp = make_dataset(tmp_path, n=64)
    log = tmp_path / "steps.jsonl"
    cmd = [
        MPIRUN,
        "--oversubscribe",
        "-np",
        "2",
        fixture_path(),
        "--data",
        str(xp),
        "--labels",
        str(yp),
        "--epochs",
        "1000",
        "--log-json",
        str(log),
        "--timeout",
        "3",
        "--quiet",
    ]
    env = run_env({"DDPC_FIXTURE_SLEEP_MS": "20"})
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            if log.exists() and len(log.read_text().splitlines()) >= 3:
                break
            time.sleep(0.05)
        else:
            pytest.fail("training did not start")
        victims = rank_pids(proc.pid, 1)
        assert len(victims) == 1, victims
        os.kill(victims[0], sig)
        killed = time.time()
        out, _ = proc.communicate(timeout=60)
        elapsed = time.time() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0, out
    assert elapsed < 60
    if sig == signal.SIGKILL:
        assert "rank 1" in out, out
    else:
        assert re.search(
            r"error: rank 0: [a-z ]+ did not complete within 3 s; "
            r"a peer rank has probably died",
            out,
        ), out
        assert elapsed < 20


@pytest.mark.parametrize("ranks", [1, 2])
def test_bad_inputs_fail_fast(tmp_path, ranks):
    x, y, xp, yp = make_dataset(tmp_path, n=32)
    np.save(tmp_path / "short.npy", y[:10])
    cases = [
        (["--data", tmp_path / "missing.npy", "--labels", yp], "missing.npy"),
        (["--data", xp, "--labels", tmp_path / "short.npy"], "short.npy"),
        (["--data", xp, "--labels", xp], "x0.npy"),
        (
            ["--data", xp, "--labels", yp, "--lr", "-1"],
            "--lr must be a finite number >= 0",
        ),
        (["--data", xp, "--labels", yp, "--lr", "0x1p-4"], "a finite decimal number"),
        (["--data", xp, "--labels", yp, "--lr", " 0.1"], "a finite decimal number"),
        (["--data", xp, "--labels", yp, "--timeout", "inf"], "a finite decimal number"),
        (
            ["--data", xp, "--labels", yp, "--save", tmp_path],
            "is a folder; give a file name",
        ),
        (["--data", xp, "--labels", yp, "--save", xp / "m.onnx"], "' is not a folder"),
    ]
    for args, needle in cases:
        start = time.time()
        proc = run_train(
            args + ["--epochs", 1], ranks=ranks, plain=ranks == 1, timeout=30
        )
        assert proc.returncode != 0
        assert time.time() - start < 20
        errors = [l for l in proc.stderr.splitlines() if l.startswith("error: rank ")]
        assert errors and all(needle in l for l in errors), proc.stderr
        if ranks == 1:
            assert proc.stderr.strip() == errors[0], proc.stderr
    proc = run_train(
        ["--data", xp, "--labels", tmp_path / "short.npy", "--epochs", 1], plain=True
    )
    assert "expected labels of shape [32]" in proc.stderr


def test_label_dtypes_are_converted(tmp_path):
    x, y, xp, yp = make_dataset(tmp_path, n=32)
    outs = []
    for dtype in (np.int64, np.int32, np.uint8):
        np.save(tmp_path / "yd.npy", y.astype(dtype))
        out = tmp_path / f"{np.dtype(dtype).name}.onnx"
        assert_ok(
            run_train(
                [
                    "--data",
                    xp,
                    "--labels",
                    tmp_path / "yd.npy",
                    "--epochs",
                    1,
                    "--save",
                    out,
                ],
                plain=True,
            )
        )
        outs.append(weights(out)["W"].tobytes())
    assert outs[0] == outs[1] == outs[2]


def test_driver_style_link(tmp_path):
    """The link line the compiler driver uses: c++ model.o glue archive flags."""
    link_file = UNITTEST_DIR.parent / "lib" / "ddpc_train_runtime.link"
    archive = UNITTEST_DIR.parent / "lib" / "libddpc_train_runtime.a"
    assert link_file.exists() and archive.exists()
    flags = link_file.read_text().split()
    exe = tmp_path / "train"
    subprocess.run(
        [
            "c++",
            "-O1",
            "-I",
            str(ROOT / "include"),
            str(ROOT / "unittests" / "Runtime" / "FakeTrainModel.cpp"),
            str(archive),
            *flags,
            "-lm",
            "-lpthread",
            "-o",
            str(exe),
        ],
        check=True,
        timeout=120,
    )
    proc = subprocess.run(
        [str(exe), "--help"], capture_output=True, text=True, timeout=30, env=run_env()
    )
    assert_ok(proc)
    assert "fake_train" in proc.stdout and "--resume" in proc.stdout

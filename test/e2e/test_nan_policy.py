"""Non-finite losses and gradients (issue 17, item 5).

One inf in an input sample made the loss NaN and every saved weight NaN,
with exit 0. Now the training program checks, after each step's last
micro-batch, every rank's loss and the norm of the averaged gradient (one
allreduce, so all ranks decide alike), and `--nan-policy` says what
happens: `stop` (default) ends the run on every rank with one line naming
the step and the ranks, and writes nothing; `skip` drops the step on every
rank (no update, buffers restored; AdamW's step count does not advance);
`ignore` applies it. No checkpoint or --save is ever written with
non-finite weights.

Oracles: a skipped step equals training on the data without that step's
global batch (the invariant of skipping); the numpy MLP of test_training
for the finite steps; the messages name what the test planted.
"""

import json
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ddpc_testing import run_env, MPIRUN, weights

F, C, H, B = 6, 3, 8, 4


def mlp(path, sqrt_square=False):
    """x -> (+ b0) -> [Sqrt(h*h)] -> MatMul W1 -> Relu -> Gemm W2 -> logits."""
    rng = np.random.default_rng(0)
    inits = {
        "b0": np.zeros(F, np.float32),
        "W1": (rng.standard_normal((F, H)) * 0.5).astype(np.float32),
        "W2": (rng.standard_normal((H, C)) * 0.5).astype(np.float32),
        "b2": np.zeros(C, np.float32),
    }
    nodes = [helper.make_node("Add", ["x", "b0"], ["h0"])]
    if sqrt_square:  # |h0| with an infinite slope at 0: a NaN gradient there
        nodes += [
            helper.make_node("Mul", ["h0", "h0"], ["sq"]),
            helper.make_node("Sqrt", ["sq"], ["h"]),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["h0"], ["h"]))
    nodes += [
        helper.make_node("MatMul", ["h", "W1"], ["m"]),
        helper.make_node("Relu", ["m"], ["r"]),
        helper.make_node("Gemm", ["r", "W2", "b2"], ["logits"]),
    ]
    g = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", F])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", C])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def compile_train(
    ddpc, tmp, name="train", sqrt_square=False, opt=("--optimizer", "adamw")
):
    mlp(tmp / f"{name}.onnx", sqrt_square)
    proc = subprocess.run(
        [
            ddpc,
            "compile",
            str(tmp / f"{name}.onnx"),
            "--train",
            "--batch-size",
            str(B),
            "--lr",
            "0.05",
            *opt,
            "-o",
            str(tmp / name),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return tmp / name


def data(tmp, n, bad_row=None, value=np.inf, name="x"):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, F)).astype(np.float32)
    if bad_row is not None:
        x[bad_row, 2] = value
    np.save(tmp / f"{name}.npy", x)
    np.save(tmp / "y.npy", rng.integers(0, C, n).astype(np.int64))
    return x


def run(prog, tmp, *args, ranks=1, x="x.npy", y="y.npy"):
    cmd = [str(prog), "--data", x, "--labels", y, "--no-shuffle", "--quiet", *args]
    if ranks > 1:
        cmd = [MPIRUN, "--oversubscribe", "-np", str(ranks), *cmd]
    return subprocess.run(
        cmd, capture_output=True, text=True, cwd=tmp, env=run_env(), timeout=120
    )


needs_mpi = pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")


@needs_mpi
@pytest.mark.parametrize("value,kind", [(np.inf, "nan"), (np.nan, "nan")])
def test_inf_in_a_sample_stops_every_rank(ddpc, tmp_path, value, kind):
    """Sample 13 (step 2 of 8-sample global batches, rank 1's second row)
    holds an inf: the loss is nan on rank 1 only; both ranks end at step 2
    with one message, exit non-zero, and --save is not written."""
    prog = compile_train(ddpc, tmp_path)
    data(tmp_path, 48, bad_row=13, value=value)
    proc = run(
        prog,
        tmp_path,
        "--epochs",
        "1",
        "--save",
        "out.onnx",
        "--log-json",
        "log.jsonl",
        ranks=2,
    )
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: step 2: the loss is {kind} on rank 1; the gradient norm is nan; "
        "stopping, with nothing written (--nan-policy stop; --nan-policy skip "
        "drops such steps on every rank)"
    ], proc.stderr
    assert not (tmp_path / "out.onnx").exists()
    log = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    assert [entry["step"] for entry in log] == [1]  # step 2 is not logged as done


def test_nan_gradient_with_a_finite_loss_stops(ddpc, tmp_path):
    """sqrt(h*h) at h = 0 has a finite value and a NaN gradient (0 * inf):
    the loss check alone would pass; the gradient norm catches it. (Step 1,
    where the bias b0 is still exactly 0, so h = x + b0 is 0 where x is.)"""
    prog = compile_train(ddpc, tmp_path, sqrt_square=True)
    data(tmp_path, 16, bad_row=2, value=0.0)
    proc = run(prog, tmp_path, "--epochs", "1", "--save", "out.onnx")
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "error: step 1: the gradient norm is nan; stopping, with nothing written "
        "(--nan-policy stop; --nan-policy skip drops such steps on every rank)"
    ), proc.stderr
    assert not (tmp_path / "out.onnx").exists()


@needs_mpi
@pytest.mark.parametrize(
    "opt", [("--optimizer", "adamw"), ("--optimizer", "sgd", "--momentum", "0.9")]
)
def test_skip_equals_training_without_that_step(ddpc, tmp_path, opt):
    """--nan-policy skip at 2 ranks: step 3 (rows 16..23) holds an inf.
    The result equals a run on the data without those 8 rows (no update,
    the optimizer's step count and momentum untouched), every rank agrees,
    and the log marks the step."""
    prog = compile_train(ddpc, tmp_path, opt=opt)
    x = data(tmp_path, 48, bad_row=19)
    y = np.load(tmp_path / "y.npy")
    keep = np.r_[0:16, 24:48]
    np.save(tmp_path / "x_without.npy", x[keep])
    np.save(tmp_path / "y_without.npy", y[keep])
    proc = run(
        prog,
        tmp_path,
        "--epochs",
        "1",
        "--nan-policy",
        "skip",
        "--save",
        "skip.onnx",
        "--log-json",
        "log.jsonl",
        ranks=2,
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning: step 3 skipped: the loss is nan on rank 0" in proc.stderr
    ref = run(
        prog,
        tmp_path,
        "--epochs",
        "1",
        "--save",
        "ref.onnx",
        ranks=2,
        x="x_without.npy",
        y="y_without.npy",
    )
    assert ref.returncode == 0, ref.stderr
    got, want = weights(tmp_path / "skip.onnx"), weights(tmp_path / "ref.onnx")
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    log = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    assert [e.get("skipped", False) for e in log] == [
        False,
        False,
        True,
        False,
        False,
        False,
    ]
    assert log[2]["loss"] is None and log[2]["grad_norm"] is None
    assert all(
        np.isfinite(e["grad_norm"]) and e["grad_norm"] > 0
        for i, e in enumerate(log)
        if i != 2
    )


def test_skip_then_resume_equals_uninterrupted(ddpc, tmp_path):
    """The count of applied steps is in the checkpoint: a run that skipped
    a step, checkpointed and resumed equals one that did not stop."""
    prog = compile_train(ddpc, tmp_path)
    data(tmp_path, 40, bad_row=5)
    full = run(
        prog, tmp_path, "--epochs", "1", "--nan-policy", "skip", "--save", "full.onnx"
    )
    assert full.returncode == 0, full.stderr
    part = run(
        prog,
        tmp_path,
        "--epochs",
        "1",
        "--nan-policy",
        "skip",
        "--checkpoint",
        "ck",
        "--stop-after-steps",
        "4",
    )
    assert part.returncode == 0, part.stderr
    rest = run(
        prog,
        tmp_path,
        "--epochs",
        "1",
        "--nan-policy",
        "skip",
        "--resume",
        "ck",
        "--save",
        "resumed.onnx",
    )
    assert rest.returncode == 0, rest.stderr
    got, want = weights(tmp_path / "resumed.onnx"), weights(tmp_path / "full.onnx")
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_ignore_trains_on_but_never_saves_nan_weights(ddpc, tmp_path):
    """--nan-policy ignore applies the NaN step; the weights become NaN, and
    neither the checkpoint nor --save is written: one error names the
    parameter."""
    prog = compile_train(ddpc, tmp_path)
    data(tmp_path, 16, bad_row=9)
    proc = run(
        prog,
        tmp_path,
        "--epochs",
        "1",
        "--nan-policy",
        "ignore",
        "--save",
        "out.onnx",
        "--checkpoint",
        "ck",
        "--checkpoint-every",
        "1",
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: rank 0: parameter '"), proc.stderr
    assert "holds nan after step 3, so the checkpoint is not written" in proc.stderr
    assert not (tmp_path / "out.onnx").exists()
    # The checkpoints of steps 1 and 2 were finite; none of step 3 replaced
    # them (write-then-rename).
    assert (tmp_path / "ck").exists()


def test_finite_run_logs_the_gradient_norm(ddpc, tmp_path):
    """grad_norm in --log-json is the L2 norm of the averaged gradient, as
    torch.nn.utils.clip_grad_norm_ returns it; oracle: numpy on step 1 of
    the MLP from its initial weights."""
    prog = compile_train(ddpc, tmp_path)
    x = data(tmp_path, 8)
    y = np.load(tmp_path / "y.npy")
    proc = run(prog, tmp_path, "--epochs", "1", "--log-json", "log.jsonl")
    assert proc.returncode == 0, proc.stderr
    w = weights(tmp_path / "train.onnx")
    xb, yb = x[:B].astype(np.float64), y[:B]
    h = xb + w["b0"]
    m = h @ w["W1"]
    r = np.maximum(m, 0)
    z = r @ w["W2"] + w["b2"]
    e = np.exp(z - z.max(1, keepdims=True))
    dz = (e / e.sum(1, keepdims=True) - np.eye(C)[yb]) / B
    dm = (dz @ w["W2"].T) * (m > 0)
    grads = [r.T @ dz, dz.sum(0), h.T @ dm, (dm @ w["W1"].T).sum(0)]
    want = np.sqrt(sum(float(np.sum(g * g)) for g in grads))
    log = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    assert abs(log[0]["grad_norm"] - want) <= 1e-5 * want


def test_bad_nan_policy_is_named(ddpc, tmp_path):
    prog = compile_train(ddpc, tmp_path)
    data(tmp_path, 8)
    proc = run(prog, tmp_path, "--epochs", "1", "--nan-policy", "maybe")
    assert proc.returncode == 1
    assert (
        "invalid value 'maybe' for --nan-policy (stop, skip or ignore)" in proc.stderr
    )

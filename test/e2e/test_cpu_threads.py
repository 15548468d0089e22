"""`--threads N` of the compiled CPU programs (lib/Runtime/CpuBlas.cpp): the
threads of the OpenBLAS calls. Results do not depend on it (onnxruntime and
the float64 numpy trainer are the oracles), the programs report the count
they use, a bad value is one error line, and ranks under mpirun share the
node's cores instead of each taking all of them.
"""

import os
import re
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ddpc_testing import (
    MPIRUN,
    OPTIMIZERS,
    assert_close_weights,
    compile_train,
    data,
    mlp_model,
    numpy_train,
    run_env,
    run_train,
    weights,
)

F = TensorProto.FLOAT


@pytest.fixture
def matmul_prog(ddpc, tmp_path):
    """A [96, 160] x [160, 80] MatMul (large enough for OpenBLAS to split),
    compiled with the CLI; returns (program, feeds, onnxruntime's y)."""
    g = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        "mm",
        [
            helper.make_tensor_value_info("a", F, [96, 160]),
            helper.make_tensor_value_info("b", F, [160, 80]),
        ],
        [helper.make_tensor_value_info("y", F, [96, 80])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "mm.onnx")
    prog = tmp_path / "mm"
    proc = subprocess.run(
        [ddpc, "compile", str(tmp_path / "mm.onnx"), "-o", str(prog)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rng = np.random.default_rng(7)
    feeds = {
        "a": rng.standard_normal((96, 160)).astype(np.float32),
        "b": rng.standard_normal((160, 80)).astype(np.float32),
    }
    for k, v in feeds.items():
        np.save(tmp_path / f"{k}.npy", v)
    want = ort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]
    return prog, want


def run_inference(prog, tmp_path, *args, env=None):
    cmd = [str(prog), "--output-dir", str(tmp_path / "out")]
    cmd += ["--input", f"a={tmp_path / 'a.npy'}", "--input", f"b={tmp_path / 'b.npy'}"]
    return subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(run_env(), **(env or {})),
    )


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_inference_threads_match_onnxruntime(matmul_prog, tmp_path, threads):
    prog, want = matmul_prog
    # OPENBLAS_NUM_THREADS is what --threads overrides.
    proc = run_inference(
        prog, tmp_path, "--threads", str(threads), "--time", "2",
        env={"OPENBLAS_NUM_THREADS": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f", {threads} CPU thread(s)" in proc.stderr, proc.stderr
    got = np.load(tmp_path / "out" / "y.npy")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_inference_default_threads_follow_environment(matmul_prog, tmp_path):
    prog, _ = matmul_prog
    env = {k: v for k, v in os.environ.items() if "NUM_THREADS" not in k}
    proc = subprocess.run(
        [str(prog), "--input", f"a={tmp_path / 'a.npy'}", "--input",
         f"b={tmp_path / 'b.npy'}", "--output-dir", str(tmp_path / "o"),
         "--time", "1"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    n = int(re.search(r", (\d+) CPU thread\(s\)", proc.stderr).group(1))
    # Unset: every core this process may run on.
    assert n == len(os.sched_getaffinity(0))
    proc = run_inference(
        prog, tmp_path, "--time", "1", env={"OPENBLAS_NUM_THREADS": "2"}
    )
    assert proc.returncode == 0, proc.stderr
    assert ", 2 CPU thread(s)" in proc.stderr, proc.stderr


@pytest.mark.parametrize("bad", ["0", "-2", "x", "1.5", ""])
def test_bad_threads_is_one_error_line(matmul_prog, tmp_path, ddpc, bad):
    prog, _ = matmul_prog
    proc = run_inference(prog, tmp_path, "--threads", bad)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--threads" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()
    # The training program's parser says the same.
    mlp_model(tmp_path / "m.onnx")
    x, y = data(16)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    train = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "train", 8)
    proc = run_train(train, tmp_path, 1, "--threads", bad, check=False)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--threads" in lines[0], proc.stderr


def test_training_threads_match_numpy(ddpc, tmp_path):
    flags, spec = OPTIMIZERS["sgd-momentum"]
    init = mlp_model(tmp_path / "m.onnx")
    x, y = data(160)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    prog = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "train", 8, *flags)
    want = numpy_train(init, x, y, 8, 20, spec)
    for threads in ("1", "2"):
        proc = subprocess.run(
            [str(prog), "--data", "x.npy", "--labels", "y.npy", "--epochs", "1",
             "--no-shuffle", "--threads", threads, "--save", f"t{threads}.onnx"],
            capture_output=True, text=True, timeout=300, env=run_env(), cwd=tmp_path,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f", {threads} CPU thread(s) per rank" in proc.stdout, proc.stdout
        assert_close_weights(weights(tmp_path / f"t{threads}.onnx"), want, rtol=2e-5)


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_ranks_share_the_cores(ddpc, tmp_path):
    """Two ranks on one node: without --threads or OPENBLAS_NUM_THREADS,
    the ranks' threads together do not exceed the cores."""
    mlp_model(tmp_path / "m.onnx")
    x, y = data(32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    prog = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "train", 8)
    env = {k: v for k, v in run_env().items() if "NUM_THREADS" not in k}
    proc = subprocess.run(
        [MPIRUN, "--oversubscribe", "-np", "2", str(prog), "--data", "x.npy",
         "--labels", "y.npy", "--epochs", "1"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = int(re.search(r", (\d+) CPU thread\(s\) per rank", proc.stdout).group(1))
    assert 1 <= n <= max(1, os.cpu_count() // 2), proc.stdout

"""Inputs the fuzz targets once crashed on (test/fuzz/, fuzz/README.md),
through the real tools: each must give a result or one clean error line
with exit 1 or 2, never a signal.

- test/fuzz/onnx-import/*: the first byte is the fuzz target's mode (bit 0:
  a training import, bit 1: --batch-size 2), the rest an ONNX model, given
  to `ddpc compile --emit=mlir`;
- test/fuzz/npy/*: .npy files, given to a compiled program's --input.

`scripts/fuzz` replays the same inputs through the sanitizer builds; this
test keeps the fixes in `make test` without them.
"""

import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ddpc_testing import ROOT

CASES = ROOT / "test" / "fuzz"


def inputs(target):
    folder = CASES / target
    return sorted(p for p in folder.iterdir() if p.is_file()) if folder.exists() else []


def assert_clean(proc):
    assert (
        proc.returncode >= 0
    ), f"killed by signal {-proc.returncode}: {proc.stderr[-2000:]}"
    if proc.returncode != 0:
        assert proc.returncode in (1, 2), proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr


def test_there_are_regression_inputs():
    assert inputs("onnx-import"), "test/fuzz/onnx-import is empty"


ALL = [(t, p) for t in ("onnx-import", "npy") for p in inputs(t)]


@pytest.fixture(scope="module")
def relu_program(ddpc, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("npy")
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
        tmp / "m.onnx",
    )
    subprocess.run(
        [ddpc, "compile", str(tmp / "m.onnx"), "-o", str(tmp / "prog")], check=True
    )
    return tmp / "prog"


@pytest.mark.parametrize("target,path", ALL, ids=[f"{t}/{p.name}" for t, p in ALL])
def test_regression_input(ddpc, relu_program, tmp_path, target, path):
    if target == "npy":
        proc = subprocess.run(
            [str(relu_program), "--input", f"x={path}", "--output-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert_clean(proc)
        if proc.returncode == 0:  # it was a valid [2, 3] float32 array
            assert np.load(path).shape == (2, 3)
        return
    blob = path.read_bytes()
    mode, model = (blob[0], blob[1:]) if blob else (0, b"")
    (tmp_path / "m.onnx").write_bytes(model)
    flags = (["--train"] if mode & 1 else []) + (
        ["--batch-size", "2"] if mode & 2 else []
    )
    proc = subprocess.run(
        [
            ddpc,
            "compile",
            str(tmp_path / "m.onnx"),
            *flags,
            "--emit=mlir",
            "-o",
            str(tmp_path / "out.mlir"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_clean(proc)

"""MaxPool's Indices output (opsets 8, 10, 11, 12, 22) beyond the two node
tests: ties, storage_order 0 and 1, pads, strides, dilations, ceil_mode,
1-D and 3-D windows, int8/uint8 X, and Y's gradient when Indices is used.

Oracle: onnxruntime (its scan takes the first maximum in the window's
row-major order, a strict `>`); the gradient against finite differences.
Each case is compiled for the CPU and the CUDA-emulate target.
"""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ddpc as ddpc_py
from ddpc_testing import check_gradients

TARGETS = ["cpu", "cuda-emulate"]

NP = {
    TensorProto.FLOAT: np.float32,
    TensorProto.DOUBLE: np.float64,
    TensorProto.INT8: np.int8,
    TensorProto.UINT8: np.uint8,
}


def maxpool_model(x_shape, attrs, opset, dtype=TensorProto.FLOAT, outputs=("y", "i")):
    g = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], list(outputs), **attrs)],
        "g",
        [helper.make_tensor_value_info("x", dtype, list(x_shape))],
        [helper.make_tensor_value_info("y", dtype, None)]
        + [
            helper.make_tensor_value_info(o, TensorProto.INT64, None)
            for o in outputs[1:]
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def tied_input(shape, dtype, seed):
    """Few distinct values, so that most windows hold tied maxima."""
    rng = np.random.default_rng(seed)
    lo = 0 if dtype == TensorProto.UINT8 else -3
    return rng.integers(lo, lo + 4, shape).astype(NP[dtype])


# name: (X shape, attributes, opset, dtype)
CASES = {
    "2d-opset8": ((2, 3, 5, 6), dict(kernel_shape=[2, 3], strides=[1, 2]), 8, None),
    "2d-opset8-storage1": (
        (1, 2, 5, 4),
        dict(kernel_shape=[3, 2], pads=[1, 0, 1, 1], storage_order=1),
        8,
        None,
    ),
    "2d-pads-dilations": (
        (1, 2, 7, 6),
        dict(kernel_shape=[3, 2], pads=[2, 1, 1, 1], dilations=[2, 3]),
        10,
        None,
    ),
    "2d-ceil-storage1": (
        (2, 1, 6, 7),
        dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, storage_order=1),
        10,
        None,
    ),
    "2d-same-upper": (
        (1, 2, 5, 5),
        dict(kernel_shape=[2, 3], strides=[2, 1], auto_pad="SAME_UPPER"),
        11,
        None,
    ),
    "1d-pads-ceil": (
        (2, 2, 9),
        dict(kernel_shape=[3], strides=[2], pads=[1, 2], ceil_mode=1),
        12,
        None,
    ),
    "3d": (
        (1, 2, 4, 5, 3),
        dict(kernel_shape=[2, 3, 2], pads=[0, 1, 1, 1, 0, 0]),
        12,
        None,
    ),
    "3d-storage1-dilations": (
        (1, 1, 5, 4, 6),
        dict(kernel_shape=[2, 2, 3], dilations=[2, 1, 2], storage_order=1),
        12,
        None,
    ),
    "2d-int8": (
        (1, 3, 5, 5),
        dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        12,
        TensorProto.INT8,
    ),
    "2d-uint8-storage1": (
        (2, 1, 4, 6),
        dict(kernel_shape=[2, 2], strides=[2, 2], storage_order=1),
        12,
        TensorProto.UINT8,
    ),
    "2d-double-opset22": (
        (1, 2, 6, 5),
        dict(kernel_shape=[3, 3], strides=[2, 1], pads=[1, 1, 1, 1], ceil_mode=1),
        22,
        TensorProto.DOUBLE,
    ),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_indices_match_onnxruntime(name, target):
    shape, attrs, opset, dtype = CASES[name]
    dtype = dtype or TensorProto.FLOAT
    m = maxpool_model(shape, attrs, opset, dtype)
    x = tied_input(shape, dtype, seed=len(name))
    ours = ddpc_py.compile(m, target=target, onnx_checker=False).run({"x": x})
    y, i = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})
    assert ours["i"].dtype == np.int64
    np.testing.assert_array_equal(ours["y"], y)
    np.testing.assert_array_equal(ours["i"], i)


@pytest.mark.parametrize("target", TARGETS)
def test_indices_of_distinct_values(target):
    # Every value distinct: the index pins the maximum exactly.
    shape = (2, 3, 6, 5)
    m = maxpool_model(
        shape, dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1]), 12
    )
    x = (
        np.random.default_rng(7)
        .permutation(np.prod(shape))
        .reshape(shape)
        .astype(np.float32)
    )
    ours = ddpc_py.compile(m, target=target, onnx_checker=False).run({"x": x})
    np.testing.assert_array_equal(
        ours["i"], ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[1]
    )
    np.testing.assert_array_equal(x.reshape(-1)[ours["i"]], ours["y"])


def test_y_gradient_with_indices_used():
    # Indices as a second (integer) graph output leaves Y's VJP unchanged.
    m = maxpool_model(
        (1, 2, 5, 5),
        dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], storage_order=1),
        12,
        TensorProto.DOUBLE,
        outputs=("y", "i"),
    )
    m.graph.output.pop()
    check_gradients(m, [("x", [1, 2, 5, 5])], np.random.default_rng(3))


def test_indices_before_opset_8_is_invalid():
    m = maxpool_model((1, 1, 4, 4), dict(kernel_shape=[2, 2]), 7)
    with pytest.raises(ddpc_py.CompileError, match="opset 7.*at most 1"):
        ddpc_py.compile(m, onnx_checker=False)


def test_dilations_before_opset_10_are_refused():
    m = maxpool_model((1, 1, 4, 4), dict(kernel_shape=[2, 2], dilations=[2, 2]), 8)
    with pytest.raises(ddpc_py.CompileError, match="dilations"):
        ddpc_py.compile(m, onnx_checker=False)


def test_cuda_target_compiles_to_ptx(ddpc, tmp_path):
    import subprocess

    import onnx

    from ddpc_testing import cuda_root

    if cuda_root() is None:
        pytest.skip("CUDA toolkit (ptxas) is missing")
    m = maxpool_model(
        (1, 2, 5, 5), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], storage_order=1), 12
    )
    onnx.save(m, tmp_path / "m.onnx")
    r = subprocess.run(
        [ddpc, "compile", str(tmp_path / "m.onnx"), "--no-onnx-checker"]
        + ["--target", "cuda", "--emit=ptx", "-o", "-"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert ".visible .entry" in r.stdout

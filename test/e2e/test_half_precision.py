"""float16 ops that accumulate compute in float32, against onnxruntime.

A float16 sum of 4096 ones stopped at 2048 (2048 + 1 rounds to 2048 in
float16), a float16 Softmax over 8192 elements summed to 2.5, a LayerNorm
of values near 100 was NaN: the reductions, contractions and
normalizations accumulated in float16. onnxruntime's kernels (and
PyTorch's) accumulate in float32 and round once; ddpc now computes these
ops in float32 from float16 inputs and rounds the result (issue 17's wrong
results, found by the adversarial trial). Oracle: onnxruntime on the same
float16 model; tolerance: a few float16 ulps of the result.
"""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

ddpc = pytest.importorskip("ddpc", reason="build the Python extension (make build)")

H = TensorProto.FLOAT16
N = 8192


def model(nodes, inputs, inits=(), opset=18):
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, H, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", H, None)],
        list(inits),
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def axes(*a):
    return numpy_helper.from_array(np.array(a, np.int64), "axes")


CASES = {
    **{
        op: (
            [helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)],
            [("x", [4, N])],
            [axes(1)],
        )
        for op in [
            "ReduceSum",
            "ReduceMean",
            "ReduceSumSquare",
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSumExp",
        ]
    },
    "Softmax": ([helper.make_node("Softmax", ["x"], ["y"])], [("x", [2, N])], []),
    "LogSoftmax": ([helper.make_node("LogSoftmax", ["x"], ["y"])], [("x", [2, N])], []),
    "LayerNormalization": (
        [helper.make_node("LayerNormalization", ["xs", "s"], ["y"])],
        [("x", [2, N])],
        [numpy_helper.from_array(np.ones(N, np.float16), "s")],
    ),
    "MatMul": (
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [("x", [2, N])],
        [numpy_helper.from_array(np.full((N, 3), 0.5, np.float16), "w")],
    ),
    "GlobalAveragePool": (
        [helper.make_node("GlobalAveragePool", ["x4"], ["y"])],
        [("x", [2, N])],
        [],
    ),
}


def build(op):
    nodes, inputs, inits = CASES[op]
    if op == "LayerNormalization":  # values near 100: their variance needs float32
        nodes = [helper.make_node("Add", ["x", "c"], ["xs"])] + nodes
        inits = inits + [numpy_helper.from_array(np.array(100, np.float16), "c")]
    if op == "GlobalAveragePool":
        nodes = [helper.make_node("Reshape", ["x", "shp"], ["x4"])] + nodes
        inits = inits + [
            numpy_helper.from_array(np.array([2, 1, N // 64, 64], np.int64), "shp")
        ]
    return model(nodes, inputs, inits)


@pytest.mark.parametrize("op", sorted(CASES))
def test_float16_accumulation_matches_onnxruntime(op):
    m = build(op)
    shape = CASES[op][1][0][1]
    x = np.random.default_rng(0).random(shape).astype(np.float16)
    want = ort.InferenceSession(
        m.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, {"x": x})[0]
    got = ddpc.compile(m, onnx_checker=False).run({"x": x})["y"]
    assert got.dtype == np.float16
    w = want.astype(np.float32)
    np.testing.assert_allclose(
        got.astype(np.float32),
        w,
        rtol=4e-3,
        atol=4e-3 * max(1.0, float(np.max(np.abs(w)))),
    )


def test_float16_sum_of_ones():
    """The class in one line: 4096 ones sum to 4096, not 2048."""
    m = model(
        [helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)], [("x", [4096])]
    )
    got = ddpc.compile(m, onnx_checker=False).run({"x": np.ones(4096, np.float16)})["y"]
    assert float(got) == 4096.0

"""The CPU target's contractions on OpenBLAS (ddpc-cpu-library-calls,
lib/Runtime/CpuBlas.cpp): MatMul/Gemm of every transpose, batch and
broadcast form, and Conv with its two gradients as im2col + GEMM.

Oracles: onnxruntime for inference, numpy in float64 for the Conv VJP. Each
case also checks that the lowered IR calls ddpc_gemm_f32, so a matcher that
stops firing (and leaves loops) fails here instead of silently slowing down.
"""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ddpc_testing import check_conv_vjp

ddpc_py = pytest.importorskip("ddpc", reason="build the Python extension (make build)")

F = TensorProto.FLOAT


def model(nodes, inputs, opset=17):
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", F, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def gemm_calls(prog):
    lowered = prog.ir(prog.stages[-1])
    return lowered.count("llvm.call @ddpc_gemm_f32(") + lowered.count(
        "llvm.call @ddpc_gemm_bias_act_f32("
    )


MATMULS = {
    "matmul": ([("a", [5, 7]), ("b", [7, 3])], "MatMul", {}),
    "blocked": ([("a", [67, 129]), ("b", [129, 35])], "MatMul", {}),
    "batched": ([("a", [2, 3, 4, 5]), ("b", [2, 3, 5, 6])], "MatMul", {}),
    "broadcast-rhs": ([("a", [2, 4, 5]), ("b", [5, 3])], "MatMul", {}),
    "vector-rhs": ([("a", [4, 5]), ("b", [5])], "MatMul", {}),
    "gemm-tt": (
        [("a", [6, 4]), ("b", [3, 6]), ("c", [3])],
        "Gemm",
        dict(transA=1, transB=1),
    ),
    "gemm-alpha-beta": (
        [("a", [4, 6]), ("b", [6, 3]), ("c", [4, 3])],
        "Gemm",
        dict(alpha=0.5, beta=2.0),
    ),
}


@pytest.mark.parametrize("case", list(MATMULS))
def test_contractions_match_onnxruntime(case):
    inputs, op, attrs = MATMULS[case]
    m = model([helper.make_node(op, [n for n, _ in inputs], ["y"], **attrs)], inputs)
    prog = ddpc_py.compile(m, onnx_checker=False)
    assert gemm_calls(prog) >= 1
    rng = np.random.default_rng(3)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in inputs}
    want = ort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]
    got = prog.run(feeds)["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_gemm_relu_epilogue_matches_onnxruntime(monkeypatch):
    """Gemm + Relu: one OpenBLAS GEMM with the bias/ReLU epilogue in the
    runtime, and with DDPC_GEMM_EPILOGUE=0 the separate GEMM and kernel."""
    inputs = [("x", [8, 16]), ("w", [5, 16]), ("b", [5])]
    m = model(
        [
            helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1),
            helper.make_node("Relu", ["h"], ["y"]),
        ],
        inputs,
    )
    prog = ddpc_py.compile(m, onnx_checker=False)
    assert "llvm.call @ddpc_gemm_bias_act_f32(" in prog.ir(prog.stages[-1])
    rng = np.random.default_rng(4)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in inputs}
    want = ort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]
    for fused in ("1", "0"):
        monkeypatch.setenv("DDPC_GEMM_EPILOGUE", fused)
        np.testing.assert_allclose(prog.run(feeds)["y"], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "attrs",
    [
        dict(),
        dict(strides=[2, 2], pads=[1, 1, 1, 1]),
        dict(strides=[1, 2], dilations=[2, 1], pads=[1, 0, 0, 2]),
        dict(strides=[3, 3], kernel_shape=[2, 2]),  # windows do not overlap
        dict(kernel_shape=[1, 1]),  # x itself is the im2col matrix
        dict(kernel_shape=[1, 1], strides=[2, 1]),
        dict(group=2, strides=[2, 1]),
        dict(group=4, pads=[1, 1, 1, 1]),  # depthwise
    ],
)
@pytest.mark.parametrize("library", ["1", "0"])
def test_conv_vjp_matches_numpy(attrs, library, monkeypatch):
    """Forward, input, weight and bias gradients of a float32 Conv on the
    CPU target against numpy in float64: the runtime's ddpc_conv2d_f32
    (im2col per image and group + OpenBLAS), and with DDPC_CUDNN=0 the
    generated fallback (im2col + GEMM for one group: forward im2col + GEMM,
    weight gradient im2col + transpose + GEMM, input gradient GEMM +
    col2im; the convolution loops for several)."""
    kh, kw = attrs.get("kernel_shape", [3, 2])
    group = attrs.get("group", 1)
    c, oc = {1: (3, 4), 2: (4, 4), 4: (4, 4)}[group]
    shapes = {"x": [2, c, 9, 8], "w": [oc, c // group, kh, kw], "b": [oc]}
    m = model(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], shapes.items()
    )
    prog = ddpc_py.compile(m, vjp=True, onnx_checker=False)
    lowered = prog.ir(prog.stages[-1])
    assert lowered.count("llvm.call @ddpc_conv2d_f32(") == 3
    assert lowered.count("llvm.call @ddpc_gemm_f32(") == (3 if group == 1 else 0)
    monkeypatch.setenv("DDPC_CUDNN", library)
    check_conv_vjp(prog, shapes, attrs)

"""ScatterElements, ScatterND and OneHot against numpy: the spec's
sequential loops (Operators.md pseudo-code), run in row-major order of the
updates. With duplicate indices and reduction none the spec leaves the
result undefined; ddpc's is the last update in that order, which the loop
also gives, so duplicates are part of every case. Also onnxruntime where
it defines the result (no duplicates with reduction none)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ddpc as ddpc_py

COMBINE = {
    "none": lambda a, u: u,
    "add": lambda a, u: a + u,
    "mul": lambda a, u: a * u,
    "max": np.maximum,
    "min": np.minimum,
}
DTYPES = {
    np.float32: TensorProto.FLOAT,
    np.int32: TensorProto.INT32,
    np.int64: TensorProto.INT64,
    np.uint8: TensorProto.UINT8,
}


def scatter_elements_loop(data, idx, upd, axis, red):
    out = data.copy()
    for pos in np.ndindex(*idx.shape):
        tgt = list(pos)
        tgt[axis] = idx[pos] % data.shape[axis]
        out[tuple(tgt)] = COMBINE[red](out[tuple(tgt)], upd[pos])
    return out


def scatter_nd_loop(data, idx, upd, red):
    out = data.copy()
    for pos in np.ndindex(*idx.shape[:-1]):
        tgt = tuple(int(i) % n for i, n in zip(idx[pos], data.shape))
        out[tgt] = COMBINE[red](out[tgt], upd[pos])
    return out


def compile_run(op, attrs, data, idx, upd, opset, target):
    t = DTYPES[data.dtype.type]
    g = helper.make_graph(
        [helper.make_node(op, ["d", "i", "u"], ["y"], **attrs)],
        "g",
        [
            helper.make_tensor_value_info("d", t, data.shape),
            helper.make_tensor_value_info("i", TensorProto.INT64, idx.shape),
            helper.make_tensor_value_info("u", t, upd.shape),
        ],
        [helper.make_tensor_value_info("y", t, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    feeds = {"d": data, "i": idx, "u": upd}
    got = ddpc_py.compile(m, onnx_checker=False, target=target).run(feeds)["y"]
    return got, m, feeds


def check(got, want):
    """Exact for integers; float sums may associate differently (ddpc adds
    the updates reaching an element first, then data)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == np.float32:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


def values(rng, shape, dtype):
    if dtype == np.float32:
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 5, shape).astype(dtype)


@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("red", list(COMBINE))
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements_matches_the_spec_loop(axis, red, dtype, target):
    """Updates [2, 3, 2] into data [4, 5, 3]: smaller than data off the
    axis (the rest keeps data), with repeated and negative indices."""
    rng = np.random.default_rng(7)
    data = values(rng, (4, 5, 3), dtype)
    n = data.shape[axis]
    idx = rng.integers(-n, n, (2, 3, 2))
    upd = values(rng, (2, 3, 2), dtype)
    attrs = dict(axis=axis, reduction=red)
    got, m, feeds = compile_run("ScatterElements", attrs, data, idx, upd, 18, target)
    check(got, scatter_elements_loop(data, idx, upd, axis, red))


@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("red", list(COMBINE))
@pytest.mark.parametrize("tuple_len", [1, 2, 3])
def test_scatter_nd_matches_the_spec_loop(tuple_len, red, dtype, target):
    """Index tuples of 1-3 components into data [3, 4, 2], 5 x 2 of them,
    with repeated tuples and negative components."""
    rng = np.random.default_rng(tuple_len)
    data = values(rng, (3, 4, 2), dtype)
    idx = np.stack(
        [rng.integers(-s, s, (5, 2)) for s in data.shape[:tuple_len]], axis=-1
    )
    idx[4, 1] = idx[0, 0]
    upd = values(rng, (5, 2) + data.shape[tuple_len:], dtype)
    got, m, feeds = compile_run(
        "ScatterND", dict(reduction=red), data, idx, upd, 18, target
    )
    check(got, scatter_nd_loop(data, idx, upd, red))


@pytest.mark.parametrize("red", ["none", "add"])
def test_scatter_nd_matches_onnxruntime_at_opset_16(red):
    """Distinct tuples (onnxruntime defines none's result then)."""
    rng = np.random.default_rng(3)
    data = rng.standard_normal((4, 3)).astype(np.float32)
    idx = np.array([[[2], [0]], [[-1], [1]]])
    upd = rng.standard_normal((2, 2, 3)).astype(np.float32)
    got, m, feeds = compile_run(
        "ScatterND", dict(reduction=red), data, idx, upd, 16, "cpu"
    )
    ref = ort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-6)


@pytest.mark.parametrize(
    "op,opset,red,text",
    [
        ("ScatterND", 16, "max", "reduction 'max' is not defined at opset 16"),
        ("ScatterElements", 18, "sum", "reduction 'sum' is not defined at opset 18"),
    ],
)
def test_undefined_reduction_is_refused(op, opset, red, text):
    data = np.zeros((3, 2), np.float32)
    idx = np.zeros((1, 1) if op == "ScatterND" else (1, 2), np.int64)
    upd = np.ones((1, 2), np.float32)
    with pytest.raises(ddpc_py.CompileError, match="invalid model") as e:
        compile_run(op, dict(reduction=red), data, idx, upd, opset, "cpu")
    assert text in str(e.value) and op in str(e.value), str(e.value)


@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_onehot_matches_onnxruntime(axis, target):
    """Negative indices (opset 11), one out of range, a float depth."""
    ids = np.array([[0, 2, -1], [3, -3, 7]], np.int64)
    g = helper.make_graph(
        [helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=axis)],
        "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, ids.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array(4.0, np.float32), "d"),
            numpy_helper.from_array(np.array([-2, 9], np.float32), "v"),
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    m.ir_version = 8
    got = ddpc_py.compile(m, onnx_checker=False, target=target).run({"i": ids})["y"]
    ref = ort.InferenceSession(m.SerializeToString()).run(None, {"i": ids})[0]
    np.testing.assert_array_equal(got, ref)

"""Every ONNX Reduce* op under every form its axes can take, against
onnxruntime.

The forms: the `axes` attribute (opsets before 18; ReduceSum before 13),
the attribute omitted, the `axes` input, an empty `axes` input, the input
omitted and the input given as the empty name, each with
`noop_with_empty_axes` 0 and 1 where the opset has it, and `keepdims` 0
and 1. With noop_with_empty_axes=1 and no axes nothing is reduced, but the
op's element function still applies (X^2 for ReduceSumSquare, |X| for
ReduceL1, sqrt(X^2) for ReduceL2, log X for ReduceLogSum); ddpc returned X
unchanged there (issue 17, item 3).

Oracle: onnxruntime; where it has no kernel for an integer dtype, the ONNX
reference evaluator (onnx.reference), which the backend node tests' outputs
come from.
"""

import itertools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

ddpc = pytest.importorskip("ddpc", reason="build the Python extension (make build)")

OPS = [
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceSumSquare",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
]
# Ops defined on integers too (the others need a float element function).
INT_OPS = [
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceSumSquare",
    "ReduceL1",
]
# Unsigned elements above the signed range (|x| of a uint32 above 2^31 is x).
UINT_OPS = ["ReduceMax", "ReduceMin", "ReduceL1"]

# (form, opset offset): "attr" forms use the last opset before axes became
# an input, the others the first opset with the input.
FORMS = ["attr", "attr-omitted", "input", "input-empty", "input-omitted", "input-blank"]


def axes_opsets(op):
    """(last opset with the axes attribute, first opset with the input)."""
    return (11, 13) if op == "ReduceSum" else (13, 18)


def make_model(op, form, noop, keepdims, dtype):
    attr_opset, input_opset = axes_opsets(op)
    opset = attr_opset if form.startswith("attr") else input_opset
    attrs = {"keepdims": keepdims}
    inputs, inits = ["x"], []
    if form == "attr":
        attrs["axes"] = [0, -1]
    elif form == "input":
        inits.append(helper.make_tensor("axes", TensorProto.INT64, [2], [0, -1]))
        inputs.append("axes")
    elif form == "input-empty":
        inits.append(helper.make_tensor("axes", TensorProto.INT64, [0], []))
        inputs.append("axes")
    elif form == "input-blank":
        inputs.append("")
    if noop is not None:
        attrs["noop_with_empty_axes"] = noop
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", dtype, [2, 3, 4])],
        [helper.make_tensor_value_info("y", dtype, None)],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def cases():
    for op, form, keepdims in itertools.product(OPS, FORMS, [0, 1]):
        noops = [None] if form.startswith("attr") else [0, 1]
        for noop in noops:
            dtypes = [TensorProto.FLOAT] + (
                [TensorProto.INT32] if op in INT_OPS else []
            )
            if (
                op in UINT_OPS
                and form in ("input-empty", "input-omitted")
                and noop == 1
            ):
                dtypes.append(TensorProto.UINT32)
            for dtype in dtypes:
                yield op, form, noop, keepdims, dtype


def oracle(m, x):
    try:
        sess = ort.InferenceSession(
            m.SerializeToString(), providers=["CPUExecutionProvider"]
        )
    except Exception as e:  # no kernel for this dtype: the reference
        if not any(
            s in str(e) for s in ("NOT_IMPLEMENTED", "Could not find an implementation")
        ):
            raise
        return ReferenceEvaluator(m).run(None, {"x": x})[0]
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize(
    "op,form,noop,keepdims,dtype", list(cases()), ids=lambda v: str(v)
)
def test_reduce_axes_forms_match_onnxruntime(op, form, noop, keepdims, dtype):
    rng = np.random.default_rng(0)
    if dtype == TensorProto.UINT32:
        x = rng.integers(0, 2**32, (2, 3, 4), dtype=np.uint64).astype(np.uint32)
    elif dtype == TensorProto.INT32:
        x = rng.integers(-3, 4, (2, 3, 4)).astype(np.int32)
    elif op == "ReduceLogSum":
        x = rng.uniform(0.5, 2.0, (2, 3, 4)).astype(np.float32)
    else:
        x = rng.uniform(-2.0, 2.0, (2, 3, 4)).astype(np.float32)
    m = make_model(op, form, noop, keepdims, dtype)
    want = oracle(m, x)
    got = ddpc.compile(m, onnx_checker=False).run({"x": x})["y"]
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

"""Edge cases of imported ops: NaN orderings, integer corner values, empty
tensors, and the invalid models the importer must refuse.

Oracles: onnxruntime where it defines the result; numpy/PyTorch semantics
where onnxruntime's result is an artifact of its kernel (noted per case);
the ONNX spec for what a valid model is. Found by a break-it review.
"""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ddpc as ddpc_py


def model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        list(inits),
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def const(name, value, dtype=np.int64):
    return numpy_helper.from_array(np.array(value, dtype), name)


def both(m, feeds):
    ours = ddpc_py.compile(m, onnx_checker=False).run(feeds)
    ref = ort.InferenceSession(m.SerializeToString()).run(None, feeds)
    return ours, ref


NAN_ROWS = np.array([[np.nan, 1, 2, np.nan, 3], [5, np.nan, -1, 0, 2]], np.float32)


@pytest.mark.parametrize("largest", [1, 0])
def test_topk_orders_nan_above_every_number(largest):
    """NaN compared false with everything, so TopK picked arbitrary
    elements. onnxruntime (and torch.topk) order NaN as the largest."""
    m = model(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], largest=largest)],
        [("x", TensorProto.FLOAT, [2, 5])],
        [("v", TensorProto.FLOAT), ("i", TensorProto.INT64)],
        [const("k", [3])],
    )
    ours, ref = both(m, {"x": NAN_ROWS})
    np.testing.assert_array_equal(ours["v"], ref[0])
    np.testing.assert_array_equal(ours["i"], ref[1])


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_extreme_picks_nan_like_numpy(op, last):
    """ArgMax/ArgMin of a row with NaN is the (first or last) NaN, as
    numpy's argmax/argmin and torch.argmax give, consistent with ReduceMax
    returning NaN. (onnxruntime's kernel keeps the running extreme and
    never lets a NaN replace it: a result that depends on where the NaN
    is, not used as the oracle.)"""
    m = model(
        [helper.make_node(op, ["x"], ["y"], axis=1, select_last_index=last)],
        [("x", TensorProto.FLOAT, [2, 5])],
        [("y", TensorProto.INT64)],
    )
    ours = ddpc_py.compile(m, onnx_checker=False).run({"x": NAN_ROWS})["y"]
    rows = NAN_ROWS if not last else NAN_ROWS[:, ::-1]
    want = getattr(np, op.lower())(rows, axis=1)
    if last:
        want = NAN_ROWS.shape[1] - 1 - want
    np.testing.assert_array_equal(ours[:, 0], want)


@pytest.mark.parametrize(
    "np_dtype,dtype", [(np.int32, TensorProto.INT32), (np.int64, TensorProto.INT64)]
)
@pytest.mark.parametrize("fmod", [0, 1])
def test_int_min_mod_minus_one_is_zero(np_dtype, dtype, fmod):
    """INT_MIN % -1 raised ZeroDivisionError (the Div check was shared);
    it is 0, computed and folded alike."""
    lo = np.iinfo(np_dtype).min
    m = model(
        [helper.make_node("Mod", ["x", "e"], ["y"], fmod=fmod)],
        [("x", dtype, [3]), ("e", dtype, [3])],
        [("y", dtype)],
    )
    feeds = {"x": np.array([lo, 7, -7], np_dtype), "e": np.array([-1, -1, 3], np_dtype)}
    ours, ref = both(m, feeds)
    np.testing.assert_array_equal(ours["y"], ref[0])
    # The same of constants, folded at import.
    folded = model(
        [
            helper.make_node("Mod", ["a", "b"], ["q"], fmod=fmod),
            helper.make_node("Add", ["x", "q"], ["y"]),
        ],
        [("x", dtype, [1])],
        [("y", dtype)],
        [
            numpy_helper.from_array(np.array([lo], np_dtype), "a"),
            numpy_helper.from_array(np.array([-1], np_dtype), "b"),
        ],
    )
    ours, ref = both(folded, {"x": np.array([5], np_dtype)})
    np.testing.assert_array_equal(ours["y"], ref[0])


def test_nll_mean_over_no_samples_is_zero():
    """The mean over N = 0 samples was 0 / 0 = NaN; onnxruntime gives 0."""
    m = model(
        [helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"])],
        [("x", TensorProto.FLOAT, [0, 3]), ("t", TensorProto.INT64, [0])],
        [("y", TensorProto.FLOAT)],
    )
    feeds = {"x": np.ones((0, 3), np.float32), "t": np.ones(0, np.int64)}
    ours, ref = both(m, feeds)
    np.testing.assert_array_equal(ours["y"], ref[0])


X27 = [("x", TensorProto.FLOAT, [2, 7])]
Y = [("y", TensorProto.FLOAT)]


def untyped(node):
    """`node` with the type field of its attributes cleared (UNDEFINED), as
    models of IR version 1 have them: the set value field gives the type."""
    for a in node.attribute:
        a.type = 0
    return node


def valueless(node, name):
    """`node` with an attribute `name` that has neither a type nor a value."""
    node.attribute.add().name = name
    return node


def twice(node):
    """`node` with its first attribute given twice."""
    node.attribute.append(node.attribute[0])
    return node


# (case, nodes, inputs, outputs, initializers, opset, text in the error).
# Each is a model the ONNX spec does not allow; each was accepted (read with
# a default or an arbitrary choice) before.
INVALID = [
    (
        "attribute of the wrong type",
        [helper.make_node("Softmax", ["x"], ["y"], axis=1.5)],
        X27,
        Y,
        [],
        18,
        "attribute 'axis' is a float; Softmax takes an int",
    ),
    (
        "untyped attribute holding a float",
        [untyped(helper.make_node("Softmax", ["x"], ["y"], axis=1.5))],
        X27,
        Y,
        [],
        18,
        "attribute 'axis' is a float; Softmax takes an int",
    ),
    (
        "untyped attribute without a value",
        [valueless(helper.make_node("Softmax", ["x"], ["y"]), "axis")],
        X27,
        Y,
        [],
        13,
        "attribute 'axis' has no type and no single value",
    ),
    (
        "attribute given twice",
        [twice(helper.make_node("Softmax", ["x"], ["y"], axis=0))],
        X27,
        Y,
        [],
        13,
        "attribute 'axis' is given twice",
    ),
    (
        "attribute the op does not have",
        [helper.make_node("Relu", ["x"], ["y"], alpha=0.5)],
        X27,
        Y,
        [],
        17,
        "has no attribute 'alpha' at opset 17",
    ),
    (
        "wrong type, op newer than the ONNX library",
        [helper.make_node("Gelu", ["x"], ["y"], approximate=1)],
        X27,
        Y,
        [],
        20,
        "attribute 'approximate' is an int; Gelu takes a string",
    ),
    (
        "required attribute missing",
        [helper.make_node("Concat", ["x", "x"], ["y"])],
        X27,
        Y,
        [],
        18,
        "required attribute 'axis' is missing",
    ),
    (
        "flag other than 0 or 1",
        [helper.make_node("CumSum", ["x", "ax"], ["y"], exclusive=2)],
        X27,
        Y,
        [const("ax", 1)],
        18,
        "attribute 'exclusive' is 2; it must be 0 or 1",
    ),
    (
        "op before its first opset",
        [helper.make_node("RMSNormalization", ["x", "s"], ["y"])],
        X27,
        Y,
        [const("s", np.ones(7), np.float32)],
        22,
        "RMSNormalization is not part of opset 22 (it was added in opset 23)",
    ),
    (
        "Split: num_outputs leaves a negative last part",
        [
            helper.make_node(
                "Split", ["x"], ["a", "b", "c", "d", "e"], axis=1, num_outputs=5
            )
        ],
        X27,
        [(n, TensorProto.FLOAT) for n in "abcde"],
        [],
        18,
        "leave a negative last part",
    ),
    (
        "Split: both split and num_outputs",
        [helper.make_node("Split", ["x", "s"], ["a", "b"], axis=1, num_outputs=2)],
        X27,
        [("a", TensorProto.FLOAT), ("b", TensorProto.FLOAT)],
        [const("s", [3, 4])],
        18,
        "not both",
    ),
    (
        "Split: neither split nor num_outputs at opset 18",
        [helper.make_node("Split", ["x"], ["a", "b"], axis=0)],
        X27,
        [("a", TensorProto.FLOAT), ("b", TensorProto.FLOAT)],
        [],
        18,
        "needs the 'split' input or the num_outputs attribute",
    ),
    (
        "Pad: more inputs than opset 18 has",
        [helper.make_node("Pad", ["x", "p", "", "ax", "ax"], ["y"])],
        X27,
        Y,
        [const("p", [1, 1]), const("ax", [1])],
        18,
        "has 5 input(s); Pad (opset 18) takes 2 to 4",
    ),
    (
        "Pad: an axis twice",
        [helper.make_node("Pad", ["x", "p", "", "ax"], ["y"])],
        X27,
        Y,
        [const("p", [1, 1, 1, 1]), const("ax", [1, -1])],
        18,
        "axis 1 appears twice in axes",
    ),
    (
        "Celu: alpha 0",
        [helper.make_node("Celu", ["x"], ["y"], alpha=0.0)],
        X27,
        Y,
        [],
        18,
        "alpha must not be 0",
    ),
    (
        "Range: a NaN limit",
        [helper.make_node("Range", ["a", "l", "d"], ["y"])],
        [],
        Y,
        [
            const("a", 0, np.float32),
            const("l", np.nan, np.float32),
            const("d", 1, np.float32),
        ],
        18,
        "must be finite",
    ),
]


@pytest.mark.parametrize(
    "nodes,inputs,outputs,inits,opset,text",
    [c[1:] for c in INVALID],
    ids=[c[0] for c in INVALID],
)
def test_invalid_model_is_refused(nodes, inputs, outputs, inits, opset, text):
    m = model(nodes, inputs, outputs, inits, opset)
    with pytest.raises(ddpc_py.CompileError, match="invalid model") as e:
        ddpc_py.compile(m, onnx_checker=False)
    assert text in str(e.value), str(e.value)
    assert "\n" not in str(e.value).strip()


def test_untyped_attribute_reads_its_value():
    """An attribute without a type (IR version 1) is read from the field
    that is set: Softmax over axis 0 (it read as the default before)."""
    m = model(
        [untyped(helper.make_node("Softmax", ["x"], ["y"], axis=0))],
        X27,
        Y,
        opset=13,
    )
    x = np.random.default_rng(1).standard_normal((2, 7)).astype(np.float32)
    ours = ddpc_py.compile(m, onnx_checker=False).run({"x": x})["y"]
    e = np.exp(x - x.max(axis=0))
    np.testing.assert_allclose(ours, e / e.sum(axis=0), rtol=1e-5)


@pytest.mark.parametrize("opset", [9, 12, 15])
def test_batchnorm_training_outputs_are_defined(opset):
    """Every output a training-mode BatchNormalization has is computed (the
    four extra ones of opsets 9-13 were refused): Y with the batch
    statistics, the updated running statistics, and before opset 14
    saved_mean (the batch mean) and saved_var. onnxruntime is the oracle
    (without its graph optimizations, which fuse Conv + BatchNormalization
    whatever training_mode says); saved_var is the biased batch variance
    as the ONNX reference implementation has it (onnxruntime writes the
    inverse standard deviation there, an implementation choice: the spec
    only says "saved variance")."""
    outs = ["y", "rm", "rv"] + (["sm", "sv"] if opset < 14 else [])
    kw = {"training_mode": 1} if opset >= 14 else {}
    c = 3
    inits = [
        const("s", [1, 2, 3], np.float32),
        const("b", [0, 1, 0], np.float32),
        const("m", [0.5, 0, 1], np.float32),
        const("v", [1, 2, 0.5], np.float32),
    ]
    m = model(
        [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], outs, **kw)],
        [("x", TensorProto.FLOAT, [4, c, 2, 2])],
        [(o, TensorProto.FLOAT) for o in outs],
        inits,
        opset,
    )
    x = np.random.default_rng(0).standard_normal((4, c, 2, 2)).astype(np.float32)
    ours = ddpc_py.compile(m, onnx_checker=False).run({"x": x})
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = dict(
        zip(outs, ort.InferenceSession(m.SerializeToString(), so).run(None, {"x": x}))
    )
    for o in ["y", "rm", "rv"] + (["sm"] if opset < 14 else []):
        np.testing.assert_allclose(ours[o], ref[o], rtol=1e-5, atol=1e-6, err_msg=o)
    if opset < 14:
        np.testing.assert_allclose(ours["sv"], x.var(axis=(0, 2, 3)), rtol=1e-5)


@pytest.mark.parametrize(
    "op,attrs,opset",
    [
        ("LpPool", dict(kernel_shape=[3, 3], p=3, strides=[2, 2]), 11),
        ("LpPool", dict(kernel_shape=[2, 2], p=2, ceil_mode=1, strides=[2, 2]), 18),
        ("LpPool", dict(kernel_shape=[2, 2], p=1, auto_pad="SAME_UPPER"), 11),
        ("GlobalLpPool", dict(p=2), 2),
        ("GlobalLpPool", dict(p=3), 2),
        ("GlobalLpPool", dict(), 2),
    ],
)
def test_lppool_matches_onnxruntime(op, attrs, opset):
    """LpPool: (sum over the window of |x|^p)^(1/p), pads adding 0; the
    global form over all spatial positions."""
    m = model(
        [helper.make_node(op, ["x"], ["y"], **attrs)],
        [("x", TensorProto.FLOAT, [2, 3, 7, 5])],
        [("y", TensorProto.FLOAT)],
        opset=opset,
    )
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 5)).astype(np.float32)
    ours, ref = both(m, {"x": x})
    np.testing.assert_allclose(ours["y"], ref[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("p", [0, -2])
def test_lppool_refuses_p_not_positive(p):
    m = model(
        [helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2], p=p)],
        [("x", TensorProto.FLOAT, [1, 1, 4])],
        [("y", TensorProto.FLOAT)],
    )
    with pytest.raises(ddpc_py.CompileError, match="p must be a finite number > 0"):
        ddpc_py.compile(m, onnx_checker=False)


@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
@pytest.mark.parametrize(
    "data_shape,ids_shape,batch_dims",
    [
        ((4, 3, 5), (2, 2, 1), 0),
        ((4, 3, 5), (2, 3), 0),
        ((2, 3, 4, 5), (2, 2, 2), 1),
        ((2, 3, 4, 5), (2, 3, 1, 2), 2),
        ((3, 4), (5, 1), 0),
    ],
)
def test_gathernd_matches_onnxruntime(data_shape, ids_shape, batch_dims, target):
    """GatherND with whole and partial index tuples, batch dims and
    negative indices."""
    rng = np.random.default_rng(len(ids_shape) + batch_dims)
    m = model(
        [helper.make_node("GatherND", ["d", "i"], ["y"], batch_dims=batch_dims)],
        [("d", TensorProto.FLOAT, data_shape), ("i", TensorProto.INT64, ids_shape)],
        [("y", TensorProto.FLOAT)],
        opset=13,
    )
    n = data_shape[batch_dims : batch_dims + ids_shape[-1]]
    ids = np.stack([rng.integers(-s, s, ids_shape[:-1]) for s in n], -1)
    feeds = {"d": rng.standard_normal(data_shape).astype(np.float32), "i": ids}
    ours = ddpc_py.compile(m, onnx_checker=False, target=target).run(feeds)["y"]
    ref = ort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_array_equal(ours, ref)

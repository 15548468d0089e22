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


def _feeds(inputs, seed=0):
    rng = np.random.default_rng(seed)
    return {
        n: (
            rng.standard_normal(s).astype(np.float32)
            if t == TensorProto.FLOAT
            else np.zeros(s, np.int64)
        )
        for n, t, s in inputs
    }


F = TensorProto.FLOAT
I64 = TensorProto.INT64
node = helper.make_node

# Zero-size tensors of the newer ops (their slices and insert_slices did
# not verify on empty axes): (id, node, inputs, initializers, opset,
# oracle). The oracle is onnxruntime, or the ONNX reference where
# onnxruntime's kernel refuses the empty input.
ZERO_SIZE = [
    (
        "rope-S0",
        node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"]),
        [("x", F, [1, 2, 0, 4]), ("c", F, [8, 2]), ("s", F, [8, 2])],
        [("p", I64, [1, 0])],
        23,
        "ort",
    ),
    (
        "rope-D0",
        node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"]),
        [("x", F, [1, 2, 3, 0]), ("c", F, [8, 0]), ("s", F, [8, 0])],
        [("p", I64, [1, 3])],
        23,
        "ort",
    ),
    (
        "rope-3d-S0",
        node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], num_heads=2),
        [("x", F, [1, 0, 8]), ("c", F, [8, 2]), ("s", F, [8, 2])],
        [("p", I64, [1, 0])],
        23,
        "ort",
    ),
    (
        "rope-partial-S0",
        node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], rotary_embedding_dim=2),
        [("x", F, [1, 2, 0, 4]), ("c", F, [8, 1]), ("s", F, [8, 1])],
        [("p", I64, [1, 0])],
        23,
        "ort",
    ),
    (
        "convtranspose-N0",
        node("ConvTranspose", ["x", "w"], ["y"]),
        [("x", F, [0, 2, 5, 5]), ("w", F, [2, 3, 3, 3])],
        [],
        22,
        "ort",
    ),
    (
        "convtranspose-C0-bias",
        node(
            "ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 0, 0, 1]
        ),
        [("x", F, [1, 0, 5, 5]), ("w", F, [0, 3, 3, 3]), ("b", F, [3])],
        [],
        22,
        "ort",
    ),
    (
        "convtranspose-1d-C0",
        node("ConvTranspose", ["x", "w"], ["y"]),
        [("x", F, [2, 0, 4]), ("w", F, [0, 2, 3])],
        [],
        11,
        "ort",
    ),
    (
        "attention-S0",
        node("Attention", ["q", "k", "v"], ["y"]),
        [("q", F, [1, 2, 0, 4]), ("k", F, [1, 2, 3, 4]), ("v", F, [1, 2, 3, 4])],
        [],
        23,
        "reference",
    ),
    (
        "attention-B0",
        node("Attention", ["q", "k", "v"], ["y"]),
        [("q", F, [0, 2, 3, 4]), ("k", F, [0, 2, 3, 4]), ("v", F, [0, 2, 3, 4])],
        [],
        23,
        "reference",
    ),
    (
        # Head size 0: Q K^T = 0, so each row is the mean of V (not NaN).
        "attention-qk-head0",
        node("Attention", ["q", "k", "v"], ["y"]),
        [("q", F, [1, 2, 3, 0]), ("k", F, [1, 2, 3, 0]), ("v", F, [1, 2, 3, 4])],
        [],
        23,
        "reference",
    ),
    (
        "attention-empty-past",
        node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "pko", "pvo"]),
        [
            ("q", F, [1, 2, 3, 4]),
            ("k", F, [1, 2, 3, 4]),
            ("v", F, [1, 2, 3, 4]),
            ("pk", F, [1, 2, 0, 4]),
            ("pv", F, [1, 2, 0, 4]),
        ],
        [],
        23,
        "ort",
    ),
    (
        "pad-constant-empty-x",
        node("Pad", ["x", "p"], ["y"]),
        [("x", F, [0, 3])],
        [const("p", [1, 1, 0, 0])],
        18,
        "ort",
    ),
    (
        "resize-N0",
        node("Resize", ["x", "", "s"], ["y"], mode="linear"),
        [("x", F, [0, 1, 2, 2])],
        [const("s", [1, 1, 2, 2], np.float32)],
        18,
        "ort",
    ),
    (
        "resize-to-empty",
        node("Resize", ["x", "", "", "z"], ["y"]),
        [("x", F, [1, 1, 2, 2])],
        [const("z", [1, 1, 0, 3])],
        18,
        "reference",
    ),
    (
        "gathernd-no-indices",
        node("GatherND", ["d", "i"], ["y"]),
        [("d", F, [3, 4])],
        [("i", I64, [0, 1])],
        13,
        "ort",
    ),
    (
        "einsum-empty-contraction",
        node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik"),
        [("a", F, [2, 0]), ("b", F, [0, 3])],
        [],
        12,
        "ort",
    ),
    (
        "tile-empty",
        node("Tile", ["x", "r"], ["y"]),
        [("x", F, [0, 3])],
        [const("r", [2, 2])],
        13,
        "ort",
    ),
    (
        "split-empty-part",
        node("Split", ["x", "s"], ["a", "b"], axis=1),
        [("x", F, [2, 3])],
        [const("s", [0, 3])],
        13,
        "ort",
    ),
]


@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
@pytest.mark.parametrize(
    "n,inputs,extra,opset,oracle",
    [c[1:] for c in ZERO_SIZE],
    ids=[c[0] for c in ZERO_SIZE],
)
def test_zero_size_tensors_of_newer_ops(n, inputs, extra, opset, oracle, target):
    """Zero-size inputs give the (empty, or bias/zero/mean-filled) output of
    onnxruntime or the ONNX reference. Index inputs (`extra` value infos)
    are zeros; initializers (`extra` tensors) are fixed."""
    infos = inputs + [e for e in extra if isinstance(e, tuple)]
    inits = [e for e in extra if not isinstance(e, tuple)]
    outs = [(o, F) for o in n.output]
    m = model([n], infos, outs, inits, opset)
    feeds = _feeds(infos)
    if oracle == "ort":
        ref = ort.InferenceSession(m.SerializeToString()).run(None, feeds)
    else:
        from onnx.reference import ReferenceEvaluator

        ref = ReferenceEvaluator(m).run(None, feeds)
    ours = ddpc_py.compile(m, onnx_checker=False, target=target).run(feeds)
    for (o, _), r in zip(outs, ref):
        assert ours[o].shape == r.shape, o
        np.testing.assert_allclose(ours[o], r, rtol=1e-5, atol=1e-6, err_msg=o)


def _first_opsets():
    import onnx.defs

    first = {}
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain == "":
            first[s.name] = min(first.get(s.name, 1 << 30), s.since_version)
    return first


def test_every_op_is_refused_before_its_first_opset():
    """An op used at an opset before it was added (ONNX 1.22's operator
    history: since_version of its oldest schema) is not part of the
    model's opset: an invalid model naming the op and both opsets. CumProd
    (opset 26) was accepted at opset 25."""
    first = _first_opsets()
    checked = []
    for op in ddpc_py.supported_ops():
        assert op in first, f"{op} is not an ONNX op"
        if first[op] == 1:
            continue
        opset = first[op] - 1
        m = model(
            [node(op, ["x"], ["y"], name="n")],
            [("x", F, [2, 3])],
            [("y", F)],
            opset=opset,
        )
        with pytest.raises(ddpc_py.CompileError) as e:
            ddpc_py.compile(m, onnx_checker=False)
        msg = str(e.value)
        want = f"{op} is not part of opset {opset} (it was added in opset {first[op]})"
        assert want in msg and "node 'n'" in msg, (op, msg)
        assert not e.value.unsupported, (op, msg)
        checked.append(op)
    assert "CumProd" in checked and "Attention" in checked, checked


def _convt(opset=22, x=(1, 1, 5, 5), w=(1, 1, 3, 3), **attrs):
    return model(
        [node("ConvTranspose", ["x", "w"], ["y"], name="ct", **attrs)],
        [("x", F, list(x)), ("w", F, list(w))],
        [("y", F)],
        opset=opset,
    )


@pytest.mark.parametrize("opset", [11, 22])
@pytest.mark.parametrize("out", [[2, 2], [6, 9], [11, 11], [12, 12]])
def test_convtranspose_output_shape_matches_onnxruntime(out, opset):
    """output_shape from 5x5 with stride 2 and a 3x3 kernel: smaller than
    the unpadded 11 (pads, cropping past the kernel's extent), equal, and
    one more (an extra row and column of zeros, as onnxruntime). Opset 1
    splits the padding the other way round (its spec), unlike
    onnxruntime, so it is left out."""
    m = _convt(opset, strides=[2, 2], output_shape=out)
    feeds = _feeds([("x", F, [1, 1, 5, 5]), ("w", F, [1, 1, 3, 3])])
    ours, ref = both(m, feeds)
    np.testing.assert_allclose(ours["y"], ref[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "attrs,text",
    [
        (
            dict(strides=[2, 2], output_shape=[100, 100]),
            "output_shape [100,100] does not fit X's spatial size [5,5] "
            "(strides [2,2], kernel [3,3], dilations [1,1], output_padding "
            "[0,0]): dim 0 must be in [1, 12]",
        ),
        (
            dict(strides=[2, 2], output_shape=[13, 12]),
            "dim 0 must be in [1, 12]",
        ),
        (
            dict(strides=[2, 2], output_shape=[1, 1, 10, 10]),
            "output_shape [1,1,10,10] must have one entry per spatial dim (2)",
        ),
        (
            dict(dilations=[2**62, 1]),
            "dilations [4611686018427387904,1] overflow int64",
        ),
        (dict(strides=[2**62, 1]), "strides [4611686018427387904,1] overflow int64"),
        (dict(strides=[2**38, 1]), "more than 2^40"),
    ],
    ids=[
        "too-large",
        "one-stride-too-large",
        "full-rank",
        "dilations",
        "strides",
        "huge",
    ],
)
@pytest.mark.parametrize("opset", [1, 22])
def test_convtranspose_bad_geometry_is_refused(ddpc, tmp_path, attrs, text, opset):
    """An output_shape the input cannot produce (onnxruntime: "inconsistent
    with input spatial dimensions"), one with N and C, and strides or
    dilations whose sizes overflow int64: exit 1, one line naming the
    node."""
    import subprocess

    onnx_path = tmp_path / "m.onnx"
    onnx_path.write_bytes(_convt(opset, **attrs).SerializeToString())
    proc = subprocess.run(
        [
            ddpc,
            "compile",
            str(onnx_path),
            "--no-onnx-checker",
            "--emit=mlir",
            "-o",
            "-",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "op 'ConvTranspose' (node 'ct'" in lines[0], lines
    assert f"opset {opset})" in lines[0] and text in lines[0], lines[0]


OVERFLOW = [
    ("Conv", dict(dilations=[2**62, 1]), "dilations [4611686018427387904,1] overflow"),
    (
        "Conv",
        dict(pads=[2**62, 0, 2**62, 0]),
        "pads [4611686018427387904,0,4611686018427387904,0] overflow",
    ),
    (
        "MaxPool",
        dict(kernel_shape=[3, 3], dilations=[2**62, 1]),
        "dilations [4611686018427387904,1] overflow",
    ),
    (
        "AveragePool",
        dict(kernel_shape=[3, 3], pads=[2**62, 0, 2**62, 0]),
        "pads [4611686018427387904,0,4611686018427387904,0] overflow",
    ),
    (
        "MaxPool",
        dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", dilations=[2**62, 1]),
        "dilations [4611686018427387904,1] overflow",
    ),
]


@pytest.mark.parametrize("op,attrs,text", OVERFLOW)
def test_window_sizes_that_overflow_are_refused(op, attrs, text):
    """Kernel extents and padded sizes are computed with checked int64
    arithmetic: an overflow names the attribute (it wrapped around)."""
    ins = [("x", F, [1, 1, 5, 5])] + ([("w", F, [1, 1, 3, 3])] if op == "Conv" else [])
    m = model([node(op, [n for n, _, _ in ins], ["y"], **attrs)], ins, [("y", F)])
    with pytest.raises(ddpc_py.CompileError, match="invalid model") as e:
        ddpc_py.compile(m, onnx_checker=False)
    assert text in str(e.value), str(e.value)


@pytest.mark.parametrize(
    "pads", [[2**62, 0, 2**62, 0], [2**62, 0, 2**62 - 1, 0], [-(2**63), 0, 0, 0]]
)
def test_pad_sizes_that_overflow_are_refused(pads):
    m = model(
        [node("Pad", ["x", "p"], ["y"])],
        [("x", F, [2, 2])],
        [("y", F)],
        [const("p", pads)],
    )
    with pytest.raises(ddpc_py.CompileError, match="invalid model") as e:
        ddpc_py.compile(m, onnx_checker=False)
    assert "pads [" in str(e.value) and "axis 0" in str(e.value), str(e.value)


def test_rotary_odd_head_size_names_the_head_size():
    """Without rotary_embedding_dim the message named that attribute; the
    cause is the odd head size D."""
    m = model(
        [node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"])],
        [
            ("x", F, [1, 2, 3, 5]),
            ("c", F, [8, 2]),
            ("s", F, [8, 2]),
            ("p", I64, [1, 3]),
        ],
        [("y", F)],
        opset=23,
    )
    with pytest.raises(ddpc_py.CompileError, match="invalid model") as e:
        ddpc_py.compile(m, onnx_checker=False)
    assert "head size D = 5 is odd" in str(e.value), str(e.value)
    assert "rotary_embedding_dim 5" not in str(e.value)

"""Gradients (VJP rules) of every supported differentiable op match central
finite differences, in float64, on small random inputs; and a whole CNN's
gradient matches too.

Each model is compiled with `vjp=True` (CLI `--vjp`): the program takes the
inputs plus a cotangent `d_<output>` per float output and returns the outputs
plus `d_<input>` = J^T · cotangent for every float input. The oracle is the
central difference (f(x + h e_i) - f(x - h e_i)) / 2h of <f(x), cotangent>,
with f evaluated by the same program's forward outputs (whose correctness
the ONNX backend tests establish independently).
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ddpc_testing import ROOT, check_gradients

ddpc = pytest.importorskip("ddpc", reason="build the Python extension (make build)")

D = TensorProto.DOUBLE


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, D, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, D, s) for n, s in outputs],
        list(inits),
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


X34 = [("x", [3, 4])]
UNARY = [
    "Relu",
    "Sigmoid",
    "Tanh",
    "Exp",
    "Neg",
    "Abs",
    "Erf",
    "Softmax",
    "LogSoftmax",
    "Identity",
    "Softplus",
    "Elu",
]


@pytest.mark.parametrize("op", UNARY)
def test_unary(op):
    m = model([helper.make_node(op, ["x"], ["y"])], X34, [("y", [3, 4])])
    check_gradients(m, X34, np.random.default_rng(0))


def _sigmoid64(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


# float64 oracles: (forward, derivative) of each activation.
SATURATING = {
    "Sigmoid": (_sigmoid64, lambda x: _sigmoid64(x) * (1 - _sigmoid64(x))),
    "Tanh": (np.tanh, lambda x: 1 - np.tanh(x) ** 2),
    "Softplus": (lambda x: np.logaddexp(0, x), _sigmoid64),
    "Elu": (
        lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
        lambda x: np.where(x > 0, 1.0, np.exp(np.minimum(x, 0))),
    ),
}


def run_unary_f32_vjp(op, x, ct, **attrs):
    """{"y", "d_x"} of the float32 op `op` on the 1-d `x`, with cotangent ct."""
    g = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [x.size])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return ddpc.compile(m, vjp=True).run({"x": x, "d_y": ct})


@pytest.mark.parametrize("op", sorted(SATURATING))
def test_saturated_activations_have_finite_gradients(op):
    """float32 activations far into their tails (exp overflows at |x| > 88)
    against numpy float64: forward and gradient finite and within float32
    resolution. Sigmoid's gradient used to be 0 * inf = NaN at x <= -89
    (differentiating 1/(1 + exp(-x))), Elu's at x >= 89 (its untaken
    exp(x) branch), and Softplus overflowed to inf at x >= 89."""
    x = np.array(
        [-1e4, -200, -100, -89, -88, -50, -20, -1, 0, 1, 20, 50, 88, 89, 100, 200, 1e4],
        np.float32,
    )
    ct = np.linspace(0.5, 1.5, x.size).astype(np.float32)
    res = run_unary_f32_vjp(op, x, ct)
    f, df = SATURATING[op]
    x64 = x.astype(np.float64)
    assert np.all(np.isfinite(res["y"])) and np.all(np.isfinite(res["d_x"])), res
    np.testing.assert_allclose(
        res["y"], f(x64), rtol=2e-6, atol=1e-30, err_msg="forward"
    )
    # Float32 resolution: 1 - y rounds to 0 for y within 6e-8 of 1.
    np.testing.assert_allclose(
        res["d_x"], df(x64) * ct, rtol=2e-5, atol=1e-7, err_msg="gradient"
    )


@pytest.mark.parametrize("op", ["Sqrt", "Log", "Reciprocal"])
def test_unary_positive(op):
    m = model([helper.make_node(op, ["x"], ["y"])], X34, [("y", [3, 4])])
    check_gradients(m, X34, np.random.default_rng(1), positive=("x",))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary_broadcast(op):
    ins = [("a", [2, 3, 4]), ("b", [3, 1])]
    m = model([helper.make_node(op, ["a", "b"], ["y"])], ins, [("y", [2, 3, 4])])
    check_gradients(
        m, ins, np.random.default_rng(2), positive=("b",) if op == "Div" else ()
    )


def test_pow():
    ins = [("a", [3, 4]), ("b", [4])]
    m = model([helper.make_node("Pow", ["a", "b"], ["y"])], ins, [("y", [3, 4])])
    check_gradients(m, ins, np.random.default_rng(3), positive=("a",))


def test_pow_at_zero_base_and_zero_exponent():
    """Pow's gradient where the plain formulas give 0 * inf or 0 * log 0.
    x^0 is constant in x (also at x = 0), so d/dx = 0 where p = 0; 0^p is
    constant in p for p > 0, so d/dp = 0 where x = 0 and p >= 0 (PyTorch's
    pow_backward uses the same masks). Elsewhere the oracle is the formula
    in numpy float64: p x^(p-1) and x^p log x."""
    x = np.array([0, 0, 0, 0, 2, 2, 0.5, 3], np.float64)
    p = np.array([2, 0, 0.5, 3, 0, 1.5, -1, 2], np.float64)
    ins = [("x", [x.size]), ("p", [p.size])]
    m = model([helper.make_node("Pow", ["x", "p"], ["y"])], ins, [("y", [x.size])])
    ct = np.linspace(0.5, 1.5, x.size)
    res = ddpc.compile(m, vjp=True, onnx_checker=False).run({"x": x, "p": p, "d_y": ct})
    with np.errstate(divide="ignore", invalid="ignore"):
        dx = np.where(p == 0, 0.0, p * np.power(x, p - 1)) * ct
        dp = np.where((x == 0) & (p >= 0), 0.0, np.power(x, p) * np.log(x)) * ct
    np.testing.assert_allclose(res["y"], np.power(x, p))
    # 0^0.5 has an infinite slope in x; everything else is finite.
    assert np.isinf(res["d_x"][2]) and np.isinf(dx[2])
    finite = np.arange(x.size) != 2
    np.testing.assert_allclose(res["d_x"][finite], dx[finite], rtol=1e-12)
    np.testing.assert_allclose(res["d_p"], dp, rtol=1e-12)


@pytest.mark.parametrize(
    "op,attrs,slope",
    [
        ("LeakyRelu", dict(alpha=0.1), lambda x: np.where(x > 0, 1.0, 0.1)),
        ("Relu", {}, lambda x: np.where(x <= 0, 0.0, 1.0)),
        ("Abs", {}, lambda x: np.where(x > 0, 1.0, np.where(x < 0, -1.0, 0.0))),
    ],
)
def test_kinks_take_pytorchs_subgradient(op, attrs, slope):
    """At a kink (x = 0) any subgradient is right; ddpc takes PyTorch's, so
    training matches it where activations or weights are exactly 0:
    LeakyRelu alpha (it gave 1), Relu 0, Abs 0 (it gave 1, so an L1
    penalty moved weights that are exactly 0). A NaN input gets PyTorch's
    slope too (alpha for LeakyRelu, 1 for Relu, 0 for Abs). Oracle: those
    conventions in numpy."""
    x = np.array([np.nan, -2, -0.0, 0, 3, np.inf, -np.inf], np.float32)
    ct = np.linspace(0.5, 1.5, x.size).astype(np.float32)
    res = run_unary_f32_vjp(op, x, ct, **attrs)
    np.testing.assert_allclose(res["d_x"], slope(x) * ct, rtol=1e-6, atol=0)


def test_leaky_relu_gelu_clip():
    nodes = [
        helper.make_node("LeakyRelu", ["x"], ["a"], alpha=0.1),
        helper.make_node("Gelu", ["a"], ["b"]),
        helper.make_node("Clip", ["b", "lo", "hi"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(-0.3), "lo"),
        numpy_helper.from_array(np.array(0.9), "hi"),
    ]
    m = model(nodes, X34, [("y", [3, 4])], inits, opset=20)
    check_gradients(m, X34, np.random.default_rng(4))


def test_matmul_gemm():
    ins = [("a", [2, 3, 4]), ("b", [4, 5]), ("c", [5, 2]), ("bias", [2])]
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["m"]),
        helper.make_node("Reshape", ["m", "shape"], ["m2"]),
        helper.make_node("Gemm", ["m2", "c", "bias"], ["y"], alpha=0.5, beta=2.0),
    ]
    inits = [numpy_helper.from_array(np.array([6, 5], np.int64), "shape")]
    m = model(nodes, ins, [("y", [6, 2])], inits)
    check_gradients(m, ins, np.random.default_rng(5))


def test_gemm_transposed():
    ins = [("a", [4, 3]), ("b", [5, 4]), ("c", [5])]
    m = model(
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1)],
        ins,
        [("y", [3, 5])],
    )
    check_gradients(m, ins, np.random.default_rng(6))


@pytest.mark.parametrize(
    "attrs",
    [dict(), dict(strides=[2, 2], pads=[1, 1, 1, 1]), dict(group=2, dilations=[2, 1])],
)
def test_conv(attrs):
    group = attrs.get("group", 1)
    ins = [("x", [2, 4, 6, 5]), ("w", [4, 4 // group, 3, 2]), ("b", [4])]
    m = model(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], ins, [("y", None)]
    )
    check_gradients(m, ins, np.random.default_rng(7))


@pytest.mark.parametrize(
    "op,attrs",
    [
        ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2])),
        ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
        ("AveragePool", dict(kernel_shape=[3, 2], strides=[1, 2], pads=[1, 0, 1, 0])),
        ("GlobalAveragePool", dict()),
    ],
)
def test_pooling(op, attrs):
    ins = [("x", [2, 3, 5, 6])]
    m = model([helper.make_node(op, ["x"], ["y"], **attrs)], ins, [("y", None)])
    check_gradients(m, ins, np.random.default_rng(8))


@pytest.mark.parametrize(
    "kernel,strides,pads",
    [
        ([2, 2], [2, 2], [0, 0, 0, 0]),
        ([3, 3], [1, 1], [1, 1, 1, 1]),
        ([2, 2], [1, 1], [0, 0, 0, 0]),
    ],
)
def test_maxpool_ties_go_to_the_first_maximum(kernel, strides, pads):
    """With tied maxima in a window (flat image regions), the whole
    cotangent goes to the first maximum in row-major window order, as in
    PyTorch's max_pool2d backward. Finite differences cannot check this (the
    function is not differentiable at ties); the oracle is a numpy loop over
    windows with np.argmax (first occurrence)."""
    ins = [("x", [1, 2, 5, 5])]
    m = model(
        [
            helper.make_node(
                "MaxPool", ["x"], ["y"], kernel_shape=kernel, strides=strides, pads=pads
            )
        ],
        ins,
        [("y", None)],
    )
    rng = np.random.default_rng(12)
    x = rng.integers(0, 3, (1, 2, 5, 5)).astype(np.float64)  # many ties
    prog = ddpc.compile(m, vjp=True, onnx_checker=False)
    yshape = tuple(next(s for s in prog.inputs if s.name == "d_y").shape)
    g = rng.standard_normal(yshape)
    got = prog.run({"x": x, "d_y": g})["d_x"]
    want = np.zeros_like(x)
    xp = np.pad(
        x,
        ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])),
        constant_values=-np.inf,
    )
    for c in range(2):
        for i in range(yshape[2]):
            for j in range(yshape[3]):
                r0, c0 = i * strides[0], j * strides[1]
                di, dj = divmod(
                    int(np.argmax(xp[0, c, r0 : r0 + kernel[0], c0 : c0 + kernel[1]])),
                    kernel[1],
                )
                want[0, c, r0 + di - pads[0], c0 + dj - pads[1]] += g[0, c, i, j]
    np.testing.assert_array_equal(got, want)


def test_reducemax_ties_go_to_the_first_maximum():
    """ReduceMax over an axis with ties: the cotangent goes to the first
    maximum along the axis (torch.max(x, dim) semantics)."""
    ins = [("x", [3, 4, 2])]
    inits = [numpy_helper.from_array(np.array([1], np.int64), "axes")]
    m = model(
        [helper.make_node("ReduceMax", ["x", "axes"], ["y"], keepdims=0)],
        ins,
        [("y", [3, 2])],
        inits,
        opset=18,
    )
    x = np.array([[[1, 2], [3, 2], [3, 0], [1, 2]]] * 3, np.float64)
    g = np.arange(6, dtype=np.float64).reshape(3, 2) + 1
    got = ddpc.compile(m, vjp=True, onnx_checker=False).run({"x": x, "d_y": g})["d_x"]
    want = np.zeros_like(x)
    for a in range(3):
        for c in range(2):
            want[a, int(np.argmax(x[a, :, c])), c] = g[a, c]
    np.testing.assert_array_equal(got, want)


def test_sign_of_nan_is_nan():
    """Sign(NaN) is NaN (numpy, onnxruntime); it was 0."""
    x = np.array([np.nan, -2, 0, 3], np.float32)
    res = run_unary_f32_vjp("Sign", x, np.ones(4, np.float32))
    np.testing.assert_array_equal(res["y"], np.sign(x))


def test_reduceprod_gradient_with_zeros():
    """ReduceProd's gradient is the product of the other terms: p / x with
    no zero in the row, the product of the rest at a row's only zero, 0
    with two zeros (PyTorch's prod backward). It was g times the whole
    product (the accumulator stood for the final result). Oracle: numpy,
    the exclusive product by deleting each term."""
    x = np.array([[2.0, 3.0, 0.5, -1.0], [2.0, 0.0, 4.0, 3.0], [0.0, 5.0, 0.0, 2.0]])
    ins = [("x", [3, 4])]
    m = model(
        [helper.make_node("ReduceProd", ["x", "axes"], ["y"], keepdims=0)],
        ins,
        [("y", [3])],
        [numpy_helper.from_array(np.array([1], np.int64), "axes")],
        opset=18,
    )
    g = np.array([1.5, -2.0, 0.75])
    got = ddpc.compile(m, vjp=True, onnx_checker=False).run({"x": x, "d_y": g})["d_x"]
    want = np.array(
        [[np.prod(np.delete(x[r], j)) * g[r] for j in range(4)] for r in range(3)]
    )
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_batchnorm_training_and_layernorm():
    ins = [("x", [4, 3, 2, 2]), ("s", [3]), ("b", [3])]
    inits = [
        numpy_helper.from_array(np.zeros(3), "mean"),
        numpy_helper.from_array(np.ones(3), "var"),
    ]
    nodes = [
        helper.make_node(
            "BatchNormalization",
            ["x", "s", "b", "mean", "var"],
            ["y", "rm", "rv"],
            training_mode=1,
        ),
        helper.make_node("LayerNormalization", ["y", "s2", "b2"], ["z"], axis=-2),
    ]
    inits += [
        numpy_helper.from_array(np.linspace(0.5, 1.5, 4).reshape(2, 2), "s2"),
        numpy_helper.from_array(np.linspace(-1, 1, 4).reshape(2, 2), "b2"),
    ]
    m = model(nodes, ins, [("z", [4, 3, 2, 2])], inits)
    check_gradients(m, ins, np.random.default_rng(9))


def test_shape_ops():
    ins = [("x", [2, 3, 4]), ("y", [2, 1, 4])]
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
        helper.make_node("Flatten", ["t"], ["f"], axis=1),
        helper.make_node("Unsqueeze", ["f", "ax"], ["u"]),
        helper.make_node("Squeeze", ["u", "ax"], ["s"]),
        helper.make_node("Reshape", ["s", "shp"], ["r"]),
        helper.make_node("Concat", ["r", "y"], ["c"], axis=1),
        helper.make_node("Slice", ["c", "st", "en", "axs", "steps"], ["sl"]),
        helper.make_node("Expand", ["sl", "eshape"], ["e"]),
        helper.make_node("Dropout", ["e"], ["o"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([0], np.int64), "ax"),
        numpy_helper.from_array(np.array([2, 3, 4], np.int64), "shp"),
        numpy_helper.from_array(np.array([3, 0], np.int64), "st"),
        numpy_helper.from_array(np.array([0, 4], np.int64), "en"),
        numpy_helper.from_array(np.array([1, 2], np.int64), "axs"),
        numpy_helper.from_array(np.array([-1, 2], np.int64), "steps"),
        numpy_helper.from_array(np.array([3, 1, 1, 1], np.int64), "eshape"),
    ]
    m = model(nodes, ins, [("o", None)], inits)
    check_gradients(m, ins, np.random.default_rng(10))


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax"])
def test_reductions(op):
    ins = [("x", [3, 4, 2])]
    inits = [numpy_helper.from_array(np.array([1], np.int64), "axes")]
    m = model(
        [helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)],
        ins,
        [("y", [3, 2])],
        inits,
        opset=18,
    )
    check_gradients(m, ins, np.random.default_rng(11))


def i64(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


# Gather's gradient w.r.t. its data is a scatter-add: repeated indices
# accumulate, negative ones count from the end. It was a zero tensor
# (issue 17): an embedding table never trained. cuda-emulate runs the
# scatter as the GPU does, one thread per element with atomic adds.
GATHERS = {
    "axis0-repeats-negative": (
        [("data", [5, 3])],
        [i64("idx", [[0, 2], [2, -1], [4, 0]])],
        dict(axis=0),
        [3, 2, 3],
    ),
    "axis1": (
        [("data", [2, 4, 3])],
        [i64("idx", [3, -4, 1, 3])],
        dict(axis=1),
        [2, 4, 3],
    ),
    "scalar-index": ([("data", [3, 4])], [i64("idx", 1)], dict(axis=1), [3]),
    "last-axis": (
        [("data", [2, 3])],
        [i64("idx", [[2, 2], [0, -3]])],
        dict(axis=-1),
        [2, 2, 2],
    ),
}


@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
@pytest.mark.parametrize("case", sorted(GATHERS))
def test_gather(case, target):
    ins, inits, attrs, out = GATHERS[case]
    m = model(
        [helper.make_node("Gather", ["data", "idx"], ["y"], **attrs)],
        ins,
        [("y", out)],
        inits,
    )
    check_gradients(m, ins, np.random.default_rng(14), target=target)


@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
def test_gather_of_an_intermediate_and_a_tied_table(target):
    """The table is a computed tensor (Tanh of an input) and is also read
    directly, as a weight tied between an embedding and an output head:
    logits = Gather(E, ids) @ E^T. Both uses contribute to dE."""
    ins = [("w", [6, 4])]
    nodes = [
        helper.make_node("Tanh", ["w"], ["e"]),
        helper.make_node("Gather", ["e", "ids"], ["emb"], axis=0),
        helper.make_node("Transpose", ["e"], ["et"], perm=[1, 0]),
        helper.make_node("MatMul", ["emb", "et"], ["y"]),
    ]
    m = model(nodes, ins, [("y", [2, 3, 6])], [i64("ids", [[1, 5, 1], [0, 1, -1]])])
    check_gradients(m, ins, np.random.default_rng(15), target=target)


def test_where():
    ins = [("a", [3, 4]), ("b", [3, 4])]
    nodes = [
        helper.make_node("Greater", ["a", "b"], ["c"]),
        helper.make_node("Where", ["c", "a", "b"], ["y"]),
    ]
    m = model(nodes, ins, [("y", [3, 4])])
    check_gradients(m, ins, np.random.default_rng(12))


def to_float64(m):
    """The same model in float64: initializers and float tensor types."""
    m = onnx.ModelProto.FromString(m.SerializeToString())
    for t in m.graph.initializer:
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(
                numpy_helper.from_array(
                    numpy_helper.to_array(t).astype(np.float64), t.name
                )
            )
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = D
    return m


def test_whole_cnn_gradient():
    """Gradient of a whole residual CNN (Conv, BatchNorm, Relu, Add,
    GlobalAveragePool, Gemm) w.r.t. its input matches finite differences."""
    m = to_float64(onnx.load(str(ROOT / "examples" / "models" / "resnet_mini.onnx")))
    for vi in m.graph.input:
        vi.type.tensor_type.shape.dim[0].dim_value = 1
    for vi in m.graph.output:
        vi.type.tensor_type.shape.dim[0].dim_value = 1
    # A small spatial size keeps the number of finite differences low.
    for vi in m.graph.input:
        for d, v in zip(vi.type.tensor_type.shape.dim[1:], (3, 6, 6)):
            d.dim_value = v
    check_gradients(
        m, [("input", [1, 3, 6, 6])], np.random.default_rng(13), rtol=1e-4, atol=1e-6
    )

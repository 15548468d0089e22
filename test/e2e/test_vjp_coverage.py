"""Every input of every op ddpc imports has a checked gradient or is
declared non-differentiable, in one table (issue 17, item 1).

A missing VJP rule used to be silent: Gather's table got a zero cotangent,
so embeddings never trained. This file makes that class impossible to miss:

- `test_every_op_input_is_covered` walks `ddpc.supported_ops()` and, for
  each op, the inputs of its ONNX schema (onnx.defs). An input that may
  carry a gradient (its type constraint admits a float type, and so does an
  output's) must have a finite-difference case in CASES or a reason in
  NONDIFF; integer and bool inputs (indices, shapes, axes, conditions) and
  ops whose outputs cannot be float (comparisons, Shape) need none. A new op
  registered without either fails here.
- `test_vjp_matches_finite_differences` runs each case: the op alone in
  float64, compiled with `vjp=True`, its cotangent of every float graph
  input against central differences (ddpc_testing.check_gradients), on
  the CPU target.
"""

import dataclasses

import numpy as np
import onnx
import onnx.defs
import pytest
from onnx import TensorProto, helper, numpy_helper

from ddpc_testing import check_gradients

ddpc = pytest.importorskip("ddpc", reason="build the Python extension (make build)")

FLOAT_TYPES = {"tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)"}


@dataclasses.dataclass
class Var:
    """Shapes of a variadic input (Concat's inputs, Sum's data_0, ...)."""

    shapes: tuple

    def __init__(self, *shapes):
        self.shapes = shapes


@dataclasses.dataclass
class Case:
    """One op alone. `inputs`: formal input name -> a shape (a float64
    graph input whose gradient is checked), a Var of shapes, or a numpy
    array (a constant initializer: indices, shapes, configuration)."""

    inputs: dict
    attrs: dict = dataclasses.field(default_factory=dict)
    opset: int = 17
    positive: tuple = ()
    out_dtype: int = TensorProto.DOUBLE
    h: float = 1e-6
    rtol: float = 1e-5
    atol: float = 1e-7
    name: str = ""
    # Maps the random inputs into the op's domain (Asin's (-1, 1), ...).
    domain: object = None
    outputs: int = 1
    # Node outputs after the checked ones that are not graph outputs
    # (TopK's int64 Indices).
    hidden: int = 0
    in_dtype: int = TensorProto.DOUBLE

    def fd_inputs(self):
        """Formal inputs whose gradient the case checks."""
        return {k for k, v in self.inputs.items() if not isinstance(v, np.ndarray)}


def c(
    opset=17,
    attrs=None,
    positive=(),
    name="",
    domain=None,
    outputs=1,
    hidden=0,
    **inputs,
):
    return Case(
        inputs=inputs,
        attrs=attrs or {},
        opset=opset,
        positive=positive,
        name=name,
        domain=domain,
        outputs=outputs,
        hidden=hidden,
    )


def i64(*v):
    return np.array(v if len(v) != 1 or not isinstance(v[0], list) else v[0], np.int64)


def f32(*v):
    return np.array(v, np.float32)


AXES1 = i64([1])
REDUCE = {
    op: [
        c(
            opset=18,
            attrs=dict(keepdims=0),
            data=[3, 4, 2],
            axes=AXES1,
            positive=("data",) if op == "ReduceLogSum" else (),
        )
    ]
    for op in [
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceProd",
        "ReduceSum",
        "ReduceSumSquare",
    ]
}
UNARY = {
    op: [c(**{name: [3, 4]})]
    for op, name in [
        ("Abs", "X"),
        ("Ceil", "X"),
        ("Elu", "X"),
        ("Erf", "input"),
        ("Exp", "input"),
        ("Floor", "X"),
        ("HardSigmoid", "X"),
        ("Identity", "input"),
        ("LeakyRelu", "X"),
        ("Neg", "X"),
        ("Relu", "X"),
        ("Sigmoid", "X"),
        ("Sign", "input"),
        ("Softplus", "X"),
        ("Tanh", "input"),
        ("Sin", "input"),
        ("Cos", "input"),
        ("Tan", "input"),
        ("Atan", "input"),
        ("Sinh", "input"),
        ("Cosh", "input"),
        ("Asinh", "input"),
        ("Round", "X"),
        ("Softsign", "input"),
        ("Selu", "X"),
        ("ThresholdedRelu", "X"),
        ("HardSwish", "X"),
        ("Shrink", "input"),
    ]
}
# Inside (-1, 1), and above 1 for Acosh.
BOUNDED_UNARY = {
    op: [
        c(
            domain=(
                (lambda x: 0.9 * np.tanh(x))
                if op != "Acosh"
                else (lambda x: 1.2 + np.abs(x))
            ),
            input=[3, 4],
        )
    ]
    for op in ["Asin", "Acos", "Atanh", "Acosh"]
}
POSITIVE_UNARY = {
    op: [c(positive=(name,), **{name: [3, 4]})]
    for op, name in [("Log", "input"), ("Reciprocal", "X"), ("Sqrt", "X")]
}
BINARY = {
    op: [c(A=[2, 3, 4], B=[3, 1], positive=("B",) if op == "Div" else ())]
    for op in ["Add", "Sub", "Mul", "Div"]
}
VARIADIC = {
    op: [c(data_0=Var([3, 4], [4], [3, 1]))] for op in ["Max", "Min", "Mean", "Sum"]
}

CASES = {
    **REDUCE,
    **UNARY,
    **POSITIVE_UNARY,
    **BOUNDED_UNARY,
    **BINARY,
    **VARIADIC,
    "CastLike": [
        Case(
            inputs=dict(input=[3, 4], target_type=np.zeros(1, np.float32)),
            out_dtype=TensorProto.FLOAT,
            h=1e-3,
            rtol=1e-3,
            atol=2e-4,
            opset=19,
        )
    ],
    # Celu takes float32 only.
    "Celu": [
        Case(
            inputs=dict(X=[3, 4]),
            attrs=dict(alpha=0.7),
            in_dtype=TensorProto.FLOAT,
            out_dtype=TensorProto.FLOAT,
            h=1e-3,
            rtol=1e-3,
            atol=2e-4,
        )
    ],
    "CumSum": [
        c(x=[3, 4], axis=i64(1), name="inclusive"),
        c(
            x=[3, 4],
            axis=i64(-2),
            attrs=dict(exclusive=1, reverse=1),
            name="exclusive-reverse",
        ),
    ],
    "CumProd": [
        c(opset=26, x=[3, 4], axis=i64(1), name="inclusive"),
        c(
            opset=26,
            x=[3, 4],
            axis=i64(-2),
            attrs=dict(exclusive=1, reverse=1),
            name="exclusive-reverse",
        ),
        # Exact zeros: the product's derivative is not y / x there.
        c(
            opset=26,
            x=[3, 5],
            axis=i64(1),
            domain=lambda x: np.where(np.abs(x) < 0.5, 0.0, x),
            name="zeros",
        ),
    ],
    "GatherElements": [
        c(data=[3, 4], indices=i64([[0, -1, 2, 0], [2, 2, 1, 0]]), attrs=dict(axis=0))
    ],
    "Mish": [c(X=[3, 4], opset=18)],
    "Mod": [c(A=[3, 4], B=[4], attrs=dict(fmod=1), positive=("B",))],
    "PRelu": [c(X=[2, 3, 4], slope=[3, 1])],
    "Pad": [
        c(
            data=[3, 4],
            pads=i64([1, -1, 2, 2]),
            constant_value=np.array(0.5),
            opset=18,
            name="constant",
        ),
        c(
            data=[3, 4],
            pads=i64([2, 1, 1, 3]),
            attrs=dict(mode="reflect"),
            opset=18,
            name="reflect",
        ),
        c(
            data=[3, 4],
            pads=i64([2, 0, 1, 3]),
            attrs=dict(mode="edge"),
            opset=18,
            name="edge",
        ),
        c(
            data=[3, 4],
            pads=i64([4, 1, 1, 5]),
            attrs=dict(mode="wrap"),
            opset=19,
            name="wrap",
        ),
    ],
    "LpNormalization": [
        c(input=[3, 4], attrs=dict(axis=0, p=1), name="l1"),
        c(input=[3, 4], name="l2"),
    ],
    "NegativeLogLikelihoodLoss": [
        c(
            input=[3, 4],
            target=i64([1, 0, 3]),
            weight=[4],
            positive=("weight",),
            name="mean",
        ),
        c(
            input=[2, 3, 2],
            target=i64([[0, 2], [1, 1]]),
            attrs=dict(reduction="none"),
            name="none",
        ),
        c(
            input=[3, 4],
            target=i64([1, 2, 3]),
            weight=[4],
            positive=("weight",),
            attrs=dict(ignore_index=2, reduction="sum"),
            name="ignore-sum",
        ),
    ],
    "RMSNormalization": [c(X=[2, 3, 4], scale=[4], opset=23)],
    "SoftmaxCrossEntropyLoss": [
        c(scores=[3, 4], labels=i64([1, 0, 3]), weights=[4], positive=("weights",)),
        c(
            scores=[2, 3, 2],
            labels=i64([[0, 2], [1, 1]]),
            attrs=dict(ignore_index=1),
            name="ignore",
        ),
    ],
    # X's cotangent is a scatter-add at the taps; grid's flows through the
    # interpolation weights (and the border clamp / reflection), and is 0
    # for nearest.
    "GridSample": [
        c(opset=16, X=[1, 2, 3, 4], grid=[1, 2, 3, 2], name="bilinear-zeros"),
        c(
            opset=16,
            attrs=dict(mode="bicubic", padding_mode="reflection"),
            X=[2, 1, 4, 3],
            grid=[2, 2, 2, 2],
            name="bicubic-reflection",
        ),
        c(
            opset=20,
            attrs=dict(mode="nearest", padding_mode="border", align_corners=1),
            X=[1, 2, 3, 4],
            grid=[1, 3, 2, 2],
            name="nearest-border",
        ),
        c(
            opset=20,
            attrs=dict(padding_mode="reflection", align_corners=1),
            X=[1, 2, 3, 2, 4],
            grid=[1, 2, 2, 3, 3],
            name="trilinear-reflection",
        ),
        c(
            opset=22,
            attrs=dict(mode="cubic", padding_mode="border"),
            X=[2, 2, 5],
            grid=[2, 4, 1],
            name="cubic-1d-border",
        ),
    ],
    "Hardmax": [c(input=[3, 4], opset=13)],
    "TopK": [
        c(X=[3, 5], K=i64([3]), hidden=1, name="largest"),
        c(
            X=[4, 3],
            K=i64([2]),
            attrs=dict(axis=0, largest=0),
            hidden=1,
            name="smallest",
        ),
    ],
    "Split": [c(input=[5, 3], split=i64([2, 3]), outputs=2, opset=18)],
    "Tile": [c(input=[2, 3], repeats=i64([2, 3]))],
    "Trilu": [
        c(input=[2, 3, 4], k=i64(1), name="upper"),
        c(input=[3, 4], k=i64(-1), attrs=dict(upper=0), name="lower"),
    ],
    "AveragePool": [
        c(
            X=[1, 2, 5, 5],
            attrs=dict(kernel_shape=[2, 2], strides=[2, 1], pads=[0, 1, 0, 1]),
        )
    ],
    # Contractions Q K^T and P V (grouped-query heads broadcast, not
    # repeated), the scale/softcap/bias elementwise generics and Softmax.
    "Attention": [
        c(
            opset=23,
            attrs=dict(is_causal=1),
            Q=[1, 2, 3, 4],
            K=[1, 2, 5, 4],
            V=[1, 2, 5, 3],
            attn_mask=[3, 5],
            name="4d-float-mask-causal",
        ),
        c(
            opset=23,
            attrs=dict(q_num_heads=4, kv_num_heads=2, is_causal=1, softcap=1.5),
            Q=[2, 3, 8],
            K=[2, 3, 4],
            V=[2, 3, 6],
            past_key=[2, 2, 2, 2],
            past_value=[2, 2, 2, 3],
            name="3d-gqa-past-softcap-causal",
        ),
        c(
            opset=24,
            attrs=dict(scale=0.3),
            Q=[2, 2, 2, 3],
            K=[2, 1, 4, 3],
            V=[2, 1, 4, 2],
            attn_mask=np.array([[True, False, True], [True, True, False]]),
            nonpad_kv_seqlen=i64([3, 4]),
            name="4d-mqa-bool-mask-nonpad",
        ),
    ],
    "BatchNormalization": [
        # Inference mode: the output depends on the running statistics too.
        c(
            X=[2, 3, 2, 2],
            scale=[3],
            B=[3],
            input_mean=[3],
            input_var=[3],
            positive=("input_var",),
            name="inference",
        ),
        # Training mode: batch statistics; the running ones are buffers.
        c(
            X=[4, 3, 2, 2],
            scale=[3],
            B=[3],
            input_mean=np.zeros(3),
            input_var=np.ones(3),
            attrs=dict(training_mode=1),
            name="training",
        ),
    ],
    "Cast": [
        Case(
            inputs=dict(input=[3, 4]),
            attrs=dict(to=TensorProto.FLOAT),
            out_dtype=TensorProto.FLOAT,
            h=1e-3,
            rtol=1e-3,
            atol=2e-4,
        )
    ],
    "Clip": [c(input=[3, 4], min=[], max=[], opset=13)],
    "Concat": [c(inputs=Var([2, 3], [2, 1]), attrs=dict(axis=1))],
    "Conv": [c(X=[1, 2, 5, 4], W=[3, 2, 3, 2], B=[3], attrs=dict(pads=[1, 0, 1, 0]))],
    "ConvTranspose": [
        c(
            X=[1, 4, 3, 2],
            W=[4, 3, 2, 3],
            B=[6],
            attrs=dict(
                strides=[2, 3],
                pads=[1, 0, 0, 2],
                output_padding=[1, 2],
                dilations=[2, 1],
                group=2,
            ),
            name="2d",
        ),
        # Pads beyond the kernel's extent crop the dilated input.
        c(X=[2, 2, 4], W=[2, 1, 2], attrs=dict(strides=[2], pads=[2, 3]), name="crop"),
        c(
            X=[1, 1, 2, 2, 1],
            W=[1, 2, 2, 1, 2],
            attrs=dict(strides=[1, 2, 2], auto_pad="SAME_LOWER"),
            opset=11,
            name="3d",
        ),
    ],
    "Dropout": [c(data=[3, 4], ratio=np.array(0.3))],
    "Expand": [c(input=[3, 1], shape=i64([2, 3, 4]))],
    "Flatten": [c(input=[2, 3, 2], attrs=dict(axis=2))],
    "Gather": [c(data=[5, 3], indices=i64([[0, -1], [2, 0]]))],
    "GatherND": [
        # A repeated tuple accumulates its cotangents.
        c(data=[3, 4, 2], indices=i64([[0, 1], [2, -1], [0, 1]]), name="pairs"),
        c(
            data=[2, 3, 4],
            indices=i64([[[1], [1]], [[0], [2]]]),
            attrs=dict(batch_dims=1),
            name="batch_dims",
        ),
    ],
    "Gelu": [
        c(X=[3, 4], opset=20, name="exact"),
        c(X=[3, 4], opset=20, attrs=dict(approximate="tanh"), name="tanh"),
    ],
    "Einsum": [
        c(
            opset=12,
            Inputs=Var([2, 3, 4], [2, 4, 5]),
            attrs=dict(equation="bij,bjk->bik"),
        ),
        # Implicit output, three operands, a diagonal and a broadcast ellipsis.
        c(opset=12, Inputs=Var([3, 4], [4, 2], [2]), attrs=dict(equation="ij,jk,k")),
        c(
            opset=12,
            Inputs=Var([2, 3, 3], [1, 3]),
            attrs=dict(equation="...ii,...i->...i"),
        ),
        c(opset=12, Inputs=Var([4, 4]), attrs=dict(equation="ii->")),
    ],
    "Gemm": [c(A=[3, 4], B=[5, 4], C=[5], attrs=dict(transB=1, alpha=0.5, beta=2.0))],
    "GlobalAveragePool": [c(X=[2, 3, 3, 2])],
    "GlobalLpPool": [c(X=[2, 3, 3, 2]), c(X=[2, 2, 3], attrs=dict(p=3))],
    "GlobalMaxPool": [c(X=[2, 3, 3, 2])],
    "InstanceNormalization": [c(input=[2, 3, 2, 2], scale=[3], B=[3])],
    "LRN": [c(X=[1, 5, 2, 2], attrs=dict(size=3))],
    "LayerNormalization": [c(X=[2, 3, 4], Scale=[4], B=[4])],
    "LogSoftmax": [c(input=[3, 4])],
    "MatMul": [c(A=[2, 3, 4], B=[4, 5])],
    "LpPool": [
        c(X=[1, 2, 4, 4], attrs=dict(kernel_shape=[2, 2], strides=[2, 1])),
        c(X=[1, 2, 5], attrs=dict(kernel_shape=[3], p=3, pads=[1, 1])),
        c(X=[1, 1, 4, 4], attrs=dict(kernel_shape=[2, 2], p=1)),
    ],
    "MaxPool": [
        c(
            X=[1, 2, 5, 5],
            attrs=dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        ),
        # Y's gradient is the same when the Indices output is also computed.
        c(
            X=[1, 2, 5, 4],
            attrs=dict(kernel_shape=[2, 3], pads=[1, 1, 0, 1], storage_order=1),
            hidden=1,
            name="with-indices",
        ),
    ],
    "OneHot": [
        c(
            indices=i64([[1, -1], [0, 7]]),
            depth=i64([4]),
            values=[2],
            attrs=dict(axis=1),
            opset=11,
        )
    ],
    "ScatterElements": [
        # Duplicate indices: for none only the last update in row-major
        # order reaches the output (and gets a gradient); add sums them.
        c(
            data=[3, 4],
            indices=i64([[1, 0, 2], [1, -3, 0]]),
            updates=[2, 3],
            attrs=dict(axis=0, reduction=red),
            opset=18,
            name=red,
        )
        for red in ("none", "add", "mul", "max", "min")
    ],
    "Scatter": [
        c(
            data=[3, 4],
            indices=i64([[1, 0], [2, 2]]),
            updates=[2, 2],
            attrs=dict(axis=1),
            opset=10,
        )
    ],
    "ScatterND": [
        c(
            data=[4, 3],
            indices=i64([[[1], [3]], [[1], [-4]]]),
            updates=[2, 2, 3],
            attrs=dict(reduction=red),
            opset=18,
            name=red,
        )
        for red in ("none", "add", "mul", "max", "min")
    ]
    + [
        c(
            data=[2, 3, 2],
            indices=i64([[0, 2], [1, 0], [0, 2]]),
            updates=[3, 2],
            name="pairs",
        )
    ],
    "Pow": [c(X=[3, 4], Y=[4], positive=("X",))],
    "Reshape": [c(data=[2, 6], shape=i64([3, 4]))],
    "Slice": [
        c(
            data=[4, 5],
            starts=i64([1, -1]),
            ends=i64([3, -6]),
            axes=i64([0, 1]),
            steps=i64([1, -2]),
        )
    ],
    # Each resized axis is a contraction with a constant matrix; the
    # cotangent goes back through its transpose.
    "Resize": [
        c(opset=19, X=[3, 4], scales=f32(2, 1.5), name="nearest-2d"),
        c(
            opset=19,
            attrs=dict(mode="linear"),
            X=[1, 2, 3, 4],
            scales=f32(1, 1, 2, 0.6),
            name="linear-4d",
        ),
        c(
            opset=19,
            attrs=dict(mode="cubic", exclude_outside=1),
            X=[1, 1, 4, 5],
            sizes=i64([1, 1, 7, 3]),
            name="cubic-4d",
        ),
        c(
            opset=19,
            attrs=dict(mode="linear", antialias=1),
            X=[6, 8],
            scales=f32(0.5, 0.7),
            name="linear-antialias-2d",
        ),
        c(
            opset=19,
            attrs=dict(mode="cubic", antialias=1, axes=[2, 3]),
            X=[1, 2, 7, 6],
            scales=f32(0.6, 0.5),
            name="cubic-antialias-4d",
        ),
        c(
            opset=19,
            attrs=dict(
                mode="linear",
                coordinate_transformation_mode="tf_crop_and_resize",
                extrapolation_value=2.0,
            ),
            X=[4, 5],
            roi=f32(-0.2, 0.1, 0.9, 1.2),
            sizes=i64([5, 4]),
            name="crop-and-resize",
        ),
    ],
    "Upsample": [c(opset=9, X=[1, 2, 2, 3], scales=f32(1, 1, 2, 3))],
    # Slices of the rotated lanes, elementwise products with the (gathered)
    # caches, concatenation back into X.
    "RotaryEmbedding": [
        c(
            opset=23,
            X=[2, 2, 3, 6],
            cos_cache=[5, 3],
            sin_cache=[5, 3],
            position_ids=i64([[0, 4, 2], [1, 1, -1]]),
            name="4d-position-ids",
        ),
        c(
            opset=23,
            attrs=dict(num_heads=2, interleaved=1, rotary_embedding_dim=4),
            X=[2, 3, 12],
            cos_cache=[2, 3, 2],
            sin_cache=[2, 3, 2],
            name="3d-interleaved-partial",
        ),
    ],
    "Softmax": [c(input=[3, 4])],
    "Squeeze": [c(data=[3, 1, 4], axes=AXES1)],
    "Transpose": [c(data=[2, 3, 4], attrs=dict(perm=[2, 0, 1]))],
    "Unsqueeze": [c(data=[3, 4], axes=i64([0, 2]))],
    "Where": [c(condition=np.array([[True, False, True, False]] * 3), X=[3, 4], Y=[4])],
}

# Inputs that may be float but get no gradient, and why. Everything else
# that may carry one has a case above. Integer outputs that carry no
# cotangent are named here too, with the reason.
NONDIFF = {
    "MaxPool": {
        "Indices": "an int64 output (positions of the maxima): no cotangent flows "
        "through it, and Y keeps its own gradient (case with-indices)"
    },
    "OneHot": {
        "indices": "positions (cast to integers): the output is piecewise constant in them",
        "depth": "must be an import-time constant (it sets the output's shape)",
    },
    "CastLike": {"target_type": "only its dtype is read"},
    "Range": {
        n: "must be an import-time constant (it sets the output's shape)"
        for n in ("start", "limit", "delta")
    },
    "Pad": {
        "constant_value": "configuration (PyTorch's pad value is a Python float); an "
        "initializer here stays a constant in training"
    },
    "Resize": {
        "roi": "sets the crop, a compile-time constant (static shapes)",
        "scales": "sets the output shape, a compile-time constant",
    },
    "Upsample": {"scales": "sets the output shape, a compile-time constant"},
    "Dropout": {
        "ratio": "configuration (the drop probability; PyTorch takes a Python "
        "float); an initializer here stays a constant in training"
    },
}


def possibly_differentiable(schema):
    """Formal inputs of `schema` that could carry a gradient."""
    constraints = {
        t.type_param_str: set(t.allowed_type_strs) for t in schema.type_constraints
    }
    types = lambda f: constraints.get(f.type_str, {f.type_str})  # noqa: E731
    if not any(types(o) & FLOAT_TYPES for o in schema.outputs):
        return []
    return [f.name for f in schema.inputs if types(f) & FLOAT_TYPES]


def test_every_op_input_is_covered():
    ops = ddpc.supported_ops()
    assert len(ops) > 50, ops
    missing = []
    for op in ops:
        schema = onnx.defs.get_schema(op)
        checked = set().union(*[case.fd_inputs() for case in CASES.get(op, [])])
        for name in possibly_differentiable(schema):
            declared = name in NONDIFF.get(op, {})
            assert not (
                declared and name in checked
            ), f"{op}.{name}: both checked and declared"
            if name not in checked and not declared:
                missing.append(f"{op}.{name}")
    assert not missing, (
        "inputs with neither a finite-difference case nor a "
        f"non-differentiable declaration: {missing}"
    )
    # The tables name only real ops and inputs.
    for op in set(CASES) | set(NONDIFF):
        assert op in ops, f"{op} is in the tables but ddpc does not import it"
        formal = {f.name for f in onnx.defs.get_schema(op).inputs}
        for case in CASES.get(op, []):
            assert set(case.inputs) <= formal, (op, set(case.inputs) - formal)
        outputs = {f.name for f in onnx.defs.get_schema(op).outputs}
        assert set(NONDIFF.get(op, {})) <= formal | outputs


def build(op, case):
    """The op alone: float64 graph inputs for shapes, initializers for arrays."""
    schema = onnx.defs.get_schema(op, case.opset)
    node_inputs, graph_inputs, inits = [], [], []
    for f in schema.inputs:
        spec = case.inputs.get(f.name)
        if spec is None:
            node_inputs.append("")
            continue
        if isinstance(spec, np.ndarray):
            inits.append(numpy_helper.from_array(spec, f.name))
            node_inputs.append(f.name)
        elif isinstance(spec, Var):
            for j, shape in enumerate(spec.shapes):
                graph_inputs.append((f"{f.name}_{j}", list(shape)))
                node_inputs.append(f"{f.name}_{j}")
        else:
            graph_inputs.append((f.name, list(spec)))
            node_inputs.append(f.name)
    while node_inputs and not node_inputs[-1]:
        node_inputs.pop()
    outs = ["y"] if case.outputs == 1 else [f"y{i}" for i in range(case.outputs)]
    g = helper.make_graph(
        [
            helper.make_node(
                op,
                node_inputs,
                outs + [f"unused{i}" for i in range(case.hidden)],
                **case.attrs,
            )
        ],
        op,
        [helper.make_tensor_value_info(n, case.in_dtype, s) for n, s in graph_inputs],
        [helper.make_tensor_value_info(o, case.out_dtype, None) for o in outs],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", case.opset)])
    m.ir_version = 8
    positive = {
        n
        for n, _ in graph_inputs
        if n.rsplit("_", 1)[0] in case.positive or n in case.positive
    }
    return m, graph_inputs, positive


CASE_IDS = [(op, i) for op in sorted(CASES) for i in range(len(CASES[op]))]


@pytest.mark.parametrize(
    "op,index",
    CASE_IDS,
    ids=[
        f"{op}{'-' + CASES[op][i].name if CASES[op][i].name else ''}"
        for op, i in CASE_IDS
    ],
)
def test_vjp_matches_finite_differences(op, index):
    case = CASES[op][index]
    m, inputs, positive = build(op, case)
    check_gradients(
        m,
        inputs,
        np.random.default_rng(sum(map(ord, op)) + index),
        h=case.h,
        rtol=case.rtol,
        atol=case.atol,
        positive=positive,
        domain=case.domain,
    )

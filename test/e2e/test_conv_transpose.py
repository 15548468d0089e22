"""ConvTranspose against a direct numpy oracle (the scatter form of the
spec: every input element adds its kernel-weighted window into the output
at i*s + k*d - pad_begin), for what the backend node tests do not cover:
groups with dilations and output_padding, pads that crop, negative total
padding, and the opset-1 split of an explicit output_shape's padding."""

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper

import ddpc as ddpc_py


def reference(x, w, b, strides, dilations, group, pad_begin, out_spatial):
    """Y [N, M, O...] of ConvTranspose, accumulated in float64."""
    n, c = x.shape[:2]
    mg = w.shape[1]
    k = x.ndim - 2
    y = np.zeros((n, mg * group, *out_spatial))
    for ci in range(c):
        gi = ci // (c // group)
        for pos in itertools.product(*[range(s) for s in x.shape[2:]]):
            for kp in itertools.product(*[range(s) for s in w.shape[2:]]):
                o = [
                    pos[i] * strides[i] + kp[i] * dilations[i] - pad_begin[i]
                    for i in range(k)
                ]
                if all(0 <= o[i] < out_spatial[i] for i in range(k)):
                    idx = (slice(None), slice(gi * mg, (gi + 1) * mg), *o)
                    y[idx] += np.outer(
                        x[(slice(None), ci, *pos)], w[(ci, slice(None), *kp)]
                    )
    if b is not None:
        y += b.reshape(1, -1, *([1] * k))
    return y


def run(xs, ws, bias, attrs, opset, target="cpu"):
    names = ["x", "w"] + (["b"] if bias else [])
    m = ws[1] * attrs.get("group", 1)
    shapes = [xs, ws] + ([[m]] if bias else [])
    g = helper.make_graph(
        [helper.make_node("ConvTranspose", names, ["y"], **attrs)],
        "g",
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
            for n, s in zip(names, shapes)
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    rng = np.random.default_rng(len(xs) + opset)
    feeds = {
        n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)
    }
    y = ddpc_py.compile(model, onnx_checker=False, target=target).run(feeds)["y"]
    return y, feeds


# (X shape, W shape, bias, attrs, opset, pad_begin, output spatial shape)
CASES = [
    (
        [1, 4, 3, 2],
        [4, 3, 2, 3],
        True,
        dict(
            strides=[2, 3],
            pads=[1, 0, 0, 2],
            output_padding=[1, 2],
            dilations=[2, 1],
            group=2,
        ),
        11,
        [1, 0],
        [7, 6],
    ),
    # Pads larger than (K - 1) d crop the dilated input.
    ([2, 2, 4], [2, 1, 2], False, dict(strides=[2], pads=[2, 3]), 11, [2], [3]),
    # output_shape beyond the full output: total padding -1, zeros after.
    ([1, 1, 3], [1, 2, 3], True, dict(strides=[3], output_shape=[10]), 11, [0], [10]),
    # Odd total padding 1 from output_shape: opset 11 puts the larger half
    # first (NOTSET), opset 1 the smaller one.
    ([1, 1, 3], [1, 1, 3], False, dict(strides=[2], output_shape=[6]), 11, [1], [6]),
    ([1, 1, 3], [1, 1, 3], False, dict(strides=[2], output_shape=[6]), 1, [0], [6]),
    # SAME: O = I s, the odd padding at the end (UPPER) or first (LOWER).
] + [
    (
        [1, 2, 3, 2],
        [2, 1, 2, 3],
        False,
        dict(strides=[2, 2], auto_pad=pad),
        22,
        begin,
        [6, 4],
    )
    for pad, begin in (("SAME_UPPER", [0, 0]), ("SAME_LOWER", [0, 1]))
]


@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
@pytest.mark.parametrize("xs,ws,bias,attrs,opset,pad_begin,out", CASES)
def test_conv_transpose_matches_numpy(
    xs, ws, bias, attrs, opset, pad_begin, out, target
):
    y, f = run(xs, ws, bias, attrs, opset, target)
    ref = reference(
        f["x"].astype(np.float64),
        f["w"].astype(np.float64),
        f["b"].astype(np.float64) if bias else None,
        attrs.get("strides", [1] * (len(xs) - 2)),
        attrs.get("dilations", [1] * (len(xs) - 2)),
        attrs.get("group", 1),
        pad_begin,
        out,
    )
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "attrs,text",
    [
        (dict(strides=[2], output_padding=[2]), "output_padding [2] must be"),
        (dict(pads=[3, 3]), "the pads leave an output of size -1"),
        (dict(group=3), "do not match group 3"),
        (dict(output_shape=[0]), "must be positive"),
    ],
)
def test_invalid_conv_transpose_is_refused(attrs, text):
    with pytest.raises(ddpc_py.CompileError, match="invalid model") as e:
        run([1, 2, 3], [2, 1, 3], False, attrs, 11)
    assert text in str(e.value) and "ConvTranspose" in str(e.value), str(e.value)
    assert "\n" not in str(e.value).strip()

"""Resize and Upsample beyond the ONNX node tests (which are all opset 19
float32, or Upsample-9 nearest 2x): the older opsets' semantics, other
dtypes, scales that are not integers, tf_crop_and_resize with points
outside the input, and the refusals.

Oracle: onnxruntime; onnx.reference where onnxruntime does not implement
the mode (antialias with cubic at non-integer scales is checked against
both). Each case is compiled for the CPU and the CUDA-emulate target.
"""

import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import ddpc as ddpc_py
from ddpc_testing import check_gradients

TARGETS = ["cpu", "cuda-emulate"]


def resize_model(
    x_shape,
    attrs,
    opset,
    roi=None,
    scales=None,
    sizes=None,
    dtype=TensorProto.FLOAT,
    op="Resize",
):
    """One Resize node; roi, scales and sizes are initializers (None: the
    input is left out, [] an empty tensor)."""
    inits, names = [], ["x"]
    optional = [("roi", roi, np.float32), ("scales", scales, np.float32)]
    if opset >= 11:
        optional.append(("sizes", sizes, np.int64))
    for name, value, np_dtype in optional:
        if value is None:
            names.append("")
        else:
            inits.append(numpy_helper.from_array(np.array(value, np_dtype), name))
            names.append(name)
    if op == "Upsample" or opset == 10:
        names = ["x", "scales"] if scales is not None else ["x"]
    while names[-1] == "":
        names.pop()
    g = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info("x", dtype, list(x_shape))],
        [helper.make_tensor_value_info("y", dtype, None)],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def random_input(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == TensorProto.FLOAT:
        return rng.standard_normal(shape).astype(np.float32)
    if dtype == TensorProto.DOUBLE:
        return rng.standard_normal(shape)
    if dtype == TensorProto.FLOAT16:
        return rng.standard_normal(shape).astype(np.float16)
    if dtype == TensorProto.INT32:
        return rng.integers(-1000, 1000, shape).astype(np.int32)
    if dtype == TensorProto.UINT8:
        return rng.integers(0, 255, shape).astype(np.uint8)
    raise ValueError(dtype)


ORT_CASES = {
    # Resize-10 and Upsample: x_original = x_resized / scale; nearest
    # floors when upsampling and rounds up when downsampling.
    "r10-nearest-up": ((1, 2, 3, 2), dict(mode="nearest"), 10, None, [1, 1, 2.5, 3]),
    "r10-nearest-down": (
        (1, 1, 5, 7),
        dict(mode="nearest"),
        10,
        None,
        [1, 1, 0.6, 0.5],
    ),
    "r10-linear-up": ((1, 2, 3, 4), dict(mode="linear"), 10, None, [1, 1, 1.5, 2]),
    "r10-linear-down": ((2, 6, 5), dict(mode="linear"), 10, None, [1, 0.5, 0.8]),
    # Resize-11: roi and scales are required inputs; the TF nearest mode.
    "r11-tf-half-pixel-nn": (
        (1, 1, 3, 5),
        dict(mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn"),
        11,
        [],
        [1, 1, 2, 1.6],
    ),
    "r11-linear-sizes": (
        (1, 2, 4, 4),
        dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
        11,
        [],
        [],
        [1, 2, 7, 3],
    ),
    "r13-cubic-align": (
        (1, 2, 3, 5),
        dict(mode="cubic", coordinate_transformation_mode="align_corners"),
        13,
        None,
        [1, 1, 1.5, 1.7],
    ),
    "r13-cubic-exclude": (
        (1, 1, 6, 4),
        dict(mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5),
        13,
        None,
        [1, 1, 0.5, 2.25],
    ),
    "r13-nearest-ceil-asym": (
        (1, 1, 4, 5),
        dict(
            mode="nearest",
            nearest_mode="ceil",
            coordinate_transformation_mode="asymmetric",
        ),
        13,
        None,
        None,
        [1, 1, 7, 3],
    ),
    "r13-crop-3d": (
        (2, 5, 6),
        dict(
            mode="linear",
            coordinate_transformation_mode="tf_crop_and_resize",
            extrapolation_value=-2.5,
        ),
        13,
        [0, -0.2, 0.1, 1, 1.3, 0.7],
        None,
        [2, 4, 5],
    ),
    "r18-linear-antialias-axes": (
        (2, 3, 9, 8),
        dict(mode="linear", antialias=1, axes=[-1, 2]),
        18,
        None,
        [0.4, 0.7],
    ),
    "r18-nearest-not-smaller": (
        (1, 3, 5, 4),
        dict(mode="nearest", axes=[2, 3], keep_aspect_ratio_policy="not_smaller"),
        18,
        None,
        None,
        [7, 7],
    ),
    "r19-linear-symmetric": (
        (1, 1, 5, 3),
        dict(mode="linear", coordinate_transformation_mode="half_pixel_symmetric"),
        19,
        None,
        [1, 1, 1.3, 0.7],
    ),
}


# align_corners with a fractional scale * in_len: onnxruntime divides by
# out_len - 1, the ONNX reference (and the node test
# test_resize_downsample_scales_linear_align_corners, which ddpc passes) by
# scale * in_len - 1. These cases take the reference as the oracle.
REFERENCE_ORACLE = {"r13-cubic-align"}


def both(m, x, target, oracle="onnxruntime"):
    ours = ddpc_py.compile(m, target=target, onnx_checker=False).run({"x": x})["y"]
    if oracle == "reference":
        ref = ReferenceEvaluator(m).run(None, {"x": x})[0]
    else:
        ref = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    return ours, ref


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(ORT_CASES))
def test_resize_matches_onnxruntime(name, target):
    shape, attrs, opset, *rest = ORT_CASES[name]
    rest += [None] * (3 - len(rest))
    roi, scales, sizes = rest
    if opset == 10:
        roi, sizes = None, None
    m = resize_model(shape, attrs, opset, roi, scales, sizes)
    oracle = "reference" if name in REFERENCE_ORACLE else "onnxruntime"
    ours, ref = both(m, random_input(shape, TensorProto.FLOAT), target, oracle)
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset", [7, 9])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_matches_onnxruntime(opset, mode):
    shape, scales = (1, 2, 3, 4), [1, 1, 2, 1.5]
    attrs = dict(mode=mode)
    if opset == 7:
        attrs["scales"] = scales
    m = resize_model(
        shape, attrs, opset, scales=scales if opset == 9 else None, op="Upsample"
    )
    ours, ref = both(m, random_input(shape, TensorProto.FLOAT), "cpu")
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "dtype,mode",
    [
        (TensorProto.DOUBLE, "cubic"),
        (TensorProto.DOUBLE, "linear"),
        (TensorProto.FLOAT16, "linear"),
        (TensorProto.INT32, "nearest"),
        (TensorProto.UINT8, "nearest"),
    ],
)
def test_resize_dtypes(dtype, mode):
    """float64 computes in float64, float16 in float32, and integers
    (nearest only) are copied exactly."""
    shape = (1, 2, 3, 5)
    m = resize_model(shape, dict(mode=mode), 13, scales=[1, 1, 1.5, 0.6], dtype=dtype)
    x = random_input(shape, dtype)
    # onnxruntime has no float64 Resize kernel.
    oracle = "reference" if dtype == TensorProto.DOUBLE else "onnxruntime"
    ours, ref = both(m, x, "cpu", oracle)
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    if dtype == TensorProto.FLOAT16:
        np.testing.assert_allclose(
            ours.astype(np.float32), ref.astype(np.float32), rtol=1e-3, atol=1e-3
        )
    elif mode == "cubic":
        # The reference computes the cubic weights in float32 (the type of
        # cubic_coeff_a under numpy's promotion rules), ddpc in float64.
        np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_allclose(ours, ref, rtol=1e-13, atol=0)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_antialias_matches_reference(mode):
    """Antialiased downsampling by non-integer scales, against the ONNX
    reference implementation."""
    shape = (1, 2, 11, 9)
    m = resize_model(shape, dict(mode=mode, antialias=1), 19, scales=[1, 1, 0.45, 0.7])
    x = random_input(shape, TensorProto.FLOAT)
    ours = ddpc_py.compile(m).run({"x": x})["y"]
    ref = ReferenceEvaluator(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


def compile_cli(ddpc, m, tmp_path, *extra):
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    return subprocess.run(
        [ddpc, "compile", str(path), "-o", str(tmp_path / "prog"), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


def scales_input_model():
    g = helper.make_graph(
        [helper.make_node("Resize", ["x", "", "s"], ["y"], name="up")],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 8
    return m


S12 = dict(scales=[1, 2])
# (attrs, opset, inputs, exit code, text of the one error line); X is
# float[1, 4] unless the inputs say otherwise.
REFUSALS = [
    (
        dict(mode="linear"),
        19,
        dict(S12, dtype=TensorProto.INT32),
        2,
        "linear and cubic Resize of int32 X",
    ),
    (dict(mode="linear"), 19, dict(S12, sizes=[1, 8]), 1, "both scales and sizes"),
    (dict(mode="area"), 19, S12, 1, "mode 'area' is not one of nearest, linear, cubic"),
    (
        dict(mode="linear", coordinate_transformation_mode="half_pixel_symmetric"),
        18,
        S12,
        1,
        "coordinate_transformation_mode 'half_pixel_symmetric' is not defined in "
        "Resize-18",
    ),
    (dict(mode="cubic"), 10, S12, 1, "mode 'cubic' is not one of nearest, linear"),
    (
        dict(mode="linear", antialias=1),
        13,
        S12,
        1,
        "has no attribute 'antialias' at opset 13",
    ),
    (
        dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize"),
        19,
        S12,
        1,
        "'tf_crop_and_resize' needs the roi input",
    ),
    (
        dict(),
        19,
        dict(scales=[1, 0]),
        1,
        "scales[1] = 0.000000 is not a positive number",
    ),
    (
        dict(),
        19,
        dict(scales=[1, np.inf]),
        1,
        "scales[1] = inf is not a positive number",
    ),
    (
        dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize"),
        19,
        dict(roi=[0, np.nan, 1, 1], sizes=[1, 3]),
        1,
        "roi holds a non-finite value",
    ),
    (
        dict(),
        19,
        dict(scales=[1, 5e6]),
        2,
        "resizing axis 1 from 4 to 20000000 (an interpolation matrix above 2^24 "
        "elements)",
    ),
]


def test_non_constant_scales_name_the_binding(ddpc, tmp_path):
    proc = compile_cli(ddpc, scales_input_model(), tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "error: unsupported: op 'Resize' (node 'up', domain '', opset 19): input "
        "#2 ('s') must be a float constant known at compile time; bind graph "
        "input 's' with --bind-input s=FILE.npy"
    )


@pytest.mark.parametrize("index", range(len(REFUSALS)))
def test_resize_refusals_are_one_line(ddpc, tmp_path, index):
    attrs, opset, inputs, code, needle = REFUSALS[index]
    m = resize_model((1, 4), attrs, opset, **inputs)
    proc = compile_cli(ddpc, m, tmp_path, "--no-onnx-checker")
    assert proc.returncode == code, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert needle in lines[0], lines[0]
    assert not (tmp_path / "prog").exists()


def test_bound_scales_input_compiles(ddpc, tmp_path):
    """The refused graph input compiles once --bind-input fixes it."""
    np.save(tmp_path / "s.npy", np.array([1, 1, 2, 3], np.float32))
    proc = compile_cli(
        ddpc, scales_input_model(), tmp_path, "--bind-input", f"s={tmp_path}/s.npy"
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "attrs,scales",
    [
        (dict(mode="linear"), [1, 1, 2, 0.6]),
        (dict(mode="cubic", antialias=1), [1, 1, 0.5, 0.7]),
    ],
)
def test_resize_vjp_on_cuda_emulate(attrs, scales):
    """The VJP (test_vjp_coverage.py runs it on the CPU) on the CUDA
    lowering, against central differences in float64."""
    shape = (1, 2, 5, 6)
    m = resize_model(shape, attrs, 19, scales=scales, dtype=TensorProto.DOUBLE)
    check_gradients(m, [("x", shape)], np.random.default_rng(5), target="cuda-emulate")


def test_bound_input_of_the_wrong_shape_names_both_shapes(ddpc, tmp_path):
    np.save(tmp_path / "s.npy", np.array([1, 1, 2], np.float32))
    proc = compile_cli(
        ddpc, scales_input_model(), tmp_path, "--bind-input", f"s={tmp_path}/s.npy"
    )
    assert proc.returncode == 1, proc.stderr
    line = proc.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert "the value's shape [3] does not match the graph input's [4]" in line

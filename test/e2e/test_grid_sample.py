"""GridSample (opsets 16, 20, 22) beyond the 18 node tests (all opset 22
float32, 2-D and 3-D): every mode x padding_mode x align_corners at opsets
16 and 20, grid values outside [-1, 1], positions exactly halfway between
two pixels (nearest rounds half to even), 1-D and 3-D samples, other
dtypes, gradients on the CUDA-emulate target, and the refusals.

Oracle: onnxruntime; onnx.reference where onnxruntime does not sample
(1-D, 3-D cubic); finite differences for the gradients. Each case is
compiled for the CPU and the CUDA-emulate target.
"""

import itertools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import ddpc as ddpc_py
from ddpc_testing import check_gradients

TARGETS = ["cpu", "cuda-emulate"]
PADDINGS = ["zeros", "border", "reflection"]


def grid_sample_model(
    x_shape, grid_shape, attrs, opset, x_dtype=TensorProto.FLOAT, grid_dtype=None
):
    g = helper.make_graph(
        [helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)],
        "g",
        [
            helper.make_tensor_value_info("x", x_dtype, list(x_shape)),
            helper.make_tensor_value_info(
                "grid", grid_dtype or x_dtype, list(grid_shape)
            ),
        ],
        [helper.make_tensor_value_info("y", x_dtype, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def inputs(x_shape, grid_shape, seed, spread=1.6):
    """X standard normal; grid uniform in [-spread, spread] (beyond the
    borders for spread > 1)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    grid = rng.uniform(-spread, spread, grid_shape).astype(np.float32)
    return x, grid


def run_both(m, x, grid, target, oracle="onnxruntime"):
    feeds = {"x": x, "grid": grid}
    ours = ddpc_py.compile(m, target=target, onnx_checker=False).run(feeds)["y"]
    if oracle == "reference":
        ref = ReferenceEvaluator(m).run(None, feeds)[0]
    else:
        ref = ort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    return ours, ref


MODES = {16: ["bilinear", "nearest", "bicubic"], 20: ["linear", "nearest", "cubic"]}
GRID_2D = [
    (opset, mode, pad, align)
    for opset in (16, 20)
    for mode, pad, align in itertools.product(MODES[opset], PADDINGS, (0, 1))
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "opset,mode,pad,align",
    GRID_2D,
    ids=[f"{o}-{m}-{p}-align{a}" for o, m, p, a in GRID_2D],
)
def test_2d_matches_onnxruntime(opset, mode, pad, align, target):
    x_shape, grid_shape = (2, 3, 4, 5), (2, 3, 6, 2)
    m = grid_sample_model(
        x_shape,
        grid_shape,
        dict(mode=mode, padding_mode=pad, align_corners=align),
        opset,
    )
    x, grid = inputs(x_shape, grid_shape, seed=len(mode) + 3 * align)
    ours, ref = run_both(m, x, grid, target)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


# Reflected many times over: positions far outside the input.
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_far_outside_reflects_repeatedly(mode, target):
    x_shape, grid_shape = (1, 2, 3, 4), (1, 4, 5, 2)
    for align in (0, 1):
        m = grid_sample_model(
            x_shape,
            grid_shape,
            dict(mode=mode, padding_mode="reflection", align_corners=align),
            20,
        )
        x, grid = inputs(x_shape, grid_shape, seed=11 + align, spread=7.0)
        ours, ref = run_both(m, x, grid, target)
        np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("pad", PADDINGS)
def test_nearest_rounds_half_to_even(pad, target):
    # L = 4 without align_corners: g = k/2 - 0.5 lands halfway between
    # pixels k - 1 and k (exact in float32), g = -1.25 and 1.25 outside.
    x_shape = (1, 1, 4, 4)
    vals = np.array([-1.25, -1.0, -0.5, 0.0, 0.5, 1.0, 1.25], np.float32)
    gx, gy = np.meshgrid(vals, vals)
    grid = np.stack([gx, gy], axis=-1)[None].astype(np.float32)
    m = grid_sample_model(
        x_shape, grid.shape, dict(mode="nearest", padding_mode=pad), 20
    )
    x = np.arange(16, dtype=np.float32).reshape(x_shape)
    ours, ref = run_both(m, x, grid, target)
    np.testing.assert_array_equal(ours, ref)
    # Halfway between pixels 1 and 2 (g = 0): pixel 2, the even one.
    np.testing.assert_array_equal(ours[0, 0, 3, 3], x[0, 0, 2, 2])


VOLUMETRIC = [
    (mode, pad, align)
    for mode, pad, align in itertools.product(["linear", "nearest"], PADDINGS, (0, 1))
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "mode,pad,align", VOLUMETRIC, ids=[f"{m}-{p}-align{a}" for m, p, a in VOLUMETRIC]
)
def test_3d_matches_onnxruntime(mode, pad, align, target):
    x_shape, grid_shape = (1, 2, 3, 4, 2), (1, 2, 3, 2, 3)
    m = grid_sample_model(
        x_shape, grid_shape, dict(mode=mode, padding_mode=pad, align_corners=align), 20
    )
    x, grid = inputs(x_shape, grid_shape, seed=5 + align)
    ours, ref = run_both(m, x, grid, target)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


# onnxruntime samples 2-D and 3-D only, and cubic in 2-D only.
REFERENCE_CASES = {
    "1d-linear-zeros": ((2, 3, 5), (2, 4, 1), dict(mode="linear")),
    "1d-cubic-reflection": (
        (1, 2, 6),
        (1, 7, 1),
        dict(mode="cubic", padding_mode="reflection", align_corners=1),
    ),
    "1d-nearest-border": (
        (1, 1, 4),
        (1, 9, 1),
        dict(mode="nearest", padding_mode="border"),
    ),
    # Cubic with border padding clamps the taps (onnxruntime, PyTorch),
    # the reference the position: compared with onnxruntime in 2-D only.
    "3d-cubic-reflection": (
        (1, 1, 3, 4, 4),
        (1, 2, 2, 2, 3),
        dict(mode="cubic", padding_mode="reflection"),
    ),
    "3d-cubic-zeros-align": (
        (1, 2, 4, 3, 3),
        (1, 1, 2, 3, 3),
        dict(mode="cubic", align_corners=1),
    ),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(REFERENCE_CASES))
def test_matches_reference(name, target):
    x_shape, grid_shape, attrs = REFERENCE_CASES[name]
    m = grid_sample_model(x_shape, grid_shape, attrs, 22)
    x, grid = inputs(x_shape, grid_shape, seed=len(name))
    ours, ref = run_both(m, x, grid, target, oracle="reference")
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_double_x_and_float_grid(target):
    # T1 and T2 differ: grid is converted to X's dtype.
    x_shape, grid_shape = (1, 2, 4, 3), (1, 3, 3, 2)
    attrs = dict(mode="bicubic", padding_mode="border")
    m = grid_sample_model(
        x_shape, grid_shape, attrs, 16, TensorProto.DOUBLE, TensorProto.FLOAT
    )
    x, grid = inputs(x_shape, grid_shape, seed=2)
    feeds = {"x": x.astype(np.float64), "grid": grid}
    ours = ddpc_py.compile(m, target=target, onnx_checker=False).run(feeds)["y"]
    assert ours.dtype == np.float64
    m32 = grid_sample_model(x_shape, grid_shape, attrs, 16)
    ref = ort.InferenceSession(m32.SerializeToString()).run(
        None, {"x": x, "grid": grid}
    )[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


def test_float16_computes_in_float32():
    x_shape, grid_shape = (1, 2, 5, 4), (1, 3, 4, 2)
    attrs = dict(mode="linear", padding_mode="reflection")
    m = grid_sample_model(x_shape, grid_shape, attrs, 22, TensorProto.FLOAT16)
    x, grid = inputs(x_shape, grid_shape, seed=9)
    x16, g16 = x.astype(np.float16), grid.astype(np.float16)
    ours = ddpc_py.compile(m, onnx_checker=False).run({"x": x16, "grid": g16})["y"]
    assert ours.dtype == np.float16
    m32 = grid_sample_model(x_shape, grid_shape, attrs, 22)
    feeds = {"x": x16.astype(np.float32), "grid": g16.astype(np.float32)}
    ref = ort.InferenceSession(m32.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(ours.astype(np.float32), ref, rtol=2e-3, atol=2e-3)


GRAD_CASES = {
    "bilinear-border": (16, dict(padding_mode="border"), (1, 2, 3, 4), (1, 2, 3, 2)),
    "bicubic-zeros-align": (
        16,
        dict(mode="bicubic", align_corners=1),
        (1, 1, 4, 4),
        (1, 3, 2, 2),
    ),
    "trilinear-zeros": (20, dict(), (1, 1, 2, 3, 3), (1, 2, 2, 2, 3)),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients_on_cuda_emulate(name):
    # X's cotangent is a scatter-add: atomics on the CUDA target's loops.
    opset, attrs, x_shape, grid_shape = GRAD_CASES[name]
    m = grid_sample_model(x_shape, grid_shape, attrs, opset, TensorProto.DOUBLE)
    check_gradients(
        m,
        [("x", list(x_shape)), ("grid", list(grid_shape))],
        np.random.default_rng(len(name)),
        target="cuda-emulate",
        domain=lambda v: 0.8 * v,
    )


def test_nearest_grid_gradient_is_zero():
    m = grid_sample_model(
        (1, 1, 3, 3), (1, 2, 2, 2), dict(mode="nearest"), 20, TensorProto.DOUBLE
    )
    prog = ddpc_py.compile(m, vjp=True, onnx_checker=False)
    rng = np.random.default_rng(0)
    out = prog.run(
        {
            "x": rng.standard_normal((1, 1, 3, 3)),
            "grid": rng.uniform(-1, 1, (1, 2, 2, 2)),
            "d_y": rng.standard_normal((1, 1, 2, 2)),
        }
    )
    np.testing.assert_array_equal(out["d_grid"], 0.0)
    assert np.count_nonzero(out["d_x"]) > 0


# name: (opset, attributes, unsupported?, message, overrides of the
# default X dtype float32, X shape (1, 1, 2, 2) and grid shape (1, 1, 1, 2)).
REFUSALS = {
    "int-x": (20, {}, True, "dtype int32", dict(dtype=TensorProto.INT32)),
    "5d-at-16": (16, {}, False, "4-D", dict(x=(1, 1, 2, 2, 2), grid=(1, 1, 1, 1, 3))),
    "linear-at-16": (16, dict(mode="linear"), False, "mode 'linear'.*opset 16", {}),
    "bicubic-at-20": (20, dict(mode="bicubic"), False, "mode 'bicubic'.*opset 20", {}),
    "padding": (20, dict(padding_mode="wrap"), False, "padding_mode 'wrap'", {}),
    "grid-shape": (20, {}, False, "grid has shape", dict(grid=(1, 1, 1, 3))),
    "cubic-4d": (
        22,
        dict(mode="cubic"),
        True,
        "mode 'cubic' over 4 spatial dims",
        dict(x=(1, 1, 2, 2, 2, 2), grid=(1, 1, 1, 1, 1, 4)),
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusals_name_the_node(name):
    opset, attrs, unsupported, message, over = REFUSALS[name]
    x_shape, grid_shape = over.get("x", (1, 1, 2, 2)), over.get("grid", (1, 1, 1, 2))
    dtype = over.get("dtype", TensorProto.FLOAT)
    m = grid_sample_model(x_shape, grid_shape, attrs, opset, dtype, TensorProto.FLOAT)
    m.graph.node[0].name = "gs"
    with pytest.raises(ddpc_py.CompileError, match=message) as e:
        ddpc_py.compile(m, onnx_checker=False)
    assert e.value.unsupported == unsupported
    assert f"'GridSample' (node 'gs', domain '', opset {opset})" in e.value.message


def transformer_model(path, seed=0):
    """A small spatial transformer: the grid is predicted from the image
    (Conv -> Transpose -> Tanh), the features (another Conv) are sampled
    at it, then Flatten -> Gemm. Both GridSample inputs carry gradients to
    parameters."""
    import onnx
    from onnx import numpy_helper

    rng = np.random.default_rng(seed)
    inits = {
        "Wg": (rng.standard_normal((2, 1, 2, 2)) * 0.5).astype(np.float32),
        "Wf": (rng.standard_normal((2, 1, 3, 3)) * 0.5).astype(np.float32),
        "W": (rng.standard_normal((18, 4)) * 0.3).astype(np.float32),
        "b": np.zeros(4, np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "Wg"], ["g0"], strides=[2, 2]),
        helper.make_node("Transpose", ["g0"], ["g1"], perm=[0, 2, 3, 1]),
        helper.make_node("Tanh", ["g1"], ["grid"]),
        helper.make_node("Conv", ["x", "Wf"], ["f"], pads=[1, 1, 1, 1]),
        helper.make_node(
            "GridSample", ["f", "grid"], ["s"], mode="bilinear", padding_mode="border"
        ),
        helper.make_node("Flatten", ["s"], ["flat"]),
        helper.make_node("Gemm", ["flat", "W", "b"], ["logits"]),
    ]
    g = helper.make_graph(
        nodes,
        "stn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 6, 6])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])
    m.ir_version = 8
    onnx.save(m, path)
    return inits


def test_training_on_cuda_emulate_matches_cpu(ddpc, tmp_path):
    """10 AdamW steps: the scatter-add of X's cotangent runs with atomics
    on the CUDA target's loops; losses and weights match the CPU target."""
    import json

    from ddpc_testing import assert_close_weights, compile_train, run_train, weights

    init = transformer_model(tmp_path / "m.onnx")
    rng = np.random.default_rng(4)
    np.save(tmp_path / "x.npy", rng.standard_normal((40, 1, 6, 6)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 4, 40).astype(np.int64))
    flags = ["--optimizer", "adamw", "--lr", "0.01"]
    progs = {
        "cpu": compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "cpu", 4, *flags),
        "emu": compile_train(
            ddpc,
            tmp_path / "m.onnx",
            tmp_path / "emu",
            4,
            *flags,
            "--target",
            "cuda-emulate",
        ),
    }
    for name, prog in progs.items():
        logs = ["--save", f"{name}.onnx", "--log-json", f"{name}.jsonl"]
        run_train(prog, tmp_path, 1, "--epochs", "1", "--no-shuffle", *logs)
    loss = lambda f: np.array(  # noqa: E731
        [json.loads(line)["loss"] for line in open(tmp_path / f)]
    )
    a, b = loss("emu.jsonl"), loss("cpu.jsonl")
    assert len(a) == len(b) == 10 and a[-1] < a[0]
    np.testing.assert_allclose(a, b, rtol=1e-4)
    w = weights(tmp_path / "cpu.onnx")
    # Both the grid's and the features' parameters trained.
    assert not np.allclose(w["Wg"], init["Wg"]) and not np.allclose(w["Wf"], init["Wf"])
    assert_close_weights(weights(tmp_path / "emu.onnx"), w, rtol=1e-4)


def test_cuda_target_compiles_to_ptx(ddpc, tmp_path):
    """--target cuda: inference and training programs down to PTX."""
    import subprocess

    from ddpc_testing import cuda_root

    if cuda_root() is None:
        pytest.skip("CUDA toolkit (ptxas) is missing")
    transformer_model(tmp_path / "m.onnx")
    for train in ([], ["--train"]):
        r = subprocess.run(
            [ddpc, "compile", str(tmp_path / "m.onnx"), *train]
            + ["--batch-size", "4", "--target", "cuda", "--emit=ptx", "-o", "-"],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr
        assert ".visible .entry" in r.stdout
        if train:
            # X's scatter-add becomes atomic adds.
            assert "atom.global.add.f32" in r.stdout or "red.global.add.f32" in r.stdout

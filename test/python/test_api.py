"""Tests of the ddpc Python API (python/ddpc) against onnxruntime and numpy.

Models: the example CNNs (LeNet-5, a residual CNN with BatchNorm; symbolic
batch dim 'N') and small graphs built here with onnx.helper.
"""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ddpc
from ddpc_testing import EXAMPLES

LENET = EXAMPLES / "lenet.onnx"
RESNET = EXAMPLES / "resnet_mini.onnx"


@pytest.fixture(scope="module")
def lenet() -> ddpc.Program:
    return ddpc.compile(LENET, batch_size=2)


def ort_run(model: pathlib.Path | onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    source = (
        str(model) if isinstance(model, pathlib.Path) else model.SerializeToString()
    )
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def add_model() -> onnx.ModelProto:
    """y = x + c for x: float32[2, 3]."""
    c = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "c")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["y"], name="add0")],
        "add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [c],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# -- compile ----------------------------------------------------------------


def test_compile_from_path(lenet: ddpc.Program) -> None:
    assert not lenet.is_training
    assert lenet.report()["model"] == "lenet"


def test_compile_from_bytes_and_modelproto() -> None:
    x = np.random.default_rng(0).standard_normal((2, 1, 28, 28)).astype(np.float32)
    from_bytes = ddpc.compile(LENET.read_bytes(), batch_size=2)
    from_proto = ddpc.compile(onnx.load(str(LENET)), dims={"N": 2})
    (want,) = ort_run(LENET, {"input": x})
    for prog in (from_bytes, from_proto):
        np.testing.assert_allclose(
            prog.run({"input": x})["logits"], want, rtol=1e-4, atol=1e-5
        )


def test_compile_from_path_with_external_data(tmp_path: pathlib.Path) -> None:
    model = onnx.load(str(LENET))
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save_model(
        model,
        str(folder / "lenet.onnx"),
        save_as_external_data=True,
        location="weights.bin",
        size_threshold=0,
    )
    assert (folder / "weights.bin").exists()
    prog = ddpc.compile(folder / "lenet.onnx", batch_size=2)
    x = np.random.default_rng(3).standard_normal((2, 1, 28, 28)).astype(np.float32)
    (want,) = ort_run(LENET, {"input": x})
    np.testing.assert_allclose(
        prog.run({"input": x})["logits"], want, rtol=1e-4, atol=1e-5
    )


def test_stages_present_and_nonempty(lenet: ddpc.Program) -> None:
    assert lenet.stages[0] == "import"
    for stage in ("import", "fused", "lowered"):
        assert stage in lenet.stages
        assert "func.func" in lenet.ir(stage) or "llvm.func" in lenet.ir(stage)
    assert "linalg" in lenet.ir("import")
    assert "llvm.func" in lenet.ir("lowered")


def test_unknown_stage_lists_valid_ones(lenet: ddpc.Program) -> None:
    with pytest.raises(KeyError, match="import.*fused.*lowered"):
        lenet.ir("nonsense")


def test_report_has_parameters_with_bytes(lenet: ddpc.Program) -> None:
    report = lenet.report()
    params = report["parameters"]
    assert params, report
    for p in params:
        assert p["bytes"] == 4 * int(np.prod(p["shape"])), p
    assert report["parameter_bytes"] == sum(p["bytes"] for p in params)
    model = onnx.load(str(LENET))
    assert {p["name"] for p in params} == {i.name for i in model.graph.initializer}
    for init in model.graph.initializer:
        p = next(p for p in params if p["name"] == init.name)
        assert p["onnx_dtype"] == init.data_type, p
        assert (
            p["dtype"] == onnx.helper.tensor_dtype_to_np_dtype(init.data_type).name
        ), p
    assert report["inputs"] == [
        {"name": "input", "dtype": "float32", "onnx_dtype": 1, "shape": [2, 1, 28, 28]}
    ]


def test_unknown_option_is_type_error() -> None:
    with pytest.raises(TypeError, match="no_such_option"):
        ddpc.compile(LENET, batch_size=2, no_such_option=1)


def test_unbound_dim_is_compile_error() -> None:
    """The message is the CLI's; str() adds the Python spelling of the CLI
    options it names."""
    with pytest.raises(ddpc.CompileError) as info:
        ddpc.compile(LENET)
    assert not info.value.unsupported
    assert "input" in info.value.message
    assert "--batch-size N" in info.value.message
    assert str(info.value).startswith(info.value.message)
    assert str(info.value).endswith(
        "[in Python: --dim is dims={name: value}, --batch-size is batch_size=]"
    )


def test_unsupported_op_is_compile_error() -> None:
    graph = helper.make_graph(
        [helper.make_node("Unique", ["x"], ["y"], name="the_unique_node", axis=1)],
        "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ddpc.CompileError) as info:
        ddpc.compile(model)
    err = info.value
    assert err.unsupported is True
    assert "the_unique_node" in err.message
    assert "Unique" in err.message
    assert "\n" not in err.message
    assert str(err) == err.message


def test_invalid_model_bytes_is_compile_error() -> None:
    with pytest.raises(ddpc.CompileError) as info:
        ddpc.compile(b"this is not an onnx model")
    assert not info.value.unsupported


@pytest.mark.skipif(
    not pathlib.Path("/usr/local/cuda/bin/ptxas").exists(),
    reason="no CUDA toolkit (ptxas) at /usr/local/cuda",
)
def test_cuda_arch_option() -> None:
    """cuda_arch (CLI --cuda-arch) picks the architectures of target="cuda"
    (the report lists them); a bad entry or another target is a
    CompileError naming the option."""
    prog = ddpc.compile(LENET, batch_size=2, target="cuda", cuda_arch="sm_90")
    assert prog.report()["cuda"]["archs"] == ["sm_90"]
    assert ddpc.compile(LENET, batch_size=2, target="cuda").report()["cuda"][
        "archs"
    ] == ["sm_80"]
    with pytest.raises(RuntimeError, match="use save"):
        prog.run({"input": np.zeros((2, 1, 28, 28), np.float32)})
    with pytest.raises(ddpc.CompileError, match="sm_81"):
        ddpc.compile(LENET, batch_size=2, target="cuda", cuda_arch="sm_81")
    with pytest.raises(ddpc.CompileError, match="cuda_arch applies to target='cuda'"):
        ddpc.compile(LENET, batch_size=2, cuda_arch="sm_90")


# -- run --------------------------------------------------------------------


@pytest.mark.parametrize(
    "path,shape",
    [(LENET, (2, 1, 28, 28)), (RESNET, (2, 3, 32, 32))],
    ids=["lenet", "resnet_mini"],
)
def test_run_matches_onnxruntime(path: pathlib.Path, shape: tuple[int, ...]) -> None:
    prog = ddpc.compile(path, batch_size=2)
    rng = np.random.default_rng(1)
    for _ in range(2):  # the loaded library is reused
        x = rng.standard_normal(shape).astype(np.float32)
        got = prog.run({"input": x})
        (want,) = ort_run(path, {"input": x})
        assert list(got) == ["logits"]
        assert got["logits"].shape == want.shape and got["logits"].dtype == np.float32
        np.testing.assert_allclose(got["logits"], want, rtol=1e-4, atol=1e-5)


def test_run_accepts_non_contiguous_input() -> None:
    prog = ddpc.compile(add_model())
    x = np.arange(12, dtype=np.float32).reshape(3, 4)[:2, ::-1][:, :3]
    assert not x.flags.c_contiguous
    (want,) = ort_run(add_model(), {"x": np.ascontiguousarray(x)})
    np.testing.assert_array_equal(prog.run({"x": x})["y"], want)
    assert [s.name for s in prog.inputs] == ["x"] and prog.outputs[0].shape == (2, 3)


def test_run_wrong_shape_raises(lenet: ddpc.Program) -> None:
    x = np.zeros((3, 1, 28, 28), np.float32)
    with pytest.raises(
        ValueError, match=r"'input'.*\[2, 1, 28, 28\].*\[3, 1, 28, 28\]"
    ):
        lenet.run({"input": x})


def test_run_wrong_dtype_raises(lenet: ddpc.Program) -> None:
    x = np.zeros((2, 1, 28, 28), np.float64)
    with pytest.raises(ValueError, match="'input'.*float32.*float64"):
        lenet.run({"input": x})


def test_run_wrong_names_raise(lenet: ddpc.Program) -> None:
    x = np.zeros((2, 1, 28, 28), np.float32)
    with pytest.raises(ValueError, match="missing input.*'input'"):
        lenet.run({})
    with pytest.raises(ValueError, match="unknown input.*'bogus'"):
        lenet.run({"input": x, "bogus": x})


def test_save_writes_working_executable(tmp_path: pathlib.Path) -> None:
    prog = ddpc.compile(add_model())
    exe = prog.save(tmp_path / "prog")
    assert exe.exists() and exe.stat().st_mode & 0o111
    x = np.ones((2, 3), np.float32)
    np.save(tmp_path / "x.npy", x)
    import subprocess

    proc = subprocess.run(
        [
            str(exe),
            "--input",
            f"x={tmp_path / 'x.npy'}",
            "--output-dir",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(
        np.load(tmp_path / "out" / "y.npy"), prog.run({"x": x})["y"]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "prog", "x.npy"]


def test_train_config_validates() -> None:
    with pytest.raises(ValueError, match="optimizer"):
        ddpc.TrainConfig(optimizer="lbfgs")
    with pytest.raises(ValueError, match="contradicts"):
        ddpc.compile(LENET, batch_size=4, train=ddpc.TrainConfig(batch_size=8))
    for field, bad in (
        ("lr", 1e39),
        ("lr", float("inf")),
        ("lr", -1.0),
        ("momentum", -1.0),
        ("weight_decay", float("nan")),
        ("eps", float("nan")),
        ("dampening", float("inf")),
        ("betas", (0.9, 1.5)),
        ("grad_accum_steps", 0),
        ("nesterov", True),  # torch.optim.SGD: needs momentum > 0
        ("loss", "hinge"),
        ("optimizer", "lamb"),
    ):
        with pytest.raises(ValueError, match=field):
            ddpc.TrainConfig(**{field: bad})
    with pytest.raises(ValueError, match="apply to --optimizer sgd only"):
        ddpc.TrainConfig(optimizer="adamw", momentum=0.9)
    with pytest.raises(ValueError, match="apply to --optimizer adamw only"):
        ddpc.TrainConfig(optimizer="sgd", eps=1e-6)
    # Types: what would convert silently to something else is refused.
    for kwargs, field in (
        (dict(nesterov="false", momentum=0.9), "nesterov"),
        (dict(sync_batchnorm="no"), "sync_batchnorm"),
        (dict(batch_size=2.9), "batch_size"),
        (dict(batch_size=True), "batch_size"),
        (dict(grad_accum_steps=2.7), "grad_accum_steps"),
        (dict(grad_accum_steps=True), "grad_accum_steps"),
        (dict(grad_accum_steps=2**70), "grad_accum_steps"),
        (dict(freeze=[1]), "freeze"),
        (dict(loss=None), "loss"),
        (dict(label_input=5), "label_input"),
        (dict(betas=None), "betas"),
    ):
        with pytest.raises(ValueError, match=field):
            ddpc.TrainConfig(**kwargs)
    # numpy scalars are numbers.
    assert ddpc.TrainConfig(lr=np.float32(0.5), batch_size=np.int64(4)).lr == 0.5
    assert ddpc.TrainConfig().bucket_cap_mb is None  # 25 MiB, 4 at stage 2
    for cap in (0, -1.0, float("nan"), float("inf"), "5", True):
        with pytest.raises(ValueError, match="bucket_cap_mb"):
            ddpc.TrainConfig(bucket_cap_mb=cap)
    # Changed after construction: the compiler rejects it, naming the option.
    config = ddpc.TrainConfig(batch_size=4)
    config.bucket_cap_mb = -1
    with pytest.raises(ddpc.CompileError, match="bucket_cap_mb"):
        ddpc.compile(LENET, train=config)


def test_train_report_lists_gradient_buckets() -> None:
    """Every trainable parameter in exactly one bucket; the bytes add up."""
    step = ddpc.compile(LENET, train=ddpc.TrainConfig(batch_size=2, bucket_cap_mb=0.01))
    report = step.report()
    buckets = report["gradient_buckets"]
    assert len(buckets) > 1
    names = [p for b in buckets for p in b["params"]]
    trainable = {p["name"]: p["bytes"] for p in report["parameters"] if p["trainable"]}
    assert sorted(names) == sorted(trainable)
    assert sum(b["bytes"] for b in buckets) == sum(trainable.values())
    assert all(0 < b["start_op"] <= b["function_ops"] for b in buckets)


# -- train ------------------------------------------------------------------


def cross_entropy(model: onnx.ModelProto, x: np.ndarray, y: np.ndarray) -> float:
    (logits,) = ort_run(model, {"input": x})
    logits = logits - logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(y)), y].mean())


def test_train_digits_lowers_loss() -> None:
    # Needs `ddpc compile --train` and the training runtime (TrainABI.h).
    # The digits example: examples/digits/digits_mlp.onnx on scikit-learn's
    # bundled digits (1,797 8x8 images).
    from sklearn.datasets import load_digits

    root = pathlib.Path(__file__).resolve().parents[2]
    model = onnx.load(str(root / "examples" / "digits" / "digits_mlp.onnx"))
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    config = ddpc.TrainConfig(
        loss="cross-entropy", optimizer="sgd", lr=0.1, momentum=0.9, batch_size=16
    )
    prog = ddpc.compile(model, train=config)
    assert prog.is_training
    for stage in ("import", "training", "fused", "lowered"):
        assert prog.ir(stage), stage
    with pytest.raises(RuntimeError, match="train"):
        prog.run({"input": x[:16]})

    result = prog.train(x, y, epochs=5)
    losses = [entry["loss"] for entry in result.log if "loss" in entry]
    assert len(losses) >= 2, result.log
    assert np.mean(losses[-5:]) < np.mean(losses[:5]), losses
    # Oracle independent of the runtime: onnxruntime on the saved model.
    before = cross_entropy(model, x, y)
    after = cross_entropy(result.model, x, y)
    assert after < 0.8 * before, (before, after)


def test_train_without_shuffling() -> None:
    """shuffle=False (and extra_args=["--no-shuffle"], which the docstring
    suggests) visit the samples in file order: the first logged loss is the
    initial model's cross-entropy on the first batch (onnxruntime oracle).
    extra_args=["--no-shuffle"] once clashed with the --shuffle-seed that
    train() always passed."""
    root = pathlib.Path(__file__).resolve().parents[2]
    model = onnx.load(str(root / "examples" / "digits" / "digits_mlp.onnx"))
    rng = np.random.default_rng(3)
    x = rng.random((64, 64), dtype=np.float32)
    y = rng.integers(0, 10, 64).astype(np.int64)
    config = ddpc.TrainConfig(
        loss="cross-entropy", optimizer="sgd", lr=0.1, batch_size=16
    )
    prog = ddpc.compile(model, train=config)
    want = cross_entropy(model, x[:16], y[:16])
    for extra in (["--save", "x.onnx"], ["--log-json=l.jsonl"]):
        with pytest.raises(ValueError, match="extra_args may not set"):
            prog.train(x, y, epochs=1, extra_args=extra)
    for kwargs in ({"shuffle": False}, {"extra_args": ["--no-shuffle"]}):
        result = prog.train(x, y, epochs=1, **kwargs)
        first = next(entry["loss"] for entry in result.log if "loss" in entry)
        assert abs(first - want) < 1e-5 * max(1.0, abs(want)), (kwargs, first, want)


def test_train_nan_policy() -> None:
    """An inf in a sample: nan_policy="stop" (the default) raises naming the
    step, "skip" drops it (the log marks it, the other steps train),
    a bad value is a ValueError."""
    root = pathlib.Path(__file__).resolve().parents[2]
    model = onnx.load(str(root / "examples" / "digits" / "digits_mlp.onnx"))
    rng = np.random.default_rng(4)
    x = rng.random((64, 64), dtype=np.float32)
    x[20, 3] = np.inf  # step 2 of 16-sample batches
    y = rng.integers(0, 10, 64).astype(np.int64)
    prog = ddpc.compile(
        model, train=ddpc.TrainConfig(optimizer="sgd", lr=0.1, batch_size=16)
    )
    with pytest.raises(RuntimeError, match="step 2: the loss is nan on rank 0"):
        prog.train(x, y, epochs=1, shuffle=False)
    result = prog.train(x, y, epochs=1, shuffle=False, nan_policy="skip")
    assert [bool(e.get("skipped")) for e in result.log] == [False, True, False, False]
    with pytest.raises(ValueError, match="nan_policy"):
        prog.train(x, y, nan_policy="never")


@pytest.mark.parametrize(
    "precision,unsupported", [("bf16", True), ("fp16", True), ("int3", False)]
)
def test_precision_option(precision, unsupported) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    # tf32 compiles everywhere (float32 math on the CPU) and runs as fp32.
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    y = ddpc.compile(model, precision="tf32").run({"x": x})["y"]
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    with pytest.raises(ddpc.CompileError) as info:
        ddpc.compile(model, precision=precision)
    assert info.value.unsupported is unsupported
    assert "--precision" in info.value.message

"""Whole CNNs compiled by ddpc match onnxruntime on random inputs.

Models: the example CNNs in examples/models (LeNet-5 and a residual CNN with
BatchNorm, built in the graph form PyTorch's exporter writes) and two
PyTorch-exported modules from the ONNX backend data (pytorch-converted)."""

import pathlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from ddpc_testing import EXAMPLES, run_ddpc


@pytest.mark.parametrize(
    "model,shape", [("lenet", (4, 1, 28, 28)), ("resnet_mini", (4, 3, 32, 32))]
)
def test_example_cnn_matches_onnxruntime(ddpc, tmp_path, model, shape):
    path = EXAMPLES / f"{model}.onnx"
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    run_ddpc(ddpc, path, {"input": x}, tmp_path, "--batch-size", str(shape[0]))
    got = np.load(tmp_path / "out" / "logits.npy")
    (want,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"input": x}
    )
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "case", ["test_Conv2d_groups", "test_MaxPool2d_stride_padding_dilation"]
)
def test_pytorch_exported_module_matches_onnxruntime(ddpc, tmp_path, case):
    path = (
        pathlib.Path(onnx.__file__).parent
        / "backend/test/data/pytorch-converted"
        / case
        / "model.onnx"
    )
    m = onnx.load(str(path))
    inits = {i.name for i in m.graph.initializer}
    rng = np.random.default_rng(2)
    feeds = {}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    run_ddpc(ddpc, path, feeds, tmp_path)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    for vi, w in zip(m.graph.output, want):
        got = np.load(tmp_path / "out" / f"{vi.name}.npy")
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)

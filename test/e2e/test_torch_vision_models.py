"""torchvision's ResNet-50 and MobileNetV3, exported by PyTorch
(torch.onnx.export, TorchScript exporter, opset 17), eval and training
mode. The exports and PyTorch's losses on them come from
test/torch_exports/make_exports.py (`make_exports.py resnet50 mobilenetv3`);
this test does not need torch. Both are shrunk so the files stay small
(see make_exports.py):

- `resnet50`: torchvision's ResNet with Bottleneck blocks [3, 4, 6, 3]
  (ResNet-50's depth), every width divided by 16 (stem 4 channels,
  bottleneck widths 4/8/16/32, outputs 16..128), zero_init_residual, 5
  classes, 3x16x16 images; 106k parameters.
- `mobilenetv3`: mobilenet_v3_small(width_mult=0.25, reduced_tail=True,
  dropout=0.0, num_classes=5), 3x16x16 images: Hardswish, Hardsigmoid,
  squeeze-excitation, depthwise Convs, BatchNorm eps 1e-3 momentum 0.01.

Oracles: onnxruntime for inference; PyTorch's per-step losses (SGD with
momentum, 1 rank; DistributedDataParallel at 2 ranks) and its eval-mode
outputs after the SGD run.

The training programs compile in about 15 s each at -O0 on a 2-core
machine (7-8 minutes before the LLVM IR translation stopped printing the
step function once per argument attribute, docs/compile-time.md): the SGD
check runs in `make test`; the two-rank check (expected to fail, see its
mark) still waits for DDPC_SLOW_TESTS=1.
"""

import os

import numpy as np
import onnxruntime as ort
import pytest

from ddpc_testing import MPIRUN
from test_torch_exports import EXPORTS, check_inference, ddpc_losses, reference

MODELS = ["resnet50", "mobilenetv3"]
O0 = ["-O", "0"]  # LLVM's optimizations change no loss beyond 1e-4
slow = pytest.mark.skipif(
    not os.environ.get("DDPC_SLOW_TESTS"),
    reason="two ranks of two training programs; set DDPC_SLOW_TESTS=1",
)


@pytest.mark.parametrize("form", ["eval", "train"])
@pytest.mark.parametrize("name", MODELS)
def test_inference_matches_onnxruntime(ddpc, tmp_path, name, form):
    """Eval-mode exports (BatchNormalization folded into Conv by the
    exporter) and training-mode ones (batch statistics, as the ONNX spec
    computes them; onnxruntime without graph optimizations, which would
    fuse Conv + BatchNormalization ignoring training_mode)."""
    check_inference(ddpc, tmp_path, name, form)


@pytest.mark.parametrize("name", MODELS)
def test_sgd_trains_like_pytorch_and_saves_its_eval_model(ddpc, tmp_path, name):
    """10 SGD (momentum) steps within 1e-4 of PyTorch's losses (measured:
    resnet50 4.1e-6, mobilenetv3 7.6e-8). The saved model under
    onnxruntime gives PyTorch's eval outputs up to the running variance:
    PyTorch updates it with the unbiased batch variance, ONNX with the
    biased one. MobileNetV3's momentum 0.01 keeps that at 2.9e-6 of the
    largest output; ResNet-50's layer3/layer4 BatchNorms see 8 values per
    channel (1x1 maps), a factor 8/7 at momentum 0.1, measured 8.4e-2, so
    its outputs are not compared."""
    ours, torch_losses, _ = ddpc_losses(
        ddpc, tmp_path, name, "train", "sgd", compile_args=O0
    )
    np.testing.assert_allclose(ours, torch_losses, rtol=1e-4)
    if name == "resnet50":
        return
    eval_x = np.load(EXPORTS / f"{name}.npz")["eval_x"]
    sess = ort.InferenceSession(str(tmp_path / "trained.onnx"))
    got = sess.run(None, {"x": eval_x})[0]
    want = np.array(reference(name)["eval_y"], np.float32)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * np.abs(want).max())


@slow
@pytest.mark.xfail(
    reason="not resolved: mobilenetv3 measured 3.8e-4 relative (eval outputs "
    "1.1e-4 of the largest); resnet50 not run yet"
)
@pytest.mark.skipif(MPIRUN is None, reason="needs mpirun")
@pytest.mark.parametrize("name", MODELS)
def test_two_ranks_reproduce_distributed_data_parallel(ddpc, tmp_path, name):
    """2 ranks against DistributedDataParallel with
    DistributedSampler(shuffle=False): --sample-assignment strided
    --buffer-sync broadcast, as for convbn."""
    ddp = ["--sample-assignment", "strided", "--buffer-sync", "broadcast"]
    losses = ddpc_losses(
        ddpc, tmp_path, name, "train", "sgd", *ddp, ranks=2, compile_args=O0
    )[0]
    np.testing.assert_allclose(losses, reference(name)["ddp2"]["losses"], rtol=1e-4)

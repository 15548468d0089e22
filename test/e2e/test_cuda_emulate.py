"""The CUDA target's kernel-level IR, run on the CPU (`--target cuda-emulate`),
against independent oracles. No GPU or CUDA toolkit is needed.

`cuda-emulate` stops the CUDA pipeline where it becomes GPU specific
(buildGPULoopPipeline): contraction generics are ddpc_gemm_f32 calls through
the same column-major (cuBLAS) argument mapping the CUDA runtime uses,
window gradients are parallel loops with atomic adds, and every other op is
a 1-d parallel loop tiled by the 256-thread block size with its bounds
guard. Those loops then run serially. So these tests check our GPU-side
rewrites and the GEMM mapping; the remaining steps to PTX are upstream
(and are checked for well-formedness by ptxas in test_cuda_target.py).

Oracles: onnxruntime (inference), the numpy re-implementation of training
in ddpc_testing.py, and the data-parallel invariant.
"""

import json
import subprocess

import numpy as np
import onnxruntime as ort
import pytest

from ddpc_testing import (
    check_conv_vjp,
    EXAMPLES,
    MPIRUN,
    OPTIMIZERS,
    ROOT,
    assert_close_weights,
    compile_train,
    data,
    mlp_model,
    numpy_train,
    run_ddpc,
    run_train,
    weights,
)

EMULATE = ["--target", "cuda-emulate"]


@pytest.mark.parametrize(
    "model,shape", [("lenet", (4, 1, 28, 28)), ("resnet_mini", (3, 3, 32, 32))]
)
def test_cnn_inference_matches_onnxruntime(ddpc, tmp_path, model, shape):
    path = EXAMPLES / f"{model}.onnx"
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    run_ddpc(
        ddpc, path, {"input": x}, tmp_path, "--batch-size", str(shape[0]), *EMULATE
    )
    got = np.load(tmp_path / "out" / "logits.npy")
    (want,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"input": x}
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("epilogue", ["1", "0"])
def test_gemm_epilogues_and_fallback_match_onnxruntime(
    ddpc, tmp_path, monkeypatch, epilogue
):
    """The digits MLP's layers (Gemm + Relu, then Gemm) become GEMMs with a
    bias+ReLU and a bias epilogue (ddpc-gemm-epilogues; cuBLASLt on the GPU,
    Gemm.h's reference here). With DDPC_GEMM_EPILOGUE=0 the runtime declines
    and the compiled fallback (GEMM call, then the generated kernel) runs.
    Both paths match onnxruntime."""
    path = ROOT / "examples/digits/digits_mlp.onnx"
    ir = subprocess.run(
        [
            ddpc,
            "compile",
            str(path),
            "--batch-size",
            "8",
            *EMULATE,
            "--emit=lowered-mlir",
            "-o",
            "-",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert ir.count("llvm.call @ddpc_gemm_bias_act_f32(") == 2
    monkeypatch.setenv("DDPC_GEMM_EPILOGUE", epilogue)
    x = np.random.default_rng(4).standard_normal((8, 64)).astype(np.float32)
    run_ddpc(ddpc, path, {"input": x}, tmp_path, "--batch-size", "8", *EMULATE)
    got = np.load(tmp_path / "out" / "logits.npy")
    (want,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"input": x}
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "env",
    [{}, {"DDPC_CONV_EPILOGUE": "0"}, {"DDPC_CUDNN": "0"}],
    ids=["fused", "conv-then-kernel", "im2col-gemm"],
)
def test_conv_epilogues_and_fallbacks_match_onnxruntime(
    ddpc, tmp_path, monkeypatch, env
):
    """LeNet's two Conv (bias) + Relu layers become fused convolution +
    bias + ReLU calls (ddpc-conv-epilogues; cudnnConvolutionBiasActivation-
    Forward on the GPU, Gemm.h's reference here). With DDPC_CONV_EPILOGUE=0
    the runtime declines and the convolution call and the generated bias/ReLU
    kernel run; with DDPC_CUDNN=0 the im2col + GEMM fallback inside that.
    All three paths match onnxruntime."""
    path = EXAMPLES / "lenet.onnx"
    rep = subprocess.run(
        [
            ddpc,
            "compile",
            str(path),
            "--batch-size",
            "4",
            *EMULATE,
            "--report=json",
            "-o",
            str(tmp_path / "p"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    (fn,) = json.loads(rep.stdout)["cuda"]["functions"]
    assert fn["cudnn_convolutions"] == 2 and fn["cudnn_epilogue_convolutions"] == 2
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    x = np.random.default_rng(5).standard_normal((4, 1, 28, 28)).astype(np.float32)
    x[0, 0, 3, 3] = np.nan  # The compiled Relu keeps NaN; so must the fused one.
    run_ddpc(ddpc, path, {"input": x}, tmp_path, "--batch-size", "4", *EMULATE)
    got = np.load(tmp_path / "out" / "logits.npy")
    (want,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"input": x}
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _layer_with_output_model(kind):
    """A layer whose pre-bias result is itself a graph output: MatMul -> y1,
    Add(y1, b) -> Relu -> y2 ("matmul"); Conv (no bias) -> y1, Add(y1, b[C,1,1])
    -> Relu -> y2 ("conv"); Conv with bias -> y1, Relu -> y2 ("conv-bias")."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(6)
    if kind == "matmul":
        x_shape, w, b = [4, 8], rng.standard_normal((8, 6)), rng.standard_normal(6)
        nodes = [
            helper.make_node("MatMul", ["x", "w"], ["y1"]),
            helper.make_node("Add", ["y1", "b"], ["s"]),
            helper.make_node("Relu", ["s"], ["y2"]),
        ]
        y_shape = [4, 6]
    else:
        x_shape, w = [2, 2, 5, 5], rng.standard_normal((3, 2, 3, 3))
        y_shape = [2, 3, 5, 5]
        if kind == "conv":
            b = rng.standard_normal((3, 1, 1))
            nodes = [
                helper.make_node("Conv", ["x", "w"], ["y1"], pads=[1, 1, 1, 1]),
                helper.make_node("Add", ["y1", "b"], ["s"]),
                helper.make_node("Relu", ["s"], ["y2"]),
            ]
        else:
            b = rng.standard_normal(3)
            nodes = [
                helper.make_node("Conv", ["x", "w", "b"], ["y1"], pads=[1, 1, 1, 1]),
                helper.make_node("Relu", ["y1"], ["y2"]),
            ]
    g = helper.make_graph(
        nodes,
        kind,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, y_shape)
            for n in ("y1", "y2")
        ],
        [
            numpy_helper.from_array(w.astype(np.float32), "w"),
            numpy_helper.from_array(b.astype(np.float32), "b"),
        ],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), x_shape


@pytest.mark.parametrize("kind", ["matmul", "conv", "conv-bias"])
def test_library_epilogues_keep_outputs_the_caller_reads(ddpc, tmp_path, kind):
    """A GEMM or convolution whose output the caller reads (a graph output)
    must still write it when its bias kernel writes elsewhere, so no fused
    epilogue may replace the pair. The MatMul case once got a cuBLASLt
    epilogue and left y1 unwritten."""
    import onnx

    model, x_shape = _layer_with_output_model(kind)
    path = tmp_path / f"{kind}.onnx"
    onnx.save(model, path)
    x = np.random.default_rng(7).standard_normal(x_shape).astype(np.float32)
    run_ddpc(ddpc, path, {"x": x}, tmp_path, *EMULATE)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    for name, ref in zip(("y1", "y2"), want):
        np.testing.assert_allclose(
            np.load(tmp_path / "out" / f"{name}.npy"),
            ref,
            rtol=1e-5,
            atol=1e-5,
            err_msg=name,
        )


def _batch_one_bias_model(kind):
    """Batch 1 with a bias broadcast from a leading unit dimension: Conv,
    Add(b[1,C,1,1]), Relu ("conv"); MatMul, Add(b[1,N]), Relu ("matmul").
    At batch 1 the bias is read as (n, c, 0, 0) and (m, n): along the
    channel (column) loop, since n (m) only takes the index 0."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(8)
    if kind == "conv":
        x_shape, y_shape = [1, 3, 6, 6], [1, 4, 6, 6]
        w, b = rng.standard_normal((4, 3, 3, 3)), rng.standard_normal((1, 4, 1, 1))
        first = helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])
    else:
        x_shape, y_shape = [1, 8], [1, 5]
        w, b = rng.standard_normal((8, 5)), rng.standard_normal((1, 5))
        first = helper.make_node("MatMul", ["x", "w"], ["c"])
    g = helper.make_graph(
        [
            first,
            helper.make_node("Add", ["c", "b"], ["s"]),
            helper.make_node("Relu", ["s"], ["y"]),
        ],
        kind,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [
            numpy_helper.from_array(w.astype(np.float32), "w"),
            numpy_helper.from_array(b.astype(np.float32), "b"),
        ],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), x_shape


@pytest.mark.parametrize(
    "env",
    [{}, {"DDPC_CONV_EPILOGUE": "0", "DDPC_GEMM_EPILOGUE": "0"}],
    ids=["fused", "declined"],
)
@pytest.mark.parametrize("kind", ["conv", "matmul"])
def test_batch_one_broadcast_bias_gets_the_epilogue(
    ddpc, tmp_path, monkeypatch, kind, env
):
    """A [1,C,1,1] (or [1,N]) bias at batch 1 is a per-channel bias: the
    library epilogue applies (it used to be missed), and its result and the
    declined path's match onnxruntime."""
    import onnx

    model, x_shape = _batch_one_bias_model(kind)
    path = tmp_path / f"{kind}.onnx"
    onnx.save(model, path)
    rep = subprocess.run(
        [
            ddpc,
            "compile",
            str(path),
            *EMULATE,
            "--report=json",
            "-o",
            str(tmp_path / "p"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    (fn,) = json.loads(rep.stdout)["cuda"]["functions"]
    key = "cudnn_epilogue_convolutions" if kind == "conv" else "cublaslt_epilogue_gemms"
    assert fn[key] == 1, fn
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    x = np.random.default_rng(9).standard_normal(x_shape).astype(np.float32)
    run_ddpc(ddpc, path, {"x": x}, tmp_path, *EMULATE)
    (want,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    np.testing.assert_allclose(
        np.load(tmp_path / "out" / "y.npy"), want, rtol=1e-5, atol=1e-5
    )


def test_lowered_ir_uses_library_gemm_and_atomics(ddpc):
    """The training step of the CNN goes through both GPU-side rewrites, so
    the tests below exercise them."""
    ir = subprocess.run(
        [
            ddpc,
            "compile",
            str(ROOT / "examples/fashion_mnist/fmnist_cnn.onnx"),
            "--train",
            "--batch-size",
            "4",
            *EMULATE,
            "--emit=lowered-mlir",
            "-o",
            "-",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert ir.count("llvm.call @ddpc_gemm_f32(") >= 2
    assert "llvm.atomicrmw fadd" in ir


@pytest.mark.parametrize("library", ["1", "0"], ids=["cudnn", "im2col-gemm"])
@pytest.mark.parametrize(
    "attrs",
    [
        dict(),
        dict(strides=[2, 2], pads=[1, 1, 1, 1]),
        dict(strides=[1, 2], dilations=[2, 1], pads=[1, 0, 0, 2]),
        dict(strides=[3, 3], kernel_shape=[2, 2]),  # windows do not overlap
        dict(group=3, pads=[1, 1, 1, 1]),  # depthwise: 3 groups of one channel
        dict(group=2, strides=[2, 1]),  # 2 groups of 2 input, 2 output channels
    ],
)
def test_conv_vjp_matches_numpy(attrs, library, monkeypatch):
    """Forward, input, weight and bias gradients of a float32 Conv through
    ddpc-conv-to-library-call against numpy in float64, both ways the program can
    run them: the library calls (ddpc_conv2d_f32: cuDNN on the GPU, Gemm.h's
    definition here) and, with DDPC_CUDNN=0, the compiled fallback
    (forward: im2col + GEMM; weight gradient: im2col + transpose + GEMM;
    input gradient: GEMM + col2im with atomic adds)."""
    monkeypatch.setenv("DDPC_CUDNN", library)
    ddpc_py = pytest.importorskip(
        "ddpc", reason="build the Python extension (make build)"
    )
    from onnx import TensorProto, helper

    kh, kw = attrs.get("kernel_shape", [3, 2])
    group = attrs.get("group", 1)
    c, oc = {1: (3, 4), 2: (4, 4), 3: (3, 3)}[group]
    shapes = {"x": [2, c, 9, 8], "w": [oc, c // group, kh, kw], "b": [oc]}
    F = TensorProto.FLOAT
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)],
        "conv",
        [helper.make_tensor_value_info(n, F, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info("y", F, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    prog = ddpc_py.compile(m, vjp=True, target="cuda-emulate", onnx_checker=False)
    # Forward, weight gradient and input gradient: each one library call,
    # with a GEMM in its fallback.
    lowered = prog.ir(prog.stages[-1])
    assert lowered.count("llvm.call @ddpc_conv2d_f32(") == 3
    # (Grouped convolutions fall back to generated kernels, not GEMMs.)
    assert lowered.count("llvm.call @ddpc_gemm_f32(") == (3 if group == 1 else 0)
    check_conv_vjp(prog, shapes, attrs)


@pytest.mark.parametrize("opt", ["sgd-momentum", "adamw"])
def test_mlp_training_matches_numpy(ddpc, tmp_path, opt):
    """20 steps of the MLP (Gemm forward and backward through the GEMM
    mapping, all four transpose combinations) == the numpy reference."""
    flags, spec = OPTIMIZERS[opt]
    init = mlp_model(tmp_path / "m.onnx")
    x, y = data(160)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    prog = compile_train(
        ddpc, tmp_path / "m.onnx", tmp_path / "train", 8, *flags, *EMULATE
    )
    run_train(prog, tmp_path, 1, "--epochs", "1", "--no-shuffle", "--save", "out.onnx")
    want = numpy_train(init, x, y, 8, 20, spec)
    assert_close_weights(weights(tmp_path / "out.onnx"), want, rtol=2e-5)


@pytest.mark.parametrize(
    "env",
    [{}, {"DDPC_CONV_EPILOGUE": "0", "DDPC_GEMM_EPILOGUE": "0"}],
    ids=["epilogues", "no-epilogues"],
)
def test_cnn_training_matches_cpu_target(ddpc, tmp_path, monkeypatch, env):
    """10 SGD-with-momentum steps of the Fashion-MNIST CNN (Conv backward
    through atomic scatter-adds, MaxPool backward, Gemm through the GEMM
    mapping): losses and weights match the CPU target, whose convolutions
    are im2col + OpenBLAS GEMMs instead of the emulated cuDNN definition.
    Summation order differs (atomics, GEMM), hence the 1e-4 tolerance. SGD
    keeps a rounding-size gradient difference rounding-size in the weights;
    AdamW divides by sqrt(v) and turns a near-zero gradient's rounding noise
    into a full step (its kernels are checked against numpy above).

    The forward pass of training computes Conv/Gemm + bias + ReLU as one
    library call (the ReLU VJP reads the ReLU output, so the pre-activation
    is not kept for backward); with the epilogues declined at run time the
    separate kernels run instead. Both must train alike."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    model = ROOT / "examples/fashion_mnist/fmnist_cnn.onnx"
    report = json.loads(
        subprocess.run(
            [
                str(ddpc),
                "compile",
                str(model),
                "--train",
                "--batch-size",
                "8",
                *EMULATE,
                "--emit=obj",
                "-o",
                str(tmp_path / "r.o"),
                "--report=json",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    micro = next(f for f in report["cuda"]["functions"] if f["name"] == "train_micro")
    assert (
        micro["cudnn_epilogue_convolutions"] == 2
        and micro["cublaslt_epilogue_gemms"] == 1
    ), micro
    rng = np.random.default_rng(5)
    np.save(tmp_path / "x.npy", rng.random((80, 1, 28, 28), dtype=np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 10, 80).astype(np.int64))
    flags = ["--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9"]
    cpu = compile_train(ddpc, model, tmp_path / "cpu", 8, *flags)
    emu = compile_train(ddpc, model, tmp_path / "emu", 8, *flags, *EMULATE)
    run_train(
        cpu,
        tmp_path,
        1,
        "--epochs",
        "1",
        "--no-shuffle",
        "--save",
        "cpu.onnx",
        "--log-json",
        "cpu.jsonl",
    )
    run_train(
        emu,
        tmp_path,
        1,
        "--epochs",
        "1",
        "--no-shuffle",
        "--save",
        "emu.onnx",
        "--log-json",
        "emu.jsonl",
    )
    loss = lambda f: np.array([json.loads(l)["loss"] for l in open(tmp_path / f)])
    a, b = loss("emu.jsonl"), loss("cpu.jsonl")
    assert len(a) == len(b) == 10
    np.testing.assert_allclose(a, b, rtol=1e-4)
    assert_close_weights(
        weights(tmp_path / "emu.onnx"), weights(tmp_path / "cpu.onnx"), rtol=1e-4
    )


def test_batchnorm_cnn_training_matches_cpu_target(ddpc, tmp_path, monkeypatch):
    """5 SGD steps of the residual CNN with BatchNorm (examples/models/
    resnet_mini.onnx): BatchNorm backward's multi-result kernels (an
    elementwise gradient written next to the per-channel sum that reads
    it) run split over threads with atomic adds (ddpc-split-reductions),
    and independent loops merged (ddpc-merge-parallel-loops); losses and
    weights match the CPU target."""
    # Both targets' convolutions as im2col + GEMM (the emulated fallback
    # with DDPC_CUDNN=0, the CPU target's only lowering): with batch
    # statistics, a convolution's summation order shows in the early
    # layers' weights at 1e-4, and this test is about the BatchNorm kernels
    # (the emulated cuDNN definition is checked by test_conv_vjp_matches_numpy).
    monkeypatch.setenv("DDPC_CUDNN", "0")
    model = EXAMPLES / "resnet_mini.onnx"
    rng = np.random.default_rng(6)
    np.save(tmp_path / "x.npy", rng.standard_normal((20, 3, 32, 32)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 10, 20).astype(np.int64))
    flags = ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"]
    cpu = compile_train(ddpc, model, tmp_path / "cpu", 4, *flags)
    emu = compile_train(ddpc, model, tmp_path / "emu", 4, *flags, *EMULATE)
    for prog, name in ((cpu, "cpu"), (emu, "emu")):
        run_train(
            prog,
            tmp_path,
            1,
            "--epochs",
            "1",
            "--no-shuffle",
            "--save",
            f"{name}.onnx",
            "--log-json",
            f"{name}.jsonl",
        )
    loss = lambda f: np.array([json.loads(l)["loss"] for l in open(tmp_path / f)])
    a, b = loss("emu.jsonl"), loss("cpu.jsonl")
    assert len(a) == len(b) == 5
    np.testing.assert_allclose(a, b, rtol=1e-4)
    assert_close_weights(
        weights(tmp_path / "emu.onnx"), weights(tmp_path / "cpu.onnx"), rtol=1e-4
    )


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_data_parallel_invariant(ddpc, tmp_path):
    """2 ranks x batch 8 == 1 rank x batch 16 with the emulated GPU kernels."""
    flags, _ = OPTIMIZERS["adamw"]
    mlp_model(tmp_path / "m.onnx")
    x, y = data(320)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    two = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "t8", 8, *flags, *EMULATE)
    one = compile_train(
        ddpc, tmp_path / "m.onnx", tmp_path / "t16", 16, *flags, *EMULATE
    )
    run_train(
        two, tmp_path, 2, "--epochs", "1", "--shuffle-seed", "3", "--save", "two.onnx"
    )
    run_train(
        one, tmp_path, 1, "--epochs", "1", "--shuffle-seed", "3", "--save", "one.onnx"
    )
    assert_close_weights(weights(tmp_path / "two.onnx"), weights(tmp_path / "one.onnx"))


def branchy_model(seed):
    """Random independent branches from two inputs (elementwise chains,
    reductions to a few values, a small MatMul, and branches that read an
    earlier branch's output), every intermediate a graph output: many
    small, mostly independent loops for ddpc-merge-parallel-loops."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, outputs, inits = [], [], []
    shapes = {"x": (4, 8, 6), "v": (16,)}
    names = ["x", "v"]
    unary = ["Relu", "Neg", "Sigmoid", "Tanh", "Abs", "Exp"]
    for k in range(14):
        src = names[rng.integers(len(names))]
        out = f"t{k}"
        kind = rng.integers(4)
        shape = shapes[src]
        if kind == 0 or len(shape) == 1 and kind == 2:
            nodes.append(
                helper.make_node(unary[rng.integers(len(unary))], [src], [out])
            )
        elif kind == 1:
            c = f"c{k}"
            inits.append(
                numpy_helper.from_array(
                    rng.standard_normal(shape[-1:]).astype(np.float32), c
                )
            )
            nodes.append(
                helper.make_node(
                    ["Add", "Mul", "Sub"][rng.integers(3)], [src, c], [out]
                )
            )
        elif kind == 2:
            axis = int(rng.integers(len(shape)))
            nodes.append(
                helper.make_node("ReduceSum", [src, f"a{k}"], [out], keepdims=0)
            )
            inits.append(numpy_helper.from_array(np.array([axis], np.int64), f"a{k}"))
            shape = shape[:axis] + shape[axis + 1 :]
        else:
            w = f"w{k}"
            inits.append(
                numpy_helper.from_array(
                    rng.standard_normal((shape[-1], 3)).astype(np.float32), w
                )
            )
            nodes.append(helper.make_node("MatMul", [src, w], [out]))
            shape = shape[:-1] + (3,)
        shapes[out] = shape
        names.append(out)
        outputs.append(
            helper.make_tensor_value_info(out, TensorProto.FLOAT, list(shape))
        )
    g = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shapes[n]))
            for n in ("x", "v")
        ],
        outputs,
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("seed", range(6))
def test_merged_independent_loops_match_onnxruntime(ddpc, tmp_path, seed):
    """ddpc-merge-parallel-loops (horizontal fusion) on random graphs of
    independent and dependent branches: fewer launches than fusion groups,
    and every output as onnxruntime computes it."""
    import onnx

    m = branchy_model(seed)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    rng = np.random.default_rng(100 + seed)
    feeds = {
        "x": rng.standard_normal((4, 8, 6)).astype(np.float32),
        "v": rng.standard_normal(16).astype(np.float32),
    }
    run_ddpc(ddpc, path, feeds, tmp_path, *EMULATE)
    report = json.loads(
        subprocess.run(
            [
                ddpc,
                "compile",
                str(path),
                *EMULATE,
                "--emit=obj",
                "-o",
                str(tmp_path / "r.o"),
                "--report=json",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    (fn,) = report["cuda"]["functions"]
    assert fn["kernel_launches"] + fn["cublas_gemms"] < report["fusion_groups"], (
        fn,
        report,
    )
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in m.graph.output]
    for name, want in zip(names, sess.run(names, feeds)):
        np.testing.assert_allclose(
            np.load(tmp_path / "out" / f"{name}.npy"),
            want,
            rtol=1e-5,
            atol=1e-5,
            err_msg=name,
        )


def test_constant_tensors_of_every_dtype_match_onnxruntime(ddpc, tmp_path):
    """ddpc-device-constants repacks every constant tensor a kernel reads
    into one byte array, whose copy (a separate buffer here, the device copy
    on a GPU) the kernels read: a bool mask (i1, one byte per element in
    memory), int64 Gather indices, a float splat and a dense float tensor.
    Wrong offsets or a wrong i1 layout give wrong outputs against
    onnxruntime; the lowered IR must take no constant's address but the
    packed array's."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(11)
    mask = rng.random((4, 6)) < 0.5
    dense = rng.standard_normal((4, 6)).astype(np.float32)
    idx = np.array([5, 0, 2, 2], np.int64)
    nodes = [
        helper.make_node(
            "Constant", [], ["mask"], value=numpy_helper.from_array(mask, "mask")
        ),
        helper.make_node(
            "Constant", [], ["dense"], value=numpy_helper.from_array(dense, "dense")
        ),
        helper.make_node(
            "Constant", [], ["idx"], value=numpy_helper.from_array(idx, "idx")
        ),
        helper.make_node(
            "Constant",
            [],
            ["splat"],
            value=numpy_helper.from_array(np.full((4, 6), 2.5, np.float32), "splat"),
        ),
        helper.make_node("Where", ["mask", "x", "dense"], ["where"]),
        helper.make_node("Gather", ["x", "idx"], ["gather"], axis=1),
        helper.make_node("Mul", ["x", "splat"], ["scaled"]),
    ]
    outs = [
        helper.make_tensor_value_info("where", TensorProto.FLOAT, [4, 6]),
        helper.make_tensor_value_info("gather", TensorProto.FLOAT, [4, 4]),
        helper.make_tensor_value_info("scaled", TensorProto.FLOAT, [4, 6]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
        outs,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    ir = subprocess.run(
        [ddpc, "compile", str(path), *EMULATE, "--emit=lowered-mlir", "-o", "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "llvm.mlir.addressof @__constant" not in ir
    assert ir.count("llvm.call @ddpc_device_constants(") == 1
    x = rng.standard_normal((4, 6)).astype(np.float32)
    run_ddpc(ddpc, path, {"x": x}, tmp_path, *EMULATE)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for name, want in zip(
        ["where", "gather", "scaled"], sess.run(["where", "gather", "scaled"], {"x": x})
    ):
        np.testing.assert_array_equal(
            np.load(tmp_path / "out" / f"{name}.npy"), want, err_msg=name
        )

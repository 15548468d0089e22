"""Compiled training programs (`ddpc compile --train`) against independent
oracles:

- a numpy re-implementation of the MLP's forward/backward and of
  torch.optim.SGD (momentum, nesterov, weight decay) / torch.optim.AdamW;
- the data-parallel invariant: 2 ranks x batch b == 1 rank x batch 2b;
- gradient accumulation: K micro-batches of b == one batch of K*b;
- resume: a run checkpointed at step 10 and resumed to 20 == a run of 20;
- a killed rank ends the job non-zero, naming the rank.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ddpc_testing import (
    C,
    run_env,
    F,
    MPIRUN,
    OPTIMIZERS,
    assert_close_weights,
    compile_train,
    data,
    mlp_model,
    numpy_train,
    run_train,
    weights,
)


def bn_model(path, seed=0):
    """Conv -> BatchNorm -> Relu -> GlobalAveragePool -> Flatten -> Gemm."""
    rng = np.random.default_rng(seed)
    inits = {
        "cw": (rng.standard_normal((4, 1, 3, 3)) * 0.5).astype(np.float32),
        "s": np.ones(4, np.float32),
        "bb": np.zeros(4, np.float32),
        "mean": np.zeros(4, np.float32),
        "var": np.ones(4, np.float32),
        "fw": (rng.standard_normal((C, 4)) * 0.5).astype(np.float32),
        "fb": np.zeros(C, np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
    ]
    g = helper.make_graph(
        nodes,
        "bncnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 4, 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", C])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_matches_numpy_reference(ddpc, tmp_path, opt):
    flags, spec = OPTIMIZERS[opt]
    init = mlp_model(tmp_path / "m.onnx")
    x, y = data(160)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    prog = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "train", 8, *flags)
    run_train(
        prog,
        tmp_path,
        1,
        "--epochs",
        "1",
        "--no-shuffle",
        "--save",
        "out.onnx",
        "--log-json",
        "log.jsonl",
    )
    want = numpy_train(init, x, y, 8, 20, spec)
    assert_close_weights(weights(tmp_path / "out.onnx"), want, rtol=2e-5)
    log = [json.loads(l) for l in open(tmp_path / "log.jsonl")]
    assert len(log) == 20 and log[0]["step"] == 1


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
@pytest.mark.parametrize("opt", ["sgd-momentum", "adamw"])
def test_data_parallel_invariant(ddpc, tmp_path, opt):
    """2 ranks with per-rank batch b == 1 rank with batch 2b, 20 steps."""
    flags, _ = OPTIMIZERS[opt]
    mlp_model(tmp_path / "m.onnx")
    x, y = data(320)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    two = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "t8", 8, *flags)
    one = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "t16", 16, *flags)
    run_train(
        two, tmp_path, 2, "--epochs", "1", "--shuffle-seed", "3", "--save", "two.onnx"
    )
    run_train(
        one, tmp_path, 1, "--epochs", "1", "--shuffle-seed", "3", "--save", "one.onnx"
    )
    assert_close_weights(weights(tmp_path / "two.onnx"), weights(tmp_path / "one.onnx"))


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
@pytest.mark.parametrize("comm_thread", ["1", "0"])
def test_data_parallel_invariant_buckets_and_accumulation(ddpc, tmp_path, comm_thread):
    """2 ranks x K=2 micro-batches of 4, gradients summed in several small
    buckets during backward == 1 rank x one batch of 16 (AdamW, 20 steps),
    with and without the CPU runtime's communication thread. Only the last
    micro-batch of a step synchronizes (a sum in an earlier one would be
    counted twice) and every bucket covers its gradients."""
    flags, _ = OPTIMIZERS["adamw"]
    mlp_model(tmp_path / "m.onnx")
    x, y = data(320)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    proc = subprocess.run(
        [
            ddpc,
            "compile",
            str(tmp_path / "m.onnx"),
            "--train",
            "--batch-size",
            "4",
            "--grad-accum-steps",
            "2",
            "--bucket-cap-mb",
            "0.0003",
            *flags,
            "-o",
            str(tmp_path / "two"),
            "--report=json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    buckets = json.loads(proc.stdout)["gradient_buckets"]
    assert len(buckets) >= 2, buckets
    assert sorted(p for b in buckets for p in b["params"]) == ["W1", "W2", "b1", "b2"]
    one = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "t16", 16, *flags)
    run_train(
        tmp_path / "two",
        tmp_path,
        2,
        "--epochs",
        "1",
        "--shuffle-seed",
        "3",
        "--save",
        "two.onnx",
        env={"DDPC_COMM_THREAD": comm_thread},
    )
    run_train(
        one, tmp_path, 1, "--epochs", "1", "--shuffle-seed", "3", "--save", "one.onnx"
    )
    assert_close_weights(weights(tmp_path / "two.onnx"), weights(tmp_path / "one.onnx"))


@pytest.mark.parametrize("cap", ["0", "-1", "nan", "inf", "1e400"])
def test_bucket_cap_must_be_positive_and_finite(ddpc, tmp_path, cap):
    mlp_model(tmp_path / "m.onnx")
    proc = subprocess.run(
        [
            ddpc,
            "compile",
            str(tmp_path / "m.onnx"),
            "--train",
            "--batch-size",
            "4",
            f"--bucket-cap-mb={cap}",
            "-o",
            str(tmp_path / "p"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert (
        "bucket cap (--bucket-cap-mb, TrainConfig.bucket_cap_mb) must be a positive number"
        in proc.stderr
    )
    assert not (tmp_path / "p").exists()


def test_huge_bucket_cap_is_one_bucket_after_the_first(ddpc, tmp_path):
    """Caps beyond any model put every gradient after the first bucket (which
    closes at 1 MiB) in one bucket. A cap of 2^43 MiB or more once
    overflowed the byte count and gave every gradient its own bucket."""
    rng = np.random.default_rng(0)
    n = 600  # 1.44 MB per weight
    ws = {
        f"W{i}": (rng.standard_normal((n, n)) * 0.05).astype(np.float32)
        for i in range(4)
    }
    ws["Wout"] = (rng.standard_normal((n, C)) * 0.05).astype(np.float32)
    nodes, h = [], "x"
    for i in range(4):
        nodes += [
            helper.make_node("MatMul", [h, f"W{i}"], [f"m{i}"]),
            helper.make_node("Relu", [f"m{i}"], [f"r{i}"]),
        ]
        h = f"r{i}"
    nodes.append(helper.make_node("MatMul", [h, "Wout"], ["logits"]))
    g = helper.make_graph(
        nodes,
        "deep",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", n])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", C])],
        [numpy_helper.from_array(v, k) for k, v in ws.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    for cap in ["25", "1000", "8796093022208", "1e300"]:
        proc = subprocess.run(
            [
                ddpc,
                "compile",
                str(tmp_path / "m.onnx"),
                "--train",
                "--batch-size",
                "2",
                "--bucket-cap-mb",
                cap,
                "--report=json",
                "--emit=obj",
                "-o",
                str(tmp_path / "p.o"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        buckets = [b["params"] for b in json.loads(proc.stdout)["gradient_buckets"]]
        assert buckets == [["Wout", "W3"], ["W2", "W1", "W0"]], (cap, buckets)


def test_training_options_without_train_are_named(ddpc, tmp_path):
    mlp_model(tmp_path / "m.onnx")
    proc = subprocess.run(
        [
            ddpc,
            "compile",
            str(tmp_path / "m.onnx"),
            "--batch-size",
            "4",
            "--bucket-cap-mb",
            "5",
            "--freeze",
            "W1",
            "-o",
            str(tmp_path / "p"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert (
        "--freeze, --bucket-cap-mb apply to training programs only; add --train"
        in proc.stderr
    )


def test_gradient_accumulation(ddpc, tmp_path):
    """K=2 micro-batches of 8 == one batch of 16 (SGD momentum)."""
    flags, _ = OPTIMIZERS["sgd-momentum"]
    mlp_model(tmp_path / "m.onnx")
    x, y = data(320)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    acc = compile_train(
        ddpc,
        tmp_path / "m.onnx",
        tmp_path / "acc",
        8,
        *flags,
        "--grad-accum-steps",
        "2",
    )
    big = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "big", 16, *flags)
    run_train(acc, tmp_path, 1, "--epochs", "1", "--save", "acc.onnx")
    run_train(big, tmp_path, 1, "--epochs", "1", "--save", "big.onnx")
    assert_close_weights(weights(tmp_path / "acc.onnx"), weights(tmp_path / "big.onnx"))


def test_batchnorm_model_trains_and_exports(ddpc, tmp_path):
    """A BatchNorm CNN trains (loss goes down); the exported model carries the
    updated running statistics and runs in onnxruntime."""
    bn_model(tmp_path / "m.onnx")
    x, y = data(256, shape=(1, 4, 4))
    x += (y[:, None, None, None] - 2).astype(np.float32)  # learnable signal
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    prog = compile_train(
        ddpc,
        tmp_path / "m.onnx",
        tmp_path / "t",
        16,
        "--optimizer",
        "adamw",
        "--lr",
        "0.05",
    )
    run_train(
        prog,
        tmp_path,
        1,
        "--epochs",
        "6",
        "--save",
        "out.onnx",
        "--log-json",
        "log.jsonl",
    )
    log = [json.loads(l) for l in open(tmp_path / "log.jsonl")]
    first, last = np.mean([r["loss"] for r in log[:8]]), np.mean(
        [r["loss"] for r in log[-8:]]
    )
    assert last < 0.8 * first, (first, last)
    w = weights(tmp_path / "out.onnx")
    assert not np.allclose(w["mean"], 0) and not np.allclose(w["var"], 1)
    (logits,) = ort.InferenceSession(str(tmp_path / "out.onnx")).run(
        None, {"x": x[:16]}
    )
    assert logits.shape == (16, C) and np.all(np.isfinite(logits))


@pytest.mark.parametrize("ranks", [1, 2])
def test_resume_matches_uninterrupted(ddpc, tmp_path, ranks):
    if ranks > 1 and MPIRUN is None:
        pytest.skip("mpirun not installed")
    flags, _ = OPTIMIZERS["adamw"]
    mlp_model(tmp_path / "m.onnx")
    x, y = data(200)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    prog = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "t", 8, *flags)
    # 20 optimizer steps span more than one epoch with 2 ranks.
    run_train(
        prog,
        tmp_path,
        ranks,
        "--epochs",
        "4",
        "--stop-after-steps",
        "20",
        "--save",
        "full.onnx",
    )
    run_train(
        prog,
        tmp_path,
        ranks,
        "--epochs",
        "4",
        "--stop-after-steps",
        "10",
        "--checkpoint",
        "ck.bin",
    )
    run_train(
        prog,
        tmp_path,
        ranks,
        "--epochs",
        "4",
        "--stop-after-steps",
        "20",
        "--resume",
        "ck.bin",
        "--save",
        "resumed.onnx",
    )
    a, b = weights(tmp_path / "full.onnx"), weights(tmp_path / "resumed.onnx")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_killed_rank_ends_job(ddpc, tmp_path):
    mlp_model(tmp_path / "m.onnx")
    x, y = data(40000)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    prog = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "t", 1)
    cmd = [
        MPIRUN,
        "--oversubscribe",
        "-np",
        "2",
        str(prog),
        "--data",
        "x.npy",
        "--labels",
        "y.npy",
        "--epochs",
        "50",
        "--quiet",
    ]
    job = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=run_env(),
        cwd=tmp_path,
    )
    time.sleep(3)
    pids = subprocess.run(
        ["pgrep", "-f", f"{prog} --data"], capture_output=True, text=True
    ).stdout.split()
    assert len(pids) >= 2, "both ranks should be running"
    os.kill(int(pids[-1]), signal.SIGKILL)
    start = time.time()
    out, _ = job.communicate(timeout=90)
    assert time.time() - start < 60
    assert job.returncode != 0
    assert "rank" in out, out


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
@pytest.mark.parametrize(
    "case",
    [
        "data",
        "val-data",
        "batch",
        "optimizer",
        "epochs",
        "nan-policy",
        "shuffle",
        "sample-assignment",
    ],
)
def test_ranks_with_different_data_are_refused(ddpc, tmp_path, case):
    """MPMD launches whose ranks read data of different sizes, run other
    programs (another per-rank batch, another optimizer) or other
    step-defining options used to run collectives that did not pair up
    (MPI_ERR_TRUNCATE, a watchdog timeout) or to train silently apart. They
    end before the first step: one line from rank 0 naming the field, the
    values and the ranks; every rank exits 1, quickly."""
    mlp_model(tmp_path / "m.onnx")
    x, y = data(64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "x2.npy", x[:48])
    np.save(tmp_path / "y2.npy", y[:48])
    prog = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "t8", 8)
    other = prog
    common = ["--epochs", "1", "--quiet"]
    a = ["--data", "x.npy", "--labels", "y.npy", *common]
    b = list(a)
    if case == "data":
        b = ["--data", "x2.npy", "--labels", "y2.npy", *common]
        want = "--data: 64 samples on ranks 0, 1, 48 samples on rank 2"
    elif case == "val-data":
        b += ["--val-data", "x2.npy", "--val-labels", "y2.npy"]
        want = "--val-data: none on ranks 0, 1, 48 samples on rank 2"
    elif case == "batch":
        other = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "t4", 4)
        want = "per-rank batch: 8 on ranks 0, 1, 4 on rank 2"
    elif case == "optimizer":  # same shapes, another program: trained silently
        other = compile_train(
            ddpc, tmp_path / "m.onnx", tmp_path / "t8a", 8, "--optimizer", "adamw"
        )
        want = "program: "
    elif case == "epochs":  # died with MPI_ERR_TRUNCATE at the end
        b[b.index("--epochs") + 1] = "2"
        want = "--epochs: 1 on ranks 0, 1, 2 on rank 2"
    elif case == "nan-policy":  # ended in a final-barrier timeout
        b += ["--nan-policy", "skip"]
        want = "--nan-policy: stop on ranks 0, 1, skip on rank 2"
    elif case == "sample-assignment":  # rank 2's option was dropped
        b += ["--sample-assignment", "strided"]
        want = "--sample-assignment: not given on ranks 0, 1, strided on rank 2"
    else:  # the ranks drew other samples: trained silently apart
        a += ["--shuffle-seed", "7"]
        b += ["--no-shuffle"]
        want = "--shuffle-seed: 7 on ranks 0, 1, none (--no-shuffle) on rank 2"
    start = time.time()
    proc = subprocess.run(
        [
            MPIRUN,
            "--oversubscribe",
            "-np",
            "2",
            str(prog),
            *a,
            ":",
            "-np",
            "1",
            str(other),
            *b,
        ],
        capture_output=True,
        text=True,
        env=run_env(),
        cwd=tmp_path,
        timeout=60,
    )
    assert time.time() - start < 20
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith(
        "error: the ranks were given different data or programs: "
    )
    assert want in errors[0], errors[0]


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
@pytest.mark.parametrize("opt", ["sgd-momentum", "adamw"])
def test_data_parallel_invariant_sync_batchnorm(ddpc, tmp_path, opt):
    """BatchNorm model with --sync-batchnorm: 2 ranks x b == 1 rank x 2b
    (parameters and running statistics). The 2-rank program has one bucket
    per gradient, so the allreduces of the BatchNorm backward run while
    earlier buckets are in flight."""
    flags, _ = OPTIMIZERS[opt]
    bn_model(tmp_path / "m.onnx")
    x, y = data(320, shape=(1, 4, 4))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    two = compile_train(
        ddpc,
        tmp_path / "m.onnx",
        tmp_path / "t8",
        8,
        *flags,
        "--sync-batchnorm",
        "--bucket-cap-mb",
        "1e-6",
    )
    one = compile_train(
        ddpc, tmp_path / "m.onnx", tmp_path / "t16", 16, *flags, "--sync-batchnorm"
    )
    run_train(two, tmp_path, 2, "--epochs", "1", "--save", "two.onnx")
    run_train(one, tmp_path, 1, "--epochs", "1", "--save", "one.onnx")
    assert_close_weights(weights(tmp_path / "two.onnx"), weights(tmp_path / "one.onnx"))


def test_labels_out_of_range_rejected(ddpc, tmp_path):
    """A label >= the number of classes is a one-line error naming the file
    and sample, not a silent clamp."""
    mlp_model(tmp_path / "m.onnx")
    x, y = data(64)
    y[7] = C + 3
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    prog = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "t", 8)
    proc = run_train(prog, tmp_path, 1, "--epochs", "1", check=False)
    assert proc.returncode == 1
    assert f"label {C + 3} of sample 7 is out of range" in proc.stderr


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_dropout_training_data_parallel_invariant(ddpc, tmp_path):
    """Dropout(0.3) draws its mask from a seeded hash of the element's place
    in the global batch: 2 ranks x b == 1 rank x 2b, and the mask changes
    the result (vs. the same model without dropout)."""
    flags, _ = OPTIMIZERS["sgd-momentum"]
    mlp_model(tmp_path / "m.onnx", dropout=0.3)
    mlp_model(tmp_path / "plain.onnx")
    x, y = data(320)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    two = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "t8", 8, *flags)
    one = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "t16", 16, *flags)
    plain = compile_train(ddpc, tmp_path / "plain.onnx", tmp_path / "p16", 16, *flags)
    run_train(two, tmp_path, 2, "--epochs", "1", "--save", "two.onnx")
    run_train(one, tmp_path, 1, "--epochs", "1", "--save", "one.onnx")
    run_train(plain, tmp_path, 1, "--epochs", "1", "--save", "plain.onnx")
    a, b = weights(tmp_path / "two.onnx"), weights(tmp_path / "one.onnx")
    assert_close_weights(a, b)
    # The ratio configures Dropout: it stays a constant of the graph.
    assert float(
        numpy_helper.to_array(
            next(
                t
                for t in onnx.load(str(tmp_path / "one.onnx")).graph.initializer
                if t.name == "ratio"
            )
        )
    ) == pytest.approx(0.3)
    p = weights(tmp_path / "plain.onnx")
    assert not np.allclose(p["W1"], b["W1"], atol=1e-4)
    # About 30% of the hidden activations are dropped: measured through the
    # compiled program's own mask would need an extra output, so check the
    # training log instead: the dropout run's loss is higher on average.


# ------------------------------------------------- --loss output, --label-input


def loss_output_model(path, label_dtype=TensorProto.FLOAT, seed=3):
    """y = x W; loss = ReduceMean((y - t)^2) as the first output, with the
    target t a graph input (for --loss output --label-input t)."""
    w = (np.random.default_rng(seed).standard_normal((F, 3)) * 0.3).astype(np.float32)
    cast = (
        [helper.make_node("Cast", ["t"], ["tf"], to=TensorProto.FLOAT)]
        if label_dtype != TensorProto.FLOAT
        else []
    )
    g = helper.make_graph(
        cast
        + [
            helper.make_node("MatMul", ["x", "W"], ["y"]),
            helper.make_node("Sub", ["y", "tf" if cast else "t"], ["d"]),
            helper.make_node("Mul", ["d", "d"], ["s"]),
            helper.make_node("ReduceMean", ["s"], ["loss"], keepdims=0),
        ],
        "regress",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", F]),
            helper.make_tensor_value_info("t", label_dtype, ["N", 3]),
        ],
        [
            helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3]),
        ],
        [numpy_helper.from_array(w, "W")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return w


def test_loss_output_with_label_input_matches_numpy(ddpc, tmp_path):
    """--loss output: the model's first output is the loss, and its input t
    (--label-input) is fed from --labels (float32 here). 4 SGD steps of
    batch 8 == numpy's gradient of mean((xW - t)^2); 2 ranks x 4 == 1 x 8."""
    w = loss_output_model(tmp_path / "m.onnx")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((32, F)).astype(np.float32)
    t = rng.standard_normal((32, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", t)
    flags = ["--loss", "output", "--label-input", "t", "--lr", "0.1"]
    prog = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "p8", 8, *flags)
    run_train(prog, tmp_path, 1, "--epochs", "1", "--no-shuffle", "--save", "one.onnx")
    want = w.astype(np.float64)
    for s in range(4):
        xb, tb = x[8 * s : 8 * s + 8].astype(np.float64), t[8 * s : 8 * s + 8]
        want -= 0.1 * xb.T @ (2 * (xb @ want - tb) / tb.size)
    got = weights(tmp_path / "one.onnx")["W"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if MPIRUN:
        two = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "p4", 4, *flags)
        run_train(
            two, tmp_path, 2, "--epochs", "1", "--no-shuffle", "--save", "two.onnx"
        )
        np.testing.assert_allclose(
            weights(tmp_path / "two.onnx")["W"], got, rtol=1e-5, atol=1e-6
        )


def test_label_input_of_unreadable_dtype_is_refused(ddpc, tmp_path):
    """Training programs read labels as int64 or float32; a float64 target
    is refused at compile time, naming the input (it used to be read as if
    it were an integer type)."""
    loss_output_model(tmp_path / "m.onnx", label_dtype=TensorProto.DOUBLE)
    proc = subprocess.run(
        [
            ddpc,
            "compile",
            str(tmp_path / "m.onnx"),
            "--train",
            "--batch-size",
            "4",
            "--loss",
            "output",
            "--label-input",
            "t",
            "-o",
            str(tmp_path / "p"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    assert "--label-input 't' has element type f64" in proc.stderr, proc.stderr
    assert not (tmp_path / "p").exists()


def test_initializers_the_loss_does_not_reach_stay_fixed(ddpc, tmp_path):
    """Only initializers the first output (the loss's input) depends on are
    parameters: W2 feeds a second output, W3 a dead Relu. PyTorch skips
    parameters whose .grad is None (no update, no weight decay); they used
    to be decayed (x 0.98 after 2 steps here) and all-reduced."""
    rng = np.random.default_rng(0)
    inits = {
        "W1": rng.standard_normal((F, C)).astype(np.float32),
        "b1": np.zeros(C, np.float32),
        "W2": rng.standard_normal((F, 2)).astype(np.float32),
        "W3": rng.standard_normal((2, 2)).astype(np.float32),
    }
    g = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "W1", "b1"], ["logits"]),
            helper.make_node("MatMul", ["x", "W2"], ["z"]),
            helper.make_node("Relu", ["W3"], ["dead"]),
        ],
        "heads",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", F])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", C]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 2]),
        ],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    x, y = data(16)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    flags = ["--weight-decay", "0.1", "--lr", "0.1"]
    report = json.loads(
        subprocess.run(
            [
                ddpc,
                "compile",
                str(tmp_path / "m.onnx"),
                "--train",
                "--batch-size",
                "8",
                *flags,
                "--emit=mlir",
                "-o",
                str(tmp_path / "m.mlir"),
                "--report=json",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert {p["name"]: p["trainable"] for p in report["parameters"]} == {
        "W1": True,
        "b1": True,
        "W2": False,
        "W3": False,
    }
    prog = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "train", 8, *flags)
    run_train(prog, tmp_path, 1, "--epochs", "1", "--no-shuffle", "--save", "out.onnx")
    got = weights(tmp_path / "out.onnx")
    np.testing.assert_array_equal(got["W2"], inits["W2"])
    np.testing.assert_array_equal(got["W3"], inits["W3"])
    # W1 and b1 train as the plain MLP oracle's single layer would.
    p = {k: inits[k].astype(np.float64) for k in ("W1", "b1")}
    for s in range(2):
        xb, yb = x[8 * s : 8 * s + 8].astype(np.float64), y[8 * s : 8 * s + 8]
        z = xb @ p["W1"] + p["b1"]
        pr = np.exp(z - z.max(1, keepdims=True))
        pr /= pr.sum(1, keepdims=True)
        pr[np.arange(8), yb] -= 1
        gW, gb = xb.T @ pr / 8, pr.sum(0) / 8
        p["W1"] -= 0.1 * (gW + 0.1 * p["W1"])
        p["b1"] -= 0.1 * (gb + 0.1 * p["b1"])
    for k in ("W1", "b1"):
        np.testing.assert_allclose(got[k], p[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_two_inputs_without_label_input_says_how(ddpc, tmp_path):
    """A scalar first output with --loss mse, the labels a second graph
    input: the message points to the option that works (--label-input needs
    --loss output; it used to suggest --label-input alone, which the
    default loss then refused)."""
    loss_output_model(tmp_path / "m.onnx")
    proc = subprocess.run(
        [
            ddpc,
            "compile",
            str(tmp_path / "m.onnx"),
            "--train",
            "--batch-size",
            "4",
            "--loss",
            "mse",
            "-o",
            str(tmp_path / "p"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert "the first output has shape []" in proc.stderr, proc.stderr
    assert "use --loss output --label-input NAME" in proc.stderr, proc.stderr


def test_initializers_reaching_the_loss_only_as_indices_or_shapes_stay_fixed(
    ddpc, tmp_path
):
    """Float initializers that reach the first output only through
    non-differentiable paths (Shape, a Cast to int64 used as Gather indices,
    a comparison feeding Where's condition) get no gradient in PyTorch, so
    no update and no weight decay; 'zero' (also Where's else-branch) and W
    do train. Decaying the index tensor would eventually change the model."""
    rng = np.random.default_rng(3)
    inits = {
        "Wshape": np.zeros((2, 4), np.float32),
        "Fidx": np.array([3, 2, 1, 0], np.float32),
        "thr": np.array(0.5, np.float32),
        "zero": np.array(0.1, np.float32),
        "W": rng.standard_normal((4, C)).astype(np.float32),
    }
    g = helper.make_graph(
        [
            helper.make_node("Shape", ["Wshape"], ["shp"]),
            helper.make_node("Slice", ["shp", "one", "two"], ["last"]),
            helper.make_node("Concat", ["m1", "last"], ["newshape"], axis=0),
            helper.make_node("Reshape", ["x", "newshape"], ["xr"]),
            helper.make_node("Cast", ["Fidx"], ["idx"], to=TensorProto.INT64),
            helper.make_node("Gather", ["xr", "idx"], ["xg"], axis=1),
            helper.make_node("Greater", ["thr", "zero"], ["mask"]),
            helper.make_node("MatMul", ["xg", "W"], ["h"]),
            helper.make_node("Where", ["mask", "h", "zero"], ["logits"]),
        ],
        "indices",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", C])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()]
        + [
            numpy_helper.from_array(np.array([v], np.int64), k)
            for k, v in (("one", 1), ("two", 2), ("m1", -1))
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    report = json.loads(
        subprocess.run(
            [
                ddpc,
                "compile",
                str(tmp_path / "m.onnx"),
                "--train",
                "--batch-size",
                "4",
                "--emit=mlir",
                "-o",
                str(tmp_path / "m.mlir"),
                "--report=json",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    got = {
        p["name"]: p["trainable"] for p in report["parameters"] if p["name"] in inits
    }
    assert got == {
        "Wshape": False,
        "Fidx": False,
        "thr": False,
        "zero": True,
        "W": True,
    }, got


@pytest.mark.parametrize(
    "args,needle",
    [
        (
            ["--loss", "output", "--label-input", "nope"],
            "--label-input nope: no graph input of that name",
        ),
        (
            ["--loss", "mse", "--label-input", "t"],
            "--label-input with --loss mse is not supported",
        ),
    ],
)
def test_label_input_mistakes_are_named(ddpc, tmp_path, args, needle):
    """A misspelled --label-input, or one with a loss that takes separate
    labels, is named as such (they reported 'more than one data input' or
    'no data input' instead)."""
    loss_output_model(tmp_path / "m.onnx")
    proc = subprocess.run(
        [
            ddpc,
            "compile",
            str(tmp_path / "m.onnx"),
            "--train",
            "--batch-size",
            "4",
            *args,
            "-o",
            str(tmp_path / "p"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and needle in proc.stderr, proc.stderr


def test_output_not_batched_like_the_data_is_an_error(ddpc, tmp_path):
    """logits computed from weights only ([5, 3] while the batch is 4) got
    an internal error from the verifier; now a message naming the shapes."""
    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["W1", "W2"], ["logits"]),
            helper.make_node("Identity", ["x"], ["xi"]),
        ],
        "nobatch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [5, 3]),
            helper.make_tensor_value_info("xi", TensorProto.FLOAT, ["N", 4]),
        ],
        [
            numpy_helper.from_array(
                rng.standard_normal((5, 6)).astype(np.float32), "W1"
            ),
            numpy_helper.from_array(
                rng.standard_normal((6, 3)).astype(np.float32), "W2"
            ),
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    proc = subprocess.run(
        [
            ddpc,
            "compile",
            str(tmp_path / "m.onnx"),
            "--train",
            "--batch-size",
            "4",
            "-o",
            str(tmp_path / "p"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    assert (
        "the first output has shape [5,3], but its leading dimension must be the "
        "per-rank batch (4" in proc.stderr
    ), proc.stderr


@pytest.mark.parametrize(
    "flags",
    [(), ("--sample-assignment", "strided", "--buffer-sync", "broadcast")],
)
def test_gpu_check_reads_checkpoints(ddpc, tmp_path, flags):
    """scripts/gpu_check.py parses checkpoints on a GPU machine without the
    runtime: its reader must follow the format the runtime writes now (it
    fell behind once, at format version 3). Oracle: the --save ONNX file,
    written by another path, holds the same weights."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
    try:
        import gpu_check
    finally:
        sys.path.pop(0)
    adamw, _ = OPTIMIZERS["adamw"]
    mlp_model(tmp_path / "m.onnx")
    x, y = data(64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    prog = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "t", 8, *adamw)
    run_train(
        prog,
        tmp_path,
        1,
        "--epochs",
        "1",
        "--stop-after-steps",
        "3",
        "--checkpoint",
        "ck.bin",
        "--save",
        "out.onnx",
        *flags,
    )
    ck = gpu_check.read_checkpoint(tmp_path / "ck.bin")
    assert ck["global_step"] == 3 and ck["optimizer_steps"] == 3
    assert ck["sample_assignment"] == (1 if flags else 0)
    assert ck["buffer_sync"] == (1 if flags else 0)
    saved = weights(tmp_path / "out.onnx")
    assert set(ck["params"]) <= set(saved) and ck["params"]
    for name, arr in ck["params"].items():
        np.testing.assert_array_equal(arr, saved[name], err_msg=name)
    # AdamW: two state slots per parameter.
    assert len(ck["opt_state"]) == 2 * len(ck["params"])


def unet_step_model(path, mode, seed=4):
    """A U-Net-style decoder step: a stride-2 Conv and Relu, a 2x Resize
    back up (`mode`), Concat with the input (the skip connection), a 1x1
    Conv, Relu, GlobalAveragePool, Flatten, Gemm. Returns the initializers
    (float32)."""
    rng = np.random.default_rng(seed)
    inits = {
        "cw": (rng.standard_normal((2, 1, 3, 3)) * 0.5).astype(np.float32),
        "cb": (rng.standard_normal(2) * 0.1).astype(np.float32),
        "kw": (rng.standard_normal((3, 3, 1, 1)) * 0.5).astype(np.float32),
        "kb": (rng.standard_normal(3) * 0.1 + 0.2).astype(np.float32),
        "fw": (rng.standard_normal((C, 3)) * 0.5).astype(np.float32),
        "fb": np.zeros(C, np.float32),
    }
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [
        helper.make_node(
            "Conv", ["x", "cw", "cb"], ["d"], strides=[2, 2], pads=[1] * 4
        ),
        helper.make_node("Relu", ["d"], ["r"]),
        helper.make_node("Resize", ["r", "", "scales"], ["u"], mode=mode),
        helper.make_node("Concat", ["u", "x"], ["k"], axis=1),
        helper.make_node("Conv", ["k", "kw", "kb"], ["m"]),
        helper.make_node("Relu", ["m"], ["mr"]),
        helper.make_node("GlobalAveragePool", ["mr"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
    ]
    g = helper.make_graph(
        nodes,
        "unet_step",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 4, 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", C])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()] + [scales],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 8
    onnx.save(m, path)
    return inits


def numpy_upsample2x(a, mode):
    """2x upsampling of the last two axes: nearest repeats; linear is
    PyTorch's bilinear with align_corners=False (the source coordinate
    (o + 0.5) / 2 - 0.5 clamped at 0, the right neighbor at the edge)."""
    if mode == "nearest":
        return a.repeat(2, axis=-2).repeat(2, axis=-1)
    for axis in (-2, -1):
        n = a.shape[axis]
        src = np.maximum((np.arange(2 * n) + 0.5) / 2 - 0.5, 0)
        i0 = np.floor(src).astype(int)
        i1 = np.minimum(i0 + 1, n - 1)
        lam = src - i0
        shape = [1] * a.ndim
        shape[axis] = 2 * n
        lam = lam.reshape(shape)
        a = (1 - lam) * np.take(a, i0, axis) + lam * np.take(a, i1, axis)
    return a


def numpy_conv(x, w, b, stride=1, pad=0):
    x = np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    kh, kw = w.shape[2:]
    oh = (x.shape[2] - kh) // stride + 1
    ow = (x.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i : i + stride * oh : stride, j : j + stride * ow : stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out + b[None, :, None, None]


def numpy_unet_loss(p, x, y, mode):
    """Mean cross-entropy of unet_step_model in float64."""
    r = np.maximum(numpy_conv(x, p["cw"], p["cb"], stride=2, pad=1), 0)
    k = np.concatenate([numpy_upsample2x(r, mode), x], axis=1)
    f = np.maximum(numpy_conv(k, p["kw"], p["kb"]), 0).mean(axis=(2, 3))
    z = f @ p["fw"].T + p["fb"]
    z = z - z.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    return -logp[np.arange(len(y)), y].mean()


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_decoder_trains_like_finite_difference_sgd(ddpc, tmp_path, mode):
    """Plain SGD on the U-Net decoder step for 5 steps: the losses and the
    final weights match SGD in float64 on a numpy model whose gradient is
    central differences of its loss (nothing of ddpc's backward in it)."""
    init = unet_step_model(tmp_path / "m.onnx", mode)
    x, y = data(40, seed=7, shape=(1, 4, 4))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    lr, batch = 0.5, 8
    prog = compile_train(
        ddpc,
        tmp_path / "m.onnx",
        tmp_path / "t",
        batch,
        "--optimizer",
        "sgd",
        "--lr",
        str(lr),
    )
    args = "--epochs 1 --no-shuffle --save out.onnx --log-json log.jsonl"
    run_train(prog, tmp_path, 1, *args.split())
    p = {k: v.astype(np.float64) for k, v in init.items()}
    losses, h = [], 1e-6
    for t in range(5):
        xb = x[t * batch : (t + 1) * batch].astype(np.float64)
        yb = y[t * batch : (t + 1) * batch]
        losses.append(numpy_unet_loss(p, xb, yb, mode))
        grads = {}
        for k, v in p.items():
            g = np.zeros_like(v)
            for i in np.ndindex(v.shape):
                old = v[i]
                v[i] = old + h
                up = numpy_unet_loss(p, xb, yb, mode)
                v[i] = old - h
                down = numpy_unet_loss(p, xb, yb, mode)
                v[i] = old
                g[i] = (up - down) / (2 * h)
            grads[k] = g
        for k in p:
            p[k] = p[k] - lr * grads[k]
    log = [json.loads(l) for l in open(tmp_path / "log.jsonl")]
    np.testing.assert_allclose([r["loss"] for r in log], losses, rtol=1e-5)
    got = weights(tmp_path / "out.onnx")
    got.pop("scales", None)
    assert_close_weights(got, p, rtol=1e-4)
    # The decoder's weights moved: the gradient went back through Resize.
    assert not np.allclose(got["cw"], init["cw"], atol=1e-4)

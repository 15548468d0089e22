"""Training programs of models with a token embedding (Gather on a float
table) and int64/int32 token-id data, against a numpy float64 oracle of
forward, backward (the table's gradient by np.add.at: repeated ids
accumulate), torch.optim.SGD/AdamW and DDP's gradient averaging.

Issue 17: the table's gradient was a zero tensor, so an embedding never
trained and a weight tied between the embedding and the output head got
only the head's half of its gradient; and training programs refused
integer data. Each run is 2 ranks x batch 4 for 20 optimizer steps in file
order (`--no-shuffle`: rank r of step s reads rows [(2s + r) 4, ...+4)),
which DDP with the same contiguous split computes as one batch of 8.
"""

import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ddpc_testing import run_env, MPIRUN, weights

V, D, S, C = 11, 6, 5, 4  # vocabulary, embedding width, tokens per sample, classes
B, RANKS, STEPS = 4, 2, 20


def embedding_model(path, tied, id_dtype=TensorProto.INT64, seed=0):
    """ids [N, S] -> Gather(E) -> mean over tokens -> logits.

    tied=False: logits = pooled @ W + b, C classes (a token classifier).
    tied=True:  logits = pooled @ E^T, V classes (the output head reuses the
    embedding table, as language models tie them)."""
    rng = np.random.default_rng(seed)
    inits = {"E": (rng.standard_normal((V, D)) * 0.5).astype(np.float32)}
    nodes = [
        helper.make_node("Gather", ["E", "ids"], ["emb"], axis=0, name="embed"),
        helper.make_node("ReduceMean", ["emb", "axes"], ["pooled"], keepdims=0),
    ]
    if tied:
        nodes += [
            helper.make_node("Transpose", ["E"], ["Et"], perm=[1, 0]),
            helper.make_node("MatMul", ["pooled", "Et"], ["logits"]),
        ]
        classes = V
    else:
        inits["W"] = (rng.standard_normal((D, C)) * 0.5).astype(np.float32)
        inits["b"] = (rng.standard_normal(C) * 0.1).astype(np.float32)
        nodes.append(helper.make_node("Gemm", ["pooled", "W", "b"], ["logits"]))
        classes = C
    g = helper.make_graph(
        nodes,
        "tokens",
        [helper.make_tensor_value_info("ids", id_dtype, ["N", S])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()]
        + [numpy_helper.from_array(np.array([1], np.int64), "axes")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.save(m, path)
    return inits, classes


def oracle(p, ids, y, tied, opt, steps, global_batch):
    """numpy float64: mean cross-entropy over each global batch, then SGD
    (momentum) or AdamW, as torch.optim does."""
    p = {k: v.astype(np.float64) for k, v in p.items()}
    state = {k: [np.zeros_like(v), np.zeros_like(v)] for k, v in p.items()}
    for t in range(1, steps + 1):
        rows = slice((t - 1) * global_batch, t * global_batch)
        xb, yb = ids[rows].astype(np.int64), y[rows]
        pooled = p["E"][xb].mean(1)
        z = pooled @ p["E"].T if tied else pooled @ p["W"] + p["b"]
        e = np.exp(z - z.max(1, keepdims=True))
        dz = (e / e.sum(1, keepdims=True) - np.eye(z.shape[1])[yb]) / global_batch
        g = {"E": np.zeros_like(p["E"])}
        if tied:
            g["E"] += dz.T @ pooled
            dpooled = dz @ p["E"]
        else:
            g["W"], g["b"] = pooled.T @ dz, dz.sum(0)
            dpooled = dz @ p["W"].T
        np.add.at(g["E"], xb, np.repeat(dpooled[:, None, :] / S, S, axis=1))
        for k in p:
            if opt["name"] == "sgd":
                buf = g[k] if t == 1 else opt["momentum"] * state[k][0] + g[k]
                state[k][0] = buf
                p[k] = p[k] - opt["lr"] * buf
            else:
                b1, b2 = 0.9, 0.999
                p[k] = p[k] * (1 - opt["lr"] * opt["wd"])
                m = state[k][0] = b1 * state[k][0] + (1 - b1) * g[k]
                v = state[k][1] = b2 * state[k][1] + (1 - b2) * g[k] ** 2
                denom = np.sqrt(v) / np.sqrt(1 - b2**t) + 1e-8
                p[k] = p[k] - opt["lr"] / (1 - b1**t) * m / denom
    return p


OPTIMIZERS = {
    "sgd": (
        ["--optimizer", "sgd", "--lr", "0.5", "--momentum", "0.9"],
        dict(name="sgd", lr=0.5, momentum=0.9),
    ),
    "adamw": (
        ["--optimizer", "adamw", "--lr", "0.05", "--weight-decay", "0.01"],
        dict(name="adamw", lr=0.05, wd=0.01),
    ),
}


def compile_train(ddpc, model, out, *args):
    proc = subprocess.run(
        [
            ddpc,
            "compile",
            str(model),
            "--train",
            "--batch-size",
            str(B),
            "-o",
            str(out),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return out


def run(prog, tmp, *args, ranks=RANKS):
    cmd = [str(prog), "--data", "x.npy", "--labels", "y.npy", "--quiet", *args]
    if ranks > 1:
        cmd = [MPIRUN, "--oversubscribe", "-np", str(ranks), *cmd]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, env=run_env(), cwd=tmp
    )


def token_data(tmp, classes, file_dtype=np.int64, seed=1):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, V, (RANKS * B * STEPS, S))
    y = rng.integers(0, classes, len(ids)).astype(np.int64)
    np.save(tmp / "x.npy", ids.astype(file_dtype))
    np.save(tmp / "y.npy", y)
    return ids, y


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
@pytest.mark.parametrize("tied", [False, True], ids=["classifier", "tied-head"])
def test_embedding_trains_like_ddp(ddpc, tmp_path, tied, opt):
    flags, spec = OPTIMIZERS[opt]
    init, classes = embedding_model(tmp_path / "m.onnx", tied)
    ids, y = token_data(tmp_path, classes)
    prog = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "train", *flags)
    proc = run(prog, tmp_path, "--epochs", "1", "--no-shuffle", "--save", "out.onnx")
    assert proc.returncode == 0, proc.stderr
    got = weights(tmp_path / "out.onnx")
    want = oracle(init, ids, y, tied, spec, STEPS, RANKS * B)
    for k in init:
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-4, err_msg=k)
    # Every table row that some sample used has moved.
    used = np.unique(ids)
    assert np.all(np.abs(got["E"][used] - init["E"][used]).max(1) > 1e-3)


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
@pytest.mark.parametrize(
    "model_dtype,file_dtype",
    [
        (TensorProto.INT32, np.int32),
        (TensorProto.INT32, np.int64),
        (TensorProto.INT64, np.int32),
        (TensorProto.INT64, np.uint8),
    ],
)
def test_token_ids_of_other_integer_dtypes(ddpc, tmp_path, model_dtype, file_dtype):
    """An int32 model input and id files of another integer dtype train the
    same (the program converts ids to the input's dtype, as it converts
    labels)."""
    flags, spec = OPTIMIZERS["sgd"]
    init, classes = embedding_model(tmp_path / "m.onnx", False, model_dtype)
    ids, y = token_data(tmp_path, classes, file_dtype)
    prog = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "train", *flags)
    proc = run(prog, tmp_path, "--epochs", "1", "--no-shuffle", "--save", "out.onnx")
    assert proc.returncode == 0, proc.stderr
    got = weights(tmp_path / "out.onnx")
    want = oracle(init, ids, y, False, spec, STEPS, RANKS * B)
    for k in init:
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-4, err_msg=k)


@pytest.mark.parametrize(
    "file_dtype,needle",
    [(np.float32, "with dtype int32"), (np.int64, "does not fit in int32")],
)
def test_token_id_files_that_do_not_convert_are_refused(
    ddpc, tmp_path, file_dtype, needle
):
    init, classes = embedding_model(tmp_path / "m.onnx", False, TensorProto.INT32)
    token_data(tmp_path, classes, file_dtype)
    if file_dtype == np.int64:
        x = np.load(tmp_path / "x.npy")
        x[3, 1] = 2**40
        np.save(tmp_path / "x.npy", x)
    prog = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "train")
    proc = run(prog, tmp_path, "--epochs", "1", ranks=1)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "x.npy" in lines[0] and needle in lines[0], proc.stderr

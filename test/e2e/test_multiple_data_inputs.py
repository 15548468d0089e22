"""Training programs of models with more than one data input: token ids
plus an attention mask, as language models take them. Each --data file (or
each array of Python's train()) is sharded with the same sampler, row i of
every file being sample i.

Oracle: numpy float64 forward, backward and SGD of the masked embedding
classifier below; the invariant N ranks x batch b == 1 rank x batch N*b.
"""

import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ddpc as ddpc_py
from ddpc_testing import run_env, MPIRUN, weights

V, E, S, C = 13, 6, 5, 4  # vocabulary, width, tokens per sample, classes
B, RANKS, STEPS, LR = 4, 2, 12, 0.5


def masked_model(path, seed=0):
    """ids [N, S] int64, mask [N, S] float32 -> mean over tokens of
    E[ids] * mask -> Gemm -> logits [N, C]."""
    rng = np.random.default_rng(seed)
    inits = {
        "E": (rng.standard_normal((V, E)) * 0.5).astype(np.float32),
        "W": (rng.standard_normal((E, C)) * 0.5).astype(np.float32),
        "b": (rng.standard_normal(C) * 0.1).astype(np.float32),
    }
    nodes = [
        helper.make_node("Gather", ["E", "ids"], ["emb"], axis=0),
        helper.make_node("Unsqueeze", ["mask", "last"], ["mask3"]),
        helper.make_node("Mul", ["emb", "mask3"], ["masked"]),
        helper.make_node("ReduceMean", ["masked", "tokens"], ["pooled"], keepdims=0),
        helper.make_node("Gemm", ["pooled", "W", "b"], ["logits"]),
    ]
    g = helper.make_graph(
        nodes,
        "masked",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", S]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["N", S]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", C])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()]
        + [
            numpy_helper.from_array(np.array([2], np.int64), "last"),
            numpy_helper.from_array(np.array([1], np.int64), "tokens"),
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.save(m, path)
    return m, inits


def oracle(p, ids, mask, y, steps, global_batch):
    """Plain SGD on the mean cross-entropy of each global batch, in file
    order (float64)."""
    p = {k: v.astype(np.float64) for k, v in p.items()}
    for t in range(steps):
        rows = slice(t * global_batch, (t + 1) * global_batch)
        xb, mb, yb = ids[rows], mask[rows].astype(np.float64), y[rows]
        pooled = (p["E"][xb] * mb[..., None]).mean(1)
        z = pooled @ p["W"] + p["b"]
        e = np.exp(z - z.max(1, keepdims=True))
        dz = (e / e.sum(1, keepdims=True) - np.eye(C)[yb]) / global_batch
        g = {"W": pooled.T @ dz, "b": dz.sum(0), "E": np.zeros_like(p["E"])}
        dpooled = dz @ p["W"].T
        np.add.at(g["E"], xb, dpooled[:, None, :] * mb[..., None] / S)
        for k in p:
            p[k] = p[k] - LR * g[k]
    return p


def make_data(tmp, n=RANKS * B * STEPS, seed=1):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, V, (n, S))
    # Padding at the end of each sample, 0 to 3 tokens, as a tokenizer's.
    lengths = rng.integers(S - 3, S + 1, n)
    mask = (np.arange(S)[None, :] < lengths[:, None]).astype(np.float32)
    y = rng.integers(0, C, n).astype(np.int64)
    np.save(tmp / "ids.npy", ids)
    np.save(tmp / "mask.npy", mask)
    np.save(tmp / "y.npy", y)
    return ids, mask, y


def compile_train(ddpc, tmp, *args):
    out = tmp / "train"
    proc = subprocess.run(
        [ddpc, "compile", str(tmp / "m.onnx"), "--train", "--batch-size", str(B)]
        + ["--lr", str(LR), "-o", str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return out


def run(prog, tmp, *args, ranks=RANKS):
    cmd = [str(prog), "--labels", "y.npy", "--quiet", "--epochs", "1", *args]
    if ranks > 1:
        cmd = [MPIRUN, "--oversubscribe", "-np", str(ranks), *cmd]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, env=run_env(), cwd=tmp
    )


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
@pytest.mark.parametrize(
    "data_args",
    [
        ["--data", "ids.npy", "--data", "mask.npy"],
        ["--data", "mask=mask.npy", "--data", "ids=ids.npy"],
        ["--data", "ids.npy", "--data", "mask.npy", "--sample-assignment", "strided"],
    ],
    ids=["in-order", "by-name", "strided"],
)
def test_ids_and_mask_train_at_two_ranks_like_numpy(ddpc, tmp_path, data_args):
    _, init = masked_model(tmp_path / "m.onnx")
    ids, mask, y = make_data(tmp_path)
    prog = compile_train(ddpc, tmp_path)
    proc = run(prog, tmp_path, *data_args, "--no-shuffle", "--save", "out.onnx")
    assert proc.returncode == 0, proc.stderr
    got = weights(tmp_path / "out.onnx")
    want = oracle(init, ids, mask, y, STEPS, RANKS * B)
    for k in init:
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-5, err_msg=k)
    # The mask is read: without it (all ones) the weights differ.
    unmasked = oracle(init, ids, np.ones_like(mask), y, STEPS, RANKS * B)
    assert np.abs(unmasked["E"] - want["E"]).max() > 1e-3


def test_bool_and_int64_masks_are_read_as_the_float_input(ddpc, tmp_path):
    """An attention mask saved as bool (torch's masks) or int64 (a
    tokenizer's) is converted to the input's float32, as integer ids are
    to int64; bool was refused."""
    _, init = masked_model(tmp_path / "m.onnx")
    ids, mask, y = make_data(tmp_path)
    prog = compile_train(ddpc, tmp_path)
    want = oracle(init, ids, mask, y, STEPS * RANKS, B)
    for dtype in (bool, np.int64):
        np.save(tmp_path / "m2.npy", mask.astype(dtype))
        args = ["--data", "ids.npy", "--data", "m2.npy", "--no-shuffle"]
        proc = run(prog, tmp_path, *args, "--save", "out.onnx", ranks=1)
        assert proc.returncode == 0, proc.stderr
        got = weights(tmp_path / "out.onnx")
        np.testing.assert_allclose(got["E"], want["E"], rtol=0, atol=1e-5)


def test_python_train_takes_a_dict_or_a_list(tmp_path):
    """Python's train(): a dict by input name or a list in input order, at
    1 rank (global batch B), with validation data in the same form."""
    m, init = masked_model(tmp_path / "m.onnx")
    ids, mask, y = make_data(tmp_path, n=B * STEPS)
    prog = ddpc_py.compile(m, train=ddpc_py.TrainConfig(batch_size=B, lr=LR))
    want = oracle(init, ids, mask, y, STEPS, B)
    by_name = prog.train({"mask": mask, "ids": ids}, y, shuffle=False)
    in_order = prog.train(
        [ids, mask], y, shuffle=False, val_data={"ids": ids, "mask": mask}, val_labels=y
    )
    for result in (by_name, in_order):
        got = {t.name: numpy_helper.to_array(t) for t in result.model.graph.initializer}
        for k in init:
            np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-5, err_msg=k)
    with pytest.raises(ValueError, match=r"data\['mask'\] and labels"):
        prog.train({"ids": ids, "mask": mask[:-1]}, y)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--data", "ids.npy"], "the model has 2 data input(s) (ids, mask)"),
        (
            ["--data", "ids.npy", "--data", "mask.npy", "--data", "ids.npy"],
            "and 3 --data file(s) were given",
        ),
        (["--data", "ids=ids.npy", "--data", "ids=ids.npy"], "names the data input"),
        (["--data", "mask.npy", "--data", "ids.npy"], "data for input 'ids'"),
        (["--data", "ids.npy", "--data", "short.npy"], "row i of every --data file"),
        (
            ["--data", "ids.npy", "--data", "mask.npy", "--val-data", "ids.npy"]
            + ["--val-labels", "y.npy"],
            "--val-data: the model has 2 data input(s)",
        ),
    ],
    ids=["too-few", "too-many", "named-twice", "wrong-order", "other-n", "val"],
)
def test_mismatched_data_files_are_refused(ddpc, tmp_path, args, needle):
    masked_model(tmp_path / "m.onnx")
    _, mask, _ = make_data(tmp_path)
    np.save(tmp_path / "short.npy", mask[:-4])
    prog = compile_train(ddpc, tmp_path)
    proc = run(prog, tmp_path, *args, ranks=1)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_data_inputs_with_other_batch_sizes_are_refused(ddpc, tmp_path):
    """Every data input is sharded along its leading dimension, so a model
    whose data inputs disagree there is refused at compile time."""
    m, _ = masked_model(tmp_path / "m.onnx")
    m.graph.input[1].type.tensor_type.shape.dim[0].dim_value = 1
    onnx.save(m, tmp_path / "m.onnx")
    proc = subprocess.run(
        [ddpc, "compile", str(tmp_path / "m.onnx"), "--train", "--batch-size", str(B)]
        + ["-o", str(tmp_path / "train")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert "data inputs 'ids' and 'mask' have leading dimensions" in proc.stderr


def rename_inputs(m, names):
    """`m` with its graph inputs (and their readers) renamed by `names`."""
    for vi in m.graph.input:
        vi.name = names.get(vi.name, vi.name)
    for n in m.graph.node:
        for i, x in enumerate(n.input):
            n.input[i] = names.get(x, x)
    return m


@pytest.mark.parametrize(
    "names",
    [{"ids": "ïds", "mask": "маска"}, {"mask": "m=ask"}],
    ids=["unicode", "equals-sign"],
)
def test_input_names_with_any_characters_are_given_by_name(ddpc, tmp_path, names):
    """Non-ASCII names were garbled in the generated tables (a C octal
    escape written in decimal), and a name holding '=' could not be given
    as NAME=FILE (the first '=' split it)."""
    m, init = masked_model(tmp_path / "m.onnx")
    onnx.save(rename_inputs(m, names), tmp_path / "m.onnx")
    ids, mask, y = make_data(tmp_path)
    prog = compile_train(ddpc, tmp_path)
    mask_name = names.get("mask", "mask")
    ids_name = names.get("ids", "ids")
    assert (
        f"{ids_name}, {mask_name}"
        in subprocess.run([str(prog), "--help"], capture_output=True, text=True).stdout
    )
    args = ["--data", f"{mask_name}=mask.npy", "--data", f"{ids_name}=ids.npy"]
    proc = run(prog, tmp_path, *args, "--no-shuffle", "--save", "out.onnx", ranks=1)
    assert proc.returncode == 0, proc.stderr
    got = weights(tmp_path / "out.onnx")
    want = oracle(init, ids, mask, y, STEPS * RANKS, B)
    np.testing.assert_allclose(got["E"], want["E"], rtol=0, atol=1e-5)


def test_unicode_initializer_names_survive_save(ddpc, tmp_path):
    """--save wrote a garbled name for a non-ASCII initializer, so the saved
    model read an undefined tensor (exit 0)."""
    m, _ = masked_model(tmp_path / "m.onnx")
    for t in m.graph.initializer:
        if t.name == "E":
            t.name = "Éemb"
    for n in m.graph.node:
        n.input[:] = ["Éemb" if x == "E" else x for x in n.input]
    onnx.save(m, tmp_path / "m.onnx")
    make_data(tmp_path)
    prog = compile_train(ddpc, tmp_path)
    args = ["--data", "ids.npy", "--data", "mask.npy", "--save", "out.onnx"]
    proc = run(prog, tmp_path, *args, ranks=1)
    assert proc.returncode == 0, proc.stderr
    saved = onnx.load(tmp_path / "out.onnx")
    onnx.checker.check_model(saved, full_check=True)
    assert "Éemb" in {t.name for t in saved.graph.initializer}


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--data", "ids=", "--data", "mask.npy"], "ids=: no file name after '='"),
        (
            ["--data", "idz=ids.npy", "--data", "mask.npy"],
            "no data input 'idz' (its data inputs: ids, mask)",
        ),
    ],
    ids=["empty-file", "unknown-name"],
)
def test_named_data_mistakes_are_named(ddpc, tmp_path, args, needle):
    masked_model(tmp_path / "m.onnx")
    make_data(tmp_path)
    prog = compile_train(ddpc, tmp_path)
    proc = run(prog, tmp_path, *args, ranks=1)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr

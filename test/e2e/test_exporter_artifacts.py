"""What torch.onnx.export writes that is not the module: training must
see the module's parameters, not the file's.

- In eval mode the exporter merges parameters of equal values (a fresh
  model's LayerNorm scales are all ones) into one initializer read through
  Identity nodes named after the others: each copy trains on its own.
- Constant folding turns `x @ W.t()` into a MatMul with `onnx::MatMul_<n>`
  holding W^T; a tied output head (GPT-2's, the token embedding's
  transpose) becomes a second, independent tensor: it is re-tied.
- A folded causal mask is a float initializer holding -inf: not a
  parameter.

Oracle (an invariant): each artifact trains exactly like the model as the
module means it (distinct tensors, a Transpose node, a frozen constant).
"""

import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ddpc_testing import run_env

N, F, V, S, B = 32, 4, 7, 3, 8


def save(path, nodes, inputs, inits, classes):
    g = helper.make_graph(
        nodes,
        "artifact",
        inputs,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def train(ddpc, tmp, model, *flags):
    """Compiles and trains `model` (5 epochs, no shuffle); returns the
    trained initializers and the compiler's stderr."""
    prog = tmp / (model + ".prog")
    proc = subprocess.run(
        [ddpc, "compile", str(tmp / model), "--train", "--batch-size", str(B)]
        + ["--lr", "0.3", "-o", str(prog), *flags],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    notes = proc.stderr
    out = tmp / (model + ".trained.onnx")
    proc = subprocess.run(
        [str(prog), "--data", "x.npy", "--labels", "y.npy", "--epochs", "5"]
        + ["--no-shuffle", "--quiet", "--save", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=run_env(),
        cwd=tmp,
    )
    assert proc.returncode == 0, proc.stderr
    saved = onnx.load(out)
    onnx.checker.check_model(saved)
    return {t.name: numpy_helper.to_array(t) for t in saved.graph.initializer}, notes


def float_data(tmp, classes):
    rng = np.random.default_rng(1)
    np.save(tmp / "x.npy", rng.standard_normal((N, F)).astype(np.float32))
    np.save(tmp / "y.npy", rng.integers(0, classes, N).astype(np.int64))


def test_identity_copies_train_as_separate_parameters(ddpc, tmp_path):
    rng = np.random.default_rng(0)
    inits = {
        "s1": np.ones(F, np.float32),
        "s2": np.ones(F, np.float32),
        "W": rng.standard_normal((F, 3)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Mul", ["x", "s1"], ["a"]),
        helper.make_node("Tanh", ["a"], ["t"]),
        helper.make_node("Mul", ["t", "s2"], ["b"]),
        helper.make_node("MatMul", ["b", "W"], ["logits"]),
    ]
    x = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", F])]
    save(tmp_path / "distinct.onnx", nodes, x, inits, 3)
    merged = dict(inits)
    del merged["s2"]
    save(
        tmp_path / "merged.onnx",
        [helper.make_node("Identity", ["s1"], ["s2"])] + nodes,
        x,
        merged,
        3,
    )
    float_data(tmp_path, 3)
    want, _ = train(ddpc, tmp_path, "distinct.onnx")
    got, notes = train(ddpc, tmp_path, "merged.onnx")
    assert "1 initializer(s) written as Identity copies of another" in notes
    for k in inits:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    assert np.abs(want["s1"] - want["s2"]).max() > 1e-3  # they did part


def test_folded_transpose_of_a_tied_weight_is_retied(ddpc, tmp_path):
    rng = np.random.default_rng(0)
    E = rng.standard_normal((V, F)).astype(np.float32)
    embed = [
        helper.make_node("Gather", ["E", "ids"], ["h"]),
        helper.make_node("ReduceMean", ["h"], ["p"], axes=[1], keepdims=0),
    ]
    ids = [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", S])]
    save(
        tmp_path / "tied.onnx",
        embed
        + [
            helper.make_node("Transpose", ["E"], ["Et"], perm=[1, 0]),
            helper.make_node("MatMul", ["p", "Et"], ["logits"]),
        ],
        ids,
        {"E": E},
        V,
    )
    save(
        tmp_path / "folded.onnx",
        embed + [helper.make_node("MatMul", ["p", "onnx::MatMul_9"], ["logits"])],
        ids,
        {"E": E, "onnx::MatMul_9": np.ascontiguousarray(E.T)},
        V,
    )
    rng = np.random.default_rng(1)
    np.save(tmp_path / "x.npy", rng.integers(0, V, (N, S)))
    np.save(tmp_path / "y.npy", rng.integers(0, V, N).astype(np.int64))
    want, _ = train(ddpc, tmp_path, "tied.onnx")
    got, notes = train(ddpc, tmp_path, "folded.onnx")
    assert "onnx::MatMul_9 = E^T is an exporter-folded transpose" in notes
    np.testing.assert_array_equal(got["E"], want["E"])
    assert "onnx::MatMul_9" not in got


def test_non_finite_initializer_is_a_constant(ddpc, tmp_path):
    """A float initializer holding -inf (a folded mask) stays a constant:
    training it turned the weights into inf/nan."""
    rng = np.random.default_rng(0)
    inits = {
        "mask": np.array([0, -np.inf, 0, -np.inf], np.float32),
        "W": rng.standard_normal((F, 3)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Add", ["x", "mask"], ["a"]),
        helper.make_node("Softmax", ["a"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "W"], ["logits"]),
    ]
    x = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", F])]
    save(tmp_path / "m.onnx", nodes, x, inits, 3)
    float_data(tmp_path, 3)
    want, _ = train(ddpc, tmp_path, "m.onnx", "--freeze", "mask")
    got, _ = train(ddpc, tmp_path, "m.onnx")
    np.testing.assert_array_equal(got["W"], want["W"])
    np.testing.assert_array_equal(got["mask"], inits["mask"])


def compile_only(ddpc, tmp, model, *flags):
    return subprocess.run(
        [ddpc, "compile", str(tmp / model), "--train", "--batch-size", str(B)]
        + ["-o", str(tmp / "p"), *flags],
        capture_output=True,
        text=True,
        timeout=300,
    )


def two_matrices(path, first, second, names=("W", "onnx::MatMul_5")):
    """x [N, F] -> x @ first + x @ second -> logits [N, F]."""
    nodes = [
        helper.make_node("MatMul", ["x", names[0]], ["a"]),
        helper.make_node("MatMul", ["x", names[1]], ["b"]),
        helper.make_node("Add", ["a", "b"], ["logits"]),
    ]
    x = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", F])]
    save(path, nodes, x, dict(zip(names, (first, second))), F)


@pytest.mark.parametrize(
    "case",
    ["zeros", "identity", "both-folded"],
)
def test_only_folded_transposes_of_module_weights_are_retied(ddpc, tmp_path, case):
    """Matrices equal to a transpose by construction (zeros, an identity)
    are independent weights, and two folded tensors are not each other's
    source (they re-tied both ways into a cycle that was then reported as
    an invalid model)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((F, F)).astype(np.float32)
    first, second, names = {
        "zeros": (np.zeros((F, F)), np.zeros((F, F)), ("W", "onnx::MatMul_5")),
        "identity": (np.eye(F), np.eye(F), ("W", "onnx::MatMul_5")),
        "both-folded": (w, w.T, ("onnx::MatMul_1", "onnx::MatMul_2")),
    }[case]
    two_matrices(
        tmp_path / "m.onnx",
        np.float32(first),
        np.ascontiguousarray(np.float32(second)),
        names,
    )
    proc = compile_only(ddpc, tmp_path, "m.onnx")
    assert proc.returncode == 0, proc.stderr
    assert "exporter-folded transpose" not in proc.stderr


def test_frozen_weights_are_not_retied(ddpc, tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((F, F)).astype(np.float32)
    two_matrices(tmp_path / "m.onnx", w, np.ascontiguousarray(w.T))
    for frozen in ("W", "onnx::MatMul_5"):
        proc = compile_only(ddpc, tmp_path, "m.onnx", "--freeze", frozen)
        assert proc.returncode == 0, proc.stderr
        assert "exporter-folded transpose" not in proc.stderr
    proc = compile_only(ddpc, tmp_path, "m.onnx")
    assert "onnx::MatMul_5 = W^T is an exporter-folded transpose" in proc.stderr


def test_source_only_its_copies_read_leaves_the_saved_model(ddpc, tmp_path):
    """An initializer read only through Identity copies is read by nothing
    once they are initializers: the saved model does not keep it."""
    rng = np.random.default_rng(0)
    inits = {
        "ones": np.ones(F, np.float32),
        "W": rng.standard_normal((F, 3)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Identity", ["ones"], ["s1"]),
        helper.make_node("Identity", ["ones"], ["s2"]),
        helper.make_node("Mul", ["x", "s1"], ["a"]),
        helper.make_node("Mul", ["a", "s2"], ["b"]),
        helper.make_node("MatMul", ["b", "W"], ["logits"]),
    ]
    x = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", F])]
    save(tmp_path / "m.onnx", nodes, x, inits, 3)
    float_data(tmp_path, 3)
    got, notes = train(ddpc, tmp_path, "m.onnx")
    assert "2 initializer(s) written as Identity copies" in notes
    assert set(got) == {"s1", "s2", "W"}


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_running_statistic_is_refused_at_compile_time(ddpc, tmp_path, bad):
    """It used to train every epoch and then refuse to save, blaming an
    overflow."""
    c = F
    inits = {
        "s": np.ones(c, np.float32),
        "b": np.zeros(c, np.float32),
        "mean": np.zeros(c, np.float32),
        "var": np.array([1, bad, 1, 1], np.float32),
        "W": np.ones((c, 3), np.float32),
    }
    nodes = [
        helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["h"]),
        helper.make_node("MatMul", ["h", "W"], ["logits"]),
    ]
    x = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c])]
    save(tmp_path / "m.onnx", nodes, x, inits, 3)
    proc = compile_only(ddpc, tmp_path, "m.onnx")
    assert proc.returncode == 1
    assert "initializer 'var' (a BatchNormalization running statistic)" in proc.stderr

"""One initializer in two training roles (issue 17, item 4).

Tools that merge initializers of equal contents (onnxoptimizer's
eliminate_duplicate_initializer, onnx-simplifier) make one name serve
roles that need different storage: a BatchNorm's scale and its running
variance are both all ones. Training treated such a name as a buffer only:
the scale was never trained and the running statistics flowed into it.
ddpc now gives each role its own copy (trainable uses keep the name, each
running-statistics slot and the configuration inputs get copies).

Oracle (an invariant): the merged model trains exactly like the same model
with distinct initializers, as the exporter wrote it before merging; and the
saved model runs in onnxruntime like the unmerged one.
"""

import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ddpc_testing import run_env, MPIRUN

C, K, N = 3, 4, 32  # channels, classes, samples


def bn(name, x, y, scale, bias, mean, var):
    return helper.make_node(
        "BatchNormalization", [x, scale, bias, mean, var], [y], name=name
    )


def head(x):
    """x [B, C, 2, 2] -> logits [B, K]."""
    return [
        helper.make_node("GlobalAveragePool", [x], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "W", "Wb"], ["logits"]),
    ]


def values():
    rng = np.random.default_rng(0)
    return {
        "W": (rng.standard_normal((C, K)) * 0.5).astype(np.float32),
        "Wb": np.zeros(K, np.float32),
        "ones": np.ones(C, np.float32),
        "zeros": np.zeros(C, np.float32),
        "zero": np.zeros((), np.float32),
    }


def save(path, nodes, inits, graph_name="roles"):
    g = helper.make_graph(
        nodes,
        graph_name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, 2, 2])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", K])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


# Each case: (nodes using merged names, nodes using distinct names, map from
# each distinct name to the name the merged model's --save gives it).
def case_scale_and_running_var_one_node():
    v = values()
    merged = [
        bn("bn", "x", "y", "ones", "zeros", "zeros", "ones"),
        helper.make_node("Relu", ["y"], ["r"]),
    ] + head("r")
    split = [
        bn("bn", "x", "y", "s", "b", "m", "v"),
        helper.make_node("Relu", ["y"], ["r"]),
    ] + head("r")
    inits = {"s": v["ones"], "b": v["zeros"], "m": v["zeros"], "v": v["ones"]}
    names = {
        "s": "ones",
        "b": "zeros",
        "m": "zeros.bn.running_mean",
        "v": "ones.bn.running_var",
    }
    return merged, split, inits, names


def case_scale_of_one_node_running_var_of_another():
    v = values()
    merged = [
        bn("bn1", "x", "y1", "ones", "zeros", "m1", "v1"),
        helper.make_node("Relu", ["y1"], ["r1"]),
        bn("bn2", "r1", "y2", "s2", "b2", "m2", "ones"),
    ] + head("y2")
    split = [
        bn("bn1", "x", "y1", "s1", "zeros", "m1", "v1"),
        helper.make_node("Relu", ["y1"], ["r1"]),
        bn("bn2", "r1", "y2", "s2", "b2", "m2", "v2"),
    ] + head("y2")
    inits = {
        "s1": v["ones"],
        "zeros": v["zeros"],
        "m1": v["zeros"],
        "v1": v["ones"],
        "s2": v["ones"] * 0.5,
        "b2": v["zeros"],
        "m2": v["zeros"],
        "v2": v["ones"],
    }
    names = {
        "s1": "ones",
        "zeros": "zeros",
        "m1": "m1",
        "v1": "v1",
        "s2": "s2",
        "b2": "b2",
        "m2": "m2",
        "v2": "ones.bn2.running_var",
    }
    return merged, split, inits, names


def case_two_norms_share_running_statistics():
    v = values()
    merged = [
        bn("bn1", "x", "y1", "s1", "b1", "zeros", "ones"),
        helper.make_node("Relu", ["y1"], ["r1"]),
        bn("bn2", "r1", "y2", "s2", "b2", "zeros", "ones"),
    ] + head("y2")
    split = [
        bn("bn1", "x", "y1", "s1", "b1", "m1", "v1"),
        helper.make_node("Relu", ["y1"], ["r1"]),
        bn("bn2", "r1", "y2", "s2", "b2", "m2", "v2"),
    ] + head("y2")
    inits = {
        "s1": v["ones"],
        "b1": v["zeros"] + 0.1,
        "s2": v["ones"] * 0.5,
        "b2": v["zeros"],
        "m1": v["zeros"],
        "v1": v["ones"],
        "m2": v["zeros"],
        "v2": v["ones"],
    }
    names = {
        "s1": "s1",
        "b1": "b1",
        "s2": "s2",
        "b2": "b2",
        "m1": "zeros",
        "v1": "ones",
        "m2": "zeros.bn2.running_mean",
        "v2": "ones.bn2.running_var",
    }
    return merged, split, inits, names


def case_trainable_bias_and_clip_bound():
    """A scalar bias (trained) merged with Clip's lower bound (a constant)."""
    v = values()
    tail = head("c")
    merged = [
        helper.make_node("Add", ["x", "zero"], ["a"]),
        helper.make_node("Clip", ["a", "zero", ""], ["c"]),
    ] + tail
    split = [
        helper.make_node("Add", ["x", "bias"], ["a"]),
        helper.make_node("Clip", ["a", "lo", ""], ["c"]),
    ] + tail
    inits = {"bias": v["zero"], "lo": v["zero"]}
    names = {"bias": "zero", "lo": "zero.constant"}
    return merged, split, inits, names


def case_running_var_and_pow_exponent():
    """A running variance (ones) merged with a Pow exponent (a constant)."""
    v = values()
    merged = [
        bn("bn", "x", "y", "s", "b", "m", "ones"),
        helper.make_node("GlobalAveragePool", ["y"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["f"]),
        helper.make_node("Pow", ["f", "ones"], ["p"]),
        helper.make_node("Gemm", ["p", "W", "Wb"], ["logits"]),
    ]
    split = [
        bn("bn", "x", "y", "s", "b", "m", "var"),
        helper.make_node("GlobalAveragePool", ["y"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["f"]),
        helper.make_node("Pow", ["f", "e"], ["p"]),
        helper.make_node("Gemm", ["p", "W", "Wb"], ["logits"]),
    ]
    inits = {
        "s": v["ones"] * 0.8,
        "b": v["zeros"],
        "m": v["zeros"],
        "var": v["ones"],
        "e": v["ones"],
    }
    names = {"s": "s", "b": "b", "m": "m", "var": "ones", "e": "ones.constant"}
    return merged, split, inits, names


CASES = {
    f.__name__[5:]: f
    for f in [
        case_scale_and_running_var_one_node,
        case_scale_of_one_node_running_var_of_another,
        case_two_norms_share_running_statistics,
        case_trainable_bias_and_clip_bound,
        case_running_var_and_pow_exponent,
    ]
}


def build(tmp, name):
    merged, split, inits, names = CASES[name]()
    v = values()
    shared = {k: v[k] for k in ("W", "Wb")}
    merged_inits = dict(shared)
    for n in merged:
        for i in n.input:
            if i in v and i not in merged_inits:
                merged_inits[i] = v[i]
            elif i in inits and i not in merged_inits:
                merged_inits[i] = inits[i]
    save(tmp / "merged.onnx", merged, merged_inits)
    save(tmp / "split.onnx", split, {**shared, **inits})
    return names


def train(ddpc, tmp, model, out, *flags, ranks=1):
    """Compiles `model` (SGD, momentum) and trains it 2 epochs in file order;
    the saved initializers by name."""
    subprocess.run(
        [
            ddpc,
            "compile",
            str(tmp / model),
            "--train",
            "--batch-size",
            "8",
            "--optimizer",
            "sgd",
            "--lr",
            "0.2",
            "--momentum",
            "0.9",
            *flags,
            "-o",
            str(tmp / (out + ".prog")),
        ],
        check=True,
        capture_output=True,
    )
    cmd = [
        str(tmp / (out + ".prog")),
        "--data",
        "x.npy",
        "--labels",
        "y.npy",
        "--epochs",
        "2",
        "--no-shuffle",
        "--quiet",
        "--save",
        out + ".onnx",
    ]
    if ranks > 1:
        cmd = [MPIRUN, "--oversubscribe", "-np", str(ranks), *cmd]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, cwd=tmp, env=run_env(), timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return {
        t.name: numpy_helper.to_array(t)
        for t in onnx.load(str(tmp / (out + ".onnx"))).graph.initializer
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_merged_initializer_trains_like_distinct_ones(ddpc, tmp_path, name):
    names = build(tmp_path, name)
    rng = np.random.default_rng(1)
    np.save(
        tmp_path / "x.npy", rng.standard_normal((N, C, 2, 2)).astype(np.float32) * 2 + 1
    )
    np.save(tmp_path / "y.npy", rng.integers(0, K, N).astype(np.int64))
    want = train(ddpc, tmp_path, "split.onnx", "split")
    got = train(ddpc, tmp_path, "merged.onnx", "merged")
    for split_name, merged_name in names.items():
        np.testing.assert_allclose(
            got[merged_name],
            want[split_name],
            rtol=1e-6,
            atol=1e-7,
            err_msg=f"{merged_name} (distinct: {split_name})",
        )
    # Training changed the merged initializer's roles (so the comparison
    # above is not between two untouched copies).
    start = CASES[name]()[2]
    assert any(not np.allclose(want[k], start[k]) for k in names if k in start)
    # The saved merged model runs in onnxruntime like the distinct one.
    x = rng.standard_normal((4, C, 2, 2)).astype(np.float32)
    run = lambda p: ort.InferenceSession(str(p)).run(None, {"x": x})[0]  # noqa: E731
    np.testing.assert_allclose(
        run(tmp_path / "merged.onnx"),
        run(tmp_path / "split.onnx"),
        rtol=1e-5,
        atol=1e-6,
    )


def test_running_mean_that_also_trains_gets_two_tensors(ddpc, tmp_path):
    """A running mean (zeros) merged with a trainable per-channel shift
    (zeros) that an Add applies after the BatchNorm: the shift trains, the
    running mean stays a buffer, exactly as with two initializers. (It was
    refused: one tensor and two merged ones cannot be told apart, and two
    is what merging tools make.)"""
    v = values()
    zeros3 = np.zeros(C, np.float32)
    nodes = [
        bn("bn", "x", "y", "s", "b", "z", "var"),
        helper.make_node("Reshape", ["z", "shp"], ["z3"]),
        helper.make_node("Add", ["y", "z3"], ["a"], name="shift"),
    ] + head("a")
    split = [
        bn("bn", "x", "y", "s", "b", "m", "var"),
        helper.make_node("Reshape", ["t", "shp"], ["z3"]),
        helper.make_node("Add", ["y", "z3"], ["a"], name="shift"),
    ] + head("a")
    shp = np.array([C, 1, 1], np.int64)
    common = {
        "s": v["ones"],
        "b": v["zeros"] + 0.1,
        "var": v["ones"],
        "W": v["W"],
        "Wb": v["Wb"],
        "shp": shp,
    }
    save(tmp_path / "merged.onnx", nodes, {**common, "z": zeros3})
    save(tmp_path / "split.onnx", split, {**common, "m": zeros3, "t": zeros3})
    rng = np.random.default_rng(4)
    np.save(
        tmp_path / "x.npy", rng.standard_normal((N, C, 2, 2)).astype(np.float32) + 1
    )
    np.save(tmp_path / "y.npy", rng.integers(0, K, N).astype(np.int64))
    want = train(ddpc, tmp_path, "split.onnx", "split")
    got = train(ddpc, tmp_path, "merged.onnx", "merged")
    for split_name, merged_name in {
        "t": "z",
        "m": "z.bn.running_mean",
        "s": "s",
        "b": "b",
        "var": "var",
        "W": "W",
    }.items():
        np.testing.assert_allclose(
            got[merged_name],
            want[split_name],
            rtol=1e-6,
            atol=1e-7,
            err_msg=merged_name,
        )
    assert not np.allclose(want["t"], 0) and not np.allclose(want["m"], 0)


def test_running_mean_also_read_by_an_untrained_output_is_one_buffer(ddpc, tmp_path):
    """A running mean that is also copied to a second output (which the
    loss does not read) has one role that needs storage: it stays one
    buffer, and the second output reads it."""
    v = values()
    nodes = [
        bn("bn", "x", "y", "s", "b", "m", "var"),
        helper.make_node("Identity", ["m"], ["m_out"]),
    ] + head("y")
    g = helper.make_graph(
        nodes,
        "roles",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, 2, 2])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", K]),
            helper.make_tensor_value_info("m_out", TensorProto.FLOAT, [C]),
        ],
        [
            numpy_helper.from_array(a, k)
            for k, a in {
                "s": v["ones"],
                "b": v["zeros"],
                "m": v["zeros"],
                "var": v["ones"],
                "W": v["W"],
                "Wb": v["Wb"],
            }.items()
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    rng = np.random.default_rng(5)
    np.save(
        tmp_path / "x.npy", rng.standard_normal((N, C, 2, 2)).astype(np.float32) + 1
    )
    np.save(tmp_path / "y.npy", rng.integers(0, K, N).astype(np.int64))
    got = train(ddpc, tmp_path, "m.onnx", "out")
    assert set(got) == {"s", "b", "m", "var", "W", "Wb"}
    assert not np.allclose(got["m"], 0)  # updated as a running mean


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_merged_scale_and_running_var_at_two_ranks_and_frozen(ddpc, tmp_path):
    """2 ranks (buffers averaged over ranks) and --freeze of the merged name
    (the scale stays, the running variance copy still updates), against the
    distinct model with the scale frozen."""
    names = build(tmp_path, "scale_and_running_var_one_node")
    rng = np.random.default_rng(2)
    np.save(
        tmp_path / "x.npy", rng.standard_normal((N, C, 2, 2)).astype(np.float32) + 1
    )
    np.save(tmp_path / "y.npy", rng.integers(0, K, N).astype(np.int64))
    want = train(ddpc, tmp_path, "split.onnx", "split", "--freeze", "s", ranks=2)
    got = train(ddpc, tmp_path, "merged.onnx", "merged", "--freeze", "ones", ranks=2)
    for split_name, merged_name in names.items():
        np.testing.assert_allclose(
            got[merged_name],
            want[split_name],
            rtol=1e-6,
            atol=1e-7,
            err_msg=merged_name,
        )
    np.testing.assert_array_equal(got["ones"], np.ones(C, np.float32))
    assert not np.allclose(got["ones.bn.running_var"], 1.0)

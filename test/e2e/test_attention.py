"""Attention (opsets 23, 24) and RotaryEmbedding (opset 23) beyond the ONNX
node tests: grouped-query attention with a KV cache and causal masking
together, float masks shorter than the keys, multi-query 3-D inputs,
softcap with the qk_matmul_output modes, float16, opset 24's
nonpad_kv_seqlen, partial and interleaved rotary embeddings; the
run-time check of position_ids; the one-line refusals; the VJPs on the
CUDA lowering.

Oracle: onnxruntime (1.32 implements both ops), the ONNX reference
for a mask shorter than the keys (onnxruntime refuses it), numpy for
nonpad_kv_seqlen; the finite-difference
checks are central differences in float64. Each comparison runs on the
CPU and the CUDA-emulate target.
"""

import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import ddpc as ddpc_py
from ddpc_testing import check_gradients

TARGETS = ["cpu", "cuda-emulate"]
F32, F16, F64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE
NP = {F32: np.float32, F16: np.float16, F64: np.float64}


def model(op, inputs, outputs, attrs, opset=23, inits=(), dtype=F32):
    """One `op` node. `inputs`: (name, shape, dtype) graph inputs, '' for a
    left-out optional input; `inits`: (name, array) initializers, which
    the node also reads (by name, in `inputs` order)."""
    names = [i if isinstance(i, str) else i[0] for i in inputs]
    g = helper.make_graph(
        [helper.make_node(op, names, outputs, name="n", **attrs)],
        "g",
        [
            helper.make_tensor_value_info(n, t, list(s))
            for n, s, t in (i for i in inputs if not isinstance(i, str))
        ],
        [helper.make_tensor_value_info(o, dtype, None) for o in outputs if o],
        [numpy_helper.from_array(a, n) for n, a in inits],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def feeds(inputs, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for i in inputs:
        if isinstance(i, str):
            continue
        name, shape, dtype = i
        if dtype == TensorProto.BOOL:
            out[name] = rng.random(shape) < 0.7
        elif dtype == TensorProto.INT64:
            out[name] = rng.integers(0, 8, shape).astype(np.int64)
        else:
            out[name] = rng.standard_normal(shape).astype(NP[dtype])
    return out


def compare(m, x, target, rtol=1e-5, atol=1e-5, oracle="onnxruntime"):
    ours = ddpc_py.compile(m, target=target, onnx_checker=False).run(x)
    if oracle == "reference":
        ref = ReferenceEvaluator(m)
        names = list(ref.output_names)
        refs = ref.run(None, x)
    else:
        sess = ort.InferenceSession(m.SerializeToString())
        names = [o.name for o in sess.get_outputs()]
        refs = sess.run(None, x)
    for name, ref in zip(names, refs):
        got = ours[name]
        if np.issubdtype(ref.dtype, np.floating):
            # onnxruntime masks with the lowest finite value, the ONNX
            # reference (and the node tests' data, which ddpc follows)
            # with -inf: qk_matmul_output mode 2 shows the difference.
            ref = np.where(ref <= np.finfo(ref.dtype).min, -np.inf, ref)
        assert got.dtype == ref.dtype and got.shape == ref.shape, name
        np.testing.assert_allclose(
            got.astype(np.float64),
            ref.astype(np.float64),
            rtol=rtol,
            atol=atol,
            err_msg=name,
        )


def q4(b, h, s, d, dtype=F32):
    return ("Q", [b, h, s, d], dtype)


# name -> (inputs, outputs, attrs, opset)
ATTENTION_CASES = {
    # GQA (6 query heads on 2 kv heads), a KV cache and is_causal with the
    # past length as the diagonal's offset, a float mask per batch.
    "gqa-past-causal-float-mask": (
        [
            q4(2, 6, 3, 4),
            ("K", [2, 2, 3, 4], F32),
            ("V", [2, 2, 3, 5], F32),
            ("attn_mask", [2, 1, 3, 7], F32),
            ("past_key", [2, 2, 4, 4], F32),
            ("past_value", [2, 2, 4, 5], F32),
        ],
        ["Y", "present_key", "present_value"],
        dict(is_causal=1),
        23,
    ),
    # 3-D GQA with a cache and a float mask shorter than the 7 keys (the
    # keys past its end are masked out; onnxruntime refuses such a mask,
    # so the ONNX reference is the oracle).
    "3d-gqa-past-causal-short-mask": (
        [
            ("Q", [2, 3, 16], F32),
            ("K", [2, 3, 8], F32),
            ("V", [2, 3, 8], F32),
            ("attn_mask", [3, 5], F32),
            ("past_key", [2, 2, 4, 4], F32),
            ("past_value", [2, 2, 4, 4], F32),
        ],
        ["Y", "present_key", "present_value"],
        dict(is_causal=1, q_num_heads=4, kv_num_heads=2),
        23,
    ),
    # Multi-query 3-D attention with a scale and cross-attention lengths.
    "3d-mqa-scale": (
        [("Q", [1, 5, 12], F32), ("K", [1, 7, 4], F32), ("V", [1, 7, 6], F32)],
        ["Y"],
        dict(q_num_heads=3, kv_num_heads=1, scale=0.2),
        23,
    ),
    "softcap-bool-mask": (
        [
            q4(2, 2, 4, 8),
            ("K", [2, 2, 6, 8], F32),
            ("V", [2, 2, 6, 8], F32),
            ("attn_mask", [4, 6], TensorProto.BOOL),
        ],
        ["Y"],
        dict(softcap=1.5),
        23,
    ),
    "gqa-causal-opset24": (
        [q4(1, 4, 5, 8), ("K", [1, 2, 5, 8], F32), ("V", [1, 2, 5, 8], F32)],
        ["Y"],
        dict(is_causal=1),
        24,
    ),
}
for _mode in range(4):
    ATTENTION_CASES[f"qk-output-mode-{_mode}"] = (
        [
            q4(1, 2, 3, 4),
            ("K", [1, 2, 5, 4], F32),
            ("V", [1, 2, 5, 4], F32),
            ("attn_mask", [3, 5], F32),
        ],
        ["Y", "", "", "qk"],
        dict(qk_matmul_output_mode=_mode, is_causal=1),
        23,
    )


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(ATTENTION_CASES))
def test_attention_matches_onnxruntime(name, target):
    inputs, outputs, attrs, opset = ATTENTION_CASES[name]
    m = model("Attention", inputs, outputs, attrs, opset)
    oracle = "reference" if "short-mask" in name else "onnxruntime"
    compare(m, feeds(inputs), target, oracle=oracle)


def test_attention_float16_matches_onnxruntime():
    """float16 GQA with a cache computes in float32 and rounds once."""
    inputs = [
        q4(1, 4, 3, 8, F16),
        ("K", [1, 2, 3, 8], F16),
        ("V", [1, 2, 3, 8], F16),
        ("attn_mask", [3, 6], F16),
        ("past_key", [1, 2, 3, 8], F16),
        ("past_value", [1, 2, 3, 8], F16),
    ]
    outs = ["Y", "present_key", "present_value"]
    m = model("Attention", inputs, outs, dict(is_causal=1), dtype=F16)
    compare(m, feeds(inputs), "cpu", rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("target", TARGETS)
def test_attention_nonpad_kv_seqlen(target):
    """Opset 24: keys at or past nonpad_kv_seqlen[b] take no attention (an
    initializer here; a graph input works the same way)."""
    inputs = [q4(2, 2, 3, 4), ("K", [2, 2, 6, 4], F32), ("V", [2, 2, 6, 4], F32)]
    m = model(
        "Attention",
        inputs + ["", "", "", "nonpad"],
        ["Y"],
        {},
        24,
        inits=[("nonpad", np.array([2, 5], np.int64))],
    )
    x = feeds(inputs)
    ours = ddpc_py.compile(m, target=target, onnx_checker=False).run(x)["Y"]
    # numpy, float64: softmax over the first nonpad[b] keys only.
    q, k, v = (x[n].astype(np.float64) for n in "QKV")
    want = np.empty_like(q)
    for b, n in enumerate([2, 5]):
        s = q[b] @ k[b, :, :n].transpose(0, 2, 1) / 2.0
        p = np.exp(s - s.max(-1, keepdims=True))
        want[b] = (p / p.sum(-1, keepdims=True)) @ v[b, :, :n]
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)


ROTARY_CASES = {
    "3d-interleaved-partial": (
        [("X", [2, 3, 24], F32), ("cos", [9, 2], F32), ("sin", [9, 2], F32)],
        dict(num_heads=3, interleaved=1, rotary_embedding_dim=4),
        True,
    ),
    "4d-halves-partial-no-ids": (
        [("X", [2, 2, 3, 10], F32), ("cos", [2, 3, 3], F32), ("sin", [2, 3, 3], F32)],
        dict(rotary_embedding_dim=6),
        False,
    ),
    "4d-interleaved-full": (
        [("X", [1, 3, 4, 6], F32), ("cos", [9, 3], F32), ("sin", [9, 3], F32)],
        dict(interleaved=1),
        True,
    ),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(ROTARY_CASES))
def test_rotary_embedding_matches_onnxruntime(name, target):
    inputs, attrs, with_ids = ROTARY_CASES[name]
    if with_ids:
        x_shape = inputs[0][1]
        b, s = x_shape[0], x_shape[1] if len(x_shape) == 3 else x_shape[2]
        inputs = inputs + [("ids", [b, s], TensorProto.INT64)]
    m = model("RotaryEmbedding", inputs, ["Y"], attrs)
    compare(m, feeds(inputs), target)


def test_rotary_embedding_float16():
    inputs = [
        ("X", [1, 2, 3, 8], F16),
        ("cos", [1, 3, 4], F16),
        ("sin", [1, 3, 4], F16),
    ]
    m = model("RotaryEmbedding", inputs, ["Y"], {}, dtype=F16)
    compare(m, feeds(inputs), "cpu", rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("target", TARGETS)
def test_position_ids_out_of_range_raises(target):
    inputs = [
        ("X", [1, 1, 2, 4], F32),
        ("cos", [5, 2], F32),
        ("sin", [5, 2], F32),
        ("ids", [1, 2], TensorProto.INT64),
    ]
    prog = ddpc_py.compile(
        model("RotaryEmbedding", inputs, ["Y"], {}), target=target, onnx_checker=False
    )
    x = feeds(inputs)
    x["ids"] = np.array([[1, 5]], np.int64)
    with pytest.raises(
        IndexError, match=r"index 5 is out of range.*RotaryEmbedding node 'n'"
    ):
        prog.run(x)


def compile_cli(ddpc, m, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    return subprocess.run(
        [ddpc, "compile", str(path), "-o", str(tmp_path / "prog")],
        capture_output=True,
        text=True,
        timeout=120,
    )


QKV = [q4(1, 2, 3, 4), ("K", [1, 2, 3, 4], F32), ("V", [1, 2, 3, 4], F32)]
# (op, inputs, attrs, opset, exit code, text in the error line)
REFUSALS = [
    ("Attention", QKV, dict(softmax_precision=11), 23, 2, "softmax_precision 11"),
    (
        "Attention",
        QKV + [("attn_mask", [3, 3], TensorProto.INT32)],
        {},
        23,
        2,
        "attn_mask of dtype int32",
    ),
    ("Attention", QKV, dict(qk_matmul_output_mode=4), 23, 1, "qk_matmul_output_mode 4"),
    (
        "Attention",
        QKV + ["", ("past_key", [1, 2, 2, 4], F32)],
        {},
        23,
        1,
        "past_key and past_value must be given together",
    ),
    (
        "Attention",
        [q4(1, 3, 3, 4), ("K", [1, 2, 3, 4], F32), ("V", [1, 2, 3, 4], F32)],
        {},
        23,
        1,
        "not a multiple of the kv heads",
    ),
    (
        "Attention",
        [("Q", [1, 3, 8], F32), ("K", [1, 3, 8], F32), ("V", [1, 3, 8], F32)],
        {},
        23,
        1,
        "3-D inputs need q_num_heads",
    ),
    (
        "RotaryEmbedding",
        [("X", [1, 1, 2, 4], F32), ("cos", [1, 2, 1], F32), ("sin", [1, 2, 1], F32)],
        dict(rotary_embedding_dim=3),
        23,
        1,
        "rotary_embedding_dim 3 must be even",
    ),
    (
        "RotaryEmbedding",
        [("X", [1, 2, 4], F32), ("cos", [1, 2, 2], F32), ("sin", [1, 2, 2], F32)],
        {},
        23,
        1,
        "a 3-D X needs num_heads",
    ),
    (
        "RotaryEmbedding",
        [("X", [1, 1, 2, 4], F32), ("cos", [1, 2, 3], F32), ("sin", [1, 2, 3], F32)],
        {},
        23,
        1,
        "without position_ids, the caches must be",
    ),
]


@pytest.mark.parametrize("index", range(len(REFUSALS)))
def test_refusals_are_one_line(ddpc, tmp_path, index):
    op, inputs, attrs, opset, code, needle = REFUSALS[index]
    proc = compile_cli(ddpc, model(op, inputs, ["Y"], attrs, opset), tmp_path)
    assert proc.returncode == code, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert needle in lines[0] and f"'{op}' (node 'n'" in lines[0], lines[0]
    assert not (tmp_path / "prog").exists()


def test_attention_vjp_on_cuda_emulate():
    """The VJP (test_vjp_coverage.py runs it on the CPU) on the CUDA
    lowering: GQA, a cache, causal and a float mask, in float64."""
    inputs = [
        q4(1, 4, 2, 3, F64),
        ("K", [1, 2, 2, 3], F64),
        ("V", [1, 2, 2, 2], F64),
        ("attn_mask", [2, 4], F64),
        ("past_key", [1, 2, 2, 3], F64),
        ("past_value", [1, 2, 2, 2], F64),
    ]
    m = model("Attention", inputs, ["Y"], dict(is_causal=1, softcap=2.0), dtype=F64)
    check_gradients(
        m,
        [(n, s) for n, s, _ in inputs],
        np.random.default_rng(3),
        target="cuda-emulate",
    )


def test_rotary_embedding_vjp_on_cuda_emulate():
    inputs = [("X", [1, 3, 8], F64), ("cos", [4, 2], F64), ("sin", [4, 2], F64)]
    m = model(
        "RotaryEmbedding",
        inputs + ["ids"],
        ["Y"],
        dict(num_heads=2, interleaved=1, rotary_embedding_dim=4),
        inits=[("ids", np.array([[3, 0, 1]], np.int64))],
        dtype=F64,
    )
    check_gradients(
        m,
        [(n, s) for n, s, _ in inputs],
        np.random.default_rng(4),
        target="cuda-emulate",
    )

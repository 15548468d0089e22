"""Einsum (opset 12) against numpy.einsum, the oracle the ONNX spec and its
reference implementation follow: explicit and implicit outputs, several
operands, diagonals (a label repeated in one operand), ellipsis broadcasting,
uppercase labels, integer and half-precision dtypes, both CPU and
cuda-emulate targets; and the malformed equations the importer refuses.
Gradients are checked against finite differences in test_vjp_coverage.py.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper

import ddpc as ddpc_py
from ddpc._config import CompileError

DTYPES = {
    np.float32: TensorProto.FLOAT,
    np.float64: TensorProto.DOUBLE,
    np.float16: TensorProto.FLOAT16,
    np.int32: TensorProto.INT32,
    np.int64: TensorProto.INT64,
}


def einsum_model(equation, shapes, dtype, out_shape=None):
    names = [f"x{i}" for i in range(len(shapes))]
    g = helper.make_graph(
        [helper.make_node("Einsum", names, ["y"], equation=equation)],
        "einsum",
        [
            helper.make_tensor_value_info(n, DTYPES[dtype], s)
            for n, s in zip(names, shapes)
        ],
        [helper.make_tensor_value_info("y", DTYPES[dtype], out_shape)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)])
    m.ir_version = 8
    return m


def operands(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return [rng.integers(-4, 5, s).astype(dtype) for s in shapes]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


CASES = [
    ("ij,jk->ik", [[3, 4], [4, 5]]),
    ("ij,jk", [[3, 4], [4, 5]]),  # implicit: ik
    ("ba,ac", [[3, 4], [4, 2]]),  # implicit output sorted: bc
    ("ij->", [[3, 4]]),
    ("ij->j", [[3, 4]]),
    ("ijk->kji", [[2, 3, 4]]),
    ("i,j->ij", [[3], [4]]),  # outer product
    ("i,i->", [[5], [5]]),
    ("ii->i", [[4, 4]]),
    ("ii", [[4, 4]]),  # trace
    ("iij->j", [[3, 3, 2]]),
    ("ij,jk,kl->il", [[2, 3], [3, 4], [4, 2]]),
    ("bij,bjk->bik", [[2, 3, 4], [2, 4, 5]]),
    ("...ij,...jk->...ik", [[2, 1, 3, 4], [3, 4, 2]]),  # broadcast ellipsis
    ("...i,...i", [[2, 3], [3]]),
    ("i...->...", [[3, 2, 2]]),
    ("Ab,bA->A", [[3, 4], [4, 3]]),
    ("aB,Ba", [[3, 4], [4, 3]]),  # implicit with uppercase: empty (all twice)
    ("a b , b c -> a c", [[2, 3], [3, 2]]),  # spaces
]


@pytest.mark.parametrize("equation,shapes", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_einsum_matches_numpy(equation, shapes, dtype):
    xs = operands(shapes, dtype)
    want = np.einsum(equation.replace(" ", ""), *xs)
    prog = ddpc_py.compile(einsum_model(equation, shapes, dtype, want.shape))
    got = prog.run({f"x{i}": x for i, x in enumerate(xs)})["y"]
    assert got.shape == want.shape
    if dtype == np.int64:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32])
@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
def test_einsum_dtypes_and_targets(dtype, target):
    equation, shapes = "bij,bjk->bik", [[2, 3, 8], [2, 8, 4]]
    xs = operands(shapes, dtype, seed=1)
    prog = ddpc_py.compile(
        einsum_model(equation, shapes, dtype, [2, 3, 4]), target=target
    )
    got = prog.run({"x0": xs[0], "x1": xs[1]})["y"]
    # float16 accumulates in float32 (as MatMul does), then rounds once.
    acc = np.float32 if dtype == np.float16 else dtype
    want = np.einsum(equation, *[x.astype(acc) for x in xs]).astype(dtype)
    assert got.dtype == dtype
    if dtype == np.float16:
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3, atol=2e-3)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize(
    "equation,shapes,text",
    [
        ("ij,jk->ik", [[3, 4]], "operand term(s) for 1 input"),
        ("ij->ik", [[3, 4]], "has a label that no input term has"),
        ("ij->ii", [[3, 3]], "repeats a label"),
        ("ijk->i", [[3, 4]], "has 3 label(s) for input 0 of rank 2"),
        ("i1->i", [[3, 4]], "is not letters with at most one '...'"),
        ("......i->i", [[3]], "is not letters"),
        ("ij,jk->ik", [[3, 4], [5, 2]], "label sizes differ: 4 and 5"),
    ],
)
def test_malformed_equation_is_one_line(equation, shapes, text):
    with pytest.raises(CompileError) as e:
        ddpc_py.compile(einsum_model(equation, shapes, np.float32), onnx_checker=False)
    msg = str(e.value)
    assert text in msg and "Einsum" in msg and "\n" not in msg, msg

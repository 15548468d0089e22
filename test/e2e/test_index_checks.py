"""Index inputs are checked at run time (issue 17, item 2).

A Gather index outside [-size, size) used to read memory past the table:
garbage with exit 0, or a segfault for a large one. onnxruntime refuses
such an index (the oracle for "must be refused": every bad index below is
also checked to fail there), and so does ddpc now: compiled code clamps the
read, records the violation, and the caller reports it after the step
function returns: `Program.run` raises IndexError, a compiled program ends
with one line naming the node, the index and the valid range (and, in
training, the rank and the step) and writes nothing. Constant indices are
checked at compile time. `--no-runtime-checks` clamps without the check.
"""

import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ddpc_testing import run_env, MPIRUN

ddpc_py = pytest.importorskip("ddpc", reason="build the Python extension (make build)")
TABLE = np.arange(20, dtype=np.float32).reshape(5, 4)


def gather_model(
    axis=0,
    id_dtype=TensorProto.INT64,
    ids_shape=(2, 3),
    const_ids=None,
    op="Gather",
    name="embed",
):
    """`op` (Gather, or GatherND when axis is None) of TABLE by `ids`."""
    attrs = {} if axis is None else dict(axis=axis)
    inits = [numpy_helper.from_array(TABLE, "E")]
    inputs = []
    if const_ids is None:
        inputs.append(helper.make_tensor_value_info("ids", id_dtype, list(ids_shape)))
    else:
        inits.append(numpy_helper.from_array(const_ids, "ids"))
    g = helper.make_graph(
        [helper.make_node(op, ["E", "ids"], ["y"], name=name, **attrs)],
        "g",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def ort_run(m, ids):
    return ort.InferenceSession(
        m.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, {"ids": ids})[0]


BAD = [(5, 0, 5), (-6, 0, 5), (10**12, 0, 5), (-(10**12), 0, 5), (4, 1, 4), (-5, 1, 4)]


CASES = [
    (bad, axis, size, dtype)
    for bad, axis, size in BAD
    for dtype in (TensorProto.INT64, TensorProto.INT32)
    if abs(bad) < 2**31 or dtype == TensorProto.INT64
]


@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
@pytest.mark.parametrize("bad,axis,size,dtype", CASES)
def test_out_of_range_index_raises(bad, axis, size, dtype, target):
    m = gather_model(axis, dtype)
    np_dtype = np.int64 if dtype == TensorProto.INT64 else np.int32
    ids = np.array([[0, 1, -1], [2, bad, 3]], np_dtype)
    with pytest.raises(Exception):
        ort_run(m, ids)  # the oracle: onnxruntime refuses it too
    prog = ddpc_py.compile(m, onnx_checker=False, target=target)
    with pytest.raises(IndexError) as err:
        prog.run({"ids": ids})
    msg = str(err.value)
    assert f"index {bad} is out of range" in msg
    assert "Gather node 'embed'" in msg and f"axis {axis} of 'E'" in msg
    assert f"size {size}, valid indices are {-size}..{size - 1}" in msg
    # The program is usable afterwards, and in-range negative indices
    # count from the end, as in onnxruntime.
    good = np.array([[0, 1, -1], [2, -size, 3]], np_dtype)
    np.testing.assert_array_equal(prog.run({"ids": good})["y"], ort_run(m, good))


@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
@pytest.mark.parametrize("bad", [3, -4, 10**12])
def test_gather_elements_index_out_of_range_raises(bad, target):
    """GatherElements takes indices like Gather's and checks them the same
    way (axis 0 of a 3x4 table)."""
    table = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = helper.make_graph(
        [helper.make_node("GatherElements", ["E", "ids"], ["y"], axis=0, name="ge")],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(table, "E")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    ids = np.array([[0, 1, -1, 2], [2, bad, 0, -3]], np.int64)
    with pytest.raises(Exception):
        ort_run(m, ids)
    prog = ddpc_py.compile(m, onnx_checker=False, target=target)
    with pytest.raises(
        IndexError,
        match=rf"index {bad} is out of range.*GatherElements node "
        r"'ge'.*axis 0 of 'E'.*size 3, valid indices are -3..2",
    ):
        prog.run({"ids": ids})
    good = np.array([[0, 1, -1, 2], [2, -3, 0, -3]], np.int64)
    np.testing.assert_array_equal(prog.run({"ids": good})["y"], ort_run(m, good))


def test_unchecked_indices_are_clamped():
    """runtime_checks=False (--no-runtime-checks): no error, and an index out of
    range reads the nearest valid row, never memory past the table."""
    prog = ddpc_py.compile(gather_model(), onnx_checker=False, runtime_checks=False)
    ids = np.array([[0, 7, -1], [-9, 10**12, 3]])
    got = prog.run({"ids": ids})["y"]
    np.testing.assert_array_equal(got, TABLE[[[0, 4, 4], [0, 4, 3]]])


def test_constant_out_of_range_index_is_a_compile_error(ddpc, tmp_path):
    onnx.save(gather_model(const_ids=np.array([1, 9], np.int64)), tmp_path / "m.onnx")
    proc = subprocess.run(
        [
            ddpc,
            "compile",
            str(tmp_path / "m.onnx"),
            "--no-onnx-checker",
            "-o",
            str(tmp_path / "prog"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "'Gather' (node 'embed'" in proc.stderr and "index 9 of 'ids'" in proc.stderr
    assert "valid: -5..4" in proc.stderr
    assert not (tmp_path / "prog").exists()


@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
def test_program_exits_with_one_line_and_no_outputs(ddpc, tmp_path, target):
    onnx.save(gather_model(), tmp_path / "m.onnx")
    subprocess.run(
        [
            ddpc,
            "compile",
            str(tmp_path / "m.onnx"),
            "--target",
            target,
            "--no-onnx-checker",
            "-o",
            str(tmp_path / "prog"),
        ],
        check=True,
    )
    np.save(tmp_path / "ids.npy", np.array([[0, 1, 2], [3, 4, 5]]))
    proc = subprocess.run(
        [
            str(tmp_path / "prog"),
            "--input",
            f"ids={tmp_path / 'ids.npy'}",
            "--output-dir",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: index 5 is out of range"
    ), proc.stderr
    assert not list((tmp_path / "out").glob("*"))


def token_model(path):
    """ids [N, 3] -> Gather(E [5, 4]) -> mean over tokens -> Gemm -> logits [N, 2]."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Gather", ["E", "ids"], ["emb"], axis=0, name="embed"),
        helper.make_node("ReduceMean", ["emb", "axes"], ["p"], keepdims=0),
        helper.make_node("Gemm", ["p", "W", "b"], ["logits"]),
    ]
    inits = [
        numpy_helper.from_array(rng.standard_normal((5, 4)).astype(np.float32), "E"),
        numpy_helper.from_array(rng.standard_normal((4, 2)).astype(np.float32), "W"),
        numpy_helper.from_array(np.zeros(2, np.float32), "b"),
        numpy_helper.from_array(np.array([1], np.int64), "axes"),
    ]
    g = helper.make_graph(
        nodes,
        "tok",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 3])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 2])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.save(m, path)


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
def test_training_stops_naming_rank_step_and_node(ddpc, tmp_path, target):
    """2 ranks x batch 2, in file order; sample 10 (step 3, rank 1's first
    row) holds id 5 of a 5-row table. The job ends non-zero naming the rank,
    the step and the node, before the step is applied, and writes no
    --save."""
    token_model(tmp_path / "m.onnx")
    subprocess.run(
        [
            ddpc,
            "compile",
            str(tmp_path / "m.onnx"),
            "--train",
            "--batch-size",
            "2",
            "--target",
            target,
            "-o",
            str(tmp_path / "train"),
        ],
        check=True,
    )
    ids = np.random.default_rng(1).integers(0, 5, (16, 3))
    ids[10, 1] = 5  # global batch 4: step 3, rank 1 (rows 10, 11)
    np.save(tmp_path / "x.npy", ids)
    np.save(tmp_path / "y.npy", np.zeros(16, np.int64))
    proc = subprocess.run(
        [
            MPIRUN,
            "--oversubscribe",
            "-np",
            "2",
            str(tmp_path / "train"),
            "--data",
            "x.npy",
            "--labels",
            "y.npy",
            "--epochs",
            "1",
            "--no-shuffle",
            "--quiet",
            "--save",
            "out.onnx",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=run_env(),
        timeout=120,
    )
    assert proc.returncode != 0
    assert (
        "error: rank 1: step 3: index 5 is out of range in Gather node 'embed'"
        in proc.stderr
    ), proc.stderr
    assert not (tmp_path / "out.onnx").exists()


# Every imported op with an index input, and the test above that checks it.
# OneHot's out-of-range indices give an all-zero row by the spec, not an
# error, so it would go in a table of its own.
@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("bad", [4, -1, 10**12])
def test_class_index_out_of_range_raises(op, bad):
    """The loss ops' class indices lie in [0, C) or equal ignore_index;
    anything else ends the run naming the node (PyTorch and onnxruntime
    refuse it too)."""
    g = helper.make_graph(
        [helper.make_node(op, ["x", "t"], ["y"], name="loss", ignore_index=2)],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info("t", TensorProto.INT64, [3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    prog = ddpc_py.compile(m, onnx_checker=False)
    sess = ort.InferenceSession(
        m.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    good = np.array([0, 2, 3], np.int64)  # 2 is ignore_index
    np.testing.assert_allclose(
        prog.run({"x": x, "t": good})["y"],
        sess.run(None, {"x": x, "t": good})[0],
        rtol=1e-5,
    )
    with pytest.raises(
        IndexError, match=rf"target 't' outside \[0, 4\) in {op} node 'loss'"
    ):
        prog.run({"x": x, "t": np.array([0, bad, 1], np.int64)})


def gathernd_model(const_ids=None):
    """GatherND of TABLE by index pairs (component 0 into axis 0 of size 5,
    component 1 into axis 1 of size 4)."""
    return gather_model(
        None, ids_shape=(2, 2), const_ids=const_ids, op="GatherND", name="gnd"
    )


@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
@pytest.mark.parametrize(
    "component,bad,size", [(0, 5, 5), (0, -6, 5), (1, 4, 4), (1, -5, 4)]
)
def test_gathernd_index_out_of_range_raises(component, bad, size, target):
    """Each component of GatherND's index tuples has its own axis and
    bound: 4 is valid for axis 0 (size 5) but not for axis 1 (size 4)."""
    m = gathernd_model()
    ids = np.array([[4, 3], [-5, -4]], np.int64)
    ids[1, component] = bad
    with pytest.raises(Exception):
        ort_run(m, ids)
    prog = ddpc_py.compile(m, onnx_checker=False, target=target)
    with pytest.raises(
        IndexError,
        match=rf"index {bad} is out of range.*GatherND node 'gnd'.*component "
        rf"{component} into axis {component} of 'E'.*size {size}, valid indices "
        rf"are {-size}..{size - 1}",
    ):
        prog.run({"ids": ids})
    good = np.array([[4, 3], [-5, -4]], np.int64)
    np.testing.assert_array_equal(prog.run({"ids": good})["y"], ort_run(m, good))


def test_gathernd_constant_out_of_range_index_is_a_compile_error():
    with pytest.raises(ddpc_py.CompileError, match="invalid model") as e:
        ddpc_py.compile(
            gathernd_model(const_ids=np.array([[4, 3], [1, 4]], np.int64)),
            onnx_checker=False,
        )
    msg = str(e.value)
    assert "'GatherND' (node 'gnd'" in msg and "index 4 of 'ids'" in msg, msg
    assert "axis 1 of 'E' (size 4; valid: -4..3)" in msg, msg


def scatter_model(op, ids_shape, opset=13):
    """`op` of a [2, 4] update block into TABLE (5x4), indices a graph input."""
    upd = np.full((2, 4), -1.0, np.float32)
    attrs = {} if op == "ScatterND" else dict(axis=0)
    g = helper.make_graph(
        [helper.make_node(op, ["E", "ids", "u"], ["y"], name="sc", **attrs)],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, list(ids_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(TABLE, "E"), numpy_helper.from_array(upd, "u")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
@pytest.mark.parametrize(
    "op,opset", [("ScatterElements", 13), ("Scatter", 10), ("ScatterND", 13)]
)
@pytest.mark.parametrize("bad", [5, -6])
def test_scatter_index_out_of_range_raises(op, opset, bad, target):
    """Scatter indices into axis 0 (size 5) of the data are checked like
    Gather's: ScatterElements' per element, ScatterND's per row tuple."""
    nd = op == "ScatterND"
    m = scatter_model(op, (2, 1) if nd else (2, 4), opset)
    good = np.array([[1], [-1]]) if nd else np.array([[1, 0, -1, 4], [2, 3, -5, 0]])
    ids = good.copy()
    ids[1, 0] = bad
    if op != "Scatter":  # onnxruntime has no opset-10 Scatter kernel left
        with pytest.raises(Exception):
            ort_run(m, ids)
    prog = ddpc_py.compile(m, onnx_checker=False, target=target)
    with pytest.raises(
        IndexError,
        match=rf"index {bad} is out of range.*{op} node 'sc'.*axis 0 of 'E'.*"
        r"size 5, valid indices are -5..4",
    ):
        prog.run({"ids": ids})
    want = TABLE.copy()
    if nd:
        want[good[:, 0]] = -1
    else:
        np.put_along_axis(want, good % 5, -1.0, axis=0)
    np.testing.assert_array_equal(prog.run({"ids": good})["y"], want)


@pytest.mark.parametrize("opset", [9, 11])
def test_onehot_index_out_of_range_is_all_off(opset):
    """OneHot defines indices outside [-depth, depth) (opset 11) or [0,
    depth) (opset 9) as rows of `off` values: no check, no error."""
    g = helper.make_graph(
        [helper.make_node("OneHot", ["ids", "d", "v"], ["y"], name="oh")],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array([3], np.int64), "d"),
            numpy_helper.from_array(np.array([2.0, 7.0], np.float32), "v"),
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    ids = np.array([0, 3, -1, -4, 10**12])
    got = ddpc_py.compile(m, onnx_checker=False).run({"ids": ids})["y"]
    want = np.full((5, 3), 2.0, np.float32)
    want[0, 0] = 7.0
    if opset >= 11:
        want[2, 2] = 7.0
    np.testing.assert_array_equal(got, want)


CHECKED_INDEX_INPUTS = {
    ("Gather", "indices"): test_out_of_range_index_raises,
    ("GatherElements", "indices"): test_gather_elements_index_out_of_range_raises,
    ("GatherND", "indices"): test_gathernd_index_out_of_range_raises,
    ("Scatter", "indices"): test_scatter_index_out_of_range_raises,
    ("ScatterElements", "indices"): test_scatter_index_out_of_range_raises,
    ("ScatterND", "indices"): test_scatter_index_out_of_range_raises,
    # Defined behaviour, not an error: the test shows it.
    ("OneHot", "indices"): test_onehot_index_out_of_range_is_all_off,
    ("NegativeLogLikelihoodLoss", "target"): test_class_index_out_of_range_raises,
    ("SoftmaxCrossEntropyLoss", "labels"): test_class_index_out_of_range_raises,
}
# Inputs that index a class axis rather than being called `indices`.
CLASS_INDEX_INPUTS = {"target", "labels"}


def test_every_index_input_of_every_op_is_checked():
    """The class test: walks ddpc.supported_ops() and each op's ONNX schema;
    an input that holds indices into another tensor (the schemas name them
    `indices`, `batch_indices`, `write_indices`) must have a run-time check
    with a test in CHECKED_INDEX_INPUTS. Adding GatherElements, GatherND,
    ScatterND, ... without one fails here."""
    import onnx.defs

    found = {
        (op, f.name)
        for op in ddpc_py.supported_ops()
        for f in onnx.defs.get_schema(op).inputs
        if f.name.endswith("indices") or f.name in CLASS_INDEX_INPUTS
    }
    assert found, "no index input at all: the enumeration is broken"
    assert found <= set(CHECKED_INDEX_INPUTS), sorted(found - set(CHECKED_INDEX_INPUTS))


# Integer division: a zero divisor (or INT_MIN / -1 in Div) trapped with
# SIGFPE, in a compiled program and in Python's process; onnxruntime refuses
# it ("Integer division by zero"). It is now a run-time check like the index
# check: ZeroDivisionError in Program.run, one line and exit 1 in programs.
# Mod's INT_MIN % -1 is 0 (onnxruntime too), not an error.


def div_model(dtype, opset=14, op="Div", **attrs):
    g = helper.make_graph(
        [helper.make_node(op, ["x", "e"], ["y"], name="dv", **attrs)],
        "g",
        [
            helper.make_tensor_value_info("x", dtype, [3]),
            helper.make_tensor_value_info("e", dtype, [3]),
        ],
        [helper.make_tensor_value_info("y", dtype, [3])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


# Every integer op that divides: Div, and Mod with either sign rule.
DIVIDING = {"Div": {}, "Mod": {"fmod": 0}, "Mod-fmod": {"fmod": 1}}


@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
@pytest.mark.parametrize(
    "np_dtype,dtype",
    [
        (np.int32, TensorProto.INT32),
        (np.int64, TensorProto.INT64),
        (np.uint8, TensorProto.UINT8),
    ],
)
@pytest.mark.parametrize("op", sorted(DIVIDING))
def test_integer_division_by_zero_raises(target, np_dtype, dtype, op):
    m = div_model(dtype, op=op.split("-")[0], **DIVIDING[op])
    prog = ddpc_py.compile(m, onnx_checker=False, target=target)
    good = {"x": np.array([7, 8, 9], np_dtype), "e": np.array([2, 3, 4], np_dtype)}
    np.testing.assert_array_equal(
        prog.run(good)["y"],
        ort.InferenceSession(m.SerializeToString()).run(None, good)[0],
    )
    bad = {"x": np.array([7, 8, 9], np_dtype), "e": np.array([2, 0, 0], np_dtype)}
    with pytest.raises(Exception):
        ort.InferenceSession(m.SerializeToString()).run(None, bad)
    with pytest.raises(
        ZeroDivisionError,
        match=r"integer division by zero .*in "
        rf"{op.split('-')[0]} node 'dv' \(2 elements\)",
    ):
        prog.run(bad)
    if np_dtype != np.uint8:
        lo = {
            "x": np.array([np.iinfo(np_dtype).min, 1, -5], np_dtype),
            "e": np.array([-1, 1, -1], np_dtype),
        }
        if op == "Div":  # INT_MIN / -1 overflows
            with pytest.raises(ZeroDivisionError):
                prog.run(lo)
        else:
            np.testing.assert_array_equal(
                prog.run(lo)["y"],
                ort.InferenceSession(m.SerializeToString()).run(None, lo)[0],
            )
    np.testing.assert_array_equal(
        prog.run(good)["y"],
        ort.InferenceSession(m.SerializeToString()).run(None, good)[0],
    )


def test_integer_division_by_zero_in_a_program(ddpc, tmp_path):
    onnx.save(div_model(TensorProto.INT32), tmp_path / "m.onnx")
    subprocess.run(
        [ddpc, "compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "prog")],
        check=True,
    )
    np.save(tmp_path / "x.npy", np.array([5, 6, 7], np.int32))
    np.save(tmp_path / "e.npy", np.array([1, 0, 1], np.int32))
    proc = subprocess.run(
        [
            str(tmp_path / "prog"),
            "--input",
            f"x={tmp_path / 'x.npy'}",
            "--input",
            f"e={tmp_path / 'e.npy'}",
            "--output-dir",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: integer division by zero (or INT_MIN / -1) in Div node 'dv' (1 element)"
    ]


@pytest.mark.parametrize(
    "a,b,np_dtype,dtype",
    [
        (3000000000, 2, np.uint32, TensorProto.UINT32),
        (2**63 + 2, 2, np.uint64, TensorProto.UINT64),
        (-7, 2, np.int64, TensorProto.INT64),
    ],
)
def test_constant_integer_division_folds_like_onnxruntime(a, b, np_dtype, dtype):
    """Division of constants folds at import with the dtype's signedness
    (uint32 3000000000 / 2 gave 3647483648: a signed division)."""
    inits = [
        numpy_helper.from_array(np.array([a], np_dtype), "a"),
        numpy_helper.from_array(np.array([b], np_dtype), "b"),
    ]
    g = helper.make_graph(
        [
            helper.make_node("Div", ["a", "b"], ["q"]),
            helper.make_node("Add", ["x", "q"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", dtype, [1])],
        [helper.make_tensor_value_info("y", dtype, [1])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    x = {"x": np.array([0], np_dtype)}
    np.testing.assert_array_equal(
        ddpc_py.compile(m, onnx_checker=False).run(x)["y"],
        ort.InferenceSession(m.SerializeToString()).run(None, x)[0],
    )


def test_constant_int_min_divided_by_minus_one_is_a_run_time_error():
    """INT64_MIN / -1 of constants killed the compiler (SIGFPE while
    folding); it is left to the run-time check."""
    inits = [
        numpy_helper.from_array(np.array([-(2**63)], np.int64), "a"),
        numpy_helper.from_array(np.array([-1], np.int64), "b"),
    ]
    g = helper.make_graph(
        [
            helper.make_node("Div", ["a", "b"], ["q"]),
            helper.make_node("Add", ["x", "q"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [1])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    prog = ddpc_py.compile(m, onnx_checker=False)
    with pytest.raises(ZeroDivisionError):
        prog.run({"x": np.array([0], np.int64)})


def test_empty_table_is_a_compile_error(ddpc, tmp_path):
    """A zero-row table has no valid index; the clamp to [0, size - 1] read
    row -1 on cuda-emulate (SIGSEGV)."""
    g = helper.make_graph(
        [helper.make_node("Gather", ["t", "i"], ["y"], name="g")],
        "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [numpy_helper.from_array(np.zeros((0, 4), np.float32), "t")],
    )
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
        tmp_path / "m.onnx",
    )
    proc = subprocess.run(
        [
            ddpc,
            "compile",
            str(tmp_path / "m.onnx"),
            "--no-onnx-checker",
            "--target",
            "cuda-emulate",
            "-o",
            str(tmp_path / "p"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert "axis 0 of 't' has size 0: no index into it is valid" in proc.stderr

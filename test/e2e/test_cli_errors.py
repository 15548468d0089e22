"""Bad input to `ddpc compile` gives a one-line reason, a non-zero exit
code, and no output file (nothing half-written)."""

import os
import subprocess


import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def compile_model(ddpc, model_path, out_path, *extra):
    return subprocess.run(
        [ddpc, "compile", str(model_path), "-o", str(out_path), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_clean_failure(proc, out_path, expected_code, needle):
    assert proc.returncode == expected_code, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and needle in lines[0], lines[0]
    parent = os.path.dirname(str(out_path))
    assert not [
        f for f in os.listdir(parent) if f.startswith(os.path.basename(str(out_path)))
    ]


def relu_model_with_external_weight(location, offset=0):
    w = TensorProto()
    w.name = "w"
    w.data_type = TensorProto.FLOAT
    w.dims.extend([4])
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", "16")):
        e = w.external_data.add()
        e.key, e.value = k, v
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [w],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_empty_file(ddpc, tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"")
    proc = compile_model(ddpc, tmp_path / "m.onnx", tmp_path / "prog")
    assert_clean_failure(proc, tmp_path / "prog", 1, "empty")


def test_malformed_file(ddpc, tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"\xff\xfe this is not protobuf \x00\x01" * 10)
    proc = compile_model(ddpc, tmp_path / "m.onnx", tmp_path / "prog")
    assert_clean_failure(proc, tmp_path / "prog", 1, "not an ONNX")


def test_missing_file(ddpc, tmp_path):
    proc = compile_model(ddpc, tmp_path / "nope.onnx", tmp_path / "prog")
    assert_clean_failure(proc, tmp_path / "prog", 1, "cannot read")


def test_unsupported_op_exit_2(ddpc, tmp_path):
    g = helper.make_graph(
        [helper.make_node("Unique", ["x"], ["y"], name="hm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
        tmp_path / "m.onnx",
    )
    proc = compile_model(ddpc, tmp_path / "m.onnx", tmp_path / "prog")
    assert_clean_failure(
        proc,
        tmp_path / "prog",
        2,
        "unsupported op 'Unique' (node 'hm', domain '', opset 13)",
    )


@pytest.mark.parametrize(
    "location",
    [
        "../w.bin",
        "/etc/passwd",
        "link.bin",
        "hardlink.bin",
        "fifo.bin",
        "sub",
        "past-end.bin",
    ],
)
def test_external_data_outside_folder(ddpc, tmp_path, location):
    """Every way an external-data location could read what is not the
    model's own data is refused with one line: a path out of the folder
    (`..`, absolute), a symlink out, a hard link (it may also be linked from
    anywhere; onnx >= 1.20 refuses files with more than one link), a FIFO
    (reading would block), a folder, and a range past the end of the file."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (tmp_path / "w.bin").write_bytes(np.ones(4, np.float32).tobytes())
    offset = 0
    if location == "link.bin":
        os.symlink(tmp_path / "w.bin", model_dir / "link.bin")
    elif location == "hardlink.bin":
        os.link(tmp_path / "w.bin", model_dir / "hardlink.bin")
    elif location == "fifo.bin":
        os.mkfifo(model_dir / "fifo.bin")
    elif location == "sub":
        (model_dir / "sub").mkdir()
    elif location == "past-end.bin":
        (model_dir / "past-end.bin").write_bytes(np.ones(4, np.float32).tobytes())
        offset = 8
    onnx.save(relu_model_with_external_weight(location, offset), model_dir / "m.onnx")
    proc = compile_model(ddpc, model_dir / "m.onnx", tmp_path / "prog")
    needle = {
        "link.bin": "outside",
        "hardlink.bin": "2 hard links",
        "fifo.bin": "not a regular file",
        "sub": "not a regular file",
        "past-end.bin": "beyond the end",
    }.get(location, location)
    assert_clean_failure(proc, tmp_path / "prog", 1, needle)


@pytest.mark.parametrize("offset", ["abc", "-4", "99999999999999999999", "", "4x"])
def test_external_data_bad_offset(ddpc, tmp_path, offset):
    """An offset that is not a byte count is one clean error (std::stoll
    threw, and a negative offset read before the buffer)."""
    (tmp_path / "w.bin").write_bytes(np.ones(8, np.float32).tobytes())
    onnx.save(relu_model_with_external_weight("w.bin", offset), tmp_path / "m.onnx")
    proc = compile_model(ddpc, tmp_path / "m.onnx", tmp_path / "prog")
    assert_clean_failure(proc, tmp_path / "prog", 1, "is not a byte count")


def test_external_data_inside_folder_works(ddpc, tmp_path):
    """The positive case: external data next to the model is read, and the
    program computes x + w (numpy oracle)."""
    w = np.array([1.5, -2.0, 3.25, 0.5], np.float32)
    (tmp_path / "w.bin").write_bytes(w.tobytes())
    onnx.save(relu_model_with_external_weight("w.bin"), tmp_path / "m.onnx")
    proc = compile_model(ddpc, tmp_path / "m.onnx", tmp_path / "prog")
    assert proc.returncode == 0, proc.stderr
    x = np.array([1, 2, 3, 4], np.float32)
    np.save(tmp_path / "x.npy", x)
    run = subprocess.run(
        [
            str(tmp_path / "prog"),
            "--input",
            f"x={tmp_path / 'x.npy'}",
            "--output-dir",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), x + w)


def test_program_rejects_wrong_input_shape(ddpc, tmp_path):
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
        tmp_path / "m.onnx",
    )
    assert compile_model(ddpc, tmp_path / "m.onnx", tmp_path / "prog").returncode == 0
    np.save(tmp_path / "x.npy", np.zeros((3, 2), np.float32))
    run = subprocess.run(
        [
            str(tmp_path / "prog"),
            str(tmp_path / "x.npy"),
            "--output-dir",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1
    assert "input 'x'" in run.stderr and "float32[2,3]" in run.stderr


def relu_model(path, opset=13, dims=(2, 3), outputs=True):
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
        (
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))]
            if outputs
            else []
        ),
    )
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path
    )
    return path


def test_output_to_fifo_is_written_not_replaced(ddpc, tmp_path):
    """-o onto a named pipe (or a device such as /dev/null) writes into it;
    the old temp-and-rename replaced the special file with a regular one
    (and a reader waiting on the pipe hung)."""
    import stat
    import threading

    model = relu_model(tmp_path / "m.onnx")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(
        target=lambda: got.append(open(fifo, "rb").read()), daemon=True
    )
    reader.start()
    proc = compile_model(ddpc, model, fifo, "--emit=mlir")
    assert proc.returncode == 0, proc.stderr
    reader.join(timeout=60)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert got and b"func.func @main_graph" in got[0]
    assert not [f for f in os.listdir(tmp_path) if ".tmp." in f]


def test_output_through_symlink_keeps_the_link(ddpc, tmp_path):
    """-o onto a symlink replaces the file it points to, not the link; the
    program's --output-dir files likewise."""
    model = relu_model(tmp_path / "m.onnx")
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "prog").write_text("old")
    os.symlink(tmp_path / "real" / "prog", tmp_path / "prog")
    proc = compile_model(ddpc, model, tmp_path / "prog")
    assert proc.returncode == 0, proc.stderr
    assert os.path.islink(tmp_path / "prog")
    assert (tmp_path / "real" / "prog").read_bytes()[:4] == b"\x7fELF"
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(tmp_path / "real" / "y.npy", out / "y.npy")  # Dangling: created.
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.save(tmp_path / "x.npy", x)
    run = subprocess.run(
        [
            str(tmp_path / "prog"),
            "--input",
            f"x={tmp_path / 'x.npy'}",
            "--output-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert os.path.islink(out / "y.npy")
    np.testing.assert_array_equal(
        np.load(tmp_path / "real" / "y.npy"), np.maximum(x, 0)
    )


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--cpu=bogus"], "--cpu bogus: not a CPU"),
        (["-O7"], "-O7: the optimization level is 0, 1, 2 or 3"),
        (["--dim", "N=3", "--dim", "N=4"], "--dim N is given twice"),
        (
            ["--dim", "N=3", "--batch-size", "2"],
            "--batch-size 2 conflicts with --dim N=3",
        ),
        (
            ["--train", "--lr", "-1", "--batch-size", "2"],
            "--lr (TrainConfig.lr) must be a finite float32 >= 0, got -1",
        ),
        (["--dump-ir", ""], "--dump-ir needs a folder name"),
        (["--precision", "fp8"], "unknown --precision 'fp8' (supported: fp32, tf32)"),
        (
            ["--train", "--loss", "mse", "--batch-size", "2", "--freeze", ""],
            "--freeze: empty initializer name",
        ),
        (
            ["--train", "--loss", "mse", "--batch-size", "2", "--freeze", "w,"],
            "--freeze: empty initializer name",
        ),
    ],
)
def test_bad_options_are_named(ddpc, tmp_path, args, needle):
    model = relu_model(tmp_path / "m.onnx", dims=("N", 3))
    proc = compile_model(ddpc, model, tmp_path / "prog", *args)
    assert_clean_failure(proc, tmp_path / "prog", 1, needle)


@pytest.mark.parametrize("train", [[], ["--train"]])
def test_batch_size_on_fixed_shapes_is_refused(ddpc, tmp_path, train):
    """A model whose inputs all have a fixed leading dimension: --batch-size
    with another value used to be ignored silently (a training program then
    ran batch 4 when 2 was asked for); the same value is harmless."""
    model = relu_model(tmp_path / "m.onnx", dims=(4, 3))
    proc = compile_model(ddpc, model, tmp_path / "prog", "--batch-size", "2", *train)
    assert_clean_failure(
        proc,
        tmp_path / "prog",
        1,
        "--batch-size 2 cannot apply: the leading dimension of every graph "
        "input is fixed ('x' has 4)",
    )
    proc = compile_model(ddpc, model, tmp_path / "prog", "--batch-size", "4")
    assert proc.returncode == 0, proc.stderr


def test_batch_size_binds_the_name_everywhere(ddpc, tmp_path):
    """--batch-size binds the leading dimension's name, so the same name in
    another position of another input gets the same value (numpy oracle)."""
    g = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, "N"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "N"])],
    )
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
        tmp_path / "m.onnx",
    )
    proc = compile_model(
        ddpc, tmp_path / "m.onnx", tmp_path / "prog", "--batch-size", "2"
    )
    assert proc.returncode == 0, proc.stderr
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    run = subprocess.run(
        [
            str(tmp_path / "prog"),
            "--input",
            f"a={tmp_path / 'a.npy'}",
            "--input",
            f"b={tmp_path / 'b.npy'}",
            "--output-dir",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), a @ b)


def test_output_path_is_a_folder(ddpc, tmp_path):
    model = relu_model(tmp_path / "m.onnx")
    proc = compile_model(ddpc, model, tmp_path)
    assert (
        proc.returncode == 1
        and "is a folder; give the output a file name" in proc.stderr
    )
    (tmp_path / "file").write_text("x")
    proc = compile_model(ddpc, model, tmp_path / "file" / "prog")
    assert proc.returncode == 1 and "file' is not a folder" in proc.stderr


def test_newer_opset_than_onnx_knows_exit_2(ddpc, tmp_path):
    """onnxruntime refuses an opset newer than its ONNX; so does ddpc
    (ONNX 1.22: 27), instead of importing with guessed semantics."""
    model = relu_model(tmp_path / "m.onnx", opset=99)
    proc = compile_model(ddpc, model, tmp_path / "prog", "--no-onnx-checker")
    assert_clean_failure(
        proc, tmp_path / "prog", 2, "opset 99 is newer than the newest"
    )
    ok = compile_model(
        ddpc, relu_model(tmp_path / "m27.onnx", opset=27), tmp_path / "p27"
    )
    assert ok.returncode == 0, ok.stderr


def test_output_listed_twice(ddpc, tmp_path):
    """An output name listed twice compiled, and the program then refused to
    write its second copy; it is now a compile error naming the output."""
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])] * 2,
    )
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
        tmp_path / "m.onnx",
    )
    proc = compile_model(ddpc, tmp_path / "m.onnx", tmp_path / "prog")
    assert_clean_failure(proc, tmp_path / "prog", 1, "graph output 'y' is listed twice")


def test_graph_without_outputs(ddpc, tmp_path):
    model = relu_model(tmp_path / "m.onnx", outputs=False)
    proc = compile_model(ddpc, model, tmp_path / "prog")
    assert_clean_failure(proc, tmp_path / "prog", 1, "the graph has no outputs")


def test_executable_through_dangling_symlink_runs(ddpc, tmp_path):
    """-o onto a dangling symlink creates its target with the program's
    permissions (it was created 0644 and could not run)."""
    model = relu_model(tmp_path / "m.onnx")
    (tmp_path / "b").mkdir()
    os.symlink(tmp_path / "b" / "prog", tmp_path / "link")
    proc = compile_model(ddpc, model, tmp_path / "link")
    assert proc.returncode == 0, proc.stderr
    assert os.access(tmp_path / "b" / "prog", os.X_OK)
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    run = subprocess.run(
        [
            str(tmp_path / "link"),
            "--input",
            f"x={tmp_path / 'x.npy'}",
            "--output-dir",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr


def test_fifo_reader_that_stops_early(ddpc, tmp_path):
    """A reader that closes the pipe early is a write error (exit 1, named),
    not death by SIGPIPE, and leaves no temporary behind."""
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def read_a_little():
        with open(fifo, "rb") as f:
            f.read(10)

    reader = threading.Thread(target=read_a_little, daemon=True)
    reader.start()
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    # A 256x256 weight: about 0.5 MB of IR, far more than a pipe buffers.
    w = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 256])],
        [numpy_helper.from_array(w, "w")],
    )
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
        tmp_path / "big.onnx",
    )
    proc = subprocess.run(
        [ddpc, "compile", str(tmp_path / "big.onnx"), "-o", str(fifo), "--emit=mlir"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TMPDIR=str(tmpdir)),
    )
    reader.join(timeout=60)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "Broken pipe" in proc.stderr and "pipe" in proc.stderr
    assert not list(tmpdir.iterdir())


def assert_outputs_on_both_targets(ddpc, tmp_path, names, want, tol):
    """Compiles tmp_path/m.onnx for the CPU and cuda-emulate targets, runs
    each on tmp_path/x.npy (input 'x'), and compares outputs `names` with
    `want` (the oracle's, in order) within `tol` (0: bitwise)."""
    for target in ("cpu", "cuda-emulate"):
        proc = compile_model(
            ddpc, tmp_path / "m.onnx", tmp_path / "prog", "--target", target
        )
        assert proc.returncode == 0, proc.stderr
        run = subprocess.run(
            [
                str(tmp_path / "prog"),
                "--input",
                f"x={tmp_path / 'x.npy'}",
                "--output-dir",
                str(tmp_path / target),
            ],
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stderr
        for name, ref in zip(names, want):
            np.testing.assert_allclose(
                np.load(tmp_path / target / f"{name}.npy"),
                ref,
                rtol=tol,
                atol=tol,
                err_msg=f"{target} {name}",
            )


def test_one_tensor_as_several_outputs(ddpc, tmp_path):
    """Relu -> r, Identity(r) -> r2, Identity(r) -> r3: one tensor under
    three output names (compiling crashed in buffer-results-to-out-params)."""
    import onnxruntime as ort

    g = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Identity", ["r"], ["r2"]),
            helper.make_node("Identity", ["r"], ["r3"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3])
            for n in ("r", "r2", "r3")
        ],
    )
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
        tmp_path / "m.onnx",
    )
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.save(tmp_path / "x.npy", x)
    want = ort.InferenceSession(
        str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]
    ).run(None, {"x": x})
    assert_outputs_on_both_targets(ddpc, tmp_path, ("r", "r2", "r3"), want, 0)


@pytest.mark.parametrize(
    "outs", [("y", "s", "t"), ("y", "t"), ("t", "y"), ("s", "t", "y")]
)
@pytest.mark.parametrize("ops", [("Neg", "Neg", "Add"), ("Exp", "Tanh", "Mul")])
def test_chain_of_intermediate_outputs(ddpc, tmp_path, ops, outs):
    """s = f(x), t = g(s), y = s (op) t, with s and t graph outputs too: the
    consumer y reads two results of the multi-result kernel that computes s
    and t. Fusing through one operand redirected the other to the fused
    op's own result (a cycle: heap corruption at compile time). onnxruntime
    oracle, CPU and cuda-emulate."""
    import onnxruntime as ort

    f, g, op = ops
    graph = helper.make_graph(
        [
            helper.make_node(f, ["x"], ["s"]),
            helper.make_node(g, ["s"], ["t"]),
            helper.make_node(op, ["s", "t"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in outs],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
        tmp_path / "m.onnx",
    )
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    want = ort.InferenceSession(
        str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]
    ).run(None, {"x": x})
    assert_outputs_on_both_targets(ddpc, tmp_path, outs, want, 1e-6)


def test_clip_without_bounds_maps_infinities_to_the_largest_float(ddpc, tmp_path):
    """ONNX Clip-11+: a missing min/max is the type's lowest/largest value,
    so +-inf become +-FLT_MAX (onnxruntime oracle); they stayed infinite."""
    import onnxruntime as ort

    g = helper.make_graph(
        [helper.make_node("Clip", ["x", "lo"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(-1e38, np.float32), "lo")],
    )
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
        tmp_path / "m.onnx",
    )
    x = np.array([np.inf, -np.inf, np.nan, 3.0], np.float32)
    np.save(tmp_path / "x.npy", x)
    (want,) = ort.InferenceSession(
        str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]
    ).run(None, {"x": x})
    assert want[0] == np.finfo(np.float32).max
    for target in ("cpu", "cuda-emulate"):
        assert (
            compile_model(
                ddpc, tmp_path / "m.onnx", tmp_path / "prog", "--target", target
            ).returncode
            == 0
        )
        run = subprocess.run(
            [
                str(tmp_path / "prog"),
                "--input",
                f"x={tmp_path / 'x.npy'}",
                "--output-dir",
                str(tmp_path / target),
            ],
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stderr
        np.testing.assert_array_equal(np.load(tmp_path / target / "y.npy"), want)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--lr", "1e39"], "--lr (TrainConfig.lr) must be a finite float32 >= 0"),
        (
            ["--momentum", "-1"],
            "--momentum (TrainConfig.momentum) must be a finite number >= 0",
        ),
        (["--weight-decay", "nan"], "--weight-decay (TrainConfig.weight_decay)"),
        (
            ["--dampening", "inf"],
            "--dampening (TrainConfig.dampening) must be a finite number",
        ),
        (
            ["--optimizer", "adamw", "--betas", "1.5,0.9"],
            "--betas (TrainConfig.betas) must be in [0, 1)",
        ),
        (["--optimizer", "adamw", "--eps", "nan"], "--eps (TrainConfig.eps)"),
        # torch.optim.SGD refuses Nesterov without momentum (or with dampening).
        (["--nesterov"], "--nesterov (TrainConfig.nesterov) needs --momentum > 0"),
        (
            ["--nesterov", "--momentum", "0.9", "--dampening", "0.1"],
            "--nesterov (TrainConfig.nesterov) needs --momentum > 0 and --dampening 0",
        ),
        # The other optimizer's options: torch.optim raises TypeError.
        (
            ["--optimizer", "adamw", "--momentum", "0.9"],
            "--momentum, --dampening and --nesterov (TrainConfig.momentum, "
            "dampening, nesterov) apply to --optimizer sgd only",
        ),
        (["--betas", "0.8,0.99"], "--betas and --eps (TrainConfig.betas, eps) apply"),
        (
            ["--grad-accum-steps", "0"],
            "--grad-accum-steps (TrainConfig.grad_accum_steps) must be in [1, 2^31), got 0",
        ),
    ],
)
def test_bad_optimizer_settings_are_named(ddpc, tmp_path, args, needle):
    model = relu_model(tmp_path / "m.onnx", dims=("N", 3))
    proc = compile_model(
        ddpc,
        model,
        tmp_path / "prog",
        "--train",
        "--loss",
        "mse",
        "--batch-size",
        "2",
        *args,
    )
    assert_clean_failure(proc, tmp_path / "prog", 1, needle)


def test_killed_while_waiting_for_fifo_reader_leaves_no_temporary(ddpc, tmp_path):
    """Opening a FIFO for writing blocks until a reader comes. A compile
    killed while it waits there must not leave its temporary in $TMPDIR
    (it used to: the temporary was removed only after the copy)."""
    import signal
    import time

    model = relu_model(tmp_path / "m.onnx")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = subprocess.Popen(
        [ddpc, "compile", str(model), "-o", str(fifo), "--emit=mlir"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, TMPDIR=str(tmpdir)),
    )
    # Wait until it blocks in open() (Linux's wait_for_partner), or give it
    # ample time to get there: compiling this model takes well under 1 s.
    deadline = time.time() + 15
    while time.time() < deadline and proc.poll() is None:
        try:
            if "partner" in open(f"/proc/{proc.pid}/wchan").read():
                break
        except OSError:
            pass
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    assert not list(tmpdir.iterdir())


def test_hardsigmoid_keeps_nan(ddpc, tmp_path):
    """HardSigmoid clamps with NaN-propagating max/min, as onnxruntime does
    (it mapped NaN to 0)."""
    import onnxruntime as ort

    g = helper.make_graph(
        [helper.make_node("HardSigmoid", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
        tmp_path / "m.onnx",
    )
    x = np.array([[np.nan, -10, -1], [0, 1, np.inf]], np.float32)
    np.save(tmp_path / "x.npy", x)
    want = ort.InferenceSession(
        str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]
    ).run(None, {"x": x})
    assert np.isnan(want[0][0, 0])
    assert_outputs_on_both_targets(ddpc, tmp_path, ("y",), want, 0)


@pytest.mark.parametrize(
    "dtype,name",
    [(TensorProto.FLOAT8E4M3FN, "FLOAT8E4M3FN"), (TensorProto.INT4, "INT4")],
)
def test_newer_dtype_is_named(ddpc, tmp_path, dtype, name):
    """A dtype newer than the ONNX 1.12 library (8- and 4-bit types) is
    refused by its ONNX name; it read "has dtype unsupported dtype"."""
    w = helper.make_tensor("w", dtype, [4], [0, 1, 2, 3])
    g = helper.make_graph(
        [
            helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["x", "wf"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [w],
    )
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]),
        tmp_path / "m.onnx",
    )
    proc = compile_model(ddpc, tmp_path / "m.onnx", tmp_path / "prog")
    assert_clean_failure(proc, tmp_path / "prog", 2, f"has dtype {name}")


ARITY_AND_TYPES = {
    # Inputs the op's schema does not allow: one line naming the node,
    # never a crash in an importer that reads its inputs by position (the
    # fuzzer's InstanceNormalization with one input) or an IR verifier error
    # (a Clip bound of another dtype, a float Where condition).
    "too-few-inputs": (
        helper.make_node("InstanceNormalization", ["x"], ["y"], name="n"),
        [],
        "has 1 input(s); InstanceNormalization (opset 6) takes 3",
    ),
    "too-many-inputs": (
        helper.make_node("Relu", ["x", "x"], ["y"], name="n"),
        [],
        "has 2 input(s); Relu (opset 14) takes 1",
    ),
    "empty-required-input": (
        helper.make_node("Add", ["x", ""], ["y"], name="n"),
        [],
        "required input #1 ('B') is empty",
    ),
    "clip-bound-dtype": (
        helper.make_node("Clip", ["x", "lo"], ["y"], name="n"),
        [numpy_helper.from_array(np.array(1, np.int16), "lo")],
        "inputs #0 ('x', float32) and #1 ('lo', int16) must have the same "
        "element type (T)",
    ),
    "where-float-condition": (
        helper.make_node("Where", ["x", "x", "x"], ["y"], name="n"),
        [],
        "input #0 ('x') has type tensor(float), which Where (opset 9) "
        "does not take there",
    ),
}


@pytest.mark.parametrize("case", sorted(ARITY_AND_TYPES))
def test_inputs_the_schema_refuses_are_one_line(ddpc, tmp_path, case):
    node, inits, needle = ARITY_AND_TYPES[case]
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        inits,
    )
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]),
        tmp_path / "m.onnx",
    )
    proc = compile_model(
        ddpc, tmp_path / "m.onnx", tmp_path / "prog", "--no-onnx-checker"
    )
    assert_clean_failure(proc, tmp_path / "prog", 1, needle)
    assert "(node 'n'" in proc.stderr


def shape_model(nodes, inputs, inits=()):
    g = helper.make_graph(
        nodes,
        "g",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        list(inits),
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def overflow_initializer():
    t = TensorProto()
    t.name, t.data_type = "w", TensorProto.FLOAT
    t.dims.extend([6148914691236517206, 3])
    t.raw_data = np.array([1, 2], np.float32).tobytes()
    return t


BAD_SHAPES = {
    # 6148914691236517206 * 3 wraps to 2 in int64: the reshape passed its
    # element-count check and a later Gather read past the 2-element buffer.
    "reshape-overflow": (
        [
            helper.make_node("Reshape", ["x", "s"], ["r"]),
            helper.make_node("Gather", ["r", "i"], ["y"]),
        ],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [1]),
        ],
        [numpy_helper.from_array(np.array([6148914691236517206, 3], np.int64), "s")],
        "has more elements than int64 can count",
    ),
    "initializer-overflow": (  # aborted the compiler (SmallVector unable to grow)
        [helper.make_node("Gather", ["w", "i"], ["y"])],
        [helper.make_tensor_value_info("i", TensorProto.INT64, [1])],
        [overflow_initializer()],
        "more than 2^40 elements",
    ),
    "negative-pads": (  # an internal error in bufferization
        [
            helper.make_node(
                "MaxPool", ["x"], ["y"], kernel_shape=[2, 2], pads=[-1, -1, -1, -1]
            )
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [],
        "pads [-1,-1,-1,-1] has a negative entry",
    ),
    "expand-negative": (  # an IR verifier failure
        [helper.make_node("Expand", ["x", "s"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array([-3], np.int64), "s")],
        "shape [-3] has a negative dimension",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SHAPES))
def test_malformed_shapes_are_one_line(ddpc, tmp_path, case):
    nodes, inputs, inits, needle = BAD_SHAPES[case]
    onnx.save(shape_model(nodes, inputs, inits), tmp_path / "m.onnx")
    proc = compile_model(
        ddpc, tmp_path / "m.onnx", tmp_path / "prog", "--no-onnx-checker"
    )
    assert_clean_failure(proc, tmp_path / "prog", 1, needle)


def test_names_that_are_not_utf8_give_printable_errors(tmp_path):
    """Op types and node names are arbitrary bytes in a model; errors name
    them with \\xNN escapes (Python raised UnicodeDecodeError instead of
    CompileError)."""
    import ddpc as ddpc_py

    m = shape_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
    )
    raw = m.SerializeToString().replace(b"Relu", b"\x8fdd\xff")
    with pytest.raises(ddpc_py.CompileError, match=r"unsupported op '\\x8fdd\\xff'"):
        ddpc_py.compile(raw, onnx_checker=False)


SSA = {
    # Graphs are in SSA form; these were accepted, the later definition
    # silently winning.
    "two-nodes-one-output": (
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        "output 'y' is already defined",
    ),
    "output-shadows-input": (
        [helper.make_node("Relu", ["x"], ["x"]), helper.make_node("Neg", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        "output 'x' is already defined",
    ),
    "input-listed-twice": (
        [helper.make_node("Relu", ["x"], ["y"])],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
        ],
        "graph input 'x' is listed twice",
    ),
}


@pytest.mark.parametrize("case", sorted(SSA))
def test_names_defined_twice_are_refused(ddpc, tmp_path, case):
    nodes, inputs, needle = SSA[case]
    onnx.save(shape_model(nodes, inputs), tmp_path / "m.onnx")
    proc = compile_model(
        ddpc, tmp_path / "m.onnx", tmp_path / "prog", "--no-onnx-checker"
    )
    assert_clean_failure(proc, tmp_path / "prog", 1, needle)


ONE_ELEMENT = {
    # Attributes and inputs the spec makes one-element: a larger Clip bound
    # broadcast and changed the output's shape, a Constant with two value
    # attributes kept the first, a ConstantOfShape value of 0 elements read
    # past its end. onnxruntime refuses each model too.
    "clip-min-vector": (
        [helper.make_node("Clip", ["x", "lo"], ["y"], name="n")],
        [numpy_helper.from_array(np.zeros(3, np.float32), "lo")],
        "min must be a scalar (one element)",
    ),
    "clip-max-vector": (
        [helper.make_node("Clip", ["x", "", "hi"], ["y"], name="n")],
        [numpy_helper.from_array(np.ones((2, 3), np.float32), "hi")],
        "max must be a scalar (one element)",
    ),
    "constant-two-values": (
        [
            helper.make_node(
                "Constant",
                [],
                ["c"],
                name="n",
                value_float=1.0,
                value_floats=[1.0, 2.0],
            ),
            helper.make_node("Add", ["x", "c"], ["y"]),
        ],
        [],
        "needs exactly one value attribute, has 2",
    ),
    "constant-no-value": (
        [
            helper.make_node("Constant", [], ["c"], name="n"),
            helper.make_node("Add", ["x", "c"], ["y"]),
        ],
        [],
        "needs exactly one value attribute, has 0",
    ),
    "constant-of-shape-two-values": (
        [
            helper.make_node(
                "ConstantOfShape",
                ["s"],
                ["c"],
                name="n",
                value=numpy_helper.from_array(np.array([1, 2], np.float32)),
            ),
            helper.make_node("Add", ["x", "c"], ["y"]),
        ],
        [numpy_helper.from_array(np.array([2, 3], np.int64), "s")],
        "value must have one element, has 2",
    ),
    "constant-of-shape-empty-value": (
        [
            helper.make_node(
                "ConstantOfShape",
                ["s"],
                ["c"],
                name="n",
                value=numpy_helper.from_array(np.zeros(0, np.float32)),
            ),
            helper.make_node("Add", ["x", "c"], ["y"]),
        ],
        [numpy_helper.from_array(np.array([2, 3], np.int64), "s")],
        "value must have one element, has 0",
    ),
}


@pytest.mark.parametrize("case", sorted(ONE_ELEMENT))
def test_one_element_values_are_checked(ddpc, tmp_path, case):
    import onnxruntime as ort

    nodes, inits, needle = ONE_ELEMENT[case]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "m.onnx")
    # The oracle: the onnx checker or onnxruntime refuses the model
    # (onnxruntime takes the first of two Constant values; the checker not).
    with pytest.raises(Exception):
        onnx.checker.check_model(model, full_check=True)
        sess = ort.InferenceSession(
            str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]
        )
        sess.run(None, {"x": np.ones((2, 3), np.float32)})
    proc = compile_model(
        ddpc, tmp_path / "m.onnx", tmp_path / "prog", "--no-onnx-checker"
    )
    assert_clean_failure(proc, tmp_path / "prog", 1, needle)
    assert "(node 'n'" in proc.stderr


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_low_precision_not_yet_exit_2(ddpc, tmp_path, precision):
    model = relu_model(tmp_path / "m.onnx", dims=("N", 3))
    proc = compile_model(ddpc, model, tmp_path / "prog", "--precision", precision)
    assert_clean_failure(
        proc, tmp_path / "prog", 2, f"--precision {precision} is not supported yet"
    )


@pytest.mark.parametrize(
    "args,name",
    [
        (["--precision", "fp32", "--precision", "tf32"], "--precision"),
        (["--target", "cpu", "--target=cpu"], "--target"),
        (["-O2", "-O3"], "-O"),
        (["--no-fusion", "--no-fusion"], "--no-fusion"),
        (["--train", "--lr", "0.1", "--lr", "0.2"], "--lr"),
    ],
)
def test_repeated_single_valued_option_is_an_error(ddpc, tmp_path, args, name):
    """A single-valued option given twice was accepted, the last one
    winning; it is an error naming the option (--dim and the other list
    options stay repeatable)."""
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
        tmp_path / "m.onnx",
    )
    proc = compile_model(ddpc, tmp_path / "m.onnx", tmp_path / "prog", *args)
    assert_clean_failure(proc, tmp_path / "prog", 1, f"{name} is given 2 times")

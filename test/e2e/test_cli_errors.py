"""Bad input to `ddpc compile` gives a one-line reason, a non-zero exit
code, and no output file (nothing half-written)."""
import os
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def compile_model(ddpc, model_path, out_path, *extra):
    return subprocess.run([ddpc, "compile", str(model_path), "-o", str(out_path), *extra],
                          capture_output=True, text=True, timeout=120)


def assert_clean_failure(proc, out_path, expected_code, needle):
    assert proc.returncode == expected_code, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and needle in lines[0], lines[0]
    parent = os.path.dirname(str(out_path))
    assert not [f for f in os.listdir(parent) if f.startswith(os.path.basename(str(out_path)))]


def relu_model_with_external_weight(location):
    w = TensorProto()
    w.name = "w"
    w.data_type = TensorProto.FLOAT
    w.dims.extend([4])
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "16")):
        e = w.external_data.add()
        e.key, e.value = k, v
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [w])
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
    g = helper.make_graph([helper.make_node("Hardmax", ["x"], ["y"], name="hm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "m.onnx")
    proc = compile_model(ddpc, tmp_path / "m.onnx", tmp_path / "prog")
    assert_clean_failure(proc, tmp_path / "prog", 2,
                         "unsupported op 'Hardmax' (node 'hm', domain '', opset 13)")


@pytest.mark.parametrize("location", ["../w.bin", "/etc/passwd", "link.bin"])
def test_external_data_outside_folder(ddpc, tmp_path, location):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (tmp_path / "w.bin").write_bytes(np.ones(4, np.float32).tobytes())
    if location == "link.bin":
        os.symlink(tmp_path / "w.bin", model_dir / "link.bin")
    onnx.save(relu_model_with_external_weight(location), model_dir / "m.onnx")
    proc = compile_model(ddpc, model_dir / "m.onnx", tmp_path / "prog")
    assert_clean_failure(proc, tmp_path / "prog", 1, "outside" if location == "link.bin" else location)


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
    run = subprocess.run([str(tmp_path / "prog"), "--input", f"x={tmp_path / 'x.npy'}",
                          "--output-dir", str(tmp_path / "out")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), x + w)


def test_program_rejects_wrong_input_shape(ddpc, tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "m.onnx")
    assert compile_model(ddpc, tmp_path / "m.onnx", tmp_path / "prog").returncode == 0
    np.save(tmp_path / "x.npy", np.zeros((3, 2), np.float32))
    run = subprocess.run([str(tmp_path / "prog"), str(tmp_path / "x.npy"),
                          "--output-dir", str(tmp_path / "out")], capture_output=True, text=True)
    assert run.returncode == 1
    assert "input 'x'" in run.stderr and "float32[2,3]" in run.stderr

"""The static memory plan (Analysis/MemoryPlan.h), the runtimes' measured
high-water mark and --memory-budget.

The plan's categories are checked against sizes computed here from the ONNX
model's initializers (the runtime rounds each tensor to 64 bytes and keeps
two halves of parameters, buffers, gradients and optimizer state), and its
predicted peak against what the training program counted while it ran."""

import json
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ddpc_testing import C, MPIRUN, data, mlp_model, run_train

ALIGN = 64
OPTIMIZERS = {  # flags, optimizer state slots per parameter
    "sgd": (["--optimizer", "sgd"], 0),
    "sgd-momentum": (["--optimizer", "sgd", "--momentum", "0.9"], 1),
    "adamw": (["--optimizer", "adamw"], 2),
}


def cnn_model(path, seed=0):
    """Conv -> BatchNorm -> Relu -> Conv -> Relu -> GlobalAveragePool ->
    Flatten -> Gemm on [N, 2, 12, 12] images; returns the initializers."""
    rng = np.random.default_rng(seed)
    inits = {
        "cw": (rng.standard_normal((8, 2, 3, 3)) * 0.3).astype(np.float32),
        "s": np.ones(8, np.float32),
        "bb": np.zeros(8, np.float32),
        "mean": np.zeros(8, np.float32),
        "var": np.ones(8, np.float32),
        "cw2": (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32),
        "fw": (rng.standard_normal((C, 8)) * 0.3).astype(np.float32),
        "fb": np.zeros(C, np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("Conv", ["r", "cw2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
    ]
    g = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 12, 12])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", C])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return inits


def rounded(nbytes):
    return -(-max(nbytes, 1) // ALIGN) * ALIGN


def compile_plan(ddpc, model, out, batch, *args, check=True):
    proc = subprocess.run(
        [ddpc, "compile", str(model), "--train", "--batch-size", str(batch)]
        + ["-o", str(out), "--report=json", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def plan_of(proc):
    plan = json.loads(proc.stdout)["memory_plan"]
    return plan, {c["category"]: c["bytes"] for c in plan["categories"]}


def measured_peak(tmp_path, prog, ranks=1):
    run_train(prog, tmp_path, ranks, "--epochs", "1", "--log-json", "log.jsonl")
    last = [json.loads(l) for l in open(tmp_path / "log.jsonl")][-1]
    return last["peak_memory_bytes"], last["memory_plan_bytes"]


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_state_categories_match_the_initializers(ddpc, tmp_path, opt):
    flags, slots = OPTIMIZERS[opt]
    inits = cnn_model(tmp_path / "m.onnx")
    buffers = {"mean", "var"}
    params = sum(rounded(v.size * 4) for k, v in inits.items() if k not in buffers)
    bufs = sum(rounded(inits[k].size * 4) for k in buffers)
    exact_grads = sum(v.size * 4 for k, v in inits.items() if k not in buffers)
    proc = compile_plan(ddpc, tmp_path / "m.onnx", tmp_path / "t", 4, *flags)
    plan, cats = plan_of(proc)
    assert cats["parameters"] == 2 * params  # two halves (TrainMain.cpp)
    assert cats["gradients"] == 2 * params
    assert cats["optimizer state"] == 2 * slots * params
    assert cats["buffers"] == 2 * bufs
    assert cats["collective buffers"] == exact_grads  # bucket staging
    # One micro-batch of images and int64 labels, and two staged ahead.
    batch = rounded(4 * 2 * 12 * 12 * 4) + rounded(4 * 8)
    assert cats["data batches"] == batch
    assert cats["staging buffers"] >= 2 * batch
    assert plan["peak_bytes"] == sum(cats.values())
    assert plan["peak_function"] == "train_micro"
    # Both convolutions' outputs, at least, are read by backward.
    producers = [a["producer"] for a in plan["saved_activations"]]
    assert any("Conv" in p for p in producers), producers


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_saved_activations_one_line_per_producer(ddpc, tmp_path, model):
    # A node that writes two saved buffers (an output and its transposed
    # copy) was listed twice; the list is per producer, its bytes summed.
    (mlp_model if model == "mlp" else cnn_model)(tmp_path / "m.onnx")
    plan, cats = plan_of(compile_plan(ddpc, tmp_path / "m.onnx", tmp_path / "t", 4))
    saved = plan["saved_activations"]
    producers = [a["producer"] for a in saved]
    assert saved and len(producers) == len(set(producers)), producers
    assert all(a["buffers"] >= 1 and a["bytes"] > 0 for a in saved), saved
    # The category is the list's sum, capped by the function's peak.
    assert 0 < cats["saved activations"] <= sum(a["bytes"] for a in saved)


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
def test_measured_peak_within_10_percent_of_plan(ddpc, tmp_path, model, target):
    if model == "mlp":
        mlp_model(tmp_path / "m.onnx")
        x, y = data(64)
        batch = 16
    else:
        cnn_model(tmp_path / "m.onnx")
        x, y = data(32, shape=(2, 12, 12))
        batch = 8
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    proc = compile_plan(
        ddpc,
        tmp_path / "m.onnx",
        tmp_path / "t",
        batch,
        "--optimizer",
        "adamw",
        "--target",
        target,
    )
    plan, cats = plan_of(proc)
    peak, planned = measured_peak(tmp_path, tmp_path / "t")
    # One rank: no bucket staging memory.
    assert planned == plan["peak_bytes"] - cats["collective buffers"]
    assert abs(peak - planned) <= 0.1 * planned, (peak, planned, cats)


@pytest.mark.parametrize("target", ["cpu", "cuda-emulate"])
def test_free_at_last_use_shrinks_the_measured_peak(ddpc, tmp_path, target):
    """ddpc-free-at-last-use frees each temporary after its last use rather
    than when the step returns: the measured peak drops by what the plan
    says, to within 10% of the plan, and the trained weights are bitwise
    those of the program that frees at the end."""
    cnn_model(tmp_path / "m.onnx")
    x, y = data(32, shape=(2, 12, 12))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    runs = {}
    for name, flags in (("late", ["--no-free-at-last-use"]), ("early", [])):
        out = tmp_path / name
        proc = compile_plan(
            ddpc, tmp_path / "m.onnx", out, 16, "--target", target, *flags
        )
        plan, cats = plan_of(proc)
        save = tmp_path / f"{name}.onnx"
        run_train(
            out,
            tmp_path,
            1,
            "--epochs",
            "1",
            "--log-json",
            "log.jsonl",
            "--no-shuffle",
            "--save",
            save,
        )
        last = [json.loads(l) for l in open(tmp_path / "log.jsonl")][-1]
        peak, planned = last["peak_memory_bytes"], last["memory_plan_bytes"]
        assert planned == plan["peak_bytes"] - cats["collective buffers"]
        assert abs(peak - planned) <= 0.1 * planned, (name, peak, planned)
        weights = {
            t.name: numpy_helper.to_array(t)
            for t in onnx.load(str(save)).graph.initializer
        }
        runs[name] = (peak, planned, cats["temporaries"], weights)
    late, early = runs["late"], runs["early"]
    assert early[2] < late[2], (early[2], late[2])  # planned temporaries
    assert early[0] < late[0], (early[0], late[0])  # measured peaks
    assert late[0] - early[0] >= 0.9 * (late[1] - early[1])
    for k, w in late[3].items():
        np.testing.assert_array_equal(early[3][k], w, err_msg=k)


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_measured_peak_within_10_percent_of_plan_two_ranks(ddpc, tmp_path):
    cnn_model(tmp_path / "m.onnx")
    x, y = data(64, shape=(2, 12, 12))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    proc = compile_plan(
        ddpc, tmp_path / "m.onnx", tmp_path / "t", 8, "--optimizer", "adamw"
    )
    plan, _ = plan_of(proc)
    peak, planned = measured_peak(tmp_path, tmp_path / "t", ranks=2)
    assert planned == plan["peak_bytes"]
    assert abs(peak - planned) <= 0.1 * planned, (peak, planned)


@pytest.mark.parametrize("remat", ["off", "auto"])
def test_budget_below_the_peak_fails_with_one_line(ddpc, tmp_path, remat):
    """A budget below the peak (with --remat auto, below what recomputing
    every activation reaches) fails in one line, and nothing is written."""
    mlp_model(tmp_path / "m.onnx")
    plan, _ = plan_of(compile_plan(ddpc, tmp_path / "m.onnx", tmp_path / "t", 8))
    peak = plan["peak_bytes"]
    ok = compile_plan(
        ddpc, tmp_path / "m.onnx", tmp_path / "t", 8, "--memory-budget", str(peak)
    )
    assert ok.returncode == 0
    budget = peak - 1 if remat == "off" else peak // 2
    proc = compile_plan(
        ddpc,
        tmp_path / "m.onnx",
        tmp_path / "u",
        8,
        "--memory-budget",
        str(budget),
        "--remat",
        remat,
        check=False,
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert "--memory-budget" in line and "predicted peak" in line
    assert "optimizer state" in line or "parameters" in line
    assert "--batch-size" in line and "at least" in line
    assert not (tmp_path / "u").exists()


@pytest.mark.parametrize("size", ["1GiB", "512MiB", "100KiB", "123456789", "2GB"])
def test_budget_forms_accepted(ddpc, tmp_path, size):
    mlp_model(tmp_path / "m.onnx")
    compile_plan(ddpc, tmp_path / "m.onnx", tmp_path / "t", 8, "--memory-budget", size)


@pytest.mark.parametrize("size", ["abc", "0", "-4GiB", "4XB", "GiB", "1.5.2MiB"])
def test_budget_parse_errors_name_the_option(ddpc, tmp_path, size):
    mlp_model(tmp_path / "m.onnx")
    proc = compile_plan(
        ddpc,
        tmp_path / "m.onnx",
        tmp_path / "t",
        8,
        f"--memory-budget={size}",
        check=False,
    )
    assert proc.returncode == 1
    line = proc.stderr.strip()
    assert len(line.splitlines()) == 1
    assert "--memory-budget" in line and "4GiB" in line and "512MiB" in line


def test_budget_needs_train(ddpc, tmp_path):
    mlp_model(tmp_path / "m.onnx")
    proc = subprocess.run(
        [ddpc, "compile", str(tmp_path / "m.onnx"), "--batch-size", "2"]
        + ["-o", str(tmp_path / "p"), "--memory-budget", "1GiB"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert "--memory-budget applies to training programs" in proc.stderr


def test_text_report_shows_the_plan(ddpc, tmp_path):
    mlp_model(tmp_path / "m.onnx")
    proc = subprocess.run(
        [ddpc, "compile", str(tmp_path / "m.onnx"), "--train", "--batch-size"]
        + ["8", "-o", str(tmp_path / "t"), "--report"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "memory plan per rank: peak" in proc.stderr
    for cat in ["parameters", "gradients", "saved activations", "temporaries"]:
        assert cat in proc.stderr
    assert "activations saved for backward" in proc.stderr


def test_python_memory_budget(tmp_path):
    """compile(memory_budget=...) is --memory-budget: a budget below the
    plan's peak raises CompileError with the same line."""
    ddpc_py = pytest.importorskip("ddpc")
    mlp_model(tmp_path / "m.onnx")
    train = ddpc_py.TrainConfig(batch_size=8)
    ddpc_py.compile(str(tmp_path / "m.onnx"), train=train, memory_budget="1GiB")
    with pytest.raises(ddpc_py.CompileError, match="predicted peak"):
        ddpc_py.compile(str(tmp_path / "m.onnx"), train=train, memory_budget=1024)
    with pytest.raises(ddpc_py.CompileError, match="memory.budget"):
        ddpc_py.compile(str(tmp_path / "m.onnx"), train=train, memory_budget="1XB")


@pytest.mark.parametrize(
    "args,rc,needle",
    [
        (["--zero-stage", "0", "--remat", "off"], 0, ""),
        (["--zero-stage", "2"], 0, ""),
        (["--zero-stage", "3"], 0, ""),
        (["--zero-stage", "3", "--target", "cuda-emulate"], 2, "not yet for"),
        (["--zero-stage", "auto"], 0, ""),
        (["--zero-stage", "7"], 1, "unknown --zero-stage '7'"),
        (["--zero-stage="], 1, "--zero-stage is given an empty value"),
        (["--memory-budget="], 1, "--memory-budget is given an empty value"),
        (["--world-size", "-2"], 1, "invalid --world-size -2"),
        (["--remat", "auto"], 0, ""),
        (["--remat", "auto", "--memory-budget", "1GiB"], 0, ""),
        (["--remat", "on"], 1, "unknown --remat 'on'"),
    ],
)
def test_zero_stage_and_remat_values(ddpc, tmp_path, args, rc, needle):
    mlp_model(tmp_path / "m.onnx")
    proc = compile_plan(
        ddpc, tmp_path / "m.onnx", tmp_path / "t", 8, *args, check=False
    )
    assert proc.returncode == rc, proc.stderr
    assert needle in proc.stderr
    if rc:
        assert len(proc.stderr.strip().splitlines()) == 1


def test_python_zero_stage_and_remat(tmp_path):
    ddpc_py = pytest.importorskip("ddpc")
    mlp_model(tmp_path / "m.onnx")
    train = ddpc_py.TrainConfig(batch_size=8)
    ddpc_py.compile(str(tmp_path / "m.onnx"), train=train, zero_stage=0, remat="off")
    ddpc_py.compile(str(tmp_path / "m.onnx"), train=train, zero_stage=3)
    with pytest.raises(ddpc_py.CompileError, match="zero-stage|zero_stage") as e:
        ddpc_py.compile(
            str(tmp_path / "m.onnx"), train=train, zero_stage=3, target="cuda-emulate"
        )
    assert e.value.unsupported
    ddpc_py.compile(
        str(tmp_path / "m.onnx"), train=train, zero_stage="auto", world_size=2
    )
    with pytest.raises(ddpc_py.CompileError, match="world_size=") as e:
        ddpc_py.compile(str(tmp_path / "m.onnx"), train=train, world_size=-1)
    assert not e.value.unsupported

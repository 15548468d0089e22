"""Rematerialization (--remat auto, ddpc-rematerialize): the backward pass
recomputes activations instead of keeping them from the forward pass.

Oracles: the same program without recomputation (the weights after 10
AdamW steps, bitwise on the CPU, on a residual CNN with BatchNorm and on a
transformer block), the runtime's measured high-water mark (within the
budget, and within 10% of the plan), and the plans themselves (a budget
that nothing fits names the smallest one found, which then compiles)."""

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

from ddpc_testing import ROOT, run_train, weights
from test_memory_plan import compile_plan, plan_of

sys.path.insert(0, str(ROOT / "bench" / "models"))
import make_models  # noqa: E402

BATCH = 8
STEPS = 10


def _residual_cnn(path):
    """Conv-BN-Relu-Conv-BN plus a skip, Relu, GlobalAveragePool, Gemm on
    [N, 3, 8, 8] images."""
    g = make_models.Graph(0)
    x = g.node("Relu", [g.bn(g.conv("input", 3, 8, 3, 1, 1, bias=False), 8)])
    y = g.node("Relu", [g.bn(g.conv(x, 8, 8, 3, 1, 1, bias=False), 8)])
    y = g.bn(g.conv(y, 8, 8, 3, 1, 1, bias=False), 8)
    x = g.node("Relu", [g.node("Add", [y, x])])
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    onnx.save(g.model("rescnn", ["N", 3, 8, 8], g.gemm(x, 8, 10)), path)
    return (3, 8, 8)


def _transformer(path):
    onnx.save(make_models.transformer(seq=8, d=16, heads=2, ffn=32), path)
    return (8, 16)


MODELS = {"residual-cnn": _residual_cnn, "transformer": _transformer}


def _setup(tmp_path, model):
    shape = MODELS[model](tmp_path / "m.onnx")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((STEPS * BATCH, *shape)).astype(np.float32)
    y = rng.integers(0, 10, STEPS * BATCH).astype(np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)


def _compile(ddpc, tmp_path, out, *args, check=True):
    """Compiles tmp/m.onnx (AdamW, batch BATCH); (process, plan or None)."""
    proc = compile_plan(
        ddpc,
        tmp_path / "m.onnx",
        out,
        BATCH,
        "--optimizer",
        "adamw",
        *[str(a) for a in args],
        check=check,
    )
    return proc, plan_of(proc)[0] if proc.returncode == 0 else None


def _train(tmp_path, prog):
    """Weights after one epoch in file order, and the last --log-json record."""
    save, log = tmp_path / f"{prog.name}.onnx", tmp_path / f"{prog.name}.jsonl"
    args = ["--epochs", "1", "--no-shuffle", "--save", save, "--log-json", log]
    run_train(prog, tmp_path, 1, *args)
    return weights(save), [json.loads(line) for line in open(log)][-1]


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_activation_recomputed_matches_none(ddpc, tmp_path, model):
    """Backward recomputes every forward node (--remat-nodes: all of the
    graph's but its Constants): almost nothing is kept for it, the weights are bitwise those
    of the program that keeps every activation, and the plan still matches
    what the program measured."""
    _setup(tmp_path, model)
    _, plan = _compile(ddpc, tmp_path, tmp_path / "keep")
    graph = onnx.load(str(tmp_path / "m.onnx")).graph
    nodes = [n.name for n in graph.node if n.op_type != "Constant"]
    _, remat = _compile(
        ddpc, tmp_path, tmp_path / "recompute", "--remat-nodes", ",".join(nodes)
    )
    before = sum(a["bytes"] for a in plan["saved_activations"])
    after = sum(a["bytes"] for a in remat["saved_activations"])
    assert after <= before / 10, (after, before, remat["saved_activations"])
    want, _ = _train(tmp_path, tmp_path / "keep")
    got, last = _train(tmp_path, tmp_path / "recompute")
    start = weights(tmp_path / "m.onnx")
    assert any(not np.array_equal(want[k], start[k]) for k in want), "nothing trained"
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    peak, planned = last["peak_memory_bytes"], last["memory_plan_bytes"]
    assert abs(peak - planned) <= 0.1 * planned, (peak, planned)


def _one_rank_plan(plan):
    """The plan's peak at one rank (no bucket staging memory)."""
    cats = {c["category"]: c["bytes"] for c in plan["categories"]}
    return plan["peak_bytes"] - cats["collective buffers"]


@pytest.mark.parametrize("model", sorted(MODELS))
def test_auto_fits_a_budget_below_the_peak(ddpc, tmp_path, model):
    """--remat auto under a budget just below the plan without it: the plan
    fits (or the compile names the smallest budget it found, which then
    compiles), the report lists what backward recomputes and why, the
    measured peak is within the budget, and the weights equal those of the
    program that keeps every activation."""
    _setup(tmp_path, model)
    _, keep = _compile(ddpc, tmp_path, tmp_path / "keep")
    budget = keep["peak_bytes"] - 1
    proc, plan = _compile(
        ddpc, tmp_path, tmp_path / "auto", "--memory-budget", budget, check=False
    )
    if plan is None:
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr
        assert "recomputed in backward (--remat auto)" in lines[0], lines[0]
        budget = int(lines[0].split("at least ")[1].split(" bytes")[0])
        assert budget < keep["peak_bytes"], (budget, keep["peak_bytes"])
        _, plan = _compile(ddpc, tmp_path, tmp_path / "auto", "--memory-budget", budget)
    assert plan["peak_bytes"] <= budget < keep["peak_bytes"]
    remat = plan["remat"]
    assert remat["recomputed"] and all(r["bytes"] > 0 for r in remat["recomputed"])
    assert "with every activation kept; recomputing" in remat["choice"], remat
    assert "MILP (GLPK), optimal" in remat["choice"], remat
    want, _ = _train(tmp_path, tmp_path / "keep")
    got, last = _train(tmp_path, tmp_path / "auto")
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    assert last["memory_plan_bytes"] == _one_rank_plan(plan)
    assert last["peak_memory_bytes"] <= budget, (last, budget)


def test_off_keeps_every_activation_and_says_auto_would_not(ddpc, tmp_path):
    """--remat off under the same budget: the compile fails in one line
    that points at --remat auto."""
    _setup(tmp_path, "residual-cnn")
    _, keep = _compile(ddpc, tmp_path, tmp_path / "keep")
    proc, plan = _compile(
        ddpc,
        tmp_path,
        tmp_path / "off",
        "--memory-budget",
        keep["peak_bytes"] - 1,
        "--remat",
        "off",
        check=False,
    )
    assert plan is None and proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "--remat auto recomputes activations in backward" in proc.stderr
    assert not (tmp_path / "off").exists()


def test_python_remat_auto(tmp_path):
    ddpc_py = pytest.importorskip("ddpc")
    _setup(tmp_path, "residual-cnn")
    train = ddpc_py.TrainConfig(batch_size=BATCH, optimizer="adamw")
    keep = ddpc_py.compile(str(tmp_path / "m.onnx"), train=train)
    peak = keep.report()["memory_plan"]["peak_bytes"]
    prog = ddpc_py.compile(
        str(tmp_path / "m.onnx"), train=train, memory_budget=peak - 1, remat="auto"
    )
    plan = prog.report()["memory_plan"]
    assert plan["peak_bytes"] < peak and plan["remat"]["recomputed"], plan
    with pytest.raises(ddpc_py.CompileError, match="remat"):
        ddpc_py.compile(str(tmp_path / "m.onnx"), train=train, remat="sometimes")


def test_remat_nodes_are_checked_and_reported(ddpc, tmp_path):
    """--remat-nodes: a name not in the forward pass fails in one line; one
    node of a fused group recomputes the group; the report lists the nodes;
    without --train it is refused like --remat."""
    _setup(tmp_path, "residual-cnn")
    proc, _ = _compile(
        ddpc, tmp_path, tmp_path / "t", "--remat-nodes", "no_such_node", check=False
    )
    assert proc.returncode == 1 and "no node 'no_such_node'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    _, keep = _compile(ddpc, tmp_path, tmp_path / "keep")
    fused = next(
        a["producer"] for a in keep["saved_activations"] if "+" in a["producer"]
    )
    part = fused.split("+")[-1]
    _, plan = _compile(ddpc, tmp_path, tmp_path / "t", "--remat-nodes", part)
    assert fused not in {a["producer"] for a in plan["saved_activations"]}, plan
    assert [r["producer"] for r in plan["remat"]["recomputed"]] == [part]
    assert plan["remat"]["choice"].startswith("--remat-nodes:")
    proc = subprocess.run(
        [ddpc, "compile", str(tmp_path / "m.onnx"), "--batch-size", "4"]
        + ["--remat-nodes", part, "-o", str(tmp_path / "inf")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "--remat-nodes applies to training" in proc.stderr

"""ZeRO stage 1 (--zero-stage 1): each rank keeps and updates 1/N of the
optimizer state, then the parameters are all-gathered; stage 2 (--zero-stage
2) also reduce-scatters the gradient buckets, so each rank keeps the summed
gradients of its slice only.

Oracles: the same program at stage 0 (the weights after 20 AdamW and 20
SGD-momentum steps, at 2 and 3 ranks, where the slices do not divide
evenly; stage 2 with many small buckets, with gradient accumulation, and
without the communication thread), the data-parallel invariant (2 ranks x
batch 4 == 1 rank x batch 8), an uninterrupted run (checkpoint and resume),
and ZeRO's memory formula (the optimizer state shrinks by at least its full
size minus 1/N of it and the runtime's fixed buffers; at stage 2 the
gradients too, down to the slice and the buckets in flight)."""

import json
import subprocess

import numpy as np
import pytest
from onnx import helper, numpy_helper

from ddpc_testing import (
    C,
    MPIRUN,
    assert_close_weights,
    compile_train,
    data,
    mlp_model,
    run_train,
    save_classifier,
    weights,
)
from test_memory_plan import cnn_model

pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")

OPTIMIZERS = {
    "adamw": ["--optimizer", "adamw", "--weight-decay", "0.01"],
    "sgd-momentum": ["--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.05"],
}
BATCH = 4
STEPS = 20
# Stage 2 with buckets of one or two gradients (many reduce-scatters, both
# buffer pairs reused).
STAGE_FLAGS = {2: ["--bucket-cap-mb", "0.001"], 3: ["--bucket-cap-mb", "0.001"]}


def _model(tmp, name):
    if name == "mlp":
        mlp_model(tmp / "m.onnx")
        return {}
    cnn_model(tmp / "m.onnx")
    return {"shape": (2, 12, 12)}


def _train(
    ddpc, tmp, model, opt, stage, ranks, *run_args, batch=BATCH, extra=(), env=None
):
    prog = compile_train(
        ddpc,
        tmp / "m.onnx",
        tmp / f"t-{stage}-{batch}",
        batch,
        *OPTIMIZERS[opt],
        "--zero-stage",
        str(stage),
        *([] if "--bucket-cap-mb" in extra else STAGE_FLAGS.get(stage, [])),
        *extra,
    )
    save = tmp / f"s-{stage}-{ranks}-{batch}.onnx"
    run_train(
        prog,
        tmp,
        ranks,
        "--epochs",
        "1",
        "--no-shuffle",
        "--save",
        save,
        *run_args,
        env=env,
    )
    return weights(save)


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
@pytest.mark.parametrize("ranks", [2, 3])
def test_stage_matches_stage0(ddpc, tmp_path, model, opt, ranks, stage):
    kw = _model(tmp_path, model)
    x, y = data(STEPS * BATCH * ranks, **kw)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    w0 = _train(ddpc, tmp_path, model, opt, 0, ranks)
    w1 = _train(ddpc, tmp_path, model, opt, stage, ranks)
    start = weights(tmp_path / "m.onnx")
    assert any(not np.allclose(w0[k], start[k]) for k in w0), "nothing trained"
    assert_close_weights(w1, w0, rtol=1e-5)


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("comm_thread", ["1", "0"])
def test_stage_grad_accum_matches_stage0(ddpc, tmp_path, comm_thread, stage):
    """Two micro-batches per step: stages 2 and 3 reduce-scatter each one
    into the slice (stage 3 gathers the parameters in each); with and
    without the communication thread (DDPC_COMM_THREAD)."""
    _model(tmp_path, "cnn")
    ranks = 3
    x, y = data(10 * 2 * BATCH * ranks, shape=(2, 12, 12))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    # Clipping reads the gradient norm, which stage 2 sums from the slices.
    accum, clip = ["--grad-accum-steps", "2"], ["--clip-grad-norm", "0.5"]
    env = {"DDPC_COMM_THREAD": comm_thread}
    w0 = _train(ddpc, tmp_path, "cnn", "adamw", 0, ranks, *clip, extra=accum, env=env)
    w2 = _train(
        ddpc, tmp_path, "cnn", "adamw", stage, ranks, *clip, extra=accum, env=env
    )
    assert_close_weights(w2, w0, rtol=1e-5)


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("cap", ["0.001", "25"])
def test_stage_zero_element_parameter(ddpc, tmp_path, cap, stage):
    """A zero-element trainable initializer (Concat(b, Z), Z of shape (0,)):
    its gradient is never written, only handed to its bucket, at the start
    of the first bucket (cap 25) or in one of its own (cap 0.001)."""
    rng = np.random.default_rng(0)
    inits = {
        "W": rng.standard_normal((F_ZE, C)).astype(np.float32),
        "b": np.zeros(C, np.float32),
        "Z": np.zeros((0,), np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"]),
        helper.make_node("Concat", ["b", "Z"], ["bz"], axis=0),
        helper.make_node("Add", ["a", "bz"], ["logits"]),
    ]
    save_classifier(tmp_path / "m.onnx", "zero_elem", nodes, inits, F_ZE)
    x, y = data(STEPS * BATCH * 2, shape=(F_ZE,))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    cap_flags = ["--bucket-cap-mb", cap]
    w0 = _train(ddpc, tmp_path, "mlp", "adamw", 0, 2, extra=cap_flags)
    w2 = _train(ddpc, tmp_path, "mlp", "adamw", stage, 2, extra=cap_flags)
    assert w2["Z"].shape == (0,)
    assert not np.allclose(w0["W"], inits["W"]), "nothing trained"
    assert_close_weights(w2, w0, rtol=1e-5)


F_ZE = 12


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_stage_data_parallel_invariant(ddpc, tmp_path, stage):
    _model(tmp_path, "cnn")
    x, y = data(STEPS * 8, shape=(2, 12, 12))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    # BatchNorm statistics over the global batch, so that the split does not
    # change them.
    sync = ["--sync-batchnorm"]
    # SGD with momentum: batch 2x4 and 1x8 sum the gradients in different
    # orders (OpenBLAS blocks by size), and AdamW's division by sqrt(v)
    # turns a near-zero gradient's rounding into a full step. Stage 1 with
    # AdamW is checked against stage 0 at equal batches above.
    two = _train(ddpc, tmp_path, "cnn", "sgd-momentum", stage, 2, batch=4, extra=sync)
    one = _train(ddpc, tmp_path, "cnn", "sgd-momentum", stage, 1, batch=8, extra=sync)
    assert_close_weights(two, one, rtol=1e-5)


@pytest.mark.parametrize("stage", ["1", "2", "3"])
def test_stage_checkpoint_resumes_at_its_stage_and_stage0(ddpc, tmp_path, stage):
    mlp_model(tmp_path / "m.onnx")
    x, y = data(STEPS * BATCH * 3)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    flags = OPTIMIZERS["adamw"]
    p1 = compile_train(
        ddpc, tmp_path / "m.onnx", tmp_path / "p1", BATCH, *flags, "--zero-stage", stage
    )
    p0 = compile_train(ddpc, tmp_path / "m.onnx", tmp_path / "p0", BATCH, *flags)
    common = ["--epochs", "1", "--no-shuffle"]
    run_train(p1, tmp_path, 3, *common, "--save", tmp_path / "whole.onnx")
    run_train(
        p1,
        tmp_path,
        3,
        *common,
        "--stop-after-steps",
        "7",
        "--checkpoint",
        tmp_path / "ck",
    )
    for prog, ranks, name in [
        (p1, 3, "r1.onnx"),
        (p0, 3, "r0.onnx"),
        (p1, 2, "r2.onnx"),
    ]:
        if ranks == 2:  # 2 ranks x batch 6 == 3 ranks x batch 4
            prog = compile_train(
                ddpc,
                tmp_path / "m.onnx",
                tmp_path / "p6",
                6,
                *flags,
                "--zero-stage",
                stage,
            )
        run_train(
            prog,
            tmp_path,
            ranks,
            *common,
            "--resume",
            tmp_path / "ck",
            "--save",
            tmp_path / name,
        )
        assert_close_weights(weights(tmp_path / name), weights(tmp_path / "whole.onnx"))


def _wide_mlp(path, features=64, hidden=512):
    rng = np.random.default_rng(0)
    inits = {
        "W1": (rng.standard_normal((features, hidden)) * 0.1).astype(np.float32),
        "b1": np.zeros(hidden, np.float32),
        "W2": (rng.standard_normal((hidden, C)) * 0.1).astype(np.float32),
        "b2": np.zeros(C, np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("MatMul", ["r", "W2"], ["o"]),
        helper.make_node("Add", ["o", "b2"], ["logits"]),
    ]
    save_classifier(path, "wide", nodes, inits, features)
    return inits


def _measured_peaks(ddpc, tmp_path, ranks, features, stages, *flags):
    """Trains tmp/m.onnx (AdamW, batch 4, 4 steps) on `ranks` ranks at each
    ZeRO stage of `stages`, compiled with `flags`; checks each measured peak
    against the plan (10%) and returns {stage: peak bytes}."""
    x, y = data(BATCH * ranks * 4, shape=(features,))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    peaks = {}
    for stage in stages:
        prog = compile_train(
            ddpc,
            tmp_path / "m.onnx",
            tmp_path / f"t{stage}",
            BATCH,
            "--optimizer",
            "adamw",
            "--zero-stage",
            str(stage),
            *flags,
        )
        log = tmp_path / f"log{stage}.jsonl"
        run_train(prog, tmp_path, ranks, "--epochs", "1", "--log-json", log)
        last = [json.loads(l) for l in open(log)][-1]
        peak, planned = last["peak_memory_bytes"], last["memory_plan_bytes"]
        assert abs(peak - planned) <= 0.1 * planned, (stage, peak, planned)
        peaks[stage] = peak
    return peaks


@pytest.mark.parametrize("ranks", [2, 4])
def test_stage1_shrinks_the_measured_peak(ddpc, tmp_path, ranks):
    inits = _wide_mlp(tmp_path / "m.onnx")
    numel = sum(v.size for v in inits.values())
    peaks = _measured_peaks(ddpc, tmp_path, ranks, 64, (0, 1))
    # Stage 0 keeps two halves of two AdamW slots of every parameter; stage 1
    # one slice of 1/N (rounded up to 4096-float chunks) plus at most
    # 1 MiB + 1 MiB / N of gather buffers and 4 chunks.
    full = 2 * 2 * 4 * numel
    chunk = 4096
    slice_ = -(-(-(-numel // ranks)) // chunk) * chunk
    bound = 2 * 4 * slice_ + (1 << 20) * (1 + 1 / ranks) + 6 * 4 * chunk
    assert peaks[0] - peaks[1] >= full - bound, (peaks, full, bound)
    assert peaks[1] < peaks[0]


def _deep_mlp(path, width=128, layers=6):
    """`layers` Gemm layers of width x width (equal gradients, so buckets of
    one gradient each are a sixth of the model)."""
    rng = np.random.default_rng(0)
    inits, nodes, prev = {}, [], "x"
    for i in range(layers):
        out = width if i < layers - 1 else C
        inits[f"W{i}"] = (rng.standard_normal((width, out)) * 0.1).astype(np.float32)
        inits[f"b{i}"] = np.zeros(out, np.float32)
        nodes.append(helper.make_node("Gemm", [prev, f"W{i}", f"b{i}"], [f"g{i}"]))
        prev = f"g{i}"
        if i < layers - 1:
            nodes.append(helper.make_node("Relu", [prev], [f"r{i}"]))
            prev = f"r{i}"
    nodes[-1].output[0] = "logits"
    save_classifier(path, "deep", nodes, inits, width)
    return inits


def _largest_layer(inits):
    """Floats of the largest layer of _deep_mlp (weight and bias)."""
    return max(
        v.size + inits["b" + k[1:]].size for k, v in inits.items() if k[0] == "W"
    )


@pytest.mark.parametrize("ranks", [2, 4])
def test_stage2_shrinks_the_measured_peak(ddpc, tmp_path, ranks):
    """Stage 1 keeps two halves of every gradient and stages each bucket
    whole for MPI; stage 2 one slice of 1/N, the two buckets in flight, and
    each gradient only from its producer until its bucket starts."""
    inits = _deep_mlp(tmp_path / "m.onnx")
    numel = sum(v.size for v in inits.values())
    largest = _largest_layer(inits)
    # Buckets of about one layer (64 KiB).
    flags = ["--bucket-cap-mb", "0.06", "--world-size", str(ranks)]
    peaks = _measured_peaks(ddpc, tmp_path, ranks, 128, (1, 2), *flags)
    # Stage 1: 2 halves + 1 staging copy of all gradients. Stage 2 at most:
    # the slice (rounded up to 4096-float chunks), two buckets in flight
    # (send and receive buffers, at most two layers' gradients each) and
    # three layers' gradients alive in the step at once.
    chunk = 4096
    slice_ = -(-(-(-numel // ranks)) // chunk) * chunk
    stage1 = 3 * 4 * numel
    stage2 = 4 * (slice_ + 2 * 2 * (2 * largest) + 3 * largest)
    assert stage2 < stage1
    assert peaks[1] - peaks[2] >= stage1 - stage2, (peaks, stage1, stage2)


@pytest.mark.parametrize("ranks", [2, 4])
def test_stage3_shrinks_the_measured_peak(ddpc, tmp_path, ranks):
    """Stage 2 keeps two halves of every parameter; stage 3 one slice of 1/N
    and each parameter whole only while forward or backward reads it."""
    inits = _deep_mlp(tmp_path / "m.onnx")
    numel = sum(v.size for v in inits.values())
    largest = _largest_layer(inits)
    flags = ["--bucket-cap-mb", "0.06", "--world-size", str(ranks)]
    peaks = _measured_peaks(ddpc, tmp_path, ranks, 128, (2, 3), *flags)
    # Stage 3 at most: the slice (rounded up to 4096-float chunks) and three
    # layers' parameters gathered at once.
    chunk = 4096
    slice_ = -(-(-(-numel // ranks)) // chunk) * chunk
    stage2 = 2 * 4 * numel
    stage3 = 4 * (slice_ + 3 * largest)
    assert stage3 < stage2
    assert peaks[2] - peaks[3] >= stage2 - stage3, (peaks, stage2, stage3)


@pytest.mark.parametrize("val_rows", [13, 2])
def test_stage3_validation_with_uneven_rows(ddpc, tmp_path, val_rows):
    """@eval gathers the parameters collectively, so every rank evaluates as
    many batches as rank 0 even when the validation rows do not split
    evenly (13 rows on 3 ranks: 5, 4, 4; 2 rows: a rank with none); the
    validation metrics equal stage 0's."""
    mlp_model(tmp_path / "m.onnx")
    x, y = data(2 * BATCH * 3)
    xv, yv = data(val_rows)
    for name, arr in [("x", x), ("y", y), ("xv", xv), ("yv", yv)]:
        np.save(tmp_path / f"{name}.npy", arr)
    val = ["--val-data", tmp_path / "xv.npy", "--val-labels", tmp_path / "yv.npy"]
    metrics = {}
    for stage in (0, 3):
        prog = compile_train(
            ddpc,
            tmp_path / "m.onnx",
            tmp_path / f"v{stage}",
            BATCH,
            "--zero-stage",
            str(stage),
        )
        log = tmp_path / f"v{stage}.jsonl"
        run_train(prog, tmp_path, 3, "--epochs", "1", *val, "--log-json", log)
        rec = [json.loads(l) for l in open(log) if "val_loss" in l][-1]
        metrics[stage] = (rec["val_loss"], rec["val_acc"])
    assert metrics[3] == pytest.approx(metrics[0], rel=1e-6), metrics


def test_stage3_keeps_parameters_gathered_within_the_budget(ddpc, tmp_path):
    """Under a budget with room above stage 3's plan, the compiler keeps the
    largest parameters that backward gathers again whole from forward into
    backward: fewer all-gathers, a plan and a measured peak within the
    budget, and the weights of stage 0."""
    ranks = 3
    inits = _deep_mlp(tmp_path / "m.onnx")
    flags = ["--bucket-cap-mb", "0.06", "--world-size", ranks]
    proc3, p3 = _plan(ddpc, tmp_path, tmp_path / "p3", "--zero-stage", 3, *flags)
    gathers3 = [
        c
        for c in json.loads(proc3.stdout)["collectives"]
        if c["op"] == "all_gather_param"
    ]
    layer = 4 * _largest_layer(inits)
    budget = p3["peak_bytes"] + 2 * layer + layer // 2
    proc, plan = _plan(
        ddpc, tmp_path, tmp_path / "t", "--memory-budget", budget, *flags
    )
    assert plan is not None, proc.stderr
    assert plan["zero_stage"] == 3, plan
    kept = plan["kept_gathered"]
    # Largest first: two of the 128 x 128 weights, then what still fits.
    assert sum(inits[k].size == 128 * 128 for k in kept) == 2, kept
    assert sum(4 * inits[k].size for k in kept) <= budget - p3["peak_bytes"]
    assert "stay gathered from forward into backward" in plan["zero_choice"]
    assert plan["peak_bytes"] <= budget
    gathers = [
        c
        for c in json.loads(proc.stdout)["collectives"]
        if c["op"] == "all_gather_param"
    ]
    assert len(gathers) == len(gathers3) - len(kept), (gathers, gathers3)
    x, y = data(STEPS * BATCH * ranks, shape=(128,))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    log = tmp_path / "log.jsonl"
    save = tmp_path / "kept.onnx"
    common = ["--epochs", "1", "--no-shuffle"]
    run_train(
        tmp_path / "t", tmp_path, ranks, *common, "--log-json", log, "--save", save
    )
    last = [json.loads(l) for l in open(log)][-1]
    assert last["peak_memory_bytes"] <= budget, (last, budget)
    p0 = compile_train(
        ddpc, tmp_path / "m.onnx", tmp_path / "p0", BATCH, "--optimizer", "adamw"
    )
    run_train(p0, tmp_path, ranks, *common, "--save", tmp_path / "s0.onnx")
    assert_close_weights(weights(save), weights(tmp_path / "s0.onnx"), rtol=1e-5)


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("ranks", [1, 3])
def test_stage_plan_without_world_size(ddpc, tmp_path, ranks, stage):
    """Compiled without --world-size, the plan is for one rank; the program
    replaces its gradient and bucket bytes (and at stage 3 its parameter
    slice) with its own at the world size it runs at (one rank included:
    the buckets run there too)."""
    _deep_mlp(tmp_path / "m.onnx")
    _measured_peaks(ddpc, tmp_path, ranks, 128, (stage,), "--bucket-cap-mb", "0.06")


def test_stage2_budget_without_world_size_holds_at_one_rank(ddpc, tmp_path):
    """Without --world-size stage 2 plans for one rank, state and gradients
    alike: a budget of exactly that plan compiles and runs at one rank (for
    this small model the slice's chunk buffers outweigh the whole state),
    and the budget error does not send the user to --world-size, which
    would not shrink it."""
    mlp_model(tmp_path / "m.onnx")
    _, plan = _plan(ddpc, tmp_path, tmp_path / "p2", "--zero-stage", "2")
    peak = plan["peak_bytes"]
    x, y = data(BATCH * 4)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    flags = ["--optimizer", "adamw", "--zero-stage", "2"]
    prog = compile_train(
        ddpc,
        tmp_path / "m.onnx",
        tmp_path / "t",
        BATCH,
        *flags,
        "--memory-budget",
        str(peak),
    )
    log = tmp_path / "log.jsonl"
    run_train(prog, tmp_path, 1, "--epochs", "1", "--log-json", log)
    last = [json.loads(l) for l in open(log)][-1]
    assert last["memory_plan_bytes"] == peak
    proc, _ = _plan(
        ddpc,
        tmp_path,
        tmp_path / "p3",
        "--zero-stage",
        "2",
        "--memory-budget",
        peak - 1,
    )
    assert proc.returncode == 1, proc.stderr
    assert "--world-size" not in proc.stderr, proc.stderr
    assert "more ranks do not shrink it" in proc.stderr, proc.stderr


def _compile(ddpc, tmp_path, *args):
    """`ddpc compile m.onnx -o t ARGS` on the bundled MLP; returns the process."""
    mlp_model(tmp_path / "m.onnx")
    return subprocess.run(
        [ddpc, "compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "t"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "args, rc, needle",
    [
        (["--zero-stage", "1", "--target", "cuda"], 2, "not yet for cuda"),
        (["--zero-stage", "2", "--target", "cuda"], 2, "not yet for cuda"),
        (["--zero-stage", "3", "--target", "cuda-emulate"], 2, "not yet for"),
        (["--zero-stage", "4"], 1, "unknown --zero-stage '4'"),
    ],
)
def test_stage_errors(ddpc, tmp_path, args, rc, needle):
    proc = _compile(ddpc, tmp_path, "--train", *args)
    assert proc.returncode == rc, proc.stderr
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "t").exists()


def test_stage1_needs_train(ddpc, tmp_path):
    proc = _compile(ddpc, tmp_path, "--zero-stage", "1")
    assert proc.returncode == 1 and "--train" in proc.stderr, proc.stderr


def test_report_names_the_stage(ddpc, tmp_path):
    for stage in (0, 1, 2, 3):
        proc = _compile(
            ddpc,
            tmp_path,
            "--train",
            "--report=json",
            "--batch-size",
            "4",
            "--zero-stage",
            str(stage),
        )
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        plan = report["memory_plan"]
        assert plan["zero_stage"] == stage
        assert ("zero_note" in plan) == (stage >= 1)
        ops = {c["op"] for c in report["collectives"]}
        want = {"reduce_scatter_bucket" if stage >= 2 else "allreduce_bucket"}
        # Stage 3: the MLP's 4 parameters in forward, the second layer's
        # weight again in backward (the first layer computes no dX).
        gathers = [c for c in report["collectives"] if c["op"] == "all_gather_param"]
        assert len(gathers) == (5 if stage == 3 else 0), gathers
        assert ops == want | ({"all_gather_param"} if stage == 3 else set())


def _plan(ddpc, tmp_path, out, *args):
    """Compiles the wide MLP (AdamW, batch 4) with --report=json; returns
    (process, plan or None)."""
    proc = subprocess.run(
        [ddpc, "compile", str(tmp_path / "m.onnx"), "--train", "--batch-size"]
        + [str(BATCH), "--optimizer", "adamw", "--report=json", "-o", str(out)]
        + [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    plan = json.loads(proc.stdout)["memory_plan"] if proc.returncode == 0 else None
    return proc, plan


# The stage auto picks for a budget of a share of stage 0's peak (the wide
# MLP on 4 ranks plans 1.33, 1.16, 1.09 and 0.86 MB at stages 0 to 3).
AUTO_STAGE = {1.0: 0, 0.9: 1, 0.86: 2, 0.75: 3, 0.5: 3}


@pytest.mark.parametrize("share", sorted(AUTO_STAGE))
def test_auto_stage_under_a_budget(ddpc, tmp_path, share):
    """--zero-stage auto (the default under --memory-budget) with --world-size
    4, for budgets of 100%, 90%, 86%, 75% and 50% of stage 0's peak: the
    lowest stage that fits; the measured high-water mark is within the
    budget, or the compile fails in one line naming the smallest feasible
    budget (stage 3's), and that budget then compiles."""
    ranks = 4
    _wide_mlp(tmp_path / "m.onnx")
    x, y = data(BATCH * ranks * 4, shape=(64,))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    _, p0 = _plan(ddpc, tmp_path, tmp_path / "p0", "--world-size", ranks)
    budget = int(share * p0["peak_bytes"])
    args = ["--memory-budget", budget, "--world-size", ranks]
    proc, plan = _plan(ddpc, tmp_path, tmp_path / "t", *args)
    if plan is None:
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr
        assert "at ZeRO stage 3 on 4 ranks" in lines[0], lines[0]
        assert "ZeRO stages 0, 1 and 2 need more" in lines[0], lines[0]
        assert not (tmp_path / "t").exists()
        smallest = int(lines[0].split("at least ")[1].split(" bytes")[0])
        assert smallest > budget
        args[1] = smallest
        proc, plan = _plan(ddpc, tmp_path, tmp_path / "t", *args)
        assert plan is not None, proc.stderr
        budget = smallest
    # The lowest stage that fits, and why.
    assert plan["zero_stage"] == AUTO_STAGE[share], plan
    assert plan["world_size"] == ranks
    assert f"stage {plan['zero_stage']}:" in plan["zero_choice"]
    assert plan["peak_bytes"] <= budget
    log = tmp_path / "log.jsonl"
    run_train(tmp_path / "t", tmp_path, ranks, "--epochs", "1", "--log-json", log)
    last = [json.loads(l) for l in open(log)][-1]
    assert last["peak_memory_bytes"] <= budget, (last, budget)
    planned = last["memory_plan_bytes"]
    assert planned == plan["peak_bytes"]
    assert abs(last["peak_memory_bytes"] - planned) <= 0.1 * planned


def test_world_size_is_checked_at_run_time(ddpc, tmp_path):
    mlp_model(tmp_path / "m.onnx")
    x, y = data(32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    prog = compile_train(
        ddpc, tmp_path / "m.onnx", tmp_path / "t", BATCH, "--world-size", "3"
    )
    usage = subprocess.run([str(prog), "--help"], capture_output=True, text=True)
    assert "Compiled with --world-size 3: run it under `mpirun -np 3`" in usage.stdout
    proc = run_train(prog, tmp_path, 2, "--epochs", "1", check=False)
    assert proc.returncode != 0
    assert "compiled with --world-size 3" in proc.stderr, proc.stderr
    assert "mpirun -np 3" in proc.stderr
    run_train(prog, tmp_path, 3, "--epochs", "1")


def test_world_size_needs_train(ddpc, tmp_path):
    proc = _compile(ddpc, tmp_path, "--world-size", "2")
    assert proc.returncode == 1 and "--train" in proc.stderr, proc.stderr


def test_over_budget_names_stage1_and_exact_bytes(ddpc, tmp_path):
    """Stage 0 over budget with every activation kept: the line points at
    --zero-stage 1 with --world-size; sizes that print alike carry their
    bytes. With --remat auto (the default) one byte is recomputed away."""
    _wide_mlp(tmp_path / "m.onnx")
    _, p0 = _plan(ddpc, tmp_path, tmp_path / "p0")
    peak = p0["peak_bytes"]
    proc, plan = _plan(ddpc, tmp_path, tmp_path / "a", "--memory-budget", peak - 1)
    assert proc.returncode == 0 and plan["peak_bytes"] < peak, proc.stderr
    assert plan["remat"]["recomputed"], plan["remat"]
    proc, _ = _plan(
        ddpc, tmp_path, tmp_path / "t", "--memory-budget", peak - 1, "--remat", "off"
    )
    line = proc.stderr.strip()
    assert proc.returncode == 1 and len(line.splitlines()) == 1, line
    assert "give --world-size N so that --zero-stage auto considers it" in line
    assert f"{peak - 1} bytes" in line and f"at least {peak} bytes" in line


def test_stage1_budget_checked_at_run_time_without_world_size(ddpc, tmp_path):
    """Without --world-size the compile counts the whole state; the program
    checks the budget against its plan at the world size it runs at (for a
    small model stage 1's chunk and gather buffers outweigh the state)."""
    mlp_model(tmp_path / "m.onnx")
    x, y = data(32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    _, p0 = _plan(ddpc, tmp_path, tmp_path / "p0")
    budget = p0["peak_bytes"] + 1000
    prog = compile_train(
        ddpc,
        tmp_path / "m.onnx",
        tmp_path / "t",
        BATCH,
        "--optimizer",
        "adamw",
        "--zero-stage",
        "1",
        "--memory-budget",
        str(budget),
    )
    proc = run_train(prog, tmp_path, 2, "--epochs", "1", check=False)
    assert proc.returncode != 0
    assert f"above --memory-budget {budget} bytes" in proc.stderr, proc.stderr
    assert "--world-size 2" in proc.stderr


def test_auto_names_the_smaller_plan_when_nothing_fits(ddpc, tmp_path):
    """Stage 1 of a small model on 4 ranks is larger than stage 0: the error
    names stage 0's peak as the smallest budget, and that budget compiles."""
    mlp_model(tmp_path / "m.onnx")
    _, p0 = _plan(ddpc, tmp_path, tmp_path / "p0", "--world-size", 4)
    peak = p0["peak_bytes"]
    # ZeRO's choice alone (--remat auto would recompute activations).
    args = ["--world-size", 4, "--remat", "off", "--memory-budget", peak - 100]
    proc, plan = _plan(ddpc, tmp_path, tmp_path / "t", *args)
    assert plan is None and proc.returncode == 1
    assert f"at least {peak} bytes" in proc.stderr, proc.stderr
    assert "ZeRO stage 1 on 4 ranks needs more" in proc.stderr
    assert "ZeRO stage 2 needs more" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    args[-1] = peak
    proc, plan = _plan(ddpc, tmp_path, tmp_path / "t", *args)
    assert plan is not None and plan["zero_stage"] == 0, proc.stderr


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--zero-stage", "2"], "applies to training programs"),
        (["--train", "--world-size", "2000000"], "invalid --world-size 2000000"),
    ],
)
def test_option_errors(ddpc, tmp_path, args, needle):
    proc = _compile(ddpc, tmp_path, *args)
    assert proc.returncode == 1 and needle in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_stage1_without_state_is_noted(ddpc, tmp_path):
    proc = _compile(ddpc, tmp_path, "--train", "--batch-size", "4", "--zero-stage", "1")
    assert proc.returncode == 0, proc.stderr
    assert "shards nothing" in proc.stderr


def test_python_train_checks_the_world_size(tmp_path):
    """A program compiled with world_size=2 refuses train(ranks=1) before
    launching, in Python's words."""
    ddpc_py = pytest.importorskip("ddpc")
    mlp_model(tmp_path / "m.onnx")
    x, y = data(4 * BATCH)
    train = ddpc_py.TrainConfig(batch_size=BATCH)
    prog = ddpc_py.compile(str(tmp_path / "m.onnx"), train=train, world_size=2)
    with pytest.raises(ValueError, match=r"world_size=2.*ranks=2"):
        prog.train(x, y, ranks=1)


def test_python_world_size_types(tmp_path):
    ddpc_py = pytest.importorskip("ddpc")
    mlp_model(tmp_path / "m.onnx")
    train = ddpc_py.TrainConfig(batch_size=4)
    for bad in (2.7, True, "2"):
        with pytest.raises(TypeError, match="world_size"):
            ddpc_py.compile(str(tmp_path / "m.onnx"), train=train, world_size=bad)
    with pytest.raises(ValueError, match="zero_stage"):
        ddpc_py.compile(str(tmp_path / "m.onnx"), train=train, zero_stage="")


def test_stage2_cuda_emulate_matches_cpu_stage0(ddpc, tmp_path):
    """The cuda-emulate target's step (arena temporaries, GPU loop IR) hands
    its gradients to the same reduce-scatter buckets."""
    mlp_model(tmp_path / "m.onnx")
    x, y = data(10 * BATCH * 2)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    w0 = _train(ddpc, tmp_path, "mlp", "adamw", 0, 2)
    w2 = _train(
        ddpc, tmp_path, "mlp", "adamw", 2, 2, extra=["--target", "cuda-emulate"]
    )
    assert_close_weights(w2, w0, rtol=1e-5)


def test_python_zero_stage_2(tmp_path):
    ddpc_py = pytest.importorskip("ddpc")
    mlp_model(tmp_path / "m.onnx")
    x, y = data(8 * BATCH)
    train = ddpc_py.TrainConfig(batch_size=BATCH, optimizer="adamw")
    prog = ddpc_py.compile(str(tmp_path / "m.onnx"), train=train, zero_stage=2)
    assert prog.report()["memory_plan"]["zero_stage"] == 2
    result = prog.train(x, y, ranks=2, shuffle=False)
    ref = ddpc_py.compile(str(tmp_path / "m.onnx"), train=train, zero_stage=0)
    expected = ref.train(x, y, ranks=2, shuffle=False)

    def arrays(model):
        return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    assert_close_weights(arrays(result.model), arrays(expected.model))


def test_stage2_default_bucket_cap(ddpc, tmp_path):
    """Stage 2's buckets default to 4 MiB (each one in flight holds a send
    buffer of the largest); a given --bucket-cap-mb is kept."""
    _deep_mlp(tmp_path / "m.onnx", width=1024, layers=4)  # 4 MiB per W

    def buckets(*args):
        proc, _ = _plan(ddpc, tmp_path, tmp_path / "t", *args)
        assert proc.returncode == 0, proc.stderr
        return len(json.loads(proc.stdout)["gradient_buckets"])

    assert buckets("--zero-stage", "2") == 3
    assert buckets("--zero-stage", "2", "--bucket-cap-mb", "25") == 2
    assert buckets("--zero-stage", "0") == 2


def test_python_auto_reaches_stage_2(tmp_path):
    """Python's compile() takes auto's second compile too: a budget between
    stage 2's and stage 1's plans picks stage 2, with its reason."""
    ddpc_py = pytest.importorskip("ddpc")
    _wide_mlp(tmp_path / "m.onnx")
    train = ddpc_py.TrainConfig(batch_size=BATCH, optimizer="adamw")
    peaks = {}
    for stage in (1, 2):
        prog = ddpc_py.compile(
            str(tmp_path / "m.onnx"), train=train, zero_stage=stage, world_size=4
        )
        peaks[stage] = prog.report()["memory_plan"]["peak_bytes"]
    assert peaks[2] < peaks[1], peaks
    budget = (peaks[1] + peaks[2]) // 2
    prog = ddpc_py.compile(
        str(tmp_path / "m.onnx"), train=train, world_size=4, memory_budget=budget
    )
    plan = prog.report()["memory_plan"]
    assert plan["zero_stage"] == 2 and plan["peak_bytes"] == peaks[2], plan
    assert plan["zero_choice"].startswith("stage 2: stage 0 needs"), plan
    assert prog.report()["gradient_buckets"][0]["op"] == "reduce_scatter_bucket"

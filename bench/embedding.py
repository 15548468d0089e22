"""Token-embedding benchmarks of `make bench` (bench/README.md), issue 17:

- DDP match: a token classifier and a tied embedding/output head, trained
  by ddpc at 2 ranks and by PyTorch DistributedDataParallel (gloo) at 2
  ranks (bench/embedding_torch.py) from the same weights, batches and SGD;
  the largest weight difference after 20 steps.
- Index-check cost: the same embedding models compiled with and without
  the run-time index check (--no-runtime-checks), inference and training step
  times in one run, 1 thread, CPU 0.

Used by run_bench.py (run(), markdown()); needs only numpy, onnx and the
ddpc binary (PyTorch for the DDP rows).
"""

import json
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BENCH = pathlib.Path(__file__).resolve().parent


def token_model(path, V, D, S, C, tied, seed=0):
    """ids [N, S] -> Gather(E [V, D]) -> mean over tokens -> logits; tied:
    logits = pooled @ E^T (V classes), else Gemm(W [D, C], b)."""
    rng = np.random.default_rng(seed)
    w = {"E": (rng.standard_normal((V, D)) * 0.5).astype(np.float32)}
    nodes = [
        helper.make_node("Gather", ["E", "ids"], ["emb"], axis=0, name="embed"),
        helper.make_node("ReduceMean", ["emb", "axes"], ["pooled"], keepdims=0),
    ]
    if tied:
        nodes += [
            helper.make_node("Transpose", ["E"], ["Et"], perm=[1, 0]),
            helper.make_node("MatMul", ["pooled", "Et"], ["logits"]),
        ]
        classes = V
    else:
        w["W"] = (rng.standard_normal((D, C)) * 0.5).astype(np.float32)
        w["b"] = (rng.standard_normal(C) * 0.1).astype(np.float32)
        nodes.append(helper.make_node("Gemm", ["pooled", "W", "b"], ["logits"]))
        classes = C
    g = helper.make_graph(
        nodes,
        "tokens",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", S])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        [numpy_helper.from_array(v, k) for k, v in w.items()]
        + [numpy_helper.from_array(np.array([1], np.int64), "axes")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.save(m, path)
    return w, classes


def ddp_match(ctx, torch_py, work, steps=20, ranks=2, batch=4, lr=0.5, momentum=0.9):
    """Rows of the DDP-match table."""
    rows = []
    V, D, S, C = 50, 16, 8, 5
    for tied in (False, True):
        name = "tied embedding/head" if tied else "token classifier"
        d = work / ("tied" if tied else "classifier")
        d.mkdir(parents=True, exist_ok=True)
        w, classes = token_model(d / "m.onnx", V, D, S, C, tied)
        np.savez(d / "w0.npz", **w)
        rng = np.random.default_rng(1)
        n = ranks * batch * steps
        np.save(d / "ids.npy", rng.integers(0, V, (n, S)).astype(np.int64))
        np.save(d / "y.npy", rng.integers(0, classes, n).astype(np.int64))
        row = {"model": name, "steps": steps, "ranks": ranks, "batch_per_rank": batch}
        res = ctx.run(
            [
                ctx.ddpc,
                "compile",
                d / "m.onnx",
                "--train",
                "--batch-size",
                batch,
                "--optimizer",
                "sgd",
                "--lr",
                lr,
                "--momentum",
                momentum,
                "-o",
                d / "train",
            ]
        )
        if res["rc"] != 0:
            rows.append({**row, "error": ctx.first_error_line(res)})
            continue
        res = ctx.run(
            [
                "mpirun",
                "--oversubscribe",
                "-np",
                ranks,
                d / "train",
                "--data",
                d / "ids.npy",
                "--labels",
                d / "y.npy",
                "--epochs",
                1,
                "--no-shuffle",
                "--quiet",
                "--save",
                d / "ddpc.onnx",
            ],
            env=ctx.mpi_env,
            cwd=d,
        )
        if res["rc"] != 0:
            rows.append({**row, "error": ctx.first_error_line(res)})
            continue
        got = {
            t.name: numpy_helper.to_array(t)
            for t in onnx.load(str(d / "ddpc.onnx")).graph.initializer
        }
        if not torch_py:
            rows.append({**row, "error": "PyTorch not available"})
            continue
        res = ctx.run(
            [
                torch_py,
                BENCH / "embedding_torch.py",
                d / "w0.npz",
                d / "ids.npy",
                d / "y.npy",
                d / "torch.npz",
                "--ranks",
                ranks,
                "--batch",
                batch,
                "--steps",
                steps,
                "--lr",
                lr,
                "--momentum",
                momentum,
                *(["--tied"] if tied else []),
            ],
            env=ctx.one_thread,
            cwd=d,
        )
        if res["rc"] != 0:
            rows.append({**row, "error": ctx.first_error_line(res)})
            continue
        want = dict(np.load(d / "torch.npz"))
        diffs = {k: float(np.max(np.abs(got[k] - want[k]))) for k in want}
        moved = {k: float(np.max(np.abs(want[k] - w[k]))) for k in want}
        rows.append(
            {
                **row,
                "max_abs_diff": max(diffs.values()),
                "per_weight": diffs,
                "max_change": max(moved.values()),
                "ok": max(diffs.values()) <= 1e-4,
            }
        )
    return rows


def check_cost(ctx, work):
    """Rows of the index-check table: the same program with and without the
    check, inference (--time) and training (median step of --log-json)."""
    V, D, S, C = 30000, 64, 128, 10
    rows = []
    for kind, batch in (("inference", 64), ("training", 16)):
        d = work / f"cost-{kind}"
        d.mkdir(parents=True, exist_ok=True)
        token_model(d / "m.onnx", V, D, S, C, tied=False)
        rng = np.random.default_rng(3)
        row = {"kind": kind, "batch": batch, "vocab": V, "dim": D, "tokens": S}
        times = {}
        for checked in (True, False):
            prog = d / ("checked" if checked else "unchecked")
            flags = [] if checked else ["--no-runtime-checks"]
            if kind == "training":
                flags += ["--train", "--optimizer", "sgd", "--lr", 0.1]
            res = ctx.run(
                [
                    ctx.ddpc,
                    "compile",
                    d / "m.onnx",
                    "--batch-size",
                    batch,
                    *flags,
                    "-o",
                    prog,
                ]
            )
            if res["rc"] != 0:
                row["error"] = ctx.first_error_line(res)
                break
            if kind == "inference":
                np.save(d / "ids.npy", rng.integers(0, V, (batch, S)).astype(np.int64))
                res = ctx.run(
                    [
                        "taskset",
                        "-c",
                        0,
                        prog,
                        "--input",
                        f"ids={d / 'ids.npy'}",
                        "--output-dir",
                        d / "out",
                        "--time",
                        50,
                    ],
                    env=ctx.one_thread,
                )
                ms = ctx.parse_time(res["err"])
            else:
                steps, warmup = 40, 5
                np.save(
                    d / "ids.npy",
                    rng.integers(0, V, (batch * steps, S)).astype(np.int64),
                )
                np.save(d / "y.npy", rng.integers(0, C, batch * steps).astype(np.int64))
                logp = d / f"{prog.name}.jsonl"
                logp.unlink(missing_ok=True)
                res = ctx.run(
                    [
                        "taskset",
                        "-c",
                        0,
                        prog,
                        "--data",
                        d / "ids.npy",
                        "--labels",
                        d / "y.npy",
                        "--epochs",
                        1,
                        "--no-shuffle",
                        "--quiet",
                        "--log-json",
                        logp,
                    ],
                    env=ctx.one_thread,
                )
                ms = None
                if res["rc"] == 0:
                    entries = [json.loads(ln) for ln in logp.read_text().splitlines()]
                    ms = float(
                        np.median(
                            [batch / e["samples_per_s"] * 1e3 for e in entries[warmup:]]
                        )
                    )
            if res["rc"] != 0 or ms is None:
                row["error"] = ctx.first_error_line(res)
                break
            times["checked" if checked else "unchecked"] = ms
        if "error" not in row:
            row.update(
                checked_ms=times["checked"],
                unchecked_ms=times["unchecked"],
                ratio=times["checked"] / times["unchecked"],
            )
        rows.append(row)
    return rows


def run(ctx, torch_py, work):
    work.mkdir(parents=True, exist_ok=True)
    return {
        "ddp_match": ddp_match(ctx, torch_py, work / "ddp"),
        "index_check_cost": check_cost(ctx, work),
    }


def markdown(report, fmt):
    r = report.get("embedding")
    if not r:
        return []
    lines = [
        "",
        "## Token embedding vs PyTorch DDP (issue 17)",
        "",
        "ddpc at 2 ranks (`mpirun`, `--no-shuffle`) and PyTorch "
        "`DistributedDataParallel` (gloo) at 2 ranks, same initial weights, batches "
        "and `SGD(lr=0.5, momentum=0.9)`; the largest absolute weight difference "
        "after the steps, and the largest change of any weight (so the difference "
        "is not between two untrained copies).",
        "",
        "| model | ranks × batch | steps | max \\|Δw\\| vs DDP | max weight change | check |",
        "|---|---|---:|---:|---:|---|",
    ]
    for row in r["ddp_match"]:
        if "error" in row:
            lines.append(
                f"| {row['model']} | {row['ranks']} × {row['batch_per_rank']} | "
                f"{row['steps']} | error: {row['error']} | | |"
            )
            continue
        lines.append(
            f"| {row['model']} | {row['ranks']} × {row['batch_per_rank']} | "
            f"{row['steps']} | {row['max_abs_diff']:.1e} | {row['max_change']:.2f} | "
            f"{'ok (≤ 1e-4)' if row['ok'] else 'MISMATCH'} |"
        )
    lines += [
        "",
        "## Cost of the run-time index check (issue 17)",
        "",
        "The same token classifier (Gather on a [vocab, dim] table, mean over "
        "tokens, Gemm) compiled with the check and with `--no-runtime-checks`; "
        "inference: median of 50 runs; training: median step (SGD) after 5 "
        "warm-up steps; 1 thread on CPU 0.",
        "",
        "| program | batch × tokens | vocab × dim | checked ms | unchecked ms | ratio |",
        "|---|---|---|---:|---:|---:|",
    ]
    for row in r["index_check_cost"]:
        if "error" in row:
            lines.append(f"| {row['kind']} | | | error: {row['error']} | | |")
            continue
        lines.append(
            f"| {row['kind']} | {row['batch']} × {row['tokens']} | "
            f"{row['vocab']} × {row['dim']} | {fmt(row['checked_ms'])} | "
            f"{fmt(row['unchecked_ms'])} | {fmt(row['ratio'])} |"
        )
    return lines

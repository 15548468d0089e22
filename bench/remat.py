"""Rematerialization benchmark of `make bench` (bench/README.md), issue 20.

Per model, at the bench's per-rank batch B times `SCALE`, one rank, ZeRO
stage 0: the training program with every activation kept (`--remat off`),
and with `--remat auto` under a budget one byte below that plan's peak (the
backward pass recomputes the activations it chooses). Columns: the saved
activations and the peak of each plan, the peak each program measured, how
many activations auto recomputes, the median step time and the ratio of
the two (Chen et al. 2016 report about 30% extra time for O(sqrt(n))
memory), the largest weight difference after the run (must be 0), and the
largest batch of 1, 1.25, 1.5 and 2 times B whose plan fits a budget of the
remat-off peak at B, without and with --remat auto.

Used by run_bench.py (run(), markdown()); needs numpy, onnx and the ddpc
binary.
"""

import json

import numpy as np
import onnx
from onnx import numpy_helper

MODELS = ("resnet18", "transformer")
SCALE = {"resnet18": 4, "transformer": 4}
BATCH_FACTORS = (1.0, 1.25, 1.5, 2.0)


def _compile(ctx, model_path, cfg, out, *extra):
    res = ctx.run(
        ctx.train_compile_cmd(
            ctx.ddpc,
            model_path,
            cfg,
            out,
            "--report=json",
            "--zero-stage",
            0,
            *extra,
        )
    )
    if res["rc"] != 0:
        return None, ctx.first_error_line(res)
    return json.loads(res["out"])["memory_plan"], None


def _weights(path):
    return {
        t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer
    }


def _saved(plan):
    return sum(a["bytes"] for a in plan["saved_activations"])


def run(ctx, work):
    rows = []
    for name in MODELS:
        base = ctx.configs[name]
        batch = base["batch"] * SCALE[name]
        cfg = {**base, "batch": batch}
        d = work / name
        d.mkdir(parents=True, exist_ok=True)
        model_path = d / f"{name}.onnx"
        onnx.save(ctx.builders[name](), str(model_path))
        steps = cfg["warmup"] + cfg["steps"]
        xp, yp = ctx.make_data(name, steps * 2 * batch, d)
        row = {"model": name, "optimizer": cfg["opt"]["optimizer"], "batch": batch}
        rows.append(row)
        progs = {"off": d / "keep", "auto": d / "auto"}
        plans = {}
        plans["off"], err = _compile(
            ctx, model_path, cfg, progs["off"], "--remat", "off"
        )
        if not err:
            budget = plans["off"]["peak_bytes"] - 1
            plans["auto"], err = _compile(
                ctx, model_path, cfg, progs["auto"], "--memory-budget", budget
            )
        if err:
            row["error"] = err
            continue
        runs = {}
        for kind in ("off", "auto"):
            save = d / f"w-{kind}.onnx"
            runs[kind] = ctx.train(
                ctx.args, progs[kind], xp, yp, cfg, 1, ["--save", save]
            )
            if "error" in runs[kind]:
                row["error"] = f"remat {kind}: {runs[kind]['error']}"
                break
            runs[kind]["weights"] = _weights(save)
        if "error" in row:
            continue
        for kind in ("off", "auto"):
            row[f"saved_{kind}"] = _saved(plans[kind])
            row[f"plan_{kind}"] = plans[kind]["peak_bytes"]
            row[f"peak_{kind}"] = runs[kind]["peak_memory_bytes"]
            row[f"step_ms_{kind}"] = runs[kind]["step_ms"]
        row["recomputed"] = len(plans["auto"]["remat"]["recomputed"])
        row["step_ratio"] = row["step_ms_auto"] / row["step_ms_off"]
        w0, w1 = runs["off"]["weights"], runs["auto"]["weights"]
        row["max_abs_diff"] = max(float(np.max(np.abs(w0[k] - w1[k]))) for k in w0)
        # The largest batch whose plan fits the remat-off peak at `batch`.
        budget = plans["off"]["peak_bytes"]
        for kind in ("off", "auto"):
            best = 0
            for f in BATCH_FACTORS:
                b = int(round(batch * f))
                plan, _ = _compile(
                    ctx,
                    model_path,
                    {**cfg, "batch": b},
                    d / f"fit-{kind}-{b}",
                    "--memory-budget",
                    budget,
                    "--remat",
                    kind,
                )
                if plan:
                    best = b
            row[f"largest_batch_{kind}"] = best
    return {"rows": rows}


def _mib(b):
    return f"{b / 2**20:.2f}"


def markdown(report, fmt):
    r = report.get("remat")
    if not r:
        return []
    lines = [
        "",
        "## Rematerialization: --remat auto vs every activation kept (issue 20)",
        "",
        "One rank, ZeRO stage 0, the bench batch × 4. Off: `--remat off`; auto: "
        "`--remat auto` under a budget one byte below off's plan. Saved: the "
        "activations the plan keeps for backward (MiB); plan / measured: the "
        "peaks (MiB); recomputed: activations auto recomputes; step: median ms "
        "after warm-up, ratio auto / off; Δw: the largest weight difference "
        "after the run; largest batch: of 1, 1.25, 1.5 and 2 × the batch, the "
        "largest whose plan fits a budget of off's peak at the batch.",
        "",
        "| model | opt | batch | saved off / auto | plan off / auto | measured "
        "off / auto | recomputed | step ms off / auto | ratio | max \\|Δw\\| | "
        "largest batch off / auto |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in r["rows"]:
        head = f"| {row['model']} | {row['optimizer']} | {row['batch']} |"
        if "error" in row:
            lines.append(f"{head} error: {row['error']} | | | | | | | |")
            continue
        lines.append(
            f"{head} {_mib(row['saved_off'])} / {_mib(row['saved_auto'])} | "
            f"{_mib(row['plan_off'])} / {_mib(row['plan_auto'])} | "
            f"{_mib(row['peak_off'])} / {_mib(row['peak_auto'])} | "
            f"{row['recomputed']} | "
            f"{fmt(row['step_ms_off'])} / {fmt(row['step_ms_auto'])} | "
            f"{fmt(row['step_ratio'])} | {row['max_abs_diff']:.1e} | "
            f"{row['largest_batch_off']} / {row['largest_batch_auto']} |"
        )
    return lines

"""Rematerialization benchmark of `make bench` (bench/README.md), issue 20.

Per model, at the bench's per-rank batch B times `SCALE` (activations
large against the state), one rank: the training program compiled with
every activation kept (`--remat off`) and with every forward node
recomputed in backward (hidden `--remat-nodes`: all of the graph's nodes,
the most --remat auto can choose). Columns: the saved activations and the
peak of each plan, the peak the program measured, the median step time and
the ratio of the two (Chen et al. 2016 report about 30% extra time for
O(sqrt(n)) memory), the largest weight difference after the run (must be
0), and the largest batch of 1, 1.25, 1.5 and 2 times that batch whose plan
fits a budget of the remat-off peak at that batch, without and with
recomputation.

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
        model = ctx.builders[name]()
        onnx.save(model, str(model_path))
        nodes = ",".join(n.name for n in model.graph.node)
        steps = cfg["warmup"] + cfg["steps"]
        xp, yp = ctx.make_data(name, steps * 2 * batch, d)
        row = {"model": name, "optimizer": cfg["opt"]["optimizer"], "batch": batch}
        rows.append(row)
        progs = {"off": d / "keep", "on": d / "recompute"}
        plans = {}
        for kind, extra in (("off", []), ("on", ["--remat-nodes", nodes])):
            plans[kind], err = _compile(ctx, model_path, cfg, progs[kind], *extra)
            if err:
                row["error"] = f"remat {kind}: {err}"
                break
        if "error" in row:
            continue
        runs = {}
        for kind in ("off", "on"):
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
        for kind in ("off", "on"):
            row[f"saved_{kind}"] = _saved(plans[kind])
            row[f"plan_{kind}"] = plans[kind]["peak_bytes"]
            row[f"peak_{kind}"] = runs[kind]["peak_memory_bytes"]
            row[f"step_ms_{kind}"] = runs[kind]["step_ms"]
        row["step_ratio"] = row["step_ms_on"] / row["step_ms_off"]
        w0, w1 = runs["off"]["weights"], runs["on"]["weights"]
        row["max_abs_diff"] = max(float(np.max(np.abs(w0[k] - w1[k]))) for k in w0)
        # The largest batch whose plan fits the remat-off peak at `batch`.
        budget = plans["off"]["peak_bytes"]
        row["budget"] = budget
        for kind, extra in (("off", []), ("on", ["--remat-nodes", nodes])):
            best = 0
            for f in BATCH_FACTORS:
                b = int(round(batch * f))
                plan, err = _compile(
                    ctx, model_path, {**cfg, "batch": b}, d / f"fit-{kind}-{b}", *extra
                )
                if plan and plan["peak_bytes"] <= budget:
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
        "## Rematerialization: every activation kept vs recomputed (issue 20)",
        "",
        "One rank, the bench batch × 4. Off: `--remat off`; on: every forward "
        "node recomputed in backward (`--remat-nodes` with all of them, the most "
        "`--remat auto` can choose). Saved: the activations the plan keeps for "
        "backward (MiB); peak: the plan and the measured peak (MiB); step: "
        "median ms after warm-up, ratio on / off; Δw: the largest weight "
        "difference after the run; largest batch: of 1, 1.25, 1.5 and 2 × the "
        "batch, the largest whose plan fits a budget of the off plan's peak.",
        "",
        "| model | opt | batch | saved off / on | plan off / on | measured off / "
        "on | step ms off / on | ratio | max \\|Δw\\| | largest batch off / on |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in r["rows"]:
        head = f"| {row['model']} | {row['optimizer']} | {row['batch']} |"
        if "error" in row:
            lines.append(f"{head} error: {row['error']} | | | | | | |")
            continue
        lines.append(
            f"{head} {_mib(row['saved_off'])} / {_mib(row['saved_on'])} | "
            f"{_mib(row['plan_off'])} / {_mib(row['plan_on'])} | "
            f"{_mib(row['peak_off'])} / {_mib(row['peak_on'])} | "
            f"{fmt(row['step_ms_off'])} / {fmt(row['step_ms_on'])} | "
            f"{fmt(row['step_ratio'])} | {row['max_abs_diff']:.1e} | "
            f"{row['largest_batch_off']} / {row['largest_batch_on']} |"
        )
    return lines

"""ZeRO stage 1 benchmark of `make bench` (bench/README.md), issue 20.

Per model and world size N: the same training program compiled with
`--zero-stage 0` and `--zero-stage 1`, run for a few steps on N ranks
(`mpirun --oversubscribe`, 1 thread per rank). Columns: the optimizer state
per rank in the compile-time memory plan, the peak the program measured on
rank 0 against the plan it printed (bytes), the saving ZeRO's formula
predicts (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models", SC 2020, sec. 5.1: stage 1 keeps K·Ψ/N of the
K·Ψ bytes of optimizer state; ddpc's stage 0 keeps two halves, 2·K·Ψ, so
stage 1 saves 2·K·Ψ - K·Ψ/N, less its gather buffers), the median step
time of each stage and their ratio, and the largest weight difference
between the two stages after the run (the results must agree).

Used by run_bench.py (run(), markdown()); needs numpy, onnx, mpirun and the
ddpc binary.
"""

import json

import numpy as np
import onnx
from onnx import numpy_helper

MODELS = ("resnet18", "transformer")
RANKS = (2, 4)


def _state_bytes(report: dict) -> int:
    cats = report["memory_plan"]["categories"]
    return sum(c["bytes"] for c in cats if "optimizer" in c["category"])


def _compile(ctx, model_path, cfg, stage, out):
    res = ctx.run(
        ctx.train_compile_cmd(
            ctx.ddpc, model_path, cfg, out, "--zero-stage", stage, "--report=json"
        )
    )
    if res["rc"] != 0:
        return None, ctx.first_error_line(res)
    return json.loads(res["out"]), None


def _weights(path):
    return {
        t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer
    }


def run(ctx, work):
    rows = []
    for name in MODELS:
        cfg = ctx.configs[name]
        d = work / name
        d.mkdir(parents=True, exist_ok=True)
        model_path = d / f"{name}.onnx"
        onnx.save(ctx.builders[name](), str(model_path))
        steps = cfg["warmup"] + cfg["steps"]
        xp, yp = ctx.make_data(name, steps * cfg["batch"] * max(RANKS), d)
        plans, progs, err = {}, {}, None
        for stage in (0, 1):
            progs[stage] = d / f"zero{stage}"
            plans[stage], err = _compile(ctx, model_path, cfg, stage, progs[stage])
            if err:
                break
        for ranks in RANKS:
            row = {
                "model": name,
                "optimizer": cfg["opt"]["optimizer"],
                "ranks": ranks,
                "batch_per_rank": cfg["batch"],
                "steps": steps,
            }
            rows.append(row)
            if err:
                row["error"] = err
                continue
            runs = {}
            for stage in (0, 1):
                save = d / f"s{stage}-n{ranks}.onnx"
                runs[stage] = ctx.train(
                    ctx.args, progs[stage], xp, yp, cfg, ranks, ["--save", save]
                )
                if "error" in runs[stage]:
                    row["error"] = f"stage {stage}: {runs[stage]['error']}"
                    break
                runs[stage]["weights"] = _weights(save)
            if "error" in row:
                continue
            state = _state_bytes(plans[0])
            row["state_bytes"] = state
            # Stage 0 double-buffers the state (two halves, TrainMain.cpp);
            # stage 1 keeps one copy of 1/N of it.
            row["formula_saving_bytes"] = state * (1 - 1 / (2 * ranks))
            for stage in (0, 1):
                row[f"peak{stage}"] = runs[stage]["peak_memory_bytes"]
                row[f"plan{stage}"] = runs[stage]["memory_plan_bytes"]
                row[f"step_ms{stage}"] = runs[stage]["step_ms"]
            row["measured_saving_bytes"] = row["peak0"] - row["peak1"]
            row["step_ratio"] = row["step_ms1"] / row["step_ms0"]
            w0, w1 = runs[0]["weights"], runs[1]["weights"]
            row["max_abs_diff"] = max(
                float(np.max(np.abs(w0[k] - w1[k]))) for k in w0 if k in w1
            )
    return {"rows": rows}


def _mib(b):
    return f"{b / 2**20:.2f}"


def markdown(report, fmt):
    r = report.get("zero")
    if not r:
        return []
    lines = [
        "",
        "## ZeRO stage 1 vs stage 0 (issue 20)",
        "",
        "The same program compiled with `--zero-stage 0` and `1`, run on N ranks "
        "(`mpirun --oversubscribe`, 1 thread each, so N > 2 shares 2 cores). "
        "State: the whole optimizer state in the plan (MiB). Peak / plan: what "
        "rank 0 measured and the plan it printed (MiB). Formula: the saving ZeRO "
        "predicts, state·(1 − 1/(2N)) (stage 0 keeps the state in two halves, "
        "stage 1 one copy of 1/N; stage 1's gather buffers, ≤ 1 MiB + 1 MiB/N, "
        "and its rounding to 4096-float chunks are not in it); measured: "
        "peak₀ − peak₁. Step: median ms after "
        "warm-up. Δw: the largest weight difference between the stages.",
        "",
        "| model | opt | N × batch | state | stage 0 peak / plan | stage 1 peak / plan | "
        "saving formula / measured | step ms 0 / 1 | ratio | max \\|Δw\\| |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in r["rows"]:
        head = (
            f"| {row['model']} | {row['optimizer']} | "
            f"{row['ranks']} × {row['batch_per_rank']} |"
        )
        if "error" in row:
            lines.append(f"{head} error: {row['error']} | | | | | | |")
            continue
        lines.append(
            f"{head} {_mib(row['state_bytes'])} | "
            f"{_mib(row['peak0'])} / {_mib(row['plan0'])} | "
            f"{_mib(row['peak1'])} / {_mib(row['plan1'])} | "
            f"{_mib(row['formula_saving_bytes'])} / "
            f"{_mib(row['measured_saving_bytes'])} | "
            f"{fmt(row['step_ms0'])} / {fmt(row['step_ms1'])} | "
            f"{fmt(row['step_ratio'])} | {row['max_abs_diff']:.1e} |"
        )
    return lines

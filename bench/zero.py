"""ZeRO stages 1 to 3 benchmark of `make bench` (bench/README.md), issue 20.

Per model and world size N: the same training program compiled with
`--zero-stage 0`, `1` and `2`, run for a few steps on N ranks
(`mpirun --oversubscribe`, 1 thread per rank). Columns: the optimizer state
per rank in the compile-time memory plan, the peak the program measured on
rank 0 against the plan it printed (bytes), the saving ZeRO's formula
predicts (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models", SC 2020, sec. 5.1: stage 1 keeps K·Ψ/N of the
K·Ψ bytes of optimizer state; ddpc's stage 0 keeps two halves, 2·K·Ψ, so
stage 1 saves 2·K·Ψ - K·Ψ/N, less its gather buffers; sec. 5.2: stage 2
keeps Ψ/N of the Ψ gradient bytes, where ddpc's stage 0 keeps two halves and
one MPI staging copy, 3·Ψ, so stage 2 saves another 3·Ψ - Ψ/N, less its two
buckets in flight), the median step time of each stage and their ratio to
stage 0, and the largest weight difference between each stage and stage 0
after the run (the results must agree).

Used by run_bench.py (run(), markdown()); needs numpy, onnx, mpirun and the
ddpc binary.
"""

import json

import numpy as np
import onnx
from onnx import numpy_helper

MODELS = ("resnet18", "transformer")
RANKS = (2, 4)


STAGES = (0, 1, 2, 3)


def _category_bytes(report: dict, name: str) -> int:
    cats = report["memory_plan"]["categories"]
    return sum(c["bytes"] for c in cats if c["category"] == name)


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
        for stage in STAGES:
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
            for stage in STAGES:
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
            state = _category_bytes(plans[0], "optimizer state")
            grads = _category_bytes(plans[0], "gradients")
            row["state_bytes"] = state
            row["grad_bytes"] = grads
            # Stage 0 double-buffers the state and the gradients (two
            # halves, TrainMain.cpp) and stages every gradient once more for
            # MPI; stage 1 keeps one copy of 1/N of the state, stage 2 also
            # of the gradients.
            s1 = state * (1 - 1 / (2 * ranks))
            row["formula_saving_bytes1"] = s1
            row["formula_saving_bytes2"] = s1 + grads * (1.5 - 1 / (2 * ranks))
            # Stage 3 also keeps one copy of 1/N of the parameters (two
            # halves at stage 0); the gathered ones are temporaries.
            params = _category_bytes(plans[0], "parameters")
            row["param_bytes"] = params
            row["formula_saving_bytes3"] = row["formula_saving_bytes2"] + params * (
                1 - 1 / (2 * ranks)
            )
            w0 = runs[0]["weights"]
            for stage in STAGES:
                row[f"peak{stage}"] = runs[stage]["peak_memory_bytes"]
                row[f"plan{stage}"] = runs[stage]["memory_plan_bytes"]
                row[f"step_ms{stage}"] = runs[stage]["step_ms"]
                if stage == 0:
                    continue
                row[f"measured_saving_bytes{stage}"] = (
                    row["peak0"] - row[f"peak{stage}"]
                )
                row[f"step_ratio{stage}"] = row[f"step_ms{stage}"] / row["step_ms0"]
                w = runs[stage]["weights"]
                row[f"max_abs_diff{stage}"] = max(
                    float(np.max(np.abs(w0[k] - w[k]))) for k in w0 if k in w
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
        "## ZeRO stages 1 to 3 vs stage 0 (issue 20)",
        "",
        "The same program compiled with `--zero-stage 0` to `3`, run on N "
        "ranks (`mpirun --oversubscribe`, 1 thread each, so N > 2 shares 2 "
        "cores). State / grads: the optimizer state and the gradients in stage "
        "0's plan (MiB; two halves each). Peak / plan: what rank 0 measured and "
        "the plan it printed (MiB). Formula: the saving ZeRO predicts against "
        "stage 0, stage 1: state·(1 − 1/(2N)); stage 2: also grads·(1.5 − "
        "1/(2N)) (stage 0's two halves and MPI staging copy against one copy of "
        "1/N); stage 3: also params·(1 − 1/(2N)); the parameters gathered "
        "while in use, the gather buffers (≤ 1 MiB + 1 MiB/N), stage 2's two buckets in "
        "flight and the rounding to 4096-float chunks are not in it; measured: "
        "peak₀ − peakₖ. Step: median ms after warm-up; ratio: stage k over "
        "stage 0. Δw: the largest weight difference from stage 0.",
        "",
        "| model | opt | N × batch | params / state / grads | stage 0 peak / "
        "plan | stage 1 peak / plan | stage 2 peak / plan | stage 3 peak / plan "
        "| saving 1 formula / measured | saving 2 formula / measured | saving 3 "
        "formula / measured | step ms 0 / 1 / 2 / 3 | ratio 1 / 2 / 3 | max "
        "\\|Δw\\| 1 / 2 / 3 |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in r["rows"]:
        head = (
            f"| {row['model']} | {row['optimizer']} | "
            f"{row['ranks']} × {row['batch_per_rank']} |"
        )
        if "error" in row:
            lines.append(f"{head} error: {row['error']} |" + " |" * 10)
            continue
        lines.append(
            f"{head} {_mib(row['param_bytes'])} / {_mib(row['state_bytes'])} / "
            f"{_mib(row['grad_bytes'])} | "
            + " | ".join(
                f"{_mib(row[f'peak{k}'])} / {_mib(row[f'plan{k}'])}" for k in STAGES
            )
            + " | "
            + " | ".join(
                f"{_mib(row[f'formula_saving_bytes{k}'])} / "
                f"{_mib(row[f'measured_saving_bytes{k}'])}"
                for k in STAGES[1:]
            )
            + f" | {' / '.join(fmt(row[f'step_ms{k}']) for k in STAGES)} | "
            + " / ".join(fmt(row[f"step_ratio{k}"]) for k in STAGES[1:])
            + " | "
            + " / ".join(f"{row[f'max_abs_diff{k}']:.1e}" for k in STAGES[1:])
            + " |"
        )
    return lines

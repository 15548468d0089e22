#!/usr/bin/env python3
"""Gradient bucket overlap on the CPU target: 2-rank training step time with
and without the runtime's communication thread, in one run.

    python3 bench/bucket_overlap.py [--ddpc build/bin/ddpc] [--steps 30]

Model: an MLP of --layers square --width layers (float32), cross-entropy,
SGD, per-rank batch --batch. Each variant runs `mpirun -np 2 --bind-to core`
for --steps optimizer steps; the step time is global batch / samples_per_s
from the program's --log-json, median over the steps after --warmup.

Variants (only the bucket cap and the runtime's communication thread
differ):
  no-thread        default buckets (25 MiB, first 1 MiB), DDPC_COMM_THREAD=0:
                   MPI progresses them only inside MPI calls, i.e. mostly in
                   the wait at the end of backward: allreduce after backward
                   (reference)
  thread           default buckets with the communication thread (the
                   default): allreduces progress while backward computes
  per-gradient     one bucket per gradient (--bucket-cap-mb 1e-6), thread
  per-gradient, no-thread
Ratios are step time / reference (< 1: faster). Final weights of all
variants must agree (same math, different schedule); the script checks it.
"""
import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
CLASSES = 10


def make_model(path, layers, width):
    rng = np.random.default_rng(0)
    inits, nodes, h = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) * (1.0 / np.sqrt(width))).astype(
            np.float32
        )
        inits.append(numpy_helper.from_array(w, f"W{i}"))
        nodes += [
            helper.make_node("MatMul", [h, f"W{i}"], [f"m{i}"]),
            helper.make_node("Relu", [f"m{i}"], [f"r{i}"]),
        ]
        h = f"r{i}"
    wout = (rng.standard_normal((width, CLASSES)) * 0.05).astype(np.float32)
    inits.append(numpy_helper.from_array(wout, "Wout"))
    nodes.append(helper.make_node("MatMul", [h, "Wout"], ["logits"]))
    g = helper.make_graph(
        nodes,
        "deep_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return layers * width * width * 4 + width * CLASSES * 4


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ddpc", default=str(ROOT / "build" / "bin" / "ddpc"))
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    mpirun = shutil.which("mpirun")
    if not mpirun:
        sys.exit("bucket_overlap: mpirun not found")
    work = pathlib.Path(tempfile.mkdtemp(prefix="ddpc-bucket-bench-"))
    param_bytes = make_model(work / "m.onnx", args.layers, args.width)
    rng = np.random.default_rng(1)
    n = 2 * args.batch * args.steps
    np.save(work / "x.npy", rng.standard_normal((n, args.width)).astype(np.float32))
    np.save(work / "y.npy", rng.integers(0, CLASSES, n).astype(np.int64))

    variants = [
        ("no-thread", "25", "0"),
        ("thread", "25", "1"),
        ("per-gradient", "1e-6", "1"),
        ("per-gradient, no-thread", "1e-6", "0"),
    ]
    programs = {}
    for cap in sorted({v[1] for v in variants}):
        prog = work / f"train_{cap.replace('-', 'm')}"
        rep = subprocess.run(
            [
                args.ddpc,
                "compile",
                str(work / "m.onnx"),
                "--train",
                "--batch-size",
                str(args.batch),
                "--bucket-cap-mb",
                cap,
                "-o",
                str(prog),
                "--report=json",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        programs[cap] = (prog, len(json.loads(rep.stdout)["gradient_buckets"]))

    rows, weights = [], {}
    for name, cap, thread in variants:
        prog, buckets = programs[cap]
        tag = name.replace(", ", "_")
        log = work / f"{tag}.jsonl"
        out = work / f"{tag}.onnx"
        subprocess.run(
            [
                mpirun,
                "--oversubscribe",
                "--bind-to",
                "core",
                "-np",
                "2",
                str(prog),
                "--data",
                str(work / "x.npy"),
                "--labels",
                str(work / "y.npy"),
                "--epochs",
                "1",
                "--no-shuffle",
                "--quiet",
                "--log-json",
                str(log),
                "--save",
                str(out),
            ],
            env=dict(ENV, DDPC_COMM_THREAD=thread),
            check=True,
            capture_output=True,
        )
        steps = [json.loads(l) for l in open(log)][args.warmup :]
        ms = statistics.median(2 * args.batch / s["samples_per_s"] * 1e3 for s in steps)
        rows.append((name, buckets, thread, ms))
        weights[name] = {
            t.name: numpy_helper.to_array(t)
            for t in onnx.load(str(out)).graph.initializer
        }

    ref = rows[0][3]
    print(
        f"deep MLP {args.layers}x{args.width}, {param_bytes / 2**20:.1f} MiB of gradients, "
        f"2 ranks x batch {args.batch}, {len(steps)} measured steps"
    )
    print("| variant | buckets | comm thread | ms/step | ratio |")
    print("|---|---:|---|---:|---:|")
    for name, buckets, thread, ms in rows:
        print(
            f"| {name} | {buckets} | {'yes' if thread == '1' else 'no'} | {ms:.2f} | {ms / ref:.3f} |"
        )
    base = weights["no-thread"]
    worst = max(
        float(np.max(np.abs(w[k] - base[k]))) for w in weights.values() for k in base
    )
    print(f"max |weight difference| between variants: {worst:.3g}")
    shutil.rmtree(work)
    if worst > 1e-5:
        sys.exit("bucket_overlap: variants disagree")


if __name__ == "__main__":
    main()

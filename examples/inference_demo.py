#!/usr/bin/env python3
"""ddpc demo: compile real CNN architectures to native programs, run them,
and check them against onnxruntime (the independent oracle).

Models: ResNet-50, SqueezeNet and DenseNet-121 from the ONNX backend data
(`light/`, real architectures), plus the example LeNet-5 and residual CNN in
examples/models. For each: compile time, max |ddpc - onnxruntime|, and the
median inference latency of both (ratio ddpc/onnxruntime, same process
count and threads: onnxruntime pinned to 1 intra-op thread like ddpc).
"""
import argparse
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIGHT = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def models():
    yield "lenet (examples)", ROOT / "examples/models/lenet.onnx", {
        "input": (8, 1, 28, 28)
    }
    yield "resnet_mini (examples)", ROOT / "examples/models/resnet_mini.onnx", {
        "input": (8, 3, 32, 32)
    }
    for name in ("squeezenet", "resnet50", "densenet121"):
        path = LIGHT / f"light_{name}.onnx"
        m = onnx.load(str(path), load_external_data=False)
        inits = {i.name for i in m.graph.initializer}
        shapes = {
            vi.name: tuple(d.dim_value or 1 for d in vi.type.tensor_type.shape.dim)
            for vi in m.graph.input
            if vi.name not in inits
        }
        yield f"{name} (onnx light)", path, shapes


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ddpc", default=str(ROOT / "build/bin/ddpc"))
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(
        f"{'model':26} {'compile s':>9} {'max abs err':>12} {'ddpc ms':>9} {'ort ms':>8} {'ratio':>6}"
    )
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for label, path, shapes in models():
            feeds = {
                n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()
            }
            prog = tmp / "prog"
            batch = next(iter(shapes.values()))[0]
            t0 = time.perf_counter()
            proc = subprocess.run(
                [
                    args.ddpc,
                    "compile",
                    str(path),
                    "-o",
                    str(prog),
                    "--batch-size",
                    str(batch),
                ],
                capture_output=True,
                text=True,
            )
            compile_s = time.perf_counter() - t0
            if proc.returncode != 0:
                print(f"{label:26} compile failed: {proc.stderr.strip()}")
                ok = False
                continue
            cmd = [
                str(prog),
                "--output-dir",
                str(tmp / "out"),
                "--time",
                str(args.runs),
            ]
            for i, (n, v) in enumerate(feeds.items()):
                np.save(tmp / f"input_{i}.npy", v)
                cmd += ["--input", f"{n}={tmp / f'input_{i}.npy'}"]
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode != 0:
                print(f"{label:26} run failed: {run.stderr.strip()}")
                ok = False
                continue
            m = re.search(r"median ([0-9.]+) ms", run.stderr)
            ddpc_ms = float(m.group(1)) if m else float("nan")
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            sess = ort.InferenceSession(
                str(path), so, providers=["CPUExecutionProvider"]
            )
            want = sess.run(None, feeds)
            times = []
            for _ in range(args.runs):
                t = time.perf_counter()
                sess.run(None, feeds)
                times.append((time.perf_counter() - t) * 1e3)
            ort_ms = float(np.median(times))
            m = onnx.load(str(path), load_external_data=False)
            err = 0.0
            for vi, w in zip(m.graph.output, want):
                stem = re.sub(r"[^A-Za-z0-9._-]", "_", vi.name)
                got = np.load(tmp / "out" / f"{stem}.npy")
                err = max(err, float(np.max(np.abs(got - w))))
                ok &= bool(np.allclose(got, w, rtol=1e-3, atol=1e-4))
            print(
                f"{label:26} {compile_s:9.1f} {err:12.2e} {ddpc_ms:9.1f} {ort_ms:8.1f} {ddpc_ms / ort_ms:6.1f}"
            )
    print("demo:", "all outputs match onnxruntime" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

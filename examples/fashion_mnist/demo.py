#!/usr/bin/env python3
"""`make demo`: train a CNN on Fashion-MNIST with ddpc, data-parallel on 2
ranks, and check its test accuracy with onnxruntime.

1. reads the Fashion-MNIST IDX files of Debian's `dataset-fashion-mnist`
   (/usr/share/datasets/fashion-mnist: 60,000 train / 10,000 test 28x28
   images) and writes normalized float32 .npy files;
2. compiles examples/fashion_mnist/fmnist_cnn.onnx (made by make_model.py)
   into a training program: `ddpc compile --train` (cross-entropy, AdamW);
3. trains it with `mpirun -np 2` (per-rank batch 32, global batch 64);
4. evaluates the saved trained.onnx on the test set with onnxruntime (an
   independent runtime) and fails unless test accuracy >= 85%.
"""
import argparse
import gzip
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = pathlib.Path(
    os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
)
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training-set pixel statistics


def read_idx(name: str, offset: int) -> np.ndarray:
    path = DATA / name
    if not path.exists():
        sys.exit(
            f"error: {path} not found: install Debian's dataset-fashion-mnist "
            f"(scripts/setup does) or set FASHION_MNIST_DIR"
        )
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def prepare(out: pathlib.Path) -> None:
    for split, prefix in (("train", "train"), ("test", "t10k")):
        x = read_idx(f"{prefix}-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
        y = read_idx(f"{prefix}-labels-idx1-ubyte.gz", 8).astype(np.int64)
        x = ((x.astype(np.float32) / 255.0) - MEAN) / STD
        np.save(out / f"{split}_x.npy", x)
        np.save(out / f"{split}_y.npy", y)
        print(f"demo: {split}: {x.shape[0]} images")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ddpc", default=str(ROOT / "build/bin/ddpc"))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32, help="per rank")
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--work", default=str(ROOT / "build/demo"))
    args = ap.parse_args()
    start = time.time()
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    prepare(work)
    model = ROOT / "examples/fashion_mnist/fmnist_cnn.onnx"
    prog = work / "fmnist_train"
    cmd = [
        args.ddpc,
        "compile",
        str(model),
        "--train",
        "--batch-size",
        str(args.batch_size),
        "--optimizer",
        "adamw",
        "--lr",
        str(args.lr),
        "-o",
        str(prog),
        "--report",
    ]
    print("demo:", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True)
    run = [
        str(prog),
        "--data",
        "train_x.npy",
        "--labels",
        "train_y.npy",
        "--epochs",
        str(args.epochs),
        "--val-data",
        "test_x.npy",
        "--val-labels",
        "test_y.npy",
        "--save",
        "trained.onnx",
        "--log-json",
        "steps.jsonl",
    ]
    if args.ranks > 1:
        mpirun = shutil.which("mpirun")
        if not mpirun:
            sys.exit(
                "error: mpirun not found: install openmpi-bin (scripts/setup does)"
            )
        run = [mpirun, "--oversubscribe", "-np", str(args.ranks), *run]
    env = dict(
        os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"
    )
    print("demo:", " ".join(run), flush=True)
    subprocess.run(run, check=True, cwd=work, env=env)

    import onnxruntime as ort

    sess = ort.InferenceSession(
        str(work / "trained.onnx"), providers=["CPUExecutionProvider"]
    )
    x, y = np.load(work / "test_x.npy"), np.load(work / "test_y.npy")
    pred = np.concatenate(
        [
            sess.run(None, {"input": x[i : i + 1000]})[0].argmax(1)
            for i in range(0, len(x), 1000)
        ]
    )
    acc = float((pred == y).mean())
    print(
        f"demo: test accuracy of trained.onnx in onnxruntime: {acc:.4f} "
        f"({args.ranks} ranks, {args.epochs} epochs, {time.time() - start:.0f} s in total)"
    )
    if acc < 0.85:
        print("demo: FAILED: expected at least 0.85", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

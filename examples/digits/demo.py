#!/usr/bin/env python3
"""Digits example: train the MLP in digits_mlp.onnx on scikit-learn's
bundled digits data (sklearn/datasets/data/digits.csv.gz: 1,797 8x8 images,
pixel values 0-16) with 2 ranks, and report test accuracy measured with
onnxruntime on the saved model. A fixed split (seed 0) holds out 20% of the
images for testing.
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ddpc", default=str(ROOT / "build/bin/ddpc"))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--work", default=str(ROOT / "build/demo-digits"))
    args = ap.parse_args()
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    perm = np.random.default_rng(0).permutation(len(x))
    split = int(0.8 * len(x))
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    for name, idx in (("train", perm[:split]), ("test", perm[split:])):
        np.save(work / f"{name}_x.npy", x[idx])
        np.save(work / f"{name}_y.npy", y[idx])
    prog = work / "digits_train"
    subprocess.run(
        [
            args.ddpc,
            "compile",
            str(ROOT / "examples/digits/digits_mlp.onnx"),
            "--train",
            "--batch-size",
            "16",
            "--optimizer",
            "sgd",
            "--lr",
            "0.1",
            "--momentum",
            "0.9",
            "-o",
            str(prog),
        ],
        check=True,
    )
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
    ]
    if args.ranks > 1:
        run = [
            shutil.which("mpirun") or "mpirun",
            "--oversubscribe",
            "-np",
            str(args.ranks),
            *run,
        ]
    env = dict(
        os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"
    )
    subprocess.run(run, check=True, cwd=work, env=env)
    import onnxruntime as ort

    sess = ort.InferenceSession(
        str(work / "trained.onnx"), providers=["CPUExecutionProvider"]
    )
    tx, ty = np.load(work / "test_x.npy"), np.load(work / "test_y.npy")
    acc = float((sess.run(None, {"input": tx})[0].argmax(1) == ty).mean())
    print(f"digits: test accuracy of trained.onnx in onnxruntime: {acc:.4f}")
    return 0 if acc >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())

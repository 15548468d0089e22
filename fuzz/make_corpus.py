#!/usr/bin/env python3
"""Seed corpora for the fuzz targets (fuzz/README.md).

    python3 fuzz/make_corpus.py OUT

OUT/onnx-import/: the repository's example models and the ONNX backend node
tests' models (onnx wheel), each twice: as an inference import and as a
training import with --batch-size 2 (the target's first byte picks the
mode). OUT/npy/: .npy files of every dtype the reader takes, in format
versions 1.0 to 3.0, C and Fortran order, 0-d to 3-d, and empty arrays.
"""
import hashlib
import io
import pathlib
import sys

import numpy as np
import onnx

ROOT = pathlib.Path(__file__).resolve().parents[1]


def onnx_seeds(out: pathlib.Path, limit: int = 400) -> int:
    out.mkdir(parents=True, exist_ok=True)
    models = sorted((ROOT / "examples").rglob("*.onnx"))
    node = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"
    # Every op family once: the first test case of each op's name prefix.
    seen = set()
    for case in sorted(node.iterdir()):
        family = case.name.split("_")[1] if "_" in case.name else case.name
        if family not in seen and (case / "model.onnx").exists():
            seen.add(family)
            models.append(case / "model.onnx")
    count = 0
    for path in models[:limit]:
        data = path.read_bytes()
        if len(data) > 256 * 1024:
            continue
        for mode in (b"\x00", b"\x03"):
            blob = mode + data
            name = hashlib.sha1(blob).hexdigest()[:16]
            (out / name).write_bytes(blob)
            count += 1
    return count


def npy_seeds(out: pathlib.Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    arrays = [
        np.zeros((), np.float32),
        np.arange(6, dtype=np.int64).reshape(2, 3),
        np.zeros((0, 3), np.float32),
        np.array([True, False]),
        np.arange(24, dtype=np.float64).reshape(2, 3, 4),
        np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3)),
    ]
    for dt in ["u1", "i1", "u2", "i2", "u4", "i4", "u8", "i8", "f2", "f4", "f8"]:
        arrays.append(np.arange(5).astype(dt))
    count = 0
    for i, a in enumerate(arrays):
        for version in [(1, 0), (2, 0), (3, 0)]:
            buf = io.BytesIO()
            np.lib.format.write_array(buf, a, version=version)
            (out / f"seed-{i}-v{version[0]}.npy").write_bytes(buf.getvalue())
            count += 1
    return count


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 1
    out = pathlib.Path(sys.argv[1])
    n = onnx_seeds(out / "onnx-import")
    m = npy_seeds(out / "npy")
    print(f"fuzz corpus: {n} onnx-import seeds, {m} npy seeds in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

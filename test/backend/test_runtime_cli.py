"""Interop tests of the C++ runtime against numpy (the oracle).

Uses two helper programs built with the unit tests (unittests/Runtime):
``ddpc-npy-roundtrip`` (readNpy + writeNpy) and ``ddpc-runtime-add-fixture``
(the real inference ``main()`` linked with a hand-written model). They are
looked up in ``$DDPC_UNITTEST_DIR``, default ``<repo>/build/unittests``; the
tests are skipped when they are not built.

Run: ``python3 -m pytest test/backend/test_runtime_cli.py``
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("DDPC_UNITTEST_DIR", REPO / "build" / "unittests"))
ROUNDTRIP = BIN_DIR / "ddpc-npy-roundtrip"
FIXTURE = BIN_DIR / "ddpc-runtime-add-fixture"


def _need(prog: Path) -> None:
    if not prog.exists():
        pytest.skip(f"{prog} not built (set DDPC_UNITTEST_DIR)")


def _run(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=60
    )


DTYPES = [
    "<f4", "<f8", "<f2", "|u1", "|i1", "<i2", "<u2",
    "<i4", "<u4", "<i8", "<u8", "|b1",
]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (7,), (2, 3, 4), (3, 0, 2)])
@pytest.mark.parametrize("version", [None, (1, 0), (2, 0), (3, 0)])
def test_npy_roundtrip(tmp_path: Path, dtype: str, shape: tuple, version) -> None:
    _need(ROUNDTRIP)
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(shape) * 100).astype(np.dtype(dtype))
    src, dst = tmp_path / "in.npy", tmp_path / "out.npy"
    with open(src, "wb") as f:
        np.lib.format.write_array(f, a, version=version)
    r = _run(ROUNDTRIP, src, dst)
    assert r.returncode == 0, r.stderr
    b = np.load(dst)
    assert b.dtype == a.dtype and b.shape == a.shape
    assert a.tobytes() == b.tobytes()
    assert not list(tmp_path.glob("*.tmp.*"))


def test_npy_rejects_fortran_order(tmp_path: Path) -> None:
    _need(ROUNDTRIP)
    src = tmp_path / "f.npy"
    np.save(src, np.asfortranarray(np.ones((2, 3), np.float32)))
    r = _run(ROUNDTRIP, src, tmp_path / "out.npy")
    assert r.returncode == 1
    assert str(src) in r.stderr and "fortran_order" in r.stderr


def _inputs(tmp_path: Path) -> tuple[np.ndarray, np.ndarray, Path, Path]:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 0.5, np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    return x, y, tmp_path / "x.npy", tmp_path / "y.npy"


def test_fixture_runs_by_name(tmp_path: Path) -> None:
    _need(FIXTURE)
    x, y, xf, yf = _inputs(tmp_path)
    out = tmp_path / "new" / "dir"
    r = _run(FIXTURE, "--input", f"y={yf}", f"--input=x={xf}", "--output-dir", out)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "count.npy", "empty.npy", "sum_0.npy", "y_copy.npy",
    ]  # fmt: skip
    np.testing.assert_array_equal(np.load(out / "sum_0.npy"), x + y)
    np.testing.assert_array_equal(np.load(out / "y_copy.npy"), y)
    count = np.load(out / "count.npy")
    assert count.dtype == np.int64 and count.shape == () and count == 6
    empty = np.load(out / "empty.npy")
    assert empty.dtype == np.int32 and empty.shape == (0, 4)


def test_fixture_positional_and_timing(tmp_path: Path) -> None:
    _need(FIXTURE)
    x, y, xf, yf = _inputs(tmp_path)
    r = _run(FIXTURE, xf, yf, "--output-dir", tmp_path, "--time", "5")
    assert r.returncode == 0, r.stderr
    assert "median" in r.stderr and "ms" in r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "sum_0.npy"), x + y)


def test_fixture_help(tmp_path: Path) -> None:
    _need(FIXTURE)
    r = _run(FIXTURE, "--help")
    assert r.returncode == 0
    for text in ["x: float32[2,3]", "count: int64[]", "empty: int32[0,4]",
                 "sum_0.npy", "[A-Za-z0-9._-]"]:  # fmt: skip
        assert text in r.stdout, r.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["X"], "missing input 'y' (#1)"),
        (["--input", "x=X", "--input", "x=X"], "given twice"),
        (["--input", "z=X"], "unknown input 'z'"),
        (["X", "X", "X"], "too many positional inputs"),
        (["--bogus"], "unknown option '--bogus'"),
        (["X", "--input", "x=X"], "given twice"),
        (["--time", "abc", "X", "X"], "--time"),
    ],
)
def test_fixture_cli_errors(tmp_path: Path, args: list, message: str) -> None:
    _need(FIXTURE)
    _, _, xf, _ = _inputs(tmp_path)
    r = _run(FIXTURE, *[str(xf) if a == "X" else a for a in args])
    assert r.returncode == 1
    assert r.stderr.startswith("error: ") and message in r.stderr, r.stderr


@pytest.mark.parametrize(
    "array, got",
    [
        (np.zeros((2, 3), np.int64), "got int64[2,3]"),
        (np.zeros((3, 2), np.float32), "got float32[3,2]"),
        (np.zeros((), np.float32), "got float32[]"),
    ],
)
def test_fixture_checks_dtype_and_shape(
    tmp_path: Path, array: np.ndarray, got: str
) -> None:
    _need(FIXTURE)
    _, _, xf, _ = _inputs(tmp_path)
    bad = tmp_path / "bad.npy"
    np.save(bad, array)
    r = _run(FIXTURE, "--input", f"x={xf}", "--input", f"y={bad}")
    assert r.returncode == 1
    expected = f"error: input 'y' (#1): expected float32[2,3], {got} from '{bad}'"
    assert r.stderr.strip() == expected


def test_fixture_reports_unreadable_input(tmp_path: Path) -> None:
    _need(FIXTURE)
    _, _, xf, _ = _inputs(tmp_path)
    bad = tmp_path / "garbage.npy"
    bad.write_bytes(b"not numpy")
    r = _run(FIXTURE, xf, bad, "--output-dir", tmp_path / "o")
    assert r.returncode == 1
    assert "input 'y' (#1)" in r.stderr and str(bad) in r.stderr
    assert "bad magic" in r.stderr

"""Unit tests of run_backend_tests.py helpers (no compiler needed).

Run: ``python3 -m pytest test/backend/test_harness_unit.py``
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_backend_tests as h  # noqa: E402

F32 = 1


def test_sanitize_matches_runtime_rule() -> None:
    assert h.sanitize("sum:0") == "sum_0"
    assert h.sanitize("a/b c.d-e_f") == "a_b_c.d-e_f"


def test_compare_float_tolerance() -> None:
    e = np.array([1.0, 0.0], np.float32)
    assert (
        h.compare("o", np.array([1.0009, 0.0], np.float32), e, F32, None, None) is None
    )
    assert h.compare("o", np.array([1.0011, 0.0], np.float32), e, F32, None, None)
    assert h.compare("o", np.array([1.0, 2e-5], np.float32), e, F32, None, None)
    assert h.compare("o", np.array([1.0011, 0.0], np.float32), e, F32, 1e-2, 0) is None


@pytest.mark.parametrize("got", [0.0, np.inf, -np.inf])
def test_compare_nan_and_inf_must_match(got: float) -> None:
    e = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    assert h.compare("o", e.copy(), e, F32, None, None) is None
    for i in range(3):
        if e[i] != got:
            a = e.copy()
            a[i] = got
            assert h.compare("o", a, e, F32, None, None), (i, got)


def test_compare_exact_for_integers_and_bool() -> None:
    assert h.compare("o", np.array([1, 3]), np.array([1, 2]), 7, 1.0, 1.0)
    assert h.compare("o", np.array([True]), np.array([False]), 9, None, None)


def test_compare_shape_and_dtype() -> None:
    msg = h.compare(
        "o", np.zeros(3, np.float32), np.zeros((1, 3), np.float32), F32, None, None
    )
    assert msg == "output 'o': expected float32[1,3], got float32[3]"
    assert h.compare(
        "o", np.zeros(3, np.float64), np.zeros(3, np.float32), F32, None, None
    )
    assert (
        h.compare(
            "o",
            np.zeros((0, 2), np.float32),
            np.zeros((0, 2), np.float32),
            F32,
            None,
            None,
        )
        is None
    )


def test_compare_bfloat16_bits() -> None:
    def bits(values: list[float]) -> np.ndarray:
        return (np.array(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)

    assert h.compare("o", bits([1.5, 3.0]), bits([1.5, 3.0]), 16, None, None) is None
    assert h.compare("o", bits([1.5, 3.25]), bits([1.5, 3.0]), 16, None, None)


def test_light_input_matches_onnx_runner() -> None:
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 3])
    x = h._light_input(vi)
    assert x.shape == (1, 2, 3) and x.dtype == np.float32
    np.testing.assert_array_equal(x.reshape(-1), (np.arange(6) / 6).astype(np.float32))


def test_list_files(tmp_path: Path) -> None:
    xf = tmp_path / "xf.txt"
    xf.write_text("# header\n\ntest_a  # why\ntest_b\n")
    assert h.read_expected_failures(xf) == {"test_a": "why", "test_b": ""}
    tol = tmp_path / "tol.txt"
    tol.write_text("test_a 1e-2 1e-4  # reason\n")
    assert h.read_tolerances(tol) == {"test_a": (1e-2, 1e-4)}
    tol.write_text("test_a 1e-2\n")
    with pytest.raises(h.UsageError, match="tol.txt:1"):
        h.read_tolerances(tol)
    # The shipped files parse.
    h.read_expected_failures(h.HERE / "expected_failures.txt")
    h.read_tolerances(h.HERE / "tolerances.txt")

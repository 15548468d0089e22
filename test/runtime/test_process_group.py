"""The process group shared by the CPU and CUDA runtimes
(lib/Runtime/ProcessGroup.h), through unittests/Runtime/ProcessGroupCheck.cpp
built over the linked MPI (the CPU runtime's) and over Open MPI loaded with
dlopen (the CUDA runtime's). The oracle is closed-form sums of rank-dependent
values, and the documented failure lines."""

import subprocess

import pytest

from ddpc_testing import run_env, MPIRUN, UNITTEST_DIR

VARIANTS = ["linked", "loaded"]


def run_check(variant, mode, ranks=None, timeout=60):
    """Runs the check plainly (ranks None) or under mpirun -np ranks."""
    path = UNITTEST_DIR / f"ddpc-process-group-check-{variant}"
    if not path.exists():
        pytest.fail(f"{path} not found: build the ddpc-process-group-check-* targets")
    cmd = [str(path), mode]
    if ranks is not None:
        if MPIRUN is None:
            pytest.skip("mpirun not found")
        cmd = [MPIRUN, "--oversubscribe", "-np", str(ranks), *cmd]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=run_env()
    )


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("ranks", [None, 1, 2, 3])
def test_collectives_sum_over_ranks(variant, ranks):
    r = run_check(variant, "sums", ranks)
    assert r.returncode == 0, r.stderr
    n = ranks or 1
    lines = sorted(l for l in r.stdout.splitlines() if l.startswith("ok:"))
    assert lines == [f"ok: rank {i} of {n}" for i in range(n)], r.stdout


@pytest.mark.parametrize("variant", VARIANTS)
def test_fatal_error_ends_every_rank(variant):
    r = run_check(variant, "fatal", 2)
    assert r.returncode != 0
    assert "error: rank 1: deliberate failure" in r.stderr, r.stderr


@pytest.mark.parametrize("variant", VARIANTS)
def test_fatal_error_on_one_plain_rank(variant):
    r = run_check(variant, "fatal")
    assert r.returncode == 1
    assert r.stderr.strip() == "error: rank 0: deliberate failure"


@pytest.mark.parametrize("variant", VARIANTS)
def test_watchdog_names_the_stuck_collective(variant):
    r = run_check(variant, "timeout", 2)
    assert r.returncode != 0
    assert (
        "error: rank 0: barrier of the timeout check did not complete within "
        "1 s; a peer rank has probably died" in r.stderr
    ), r.stderr

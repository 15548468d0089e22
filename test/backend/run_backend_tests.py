#!/usr/bin/env python3
"""Runs the ONNX backend test data through the ddpc compiler CLI.

For every test case the harness compiles ``model.onnx`` with
``DDPC compile MODEL --target cpu -o PROG``, runs
``PROG --input NAME=FILE.npy ... --output-dir DIR`` and compares the .npy
outputs against the reference outputs shipped with the ``onnx`` package
(numpy is the oracle; no other runtime is involved).

Outcomes per case:
  passed       compiled, ran, every output matched
  failed       compile error (exit 1), run error, wrong output, timeout,
               crash (compiler or program killed by a signal, or a compiler
               exit status other than 0/1/2), or an unexpected pass ("xpass")
               of a case listed in expected_failures.txt
  xfail        failed, but listed in expected_failures.txt (not a failure)
  skipped      unsupported: the compiler exited 2, or the case needs
               something .npy cannot carry (sequence/optional/map inputs,
               string/complex/float8 tensors)

Exit status 0 iff nothing failed; 2 on usage errors. The last line printed is
``N passed, N failed, N skipped``. See README.md beside this file.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
SUITES = ("node", "light", "simple", "pytorch-converted", "pytorch-operator")

# ONNX TensorProto dtypes that travel through .npy (bfloat16 as raw uint16).
NPY_DTYPES = {
    1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16,
    6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64,
    12: np.uint32, 13: np.uint64, 16: np.uint16,
}  # fmt: skip
BFLOAT16 = 16

# Default (rtol, atol) per dtype kind; integers and bool compare exactly.
DEFAULT_TOLERANCES = {
    np.dtype(np.float32): (1e-3, 1e-5),
    np.dtype(np.float16): (1e-2, 1e-3),
    np.dtype(np.float64): (1e-6, 1e-9),
    "bfloat16": (1e-2, 1e-3),
}
# The ONNX runner's light-model tolerances (it uses atol 1e-7; we use 1e-5,
# as tiny absolute differences near zero are not worth chasing).
LIGHT_RTOL = {"densenet121": 2e-3}
LIGHT_DEFAULT_RTOL = 1e-3
LIGHT_ATOL = 1e-5
LIGHT_TIMEOUT_S = 600.0


@dataclass
class Case:
    """One test case: a model plus its inputs and reference outputs."""

    name: str
    suite: str
    model: str
    data_dir: str | None  # test_data_set_0 (None for light models)
    expected_output: str | None = None  # light models only
    timeout: float = 120.0
    rtol: float | None = None  # per-case override
    atol: float | None = None


@dataclass
class Result:
    """What happened to one case. `status` is the raw outcome; `outcome`
    folds in expected_failures.txt."""

    name: str
    suite: str
    status: str  # pass | fail | crash | timeout | unsupported
    message: str = ""
    ops: list[str] = field(default_factory=list)
    seconds: float = 0.0
    outcome: str = ""  # passed | failed | xfail | xpass | skipped


class UsageError(Exception):
    """Bad options or list files (exit status 2)."""


class Unsupported(Exception):
    """The case cannot be run (reported as skipped)."""


class CaseFailure(Exception):
    """The case failed; `status` is fail, crash or timeout."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


# --------------------------------------------------------------------------
# Discovery and list files


def discover(data_root: Path, suite: str) -> list[Case]:
    """Lists the cases of `suite`, sorted by name."""
    suite_dir = data_root / suite
    if not suite_dir.is_dir():
        raise UsageError(f"error: no suite directory '{suite_dir}'")
    cases = []
    if suite == "light":
        for model in sorted(suite_dir.glob("light_*.onnx")):
            stem = model.stem
            out = suite_dir / f"{stem}_output_0.pb"
            cases.append(
                Case(
                    name=stem,
                    suite=suite,
                    model=str(model),
                    data_dir=None,
                    expected_output=str(out),
                    timeout=LIGHT_TIMEOUT_S,
                    rtol=LIGHT_RTOL.get(stem[len("light_") :], LIGHT_DEFAULT_RTOL),
                    atol=LIGHT_ATOL,
                )
            )
        return cases
    for case_dir in sorted(suite_dir.iterdir()):
        model = case_dir / "model.onnx"
        if model.is_file():
            cases.append(
                Case(
                    name=case_dir.name,
                    suite=suite,
                    model=str(model),
                    data_dir=str(case_dir / "test_data_set_0"),
                )
            )
    return cases


def _list_lines(path: Path):
    """Yields (line number, fields, comment) of a list file, skipping blank
    and comment-only lines."""
    if not path.exists():
        return
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        text, _, comment = raw.partition("#")
        fields = text.split()
        if fields:
            yield lineno, fields, comment.strip()


def read_expected_failures(path: Path) -> dict[str, str]:
    """Parses `case_name  # reason` lines into {case: reason}."""
    entries = {}
    for lineno, fields, comment in _list_lines(path):
        if len(fields) != 1:
            raise UsageError(f"error: {path}:{lineno}: expected 'case_name  # reason'")
        entries[fields[0]] = comment
    return entries


def read_tolerances(path: Path) -> dict[str, tuple[float, float]]:
    """Parses `case_name rtol atol  # reason` lines into {case: (rtol, atol)}."""
    entries = {}
    for lineno, fields, _ in _list_lines(path):
        try:
            if len(fields) != 3:
                raise ValueError
            rtol, atol = float(fields[1]), float(fields[2])
            if not (rtol >= 0 and atol >= 0):
                raise ValueError
        except ValueError:
            raise UsageError(
                f"error: {path}:{lineno}: expected 'case_name rtol atol  # reason'"
            ) from None
        entries[fields[0]] = (rtol, atol)
    return entries


# --------------------------------------------------------------------------
# Running one case (in a worker process)


def sanitize(name: str) -> str:
    """The runtime's output file stem: chars outside [A-Za-z0-9._-] -> '_'."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _first_line(text: str) -> str:
    """The line of a tool's stderr that says why: the first 'error...' line,
    else the first non-empty one (prefixed with ': ' for messages)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # ANSI colours
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "error:" in line.lower():
            return line
    return lines[0] if lines else ""


def _with_line(prefix: str, line: str) -> str:
    return f"{prefix}: {line}" if line else prefix


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def _run_process(cmd: list[str], deadline: float, cwd: str) -> tuple[int, str]:
    """Runs `cmd` until `deadline`; returns (exit status, stderr). Kills the
    whole process group on timeout (the compiler may spawn a linker)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise CaseFailure("timeout", "timeout")
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=remaining)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise CaseFailure("timeout", f"timeout: '{Path(cmd[0]).name}' ran too long")
    text = err.decode(errors="replace")
    if not text.strip():
        text = out.decode(errors="replace")
    return proc.returncode, text


def _tensor_type_check(value_info: onnx.ValueInfoProto, what: str) -> None:
    kind = value_info.type.WhichOneof("value")
    if kind != "tensor_type":
        raise Unsupported(f"harness: {what} '{value_info.name}' is a {kind}")
    elem = value_info.type.tensor_type.elem_type
    if elem not in NPY_DTYPES:
        name = onnx.TensorProto.DataType.Name(elem)
        raise Unsupported(
            f"harness: {what} '{value_info.name}' has dtype {name}, "
            "which .npy cannot carry"
        )


def _load_tensor(path: str) -> np.ndarray:
    tensor = onnx.TensorProto()
    with open(path, "rb") as f:
        tensor.ParseFromString(f.read())
    array = numpy_helper.to_array(tensor)
    if tensor.data_type == BFLOAT16:
        array = array.view(np.uint16)  # raw bits, as the runtime expects
    return array, tensor.data_type


def _light_input(value_info: onnx.ValueInfoProto) -> np.ndarray:
    """The ONNX runner's deterministic dummy input for light models."""
    shape = tuple(
        d.dim_value if d.HasField("dim_value") else 1
        for d in value_info.type.tensor_type.shape.dim
    )
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def _as_float(array: np.ndarray, onnx_dtype: int) -> np.ndarray:
    if onnx_dtype == BFLOAT16:
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array


def compare(
    name: str,
    actual: np.ndarray,
    expected: np.ndarray,
    onnx_dtype: int,
    rtol: float | None,
    atol: float | None,
) -> str | None:
    """Returns None if `actual` matches `expected`, else a one-line reason."""
    if actual.dtype != expected.dtype or actual.shape != expected.shape:

        def fmt(a: np.ndarray) -> str:
            dt = "bfloat16" if onnx_dtype == BFLOAT16 and a is expected else a.dtype
            return f"{dt}[{','.join(map(str, a.shape))}]"

        return f"output '{name}': expected {fmt(expected)}, got {fmt(actual)}"
    key = "bfloat16" if onnx_dtype == BFLOAT16 else expected.dtype
    if key not in DEFAULT_TOLERANCES:
        if np.array_equal(actual, expected):
            return None
        bad = np.flatnonzero(actual.reshape(-1) != expected.reshape(-1))
        i = int(bad[0])
        return (
            f"output '{name}': {bad.size}/{expected.size} elements differ; "
            f"first at flat index {i}: got {actual.reshape(-1)[i].item()!r}, "
            f"expected {expected.reshape(-1)[i].item()!r}"
        )
    d_rtol, d_atol = DEFAULT_TOLERANCES[key]
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    a = _as_float(actual, onnx_dtype).astype(np.float64).reshape(-1)
    e = _as_float(expected, onnx_dtype).astype(np.float64).reshape(-1)
    a_nan, e_nan = np.isnan(a), np.isnan(e)
    with np.errstate(invalid="ignore", over="ignore"):
        # Infinities must match exactly (inf - inf would be nan, and
        # rtol * inf would accept anything).
        close = (np.abs(a - e) <= atol + rtol * np.abs(e)) & np.isfinite(e)
        close |= a == e
    bad = (a_nan != e_nan) | (~close & ~e_nan)
    if not bad.any():
        return None
    idx = np.flatnonzero(bad)
    i = int(idx[0])
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - e)
        finite = bad & np.isfinite(diff)
        worst = f"max abs diff {diff[finite].max():.3g}; " if finite.any() else ""
    return (
        f"output '{name}': {idx.size}/{e.size} elements differ "
        f"(rtol={rtol:g}, atol={atol:g}); {worst}"
        f"first at flat index {i}: got {a[i]:.9g}, expected {e[i]:.9g}"
    )


def top_level_ops(model: onnx.ModelProto) -> list[str]:
    """Distinct op types of the top-level graph; non-default domains are
    written `domain.Op`."""
    ops = set()
    for node in model.graph.node:
        domain = node.domain if node.domain not in ("", "ai.onnx") else ""
        ops.add(f"{domain}.{node.op_type}" if domain else node.op_type)
    return sorted(ops)


def run_case(
    case: Case, ddpc: str, work_root: str, keep: bool, target: str = "cpu"
) -> Result:
    """Compiles, runs and checks one case; never raises."""
    start = time.monotonic()
    result = Result(name=case.name, suite=case.suite, status="fail")
    work = Path(work_root) / case.suite / case.name
    try:
        work.mkdir(parents=True, exist_ok=True)
        model = onnx.load(case.model, load_external_data=False)
        result.ops = top_level_ops(model)
        _check_and_run(case, model, ddpc, work, start, result, target)
        result.status = "pass"
    except Unsupported as e:
        result.status, result.message = "unsupported", str(e)
    except CaseFailure as e:
        result.status, result.message = e.status, str(e)
    except Exception as e:  # A harness problem is still a failure to report.
        result.status = "fail"
        result.message = f"harness error: {type(e).__name__}: {e}"
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    result.seconds = round(time.monotonic() - start, 3)
    return result


def _check_and_run(
    case: Case,
    model: onnx.ModelProto,
    ddpc: str,
    work: Path,
    start: float,
    result: Result,
    target: str = "cpu",
) -> None:
    graph = model.graph
    initializers = {init.name for init in graph.initializer}
    inputs = [vi for vi in graph.input if vi.name not in initializers]
    for vi in inputs:
        _tensor_type_check(vi, "input")
    for vi in graph.output:
        _tensor_type_check(vi, "output")

    # Inputs and reference outputs as numpy arrays (bfloat16 as uint16 bits).
    feeds: list[np.ndarray] = []
    expected: list[tuple[np.ndarray, int]] = []
    if case.data_dir is None:
        feeds = [_light_input(vi) for vi in inputs]
        expected = [_load_tensor(case.expected_output)]
    else:

        def numbered(prefix: str) -> list[str]:
            files = glob.glob(os.path.join(case.data_dir, f"{prefix}_*.pb"))
            return sorted(files, key=lambda p: int(re.findall(r"(\d+)\.pb$", p)[0]))

        input_files = numbered("input")
        if len(input_files) != len(inputs):
            raise CaseFailure(
                "fail",
                f"harness: {len(input_files)} input files for "
                f"{len(inputs)} graph inputs",
            )
        feeds = [_load_tensor(p)[0] for p in input_files]
        expected = [_load_tensor(p) for p in numbered("output")]
    if len(expected) > len(graph.output):
        raise CaseFailure("fail", "harness: more reference outputs than graph outputs")
    names = [vi.name for vi in graph.output[: len(expected)]]
    stems = [sanitize(n) for n in names]
    if len(set(stems)) != len(stems):
        raise Unsupported("harness: output names collide after sanitizing")

    # Input files (also used to bind inputs at compile time).
    input_files = []
    for i, (vi, array) in enumerate(zip(inputs, feeds)):
        path = work / f"input_{i}.npy"
        np.save(path, np.array(array, order="C"))  # keeps 0-d arrays 0-d
        input_files.append((vi.name, path))

    # Compile. ddpc has static shapes: when it says a graph input (a shape,
    # axes, ...) must be known at compile time, bind that input to the test
    # data's value with --bind-input and compile again (the reference
    # outputs stay valid: the value is the same).
    deadline = start + case.timeout
    prog = work / "prog"
    bound: dict[str, Path] = {}
    by_name = dict(input_files)
    # Symbolic dims take the test data's sizes (ddpc has static shapes).
    dims: dict[str, int] = {}
    for vi, array in zip(inputs, feeds):
        for d, size in zip(vi.type.tensor_type.shape.dim, np.shape(array)):
            if d.HasField("dim_param") and d.dim_param:
                dims.setdefault(d.dim_param, int(size))
    while True:
        cmd = [ddpc, "compile", case.model, "--target", target, "-o", str(prog)]
        for name, size in dims.items():
            cmd += ["--dim", f"{name}={size}"]
        for name, path in bound.items():
            cmd += ["--bind-input", f"{name}={path}"]
        rc, err = _run_process(cmd, deadline, str(work))
        line = _first_line(err)
        m = re.search(r"--bind-input (\S+)=FILE\.npy", line) if rc == 2 else None
        if m and m.group(1) in by_name and m.group(1) not in bound:
            bound[m.group(1)] = by_name[m.group(1)]
            continue
        break
    if rc == 2:
        raise Unsupported(line or "unsupported (no message)")
    if rc == 1:
        raise CaseFailure("fail", _with_line("compile error", line))
    if rc < 0:
        raise CaseFailure(
            "crash", _with_line(f"compiler killed by {_signal_name(rc)}", line)
        )
    if rc != 0:
        raise CaseFailure("crash", _with_line(f"compiler exited {rc}", line))
    if not prog.is_file():
        raise CaseFailure("fail", "compile error: exit 0 but no program written")

    # Run.
    cmd = [str(prog)]
    for name, path in input_files:
        if name not in bound:
            cmd += ["--input", f"{name}={path}"]
    out_dir = work / "out"
    cmd += ["--output-dir", str(out_dir)]
    rc, err = _run_process(cmd, deadline, str(work))
    line = _first_line(err)
    if rc < 0:
        raise CaseFailure(
            "crash", _with_line(f"program killed by {_signal_name(rc)}", line)
        )
    if rc != 0:
        raise CaseFailure("fail", _with_line(f"run error (exit {rc})", line))

    # Compare.
    for name, stem, (ref, dtype) in zip(names, stems, expected):
        path = out_dir / f"{stem}.npy"
        if not path.is_file():
            raise CaseFailure("fail", f"output '{name}': '{path.name}' not written")
        actual = np.load(path, allow_pickle=False)
        problem = compare(name, actual, ref, dtype, case.rtol, case.atol)
        if problem:
            raise CaseFailure("fail", problem)


# --------------------------------------------------------------------------
# Reporting


def classify(result: Result, expected_failures: dict[str, str]) -> None:
    listed = result.name in expected_failures
    if result.status == "unsupported":
        result.outcome = "skipped"
    elif result.status == "pass":
        result.outcome = "xpass" if listed else "passed"
    else:
        result.outcome = "xfail" if listed else "failed"


def counts(results: list[Result]) -> dict[str, int]:
    c = {k: 0 for k in ("passed", "failed", "skipped", "xfail", "xpass")}
    for r in results:
        c[r.outcome] += 1
    c["crashes"] = sum(r.status == "crash" for r in results)
    c["timeouts"] = sum(r.status == "timeout" for r in results)
    return c


def is_failure(r: Result) -> bool:
    return r.outcome in ("failed", "xpass")


def describe_failure(r: Result) -> str:
    if r.outcome == "xpass":
        return "unexpectedly passed (remove it from expected_failures.txt)"
    return r.message


def write_markdown(path: Path, results: list[Result], summary: dict) -> None:
    per_op: dict[str, dict[str, int]] = {}
    for r in results:
        column = {"passed": "passed", "failed": "failed", "xpass": "failed",
                  "xfail": "xfail", "skipped": "unsupported"}[r.outcome]  # fmt: skip
        for op in r.ops or ["(no ops)"]:
            row = per_op.setdefault(
                op, {"passed": 0, "failed": 0, "xfail": 0, "unsupported": 0}
            )
            row[column] += 1
    lines = [
        "# ddpc ONNX backend tests",
        "",
        f"{summary['passed']} passed, {summary['failed']} failed, "
        f"{summary['skipped']} skipped (xfail: {summary['xfail']}, "
        f"xpass: {summary['xpass']}, crashes: {summary['crashes']}, "
        f"timeouts: {summary['timeouts']})",
        "",
        "| op | passed | failed | xfail | unsupported |",
        "|---|---:|---:|---:|---:|",
    ]
    for op in sorted(per_op, key=str.lower):
        row = per_op[op]
        lines.append(
            f"| {op} | {row['passed']} | {row['failed']} | {row['xfail']} "
            f"| {row['unsupported']} |"
        )

    def md(text: str) -> str:
        return text.replace("|", "\\|").replace("`", "'")

    failures = [r for r in results if is_failure(r)]
    lines += ["", f"## Failing cases ({len(failures)})", ""]
    lines += [
        f"- `{r.name}` ({r.suite}, {r.status}): {md(describe_failure(r))}"
        for r in failures
    ] or ["none"]
    crashes = [r for r in results if r.status == "crash"]
    lines += ["", f"## Crashes ({len(crashes)})", ""]
    lines += [f"- `{r.name}`: {md(r.message)}" for r in crashes] or ["none"]
    xfails = [r for r in results if r.outcome == "xfail"]
    if xfails:
        lines += ["", f"## Expected failures that failed ({len(xfails)})", ""]
        lines += [f"- `{r.name}`: {md(r.message)}" for r in xfails]
    reasons: dict[str, int] = {}
    for r in results:
        if r.outcome == "skipped":
            # Group by reason regardless of the node that triggered it.
            reason = re.sub(r"node '[^']*'(, )?", "", r.message).replace(" ()", "")
            reasons[reason] = reasons.get(reason, 0) + 1
    if reasons:
        lines += ["", "## Unsupported reasons", "", "| cases | reason |", "|---:|---|"]
        for reason, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"| {n} | {md(reason)} |")
    path.write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Run ONNX backend test cases through `ddpc compile` and "
        "compare outputs with the reference data (see README.md).",
    )
    p.add_argument("--suite", action="append", choices=SUITES,
                   help="suite to run (repeatable; default: node)")  # fmt: skip
    p.add_argument("--data-root", type=Path,
                   default=Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data",
                   help="ONNX backend test data (default: the onnx package's)")  # fmt: skip
    p.add_argument("--ddpc", default=str(REPO_ROOT / "build" / "bin" / "ddpc"),
                   help="compiler CLI (default: <repo>/build/bin/ddpc)")  # fmt: skip
    p.add_argument(
        "--jobs", "-j", type=int, default=2, help="parallel cases (default 2)"
    )
    p.add_argument(
        "--target",
        default="cpu",
        choices=["cpu", "cuda-emulate"],
        help="ddpc --target (cuda-emulate: the CUDA target's kernel IR run on "
        "the CPU; default cpu)",
    )
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds per case, compile + run (default 120; light: 600)")  # fmt: skip
    p.add_argument(
        "--filter", help="only cases whose name matches this regex (re.search)"
    )
    p.add_argument(
        "--expected-failures", type=Path, default=HERE / "expected_failures.txt"
    )
    p.add_argument("--tolerances", type=Path, default=HERE / "tolerances.txt")
    p.add_argument("--report", type=Path, help="write a Markdown report here")
    p.add_argument("--json", type=Path, help="write per-case results as JSON here")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument(
        "--list", action="store_true", help="list the selected cases and exit"
    )
    p.add_argument(
        "-v", "--verbose", action="store_true", help="print every case result"
    )
    args = p.parse_args(argv)
    args.suite = args.suite or ["node"]
    if args.jobs < 1:
        p.error("--jobs must be >= 1")
    if args.timeout <= 0:
        p.error("--timeout must be > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    """Runs the selected cases; returns the exit status."""
    try:
        pattern = re.compile(args.filter) if args.filter else None
    except re.error as e:
        print(f"error: bad --filter regex: {e}", file=sys.stderr)
        return 2
    expected_failures = read_expected_failures(args.expected_failures)
    tolerances = read_tolerances(args.tolerances)

    cases: list[Case] = []
    for suite in dict.fromkeys(args.suite):
        cases += discover(args.data_root, suite)
    # Keep the list files honest: every entry must name a case of some suite.
    known = {
        c.name
        for suite in SUITES
        if (args.data_root / suite).is_dir()
        for c in discover(args.data_root, suite)
    }
    for listed in list(expected_failures) + list(tolerances):
        if listed not in known:
            print(f"warning: listed case '{listed}' does not exist", file=sys.stderr)
    if pattern:
        cases = [c for c in cases if pattern.search(c.name)]
    for c in cases:
        if c.suite != "light":
            c.timeout = args.timeout
        if c.name in tolerances:
            c.rtol, c.atol = tolerances[c.name]
    if args.list:
        for c in cases:
            print(f"{c.suite}/{c.name}")
        return 0
    if not cases:
        print("error: no cases selected", file=sys.stderr)
        return 2
    ddpc = shutil.which(args.ddpc) or args.ddpc
    if not os.access(ddpc, os.X_OK):
        print(f"error: compiler '{args.ddpc}' not found or not executable "
              "(build it or pass --ddpc)", file=sys.stderr)  # fmt: skip
        return 2
    ddpc = os.path.abspath(ddpc)
    # Parallel cases share the cores: one BLAS thread each (the programs'
    # default is every core), unless the caller chose.
    if args.jobs > 1:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

    work_root = tempfile.mkdtemp(prefix="ddpc-backend-")
    results: list[Result] = []
    total = len(cases)
    try:
        with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
            futures = [
                pool.submit(run_case, c, ddpc, work_root, args.keep, args.target)
                for c in cases
            ]
            for future in concurrent.futures.as_completed(futures):
                r = future.result()
                classify(r, expected_failures)
                results.append(r)
                if args.verbose or is_failure(r):
                    print(f"{r.outcome.upper()}: {r.name}: "
                          f"{describe_failure(r) if r.outcome != 'passed' else ''}",
                          file=sys.stderr)  # fmt: skip
                if len(results) % 50 == 0 or len(results) == total:
                    c = counts(results)
                    print(f"[{len(results)}/{total}] {c['passed']} passed, "
                          f"{c['failed'] + c['xpass']} failed, {c['skipped']} skipped",
                          file=sys.stderr)  # fmt: skip
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if args.keep:
            print(f"work directory kept: {work_root}", file=sys.stderr)
        else:
            shutil.rmtree(work_root, ignore_errors=True)

    order = {(c.suite, c.name): i for i, c in enumerate(cases)}
    results.sort(key=lambda r: order[(r.suite, r.name)])
    c = counts(results)
    summary = {
        "passed": c["passed"],
        "failed": c["failed"] + c["xpass"],
        "skipped": c["skipped"],
        "xfail": c["xfail"],
        "xpass": c["xpass"],
        "crashes": c["crashes"],
        "timeouts": c["timeouts"],
    }
    if args.report:
        write_markdown(args.report, results, summary)
    if args.json:
        args.json.write_text(
            json.dumps({"summary": summary, "cases": [asdict(r) for r in results]},
                       indent=1) + "\n"  # fmt: skip
        )

    failures = [r for r in results if is_failure(r)]
    if failures:
        print("failures:")
        for r in failures:
            print(f"  {r.name}: {describe_failure(r)}")
    crashes = [r for r in results if r.status == "crash"]
    if crashes:
        print("crashes:")
        for r in crashes:
            print(f"  {r.name}: {r.message}")
    print(f"xfail: {summary['xfail']}, xpass: {summary['xpass']}, "
          f"crashes: {summary['crashes']}, timeouts: {summary['timeouts']}")  # fmt: skip
    print(
        f"{summary['passed']} passed, {summary['failed']} failed, {summary['skipped']} skipped"
    )
    return 0 if summary["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

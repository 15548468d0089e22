"""``ddpc compile --mlir-timing``: upstream MLIR's timing report, with the
phases outside the pass manager timed in the same tree.

The oracle is the pipeline itself: the pass names that ``--dump-ir``'s stage
table lists (the passes that ran) must each appear in the report, nested
under their stage in the tree display; the non-MLIR phases appear as
top-level entries.
"""

import re
import subprocess

from ddpc_testing import BUILD, ROOT

DDPC = BUILD / "bin" / "ddpc"
MODEL = ROOT / "test" / "torch_exports" / "convbn.train.onnx"
TRAIN = ["--train", "--batch-size", "4", "--optimizer", "sgd", "--momentum", "0.9"]
PHASES = [
    "ONNX import",
    "stage 'training'",
    "stage 'fused'",
    "stage 'bufferized'",
    "stage 'lowered'",
    "LLVM IR translation",
    "LLVM optimization",
    "LLVM object emission",
    "glue",
    "link",
]
ROW = re.compile(r"^\s+\d+\.\d+ \(\s*\d+\.\d+%\)( +)(\S.*)$")


def compile_timed(tmp_path, *flags):
    r = subprocess.run(
        [str(DDPC), "compile", str(MODEL), *TRAIN, "-o", str(tmp_path / "prog")]
        + list(flags),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert "Execution time report" in r.stderr
    rows = [m.groups() for m in map(ROW.match, r.stderr.splitlines()) if m]
    return [(len(indent), name) for indent, name in rows]


def passes_run(tmp_path):
    """Pass names of the CPU pipeline, from --dump-ir's per-pass dumps."""
    dump = tmp_path / "dump"
    subprocess.run(
        [str(DDPC), "compile", str(MODEL), *TRAIN, "--emit=lowered-mlir"]
        + ["-o", str(tmp_path / "l.mlir"), "--dump-ir", str(dump)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return sorted(p.name for p in dump.glob("*.mlir"))


def test_tree_names_phases_and_passes(tmp_path):
    rows = compile_timed(tmp_path, "--mlir-timing")
    names = [n for _, n in rows]
    top = {n for d, n in rows if d == min(d for d, _ in rows)}
    for phase in PHASES:
        assert phase in top, (phase, names)
    assert names[-1] == "Total"
    # Passes nest under their stage: deeper than it, after it, before the
    # next stage.
    depth = dict((n, d) for d, n in rows)
    order = {n: i for i, (_, n) in enumerate(rows)}
    for stage, p in [
        ("stage 'training'", "BuildTrainingStepPass"),
        ("stage 'fused'", "FuseOpsPass"),
        ("stage 'bufferized'", "OneShotBufferizePass"),
        ("stage 'lowered'", "ConvertFuncToLLVMPass"),
    ]:
        assert p in depth, (p, names)
        assert depth[p] > depth[stage]
        assert order[stage] < order[p]
    # The dump's file names (NNNN_<pass>[.<function>].mlir) carry the pass
    # arguments that ran; a function pass writes one dump per function it
    # changed, the report one row per pass. So the report names at least as
    # many distinct passes as the dumps do (some passes leave the IR
    # unchanged and write no dump).
    dumped = {
        f.split("_", 1)[1].split(".")[0]
        for f in passes_run(tmp_path)
        if not f.startswith("0000_")
    }
    pass_rows = {
        n for n in names if n.endswith("Pass") or n in ("Canonicalizer", "CSE")
    }
    assert len(pass_rows) >= len(dumped) > 0, (sorted(pass_rows), sorted(dumped))


def test_list_display_is_flat(tmp_path):
    rows = compile_timed(tmp_path, "--mlir-timing", "--mlir-timing-display=list")
    names = [n for _, n in rows]
    assert len({d for d, _ in rows}) == 1  # no nesting
    assert len(names) == len(set(names))  # one line per name, summed
    for phase in PHASES + ["OneShotBufferizePass", "ConvertFuncToLLVMPass"]:
        assert phase in names


def test_display_without_timing_is_an_error(tmp_path):
    r = subprocess.run(
        [str(DDPC), "compile", str(MODEL), "--mlir-timing-display=list"]
        + ["-o", str(tmp_path / "prog")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "error: --mlir-timing-display applies with --mlir-timing only"
    ]

#!/usr/bin/env python3
"""ddpc benchmark suite (`make bench`): ddpc against the reference a user
would pick instead, on the same model, batch, optimizer, thread count and
machine, in one run.

Per model (bench/models/make_models.py):
  - compile time of `ddpc compile` (import -> executable), inference and training;
  - inference: ddpc program vs onnxruntime CPU, 1 thread each, pinned to CPU 0;
  - training: ddpc program at 1 rank (plain) and 2 ranks (mpirun, bound to
    cores) vs PyTorch eager at 1 rank and 2 ranks (DDP, gloo), 1 thread per
    rank, rank r pinned to CPU r; warm-up steps excluded, median step time;
  - the per-step losses of both from the same weights and batches must agree
    (a fast wrong program cannot look good);
  - peak resident memory of the training processes;
  - a profile: each distinct node compiled alone, forward and --vjp
    (forward + backward), timed; the largest op-family stage is "slowest".

Writes bench/results/<date>.json and <date>.md and prints the Markdown.
Ratios are ddpc / reference for times and memory (> 1: ddpc is slower or
bigger) and ddpc / reference for samples/s (< 1: ddpc is slower).
"""

import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper, shape_inference

BENCH = pathlib.Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH / "models"))
sys.path.insert(0, str(BENCH))
import embedding  # noqa: E402
import remat  # noqa: E402
import zero  # noqa: E402
import make_models  # noqa: E402

MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_btl": "self,vader,tcp",
    "OMPI_MCA_btl_tcp_if_include": "lo",
    "OMPI_MCA_oob_tcp_if_include": "lo",
}
ONE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
}

#: Per model: per-rank batch, warm-up and measured training steps, inference
#: timing runs, optimizer. Sized so that `make bench` fits 20 minutes on 2
#: cores with ddpc's current naive loops; see bench/README.md.
CONFIGS = {
    "mlp": dict(
        batch=64,
        warmup=5,
        steps=30,
        infer_runs=200,
        profile_runs=50,
        opt=dict(optimizer="sgd", lr=0.05, momentum=0.9),
    ),
    "fashion_cnn": dict(
        batch=32,
        warmup=1,
        steps=5,
        infer_runs=10,
        profile_runs=3,
        opt=dict(optimizer="sgd", lr=0.05, momentum=0.9),
    ),
    # lr 0.01: at 0.05 this ResNet diverges within 4 steps of batch 4, and a
    # diverging run amplifies float rounding beyond any loss tolerance.
    "resnet18": dict(
        batch=4,
        warmup=1,
        steps=3,
        infer_runs=3,
        profile_runs=1,
        opt=dict(optimizer="sgd", lr=0.01, momentum=0.9),
    ),
    "transformer": dict(
        batch=2,
        warmup=1,
        steps=3,
        infer_runs=3,
        profile_runs=1,
        opt=dict(
            optimizer="adamw", lr=1e-3, weight_decay=0.01, betas="0.9,0.999", eps=1e-8
        ),
    ),
}
LOSS_RTOL, LOSS_ATOL = 2e-3, 2e-4


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd, env=None, timeout=1800, cwd=None) -> dict:
    """Runs cmd; returns rc, stdout, stderr, wall seconds and the peak RSS
    (MiB) of the process and every descendant it waited for (os.wait4)."""
    full_env = dict(os.environ, **(env or {}))
    t0 = time.perf_counter()
    with open(os.devnull, "rb") as devnull:
        try:
            proc = subprocess.Popen(
                [str(c) for c in cmd],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=devnull,
                env=full_env,
                cwd=cwd,
                text=True,
                start_new_session=True,
            )
        except OSError as e:  # e.g. the binary is being rebuilt
            return {
                "rc": 127,
                "out": "",
                "err": f"error: cannot run {cmd[0]}: {e}",
                "wall_s": 0.0,
                "maxrss_mib": 0.0,
            }
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(
                proc.pid, signal.SIGKILL
            )  # the group we started: mpirun and its ranks
            out, err = proc.communicate()
            err += f"\ntimed out after {timeout} s"
        except KeyboardInterrupt:  # its own session does not see the terminal's ^C
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        # _RusagePopen (below) reaped the child with os.wait4 and kept its
        # peak RSS, which covers the descendants it waited for (MPI ranks).
    wall = time.perf_counter() - t0
    return {
        "rc": proc.returncode,
        "out": out,
        "err": err,
        "wall_s": wall,
        "maxrss_mib": getattr(proc, "maxrss_kib", 0) / 1024.0,
    }


class _RusagePopen(subprocess.Popen):
    """Popen that reaps with os.wait4 to keep the child's peak RSS."""

    def _try_wait(self, wait_flags):
        try:
            pid, status, usage = os.wait4(self.pid, wait_flags)
        except ChildProcessError:
            pid, status = self.pid, 0
            usage = None
        if usage is not None and pid == self.pid:
            self.maxrss_kib = usage.ru_maxrss
        return pid, status


subprocess.Popen = _RusagePopen  # only this script's own children


def first_error_line(res: dict) -> str:
    lines = [ln for ln in (res["err"] + "\n" + res["out"]).splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower() or "unsupported" in ln.lower():
            return ln.strip()[:300]
    return (lines[-1].strip() if lines else f"exit code {res['rc']}")[:300]


# -- environment ---------------------------------------------------------------


def machine_info() -> dict:
    cpu = "unknown"
    try:
        for ln in open("/proc/cpuinfo"):
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for ln in open("/proc/meminfo"):
            if ln.startswith("MemTotal"):
                mem = int(ln.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "mem_gib": round(mem, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def ddpc_version(ddpc: str) -> str:
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
    )
    return rev.stdout.strip() or "unknown"


def mpirun_version() -> str:
    if not shutil.which("mpirun"):
        return "not found"
    res = subprocess.run(["mpirun", "--version"], capture_output=True, text=True)
    return res.stdout.splitlines()[0] if res.stdout else "unknown"


def torch_version(python: str) -> str | None:
    res = subprocess.run(
        [python, str(BENCH / "torch_ref.py"), "version"],
        capture_output=True,
        text=True,
        env=dict(os.environ, **ONE_THREAD),
    )
    return res.stdout.strip() if res.returncode == 0 else None


def ensure_torch(args) -> tuple[str | None, str]:
    """Returns (python with torch, how it was obtained)."""
    if args.torch_python:
        return (
            (args.torch_python, "given")
            if torch_version(args.torch_python)
            else (None, "given python has no torch")
        )
    venv_py = BENCH / ".venv" / "bin" / "python"
    if venv_py.exists() and torch_version(str(venv_py)):
        return str(venv_py), "PyPI (bench/.venv)"
    if not args.no_torch_install:
        log(
            "installing PyTorch from PyPI into bench/.venv (a few minutes the first time)"
        )
        t0 = time.perf_counter()
        ok = (
            subprocess.run(
                [sys.executable, "-m", "venv", str(BENCH / ".venv")]
            ).returncode
            == 0
        )
        if ok:
            ok = (
                subprocess.run(
                    [
                        str(venv_py),
                        "-m",
                        "pip",
                        "install",
                        "-q",
                        "--disable-pip-version-check",
                        "torch",
                        "numpy",
                    ],
                    timeout=args.torch_install_timeout,
                ).returncode
                == 0
            )
        log(
            f"pip install torch: {'ok' if ok else 'failed'} in {time.perf_counter() - t0:.0f} s"
        )
        if ok and torch_version(str(venv_py)):
            return str(venv_py), "PyPI (bench/.venv)"
    deb = "/usr/bin/python3"
    if os.path.exists(deb) and torch_version(deb):
        return deb, "Debian python3-torch"
    if not args.no_torch_install and shutil.which("apt-get") and os.geteuid() == 0:
        log("falling back to Debian's python3-torch")
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "python3-torch"],
            env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"),
        )
        if torch_version(deb):
            return deb, "Debian python3-torch"
    if args.no_torch_install:
        return None, "not installed (--no-torch-install)"
    return None, "PyPI install and python3-torch both failed"


# -- models and data -------------------------------------------------------------


def export_graph(
    model: onnx.ModelProto, work: pathlib.Path
) -> tuple[pathlib.Path, pathlib.Path]:
    """graph.json + weights.npz for torch_ref.py (which does not need onnx)."""
    g = model.graph
    arrays, constants, nodes, buffers = {}, [], [], []
    for init in g.initializer:
        arrays[init.name] = numpy_helper.to_array(init)
    for n in g.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type == "Constant":
            arrays[n.output[0]] = numpy_helper.to_array(attrs["value"])
            constants.append(n.output[0])
            continue
        if n.op_type == "BatchNormalization":
            buffers += list(n.input[3:5])
        attrs = {
            k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()
        }
        nodes.append(
            {
                "op": n.op_type,
                "inputs": list(n.input),
                "outputs": list(n.output),
                "attrs": attrs,
            }
        )
    desc = {
        "input": g.input[0].name,
        "output": g.output[0].name,
        "nodes": nodes,
        "initializers": [i.name for i in g.initializer],
        "constants": constants,
        "buffers": buffers,
    }
    gpath, wpath = work / "graph.json", work / "weights.npz"
    gpath.write_text(json.dumps(desc))
    np.savez(wpath, **arrays)
    return gpath, wpath


def make_data(
    name: str, rows: int, work: pathlib.Path
) -> tuple[pathlib.Path, pathlib.Path]:
    """Gaussian inputs; labels from a fixed random linear teacher (learnable)."""
    shape = make_models.INPUTS[name][1]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((rows, *shape)).astype(np.float32)
    teacher = rng.standard_normal((int(np.prod(shape)), make_models.CLASSES)).astype(
        np.float32
    )
    y = np.argmax(x.reshape(rows, -1) @ teacher, axis=1).astype(np.int64)
    xp, yp = work / "x.npy", work / "y.npy"
    np.save(xp, x)
    np.save(yp, y)
    return xp, yp


# -- inference ---------------------------------------------------------------------


def parse_time(stderr: str) -> float | None:
    m = re.search(r"time: median ([0-9.eE+-]+) ms", stderr)
    return float(m.group(1)) if m else None


def ort_latency(
    model_path: pathlib.Path, x: np.ndarray, runs: int
) -> tuple[float, np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    try:
        sess = ort.InferenceSession(
            str(model_path), opts, providers=["CPUExecutionProvider"]
        )
        feed = {sess.get_inputs()[0].name: x}
        out = sess.run(None, feed)[0]
        times = []
        for _ in range(max(runs, 3)):
            t0 = time.perf_counter()
            sess.run(None, feed)
            times.append((time.perf_counter() - t0) * 1e3)
    finally:
        os.sched_setaffinity(0, saved)
    return float(np.median(times)), out


def bench_inference(args, name, cfg, model_path, work) -> dict:
    B = cfg["batch"]
    prog = work / "infer"
    res = run([args.ddpc, "compile", model_path, "--batch-size", B, "-o", prog])
    r = {"batch": B, "compile_s": res["wall_s"]}
    if res["rc"] != 0:
        r["error"] = first_error_line(res)
        return r
    shape = make_models.INPUTS[name][1]
    x = np.random.default_rng(2).standard_normal((B, *shape)).astype(np.float32)
    np.save(work / "xi.npy", x)
    runs = cfg["infer_runs"]
    res = run(
        [
            "taskset",
            "-c",
            "0",
            prog,
            "--input",
            f"{make_models.INPUTS[name][0]}={work / 'xi.npy'}",
            "--output-dir",
            work / "out",
            "--time",
            runs,
        ],
        env=ONE_THREAD,
    )
    ms = parse_time(res["err"])
    if res["rc"] != 0 or ms is None:
        r["error"] = first_error_line(res)
        return r
    ort_ms, ort_out = ort_latency(model_path, x, runs)
    ddpc_out = np.load(next((work / "out").glob("*.npy")))
    r.update(
        ddpc_ms=ms,
        ort_ms=ort_ms,
        ratio=ms / ort_ms,
        runs=runs,
        ddpc_samples_per_s=B / ms * 1e3,
        ort_samples_per_s=B / ort_ms * 1e3,
        max_abs_diff=float(np.max(np.abs(ddpc_out - ort_out))),
    )
    return r


# -- training ----------------------------------------------------------------------


def opt_flags(opt: dict) -> list:
    flags = ["--optimizer", opt["optimizer"], "--lr", opt["lr"]]
    if opt["optimizer"] == "sgd":
        flags += ["--momentum", opt.get("momentum", 0.0)]
    else:
        flags += [
            "--weight-decay",
            opt["weight_decay"],
            "--betas",
            opt["betas"],
            "--eps",
            opt["eps"],
        ]
    return flags


def torch_opt_flags(opt: dict) -> list:
    flags = ["--optimizer", opt["optimizer"], "--lr", opt["lr"]]
    if opt["optimizer"] == "sgd":
        flags += ["--momentum", opt.get("momentum", 0.0)]
    else:
        flags += [
            "--weight-decay",
            opt["weight_decay"],
            "--betas",
            opt["betas"],
            "--eps",
            opt["eps"],
        ]
    return flags


def summarize_steps(losses, secs, warmup, samples_per_step) -> dict:
    measured = secs[warmup:]
    if not measured:
        return {"error": "no measured steps", "losses": losses}
    step_s = float(np.median(measured))
    return {
        "step_ms": step_s * 1e3,
        "samples_per_s": samples_per_step / step_s,
        "losses": losses,
        "step_ms_all": [s * 1e3 for s in secs],
    }


def train_compile_cmd(ddpc, model_path, cfg, prog, *extra) -> list:
    """`ddpc compile --train` of a model at its CONFIGS entry `cfg`."""
    return [
        ddpc,
        "compile",
        model_path,
        "--train",
        "--loss",
        "cross-entropy",
        *opt_flags(cfg["opt"]),
        "--batch-size",
        cfg["batch"],
        "-o",
        prog,
        *extra,
    ]


def run_ddpc_train(args, prog, xp, yp, cfg, world, extra=()) -> dict:
    """Trains `prog` for warm-up + measured steps on `world` ranks (extra:
    more program flags); the step summary, peak RSS, and the last record's
    measured and planned per-rank peak (bytes)."""
    steps = cfg["warmup"] + cfg["steps"]
    logp = prog.parent / f"{prog.name}-steps{world}.jsonl"
    logp.unlink(missing_ok=True)
    cmd = [
        prog,
        "--data",
        xp,
        "--labels",
        yp,
        "--epochs",
        1,
        "--no-shuffle",
        "--quiet",
        "--log-json",
        logp,
        "--stop-after-steps",
        steps,
        *extra,
    ]
    if world == 1:
        cmd = ["taskset", "-c", "0", *cmd]
    else:
        bind = "core" if (os.cpu_count() or 1) >= world else "none"
        cmd = ["mpirun", "--oversubscribe", "--bind-to", bind, "-np", world, *cmd]
    res = run(cmd, env={**ONE_THREAD, **MPI_ENV}, timeout=args.step_timeout)
    if res["rc"] != 0 or not logp.exists():
        return {"error": first_error_line(res)}
    entries = [json.loads(ln) for ln in logp.read_text().splitlines() if ln.strip()]
    entries = [e for e in entries if "loss" in e]
    gb = cfg["batch"] * world
    secs = [
        gb / e["samples_per_s"] if e.get("samples_per_s") else float("nan")
        for e in entries
    ]
    r = summarize_steps([e["loss"] for e in entries], secs, cfg["warmup"], gb)
    r["maxrss_mib"] = res["maxrss_mib"]
    if entries:
        for k in ("peak_memory_bytes", "memory_plan_bytes"):
            r[k] = entries[-1].get(k)
    return r


def run_torch_train(args, torch_py, gpath, wpath, xp, yp, cfg, world, work) -> dict:
    out = work / f"torch{world}.json"
    out.unlink(missing_ok=True)
    cmd = [
        torch_py,
        BENCH / "torch_ref.py",
        "train",
        "--graph",
        gpath,
        "--weights",
        wpath,
        "--data",
        xp,
        "--labels",
        yp,
        "--batch",
        cfg["batch"],
        "--warmup",
        cfg["warmup"],
        "--steps",
        cfg["steps"],
        "--world",
        world,
        "--out",
        out,
        *torch_opt_flags(cfg["opt"]),
    ]
    if world == 1:
        cmd = ["taskset", "-c", "0", *cmd]
    res = run(cmd, env=ONE_THREAD, timeout=args.step_timeout)
    if res["rc"] != 0 or not out.exists():
        return {"error": first_error_line(res)}
    data = json.loads(out.read_text())
    r = summarize_steps(
        data["losses"], data["step_seconds"], cfg["warmup"], cfg["batch"] * world
    )
    r["losses_fp64"] = data.get("losses_fp64")
    r["maxrss_mib"] = res["maxrss_mib"]
    return r


def loss_check(ddpc: dict, ref: dict) -> dict:
    """ddpc's per-step losses against PyTorch's float64 run of the same
    training. Passes when at every step |ddpc - fp64| <= ATOL + RTOL * |fp64|
    + 2 * |torch fp32 - fp64|: a badly conditioned run (the ResNet with
    batch 4) amplifies float32 rounding, and ddpc may then deviate from the
    exact result as far as PyTorch's own float32 run does, but no further."""
    la, lt, l64 = ddpc.get("losses"), ref.get("losses"), ref.get("losses_fp64")
    if not la or not lt or not l64:
        return {"ok": None, "note": "missing losses"}
    n = min(len(la), len(lt), len(l64))
    la, lt, l64 = (np.array(v[:n], np.float64) for v in (la, lt, l64))
    d_exact, t_exact = np.abs(la - l64), np.abs(lt - l64)
    ok = bool(np.all(d_exact <= LOSS_ATOL + LOSS_RTOL * np.abs(l64) + 2 * t_exact))
    return {
        "ok": ok,
        "steps": n,
        "max_abs_diff": float(np.abs(la - lt).max()),
        "max_abs_diff_fp64": float(d_exact.max()),
        "torch_max_abs_diff_fp64": float(t_exact.max()),
        "first_loss": float(lt[0]),
        "last_loss_ddpc": float(la[-1]),
        "last_loss_torch": float(lt[-1]),
    }


def bench_training(args, name, cfg, model_path, work, torch_py, gpath, wpath) -> dict:
    B = cfg["batch"]
    xp, yp = make_data(name, (cfg["warmup"] + cfg["steps"]) * B * 2, work)
    r = {
        "batch_per_rank": B,
        "warmup": cfg["warmup"],
        "steps": cfg["steps"],
        "optimizer": cfg["opt"],
    }
    r["torch"] = {}
    if torch_py:
        for world in (1, 2):
            log(f"  {name}: PyTorch training, {world} rank(s)")
            r["torch"][str(world)] = run_torch_train(
                args, torch_py, gpath, wpath, xp, yp, cfg, world, work
            )
    prog = work / "train"
    if not args.has_train:
        r["ddpc"] = {
            "error": "training: not available",
            "detail": "`ddpc compile --help` lists no --train",
        }
        return r
    res = run(train_compile_cmd(args.ddpc, model_path, cfg, prog))
    r["compile_s"] = res["wall_s"]
    if res["rc"] != 0:
        msg = first_error_line(res)
        unavailable = "not implemented" in msg or "Unknown command line argument" in msg
        r["ddpc"] = {
            "error": "training: not available" if unavailable else msg,
            "detail": msg,
        }
        return r
    r["ddpc"] = {}
    for world in (1, 2):
        log(f"  {name}: ddpc training, {world} rank(s)")
        r["ddpc"][str(world)] = run_ddpc_train(args, prog, xp, yp, cfg, world)
    r["loss_check"] = {
        w: loss_check(r["ddpc"][w], r["torch"].get(w, {})) for w in ("1", "2")
    }
    return r


# -- profile -------------------------------------------------------------------------


def node_models(model: onnx.ModelProto, batch: int):
    """Yields (family, signature, count, one-node model) per distinct node:
    float inputs (activations and weights) become graph inputs so that --vjp
    differentiates all of them; Constant inputs stay constants."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in list(m.graph.input) + list(m.graph.output):
        d = vi.type.tensor_type.shape.dim[0]
        d.ClearField("dim_param")
        d.dim_value = batch
    m = shape_inference.infer_shapes(m)
    types = {
        vi.name: vi
        for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info)
    }
    inits = {i.name: i for i in m.graph.initializer}
    consts = {n.output[0]: n for n in m.graph.node if n.op_type == "Constant"}
    groups = {}
    for n in m.graph.node:
        if n.op_type == "Constant":
            continue
        ins, nodes, graph_inputs, graph_inits = [], [], [], []
        for i in n.input:
            if i in consts:
                nodes.append(consts[i])
                ins.append(("const", i))
            elif i in inits and inits[i].data_type != onnx.TensorProto.FLOAT:
                graph_inits.append(inits[i])
                ins.append(("init", i))
            else:
                if i in inits:
                    t = inits[i]
                    vi = helper.make_tensor_value_info(i, t.data_type, list(t.dims))
                else:
                    vi = types[i]
                graph_inputs.append(vi)
                dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
                ins.append(("in", tuple(dims)))
        out = types[n.output[0]]
        sig = (n.op_type, str(n.attribute), tuple(map(str, ins)))
        if sig in groups:
            groups[sig][2] += 1
            continue
        node = onnx.NodeProto()
        node.CopyFrom(n)
        graph = helper.make_graph(
            nodes + [node], "node", graph_inputs, [out], graph_inits
        )
        one = helper.make_model(graph, opset_imports=list(model.opset_import))
        one.ir_version = model.ir_version
        groups[sig] = [n.op_type, sig, 1, one]
    for v in groups.values():
        yield v


def time_program(
    args, one: onnx.ModelProto, work: pathlib.Path, vjp: bool, runs: int
) -> float | None:
    path = work / "node.onnx"
    onnx.save(one, str(path))
    prog = work / ("node_vjp" if vjp else "node_fwd")
    res = run([args.ddpc, "compile", path, *(["--vjp"] if vjp else []), "-o", prog])
    if res["rc"] != 0:
        return None
    rng = np.random.default_rng(3)
    feeds = []
    specs = [(vi.name, vi.type.tensor_type) for vi in one.graph.input]
    if vjp:
        specs += [("d_" + vi.name, vi.type.tensor_type) for vi in one.graph.output]
    for nm, tt in specs:
        shape = [d.dim_value for d in tt.shape.dim]
        f = work / f"in_{len(feeds)}.npy"
        np.save(f, rng.standard_normal(shape).astype(np.float32))
        feeds += ["--input", f"{nm}={f}"]
    res = run(
        [
            "taskset",
            "-c",
            "0",
            prog,
            *feeds,
            "--output-dir",
            work / "nout",
            "--time",
            runs,
        ],
        env=ONE_THREAD,
    )
    return parse_time(res["err"]) if res["rc"] == 0 else None


def profile(args, name, cfg, model_path, work) -> dict:
    """Forward and forward+backward (--vjp) time of every distinct node,
    summed per op family (count-weighted)."""
    model = onnx.load(str(model_path))
    pw = work / "profile"
    pw.mkdir(exist_ok=True)
    runs = args.profile_runs or cfg["profile_runs"]
    fams: dict = {}
    failed = []
    for op, _, count, one in node_models(model, cfg["batch"]):
        fwd = time_program(args, one, pw, vjp=False, runs=runs)
        both = time_program(args, one, pw, vjp=True, runs=runs)
        f = fams.setdefault(op, {"nodes": 0, "forward_ms": 0.0, "backward_ms": 0.0})
        f["nodes"] += count
        if fwd is None or both is None:
            failed.append(op)
            continue
        f["forward_ms"] += count * fwd
        f["backward_ms"] += count * max(both - fwd, 0.0)
    stages = [(f"{op} forward", v["forward_ms"]) for op, v in fams.items()]
    stages += [(f"{op} backward", v["backward_ms"]) for op, v in fams.items()]
    total = sum(ms for _, ms in stages) or float("nan")
    stages.sort(key=lambda s: -s[1])
    return {
        "method": "each distinct node compiled alone (forward, and --vjp for forward+backward), "
        f"median of {runs} runs, times count of equal nodes",
        "runs": runs,
        "families": fams,
        "failed": sorted(set(failed)),
        "slowest": (
            {"stage": stages[0][0], "ms": stages[0][1], "share": stages[0][1] / total}
            if stages
            else None
        ),
        "top": [{"stage": s, "ms": ms, "share": ms / total} for s, ms in stages[:4]],
    }


# -- report --------------------------------------------------------------------------


def fmt(v, digits=3):
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "–"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:.0f}"
        return f"{v:.{digits}g}"
    return str(v)


def ratio(a, b):
    return a / b if a and b else None


def markdown(report: dict) -> str:
    m, v = report["machine"], report["versions"]
    lines = [
        f"# ddpc benchmark {report['date']}",
        "",
        f"Machine: {m['cpus']} CPUs, {m['cpu_model']}, {m['mem_gib']} GiB, {m['os']}.  ",
        f"Versions: ddpc {v['ddpc']}, onnxruntime {v['onnxruntime']}, PyTorch {v['torch']} "
        f"({v['torch_source']}), onnx {v['onnx']}, numpy {v['numpy']}, {v['mpirun']}, "
        f"Python {m['python']}.  ",
        "Threads: 1 per process (ddpc, onnxruntime intra/inter-op 1, torch.set_num_threads(1)); "
        "1 rank pinned to CPU 0 (taskset), 2 ranks bound to CPUs 0 and 1. "
        "Ratios are ddpc / reference: for times and memory > 1 means ddpc is slower/bigger; "
        "for samples/s < 1 means ddpc is slower.",
        "",
        "## Inference (ddpc vs onnxruntime CPU, same batch)",
        "",
        "| model | batch | ddpc compile s | ddpc ms | ORT ms | ratio | ddpc samples/s | ORT samples/s | max abs diff |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in report["models"].items():
        i = r.get("inference", {})
        if "error" in i:
            lines.append(
                f"| {name} | {i.get('batch')} | {fmt(i.get('compile_s'))} | error: {i['error']} | | | | | |"
            )
            continue
        lines.append(
            f"| {name} | {i['batch']} | {fmt(i['compile_s'])} | {fmt(i['ddpc_ms'])} | {fmt(i['ort_ms'])} | "
            f"{fmt(i['ratio'])} | {fmt(i['ddpc_samples_per_s'])} | {fmt(i['ort_samples_per_s'])} | "
            f"{i['max_abs_diff']:.1e} |"
        )
    lines += [
        "",
        "## Training step (ddpc vs PyTorch eager CPU; same model, weights, batches, optimizer)",
        "",
        "Batch is per rank (global batch = batch × ranks). Step time: median of the measured steps "
        "(warm-up steps excluded), rank 0's wall time of forward + backward + gradient allreduce + update.",
        "",
        "| model | batch/rank | optimizer | ranks | ddpc compile s | ddpc ms/step | torch ms/step | ratio | "
        "ddpc samples/s | torch samples/s | ratio | peak RSS ddpc MiB | torch MiB | ratio | loss check |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in report["models"].items():
        t = r.get("training", {})
        if not t:
            continue
        opt = t["optimizer"]["optimizer"]
        for w in ("1", "2"):
            d = t.get("ddpc", {}).get(w, {}) if isinstance(t.get("ddpc"), dict) else {}
            if "error" in t.get("ddpc", {}):
                d = {"error": t["ddpc"]["error"]}
            p = t.get("torch", {}).get(w, {})
            lc = t.get("loss_check", {}).get(w, {})
            if lc.get("ok") is None:
                check = "–"
            else:
                check = (
                    f"{'ok' if lc['ok'] else 'MISMATCH'}: {lc['steps']} steps "
                    f"{lc['first_loss']:.3f}→{lc['last_loss_torch']:.3f}, max \\|Δ\\| vs torch "
                    f"{lc['max_abs_diff']:.1e}, vs fp64 {lc['max_abs_diff_fp64']:.1e} "
                    f"(torch fp32 vs fp64 {lc['torch_max_abs_diff_fp64']:.1e})"
                )
            ddpc_cells = (
                [fmt(d.get("step_ms"))] if "error" not in d else [f"{d['error']}"]
            )
            lines.append(
                f"| {name} | {t['batch_per_rank']} | {opt} | {w} | {fmt(t.get('compile_s')) if w == '1' else ''} | "
                f"{ddpc_cells[0]} | {fmt(p.get('step_ms')) if 'error' not in p else 'error: ' + p['error']} | "
                f"{fmt(ratio(d.get('step_ms'), p.get('step_ms')))} | {fmt(d.get('samples_per_s'))} | "
                f"{fmt(p.get('samples_per_s'))} | {fmt(ratio(d.get('samples_per_s'), p.get('samples_per_s')))} | "
                f"{fmt(d.get('maxrss_mib'))} | {fmt(p.get('maxrss_mib'))} | "
                f"{fmt(ratio(d.get('maxrss_mib'), p.get('maxrss_mib')))} | {check} |"
            )
    lines += [
        "",
        "## Slowest stage per model (profile)",
        "",
        "Method: each distinct node compiled alone, as the forward program and with `--vjp` "
        "(forward + backward); backward = vjp - forward; median of `runs` timed runs, times the "
        "number of equal nodes, summed per op family. Share = of the summed forward + backward "
        "time (the optimizer update is not included).",
        "",
        "| model | slowest stage | ms | share | next stages | runs |",
        "|---|---|---:|---:|---|---:|",
    ]
    for name, r in report["models"].items():
        p = r.get("profile")
        if not p or not p.get("slowest"):
            continue
        s = p["slowest"]
        nxt = ", ".join(f"{x['stage']} {x['share'] * 100:.0f}%" for x in p["top"][1:])
        fail = f" (not compiled alone: {', '.join(p['failed'])})" if p["failed"] else ""
        lines.append(
            f"| {name} | {s['stage']} | {fmt(s['ms'])} | {s['share'] * 100:.0f}% | {nxt}{fail} | "
            f"{p['runs']} |"
        )
    lines += embedding.markdown(report, fmt)
    lines += zero.markdown(report, fmt)
    lines += remat.markdown(report, fmt)
    lines += ["", f"Total bench wall time: {report['wall_s']:.0f} s."]
    return "\n".join(lines) + "\n"


def snapshot_ddpc(ddpc: str, work_root: pathlib.Path) -> str:
    """Copies the ddpc binary and the runtime libraries it links into
    programs (<bindir>/../lib) into the work folder, so that the whole run
    measures one build even if the build tree is rebuilt meanwhile."""
    src_bin = pathlib.Path(ddpc)
    src_lib = src_bin.parent.parent / "lib"
    dst = work_root / "ddpc"
    shutil.rmtree(dst, ignore_errors=True)
    (dst / "bin").mkdir(parents=True)
    (dst / "lib").mkdir()
    shutil.copy2(src_bin, dst / "bin" / "ddpc")
    for f in list(src_lib.glob("libddpc_*.a")) + list(src_lib.glob("*.link")):
        shutil.copy2(f, dst / "lib" / f.name)
    return str(dst / "bin" / "ddpc")


def main() -> None:
    parser = argparse.ArgumentParser(description="ddpc benchmark suite")
    parser.add_argument("--ddpc", default=str(ROOT / "build" / "bin" / "ddpc"))
    parser.add_argument(
        "--models", nargs="*", default=list(CONFIGS), choices=list(CONFIGS)
    )
    parser.add_argument("--results", default=str(BENCH / "results"))
    parser.add_argument("--work", default=str(BENCH / ".work"))
    parser.add_argument("--torch-python", help="python with torch (skips the install)")
    parser.add_argument("--no-torch-install", action="store_true")
    parser.add_argument("--torch-install-timeout", type=int, default=900)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument(
        "--profile-runs",
        type=int,
        default=0,
        help="timed runs per profiled node (default: per model)",
    )
    parser.add_argument("--step-timeout", type=int, default=600)
    parser.add_argument(
        "--no-embedding",
        action="store_true",
        help="skip the token-embedding tables (DDP match, index-check cost)",
    )
    parser.add_argument(
        "--no-zero",
        action="store_true",
        help="skip the ZeRO stage 1 vs stage 0 table",
    )
    parser.add_argument(
        "--no-remat",
        action="store_true",
        help="skip the rematerialization table",
    )
    args = parser.parse_args()
    t_start = time.perf_counter()
    args.ddpc = str(pathlib.Path(args.ddpc).resolve())
    if not os.path.exists(args.ddpc):
        sys.exit(f"bench: {args.ddpc} not found (run `make build`)")

    args.ddpc = snapshot_ddpc(args.ddpc, pathlib.Path(args.work))
    helptext = subprocess.run(
        [args.ddpc, "compile", "--help"], capture_output=True, text=True
    ).stdout
    args.has_train = "--train" in helptext
    if not args.has_train:
        log(
            "ddpc compile has no --train: training: not available (PyTorch side still runs)"
        )
    torch_py, torch_source = ensure_torch(args)
    report = {
        "date": datetime.date.today().isoformat(),
        "machine": machine_info(),
        "versions": {
            "ddpc": ddpc_version(args.ddpc),
            "onnxruntime": ort.__version__,
            "onnx": onnx.__version__,
            "numpy": np.__version__,
            "mpirun": mpirun_version(),
            "torch": torch_version(torch_py) if torch_py else "not available",
            "torch_source": torch_source,
        },
        "configs": CONFIGS,
        "models": {},
    }
    log(f"PyTorch: {report['versions']['torch']} ({torch_source})")
    work_root = pathlib.Path(args.work)
    for name in args.models:
        cfg = CONFIGS[name]
        work = work_root / name
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        model = make_models.BUILDERS[name]()
        model_path = work / f"{name}.onnx"
        onnx.save(model, str(model_path))
        gpath, wpath = export_graph(model, work)
        entry = report["models"][name] = {}
        log(f"{name}: inference")
        entry["inference"] = bench_inference(args, name, cfg, model_path, work)
        log(f"{name}: training")
        entry["training"] = bench_training(
            args, name, cfg, model_path, work, torch_py, gpath, wpath
        )
        if not args.no_profile:
            log(f"{name}: profile")
            entry["profile"] = profile(args, name, cfg, model_path, work)
    ctx = argparse.Namespace(
        args=args,
        ddpc=args.ddpc,
        run=run,
        first_error_line=first_error_line,
        parse_time=parse_time,
        one_thread=ONE_THREAD,
        mpi_env={**ONE_THREAD, **MPI_ENV},
        opt_flags=opt_flags,
        make_data=make_data,
        train=run_ddpc_train,
        train_compile_cmd=train_compile_cmd,
        configs=CONFIGS,
        builders=make_models.BUILDERS,
    )
    if not args.no_embedding and args.has_train:
        log("token embedding: DDP match and index-check cost")
        report["embedding"] = embedding.run(ctx, torch_py, work_root / "embedding")
    if not args.no_zero and args.has_train:
        log("ZeRO stages 1 to 3 vs stage 0")
        report["zero"] = zero.run(ctx, work_root / "zero")
    if not args.no_remat and args.has_train:
        log("rematerialization: --remat auto vs every activation kept")
        report["remat"] = remat.run(ctx, work_root / "remat")
    report["wall_s"] = time.perf_counter() - t_start

    out = pathlib.Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    md = markdown(report)
    for suffix, text in ((".json", json.dumps(report, indent=1)), (".md", md)):
        path = out / f"{report['date']}{suffix}"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    print(md)
    log(f"wrote {out / report['date']}.json and .md in {report['wall_s']:.0f} s")


if __name__ == "__main__":
    main()

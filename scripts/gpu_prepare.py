#!/usr/bin/env python3
"""Builds the GPU-check bundle. Runs HERE (the build machine: ddpc, MPI,
python3 with onnx and numpy), never on the GPU machine; started by
scripts/gpu-prepare.sh.

Also the token-embedding check (embedding_bundle, gpu_check.embedding_check).

For each model (Fashion-MNIST CNN, ResNet-18 at 3x32x32):
  - compiles `ddpc compile --train --optimizer adamw --lr 0.001
    --batch-size 32` for --target cuda --cuda-arch sm_80,sm_90 and for
    --target cpu (cached in the work folder by a stamp of model, flags and
    ddpc binary);
  - makes STEPS x BATCH samples (uint8 images + an exact float32 recipe,
    int64 labels);
  - runs the CPU program here for STEPS steps (--no-shuffle, one epoch):
    per-step losses and final weights are the CPU reference;
  - writes the bundle: CUDA programs, data, references, the graph as
    graph.json + graph_weights.npz (bench/run_bench.py's export for
    bench/torch_ref.py), scripts, README.txt, manifest.json; the CPU
    programs go to the sibling folder OUTDIR-cpu (for the dry run only).

    python3 scripts/gpu_prepare.py OUTDIR [--ddpc build/bin/ddpc] [--force]
"""

import argparse
import gzip
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "models"))
import gpu_check  # noqa: E402  (checkpoint reader, data recipe, shared with the check)
import make_models  # noqa: E402  (the bench's ResNet-18 builder)
import run_bench  # noqa: E402  (export_graph: ONNX -> graph.json + weights.npz for torch_ref)

BATCH = 32
STEPS = 20
#: Step-1 chaos envelope (gpu_check.py, at GRAD_RTOL): CHAOS_RUNS extra CPU
#: step-1 runs on inputs scaled by (1 + CHAOS_EPS * N(0, 1)), about one
#: float32 rounding.
CHAOS_RUNS = 8
CHAOS_EPS = 1e-7
#: Trajectory chaos envelope: CHAOS_TRAJ_RUNS perturbed runs of all STEPS
#: steps (per-step loss and final-weight deviations from the reference).
CHAOS_TRAJ_RUNS = 2
OPTIMIZER = {
    "name": "adamw",
    "lr": 0.001,
    "betas": [0.9, 0.999],
    "eps": 1e-8,
    "weight_decay": 0.0,
}
CUDA_ARCH = "sm_80,sm_90"
#: Models that also ship an inference program (fused cuDNN/cuBLASLt
#: epilogues on the GPU); the ResNet's would not fit the bundle.
INFERENCE_MODELS = {"fmnist_cnn"}
# The reference ships tensors up to gpu_check.FULL_MAX elements whole and
# larger ones as gpu_check.SAMPLE fixed random elements (plus whole-tensor
# norms): the ResNet's 11.2M final weights would not fit the 60 MiB bundle
# beside its 45 MiB program.
#: Initial float weights ship in graph_weights.npz when they are at most
#: this big; otherwise the check takes them from the ddpc program's step-0
#: checkpoint, verified against the SHA-256 of each ONNX initializer.
INIT_SHIP_MAX = 4 << 20
MAX_BUNDLE = 60 << 20
FMNIST_MEAN, FMNIST_STD = 0.2860, 0.3530


def log(msg: str) -> None:
    print(f"[gpu-prepare {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sh(cmd, **kw) -> subprocess.CompletedProcess:
    cmd = [str(c) for c in cmd]
    log("$ " + " ".join(cmd))
    res = subprocess.run(cmd, text=True, capture_output=True, **kw)
    if res.returncode != 0:
        sys.exit(
            f"gpu-prepare: error: command failed (exit {res.returncode}): {' '.join(cmd)}\n"
            f"{res.stdout[-2000:]}\n{res.stderr[-4000:]}"
        )
    return res


# -- models and data -------------------------------------------------------------


def fmnist_model(work: pathlib.Path) -> pathlib.Path:
    path = ROOT / "examples/fashion_mnist/fmnist_cnn.onnx"
    if not path.exists():
        path = work / "fmnist_cnn.onnx"
        sh([sys.executable, ROOT / "examples/fashion_mnist/make_model.py", path])
    return path


def resnet_model(work: pathlib.Path) -> pathlib.Path:
    """bench/models/make_models.py's ResNet-18 (BasicBlock [2,2,2,2],
    BatchNorm, 11.2M parameters, numpy seed 0), for 3x32x32 inputs: the
    graph is size-agnostic (GlobalAveragePool), only the input is declared
    smaller, so the shipped data stays small."""
    m = make_models.resnet18()
    dims = m.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_value, dims[3].dim_value = 32, 32
    m.graph.name = "resnet18_32"
    onnx.checker.check_model(m)
    path = work / "resnet18_32.onnx"
    data = m.SerializeToString()
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)
    return path


def fmnist_data(n: int):
    """The first n Fashion-MNIST training images (Debian's
    dataset-fashion-mnist, as examples/fashion_mnist/demo.py reads them),
    normalized as the demo does; synthetic images if the files are missing."""
    root = pathlib.Path(
        os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
    )
    recipe = [["div", 255.0], ["sub", FMNIST_MEAN], ["div", FMNIST_STD]]
    imgs, labels = (
        root / "train-images-idx3-ubyte.gz",
        root / "train-labels-idx1-ubyte.gz",
    )
    if imgs.exists() and labels.exists():
        with gzip.open(imgs) as f:
            u8 = (
                np.frombuffer(f.read(), np.uint8, offset=16)
                .reshape(-1, 1, 28, 28)[:n]
                .copy()
            )
        with gzip.open(labels) as f:
            y = np.frombuffer(f.read(), np.uint8, offset=8)[:n].astype(np.int64)
        return u8, y, recipe, f"Fashion-MNIST, first {n} training images ({root})"
    log(f"warning: {root} has no Fashion-MNIST files: using synthetic images")
    return (
        *synthetic(n, (1, 28, 28), recipe, seed=2),
        recipe,
        "synthetic (Fashion-MNIST files not found)",
    )


def synthetic(n: int, shape: tuple, recipe: list, seed: int):
    """Uniform uint8 images; labels from a fixed random linear teacher on
    the float inputs (learnable, like bench/run_bench.py's data)."""
    rng = np.random.default_rng(seed)
    u8 = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
    x = gpu_check.reconstruct_x(u8, recipe)
    teacher = rng.standard_normal((int(np.prod(shape)), 10)).astype(np.float32)
    y = np.argmax(x.reshape(n, -1) @ teacher, axis=1).astype(np.int64)
    return u8, y


def resnet_data(n: int):
    recipe = [["sub", 128.0], ["div", 64.0]]  # exact in float32: values k/64
    u8, y = synthetic(n, (3, 32, 32), recipe, seed=1)
    return (
        u8,
        y,
        recipe,
        f"synthetic: {n} uniform uint8 3x32x32 images, labels from a random linear teacher",
    )


# -- compile, with a cache -------------------------------------------------------


def file_sha(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def compile_program(
    ddpc, model, target, out, force, ddpc_sha, train=True
) -> pathlib.Path:
    cmd = [ddpc, "compile", model]
    if train:
        cmd += ["--train", "--optimizer", OPTIMIZER["name"], "--lr", OPTIMIZER["lr"]]
    cmd += ["--batch-size", BATCH, "--target", target]
    if target == "cuda":
        cmd += ["--cuda-arch", CUDA_ARCH]
    cmd += ["-o", out]
    stamp = out.with_suffix(".stamp")
    key = json.dumps([ddpc_sha, file_sha(model), [str(c) for c in cmd]])
    if not force and out.exists() and stamp.exists() and stamp.read_text() == key:
        log(f"cached: {out}")
        return out
    t0 = time.perf_counter()
    sh(cmd)
    log(
        f"compiled {out.name} in {time.perf_counter() - t0:.0f} s ({out.stat().st_size / 2**20:.1f} MiB)"
    )
    stamp.write_text(key)
    return out


# -- CPU reference ---------------------------------------------------------------


def cpu_reference(
    prog, xpath, ypath, work, model: onnx.ModelProto, force, prog_sha
) -> dict:
    """Runs the CPU program: 0 steps (initial weights), 1 step (first
    gradient from AdamW's first moment, BatchNorm statistics) and STEPS
    steps (losses, final weights). Writes ref.json + ref_weights.npz in the
    layout gpu_check.py reads: per tensor i of ref.json's list, idx<i> (the
    sample, absent when whole), t<i> final values, g<i> step-1 gradient
    (parameters), s<i> step-1 values (buffers)."""
    ref_json, ref_npz = work / "ref.json", work / "ref_weights.npz"
    stamp = work / "ref.stamp"
    key = json.dumps(
        [
            prog_sha,
            file_sha(xpath),
            file_sha(ypath),
            STEPS,
            BATCH,
            gpu_check.FULL_MAX,
            gpu_check.SAMPLE,
            CHAOS_RUNS,
            CHAOS_EPS,
            CHAOS_TRAJ_RUNS,
            4,
        ]
    )
    if (
        not force
        and ref_json.exists()
        and ref_npz.exists()
        and stamp.exists()
        and stamp.read_text() == key
    ):
        log(f"cached: CPU reference {ref_json}")
        return json.loads(ref_json.read_text())
    flags = [str(f) for f in gpu_check.ddpc_flags(xpath, ypath)]
    init_ck, step1_ck, final_ck = (
        work / "init.ckpt",
        work / "step1.ckpt",
        work / "final.ckpt",
    )
    steps_log = work / "steps.jsonl"
    for p in (init_ck, step1_ck, final_ck, steps_log):
        p.unlink(missing_ok=True)
    sh(
        [prog, *flags, "--epochs", 1, "--stop-after-steps", 0, "--checkpoint", init_ck],
        cwd=work,
    )
    sh(
        [
            prog,
            *flags,
            "--epochs",
            1,
            "--stop-after-steps",
            1,
            "--checkpoint",
            step1_ck,
        ],
        cwd=work,
    )
    t0 = time.perf_counter()
    sh(
        [
            prog,
            *flags,
            "--epochs",
            1,
            "--stop-after-steps",
            STEPS,
            "--log-json",
            steps_log,
            "--checkpoint",
            final_ck,
        ],
        cwd=work,
    )
    wall = time.perf_counter() - t0
    recs = gpu_check.read_jsonl(steps_log)
    if len(recs) != STEPS:
        sys.exit(
            f"gpu-prepare: error: CPU reference logged {len(recs)} steps, expected {STEPS}"
        )
    init = gpu_check.tensor_table(gpu_check.read_checkpoint(init_ck))
    ck1 = gpu_check.read_checkpoint(step1_ck)
    final = gpu_check.tensor_table(gpu_check.read_checkpoint(final_ck))
    # The program's initial weights must be the ONNX initializers, bit for bit.
    onnx_init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for name, (_, arr) in init.items():
        if name not in onnx_init or gpu_check.sha256_array(
            arr
        ) != gpu_check.sha256_array(onnx_init[name].astype(np.float32)):
            sys.exit(
                f"gpu-prepare: error: the CPU program's initial {name} differs from the ONNX initializer"
            )
    beta1 = OPTIMIZER["betas"][0]
    tensors, arrays = [], {}
    for i, (name, (kind, w)) in enumerate(final.items()):
        flat, flat0 = w.ravel(), init[name][1].ravel()
        idx = gpu_check.sample_index(i, flat.size)
        pick = (lambda a: a) if idx is None else (lambda a: a[idx])
        if idx is not None:
            arrays[f"idx{i}"] = idx
        t = {
            "name": name,
            "kind": kind,
            "shape": list(w.shape),
            "full": idx is None,
            "norm_delta": float(np.linalg.norm(flat.astype(np.float64) - flat0)),
            "norm_final": float(np.linalg.norm(flat.astype(np.float64))),
        }
        arrays[f"t{i}"] = pick(flat)
        if kind == "param":
            g = gpu_check.gradient_of(ck1, name, beta1).ravel()
            t["norm_grad"] = float(np.linalg.norm(g))
            arrays[f"g{i}"] = pick(g).astype(np.float32)
        else:
            b1 = ck1["buffers"][name].ravel()
            t["norm_step1_delta"] = float(np.linalg.norm(b1.astype(np.float64) - flat0))
            arrays[f"s{i}"] = pick(b1)
        tensors.append(t)
    # The step-1 chaos envelope (gpu_check.py, at GRAD_RTOL): step 1 again on
    # inputs perturbed by CHAOS_EPS relative; each tensor's largest
    # deviation from the unperturbed step 1.
    x = np.load(xpath)
    rng = np.random.default_rng(20261130)
    pert_x = work / "x_perturbed.npy"
    for r in range(CHAOS_RUNS):
        np.save(
            pert_x,
            (
                x.astype(np.float64) * (1 + CHAOS_EPS * rng.standard_normal(x.shape))
            ).astype(np.float32),
        )
        pck = work / "step1_perturbed.ckpt"
        pck.unlink(missing_ok=True)
        pflags = [str(f) for f in gpu_check.ddpc_flags(pert_x, ypath)]
        sh(
            [
                prog,
                *pflags,
                "--epochs",
                1,
                "--stop-after-steps",
                1,
                "--checkpoint",
                pck,
            ],
            cwd=work,
        )
        ckp = gpu_check.read_checkpoint(pck)
        for i, t in enumerate(tensors):
            idx = arrays.get(f"idx{i}")
            if t["kind"] == "param":
                e = gpu_check.rel_update_error(
                    gpu_check.gradient_of(ckp, t["name"], beta1),
                    arrays[f"g{i}"],
                    None,
                    idx,
                    t["norm_grad"],
                )
                t["chaos_grad"] = max(t.get("chaos_grad", 0.0), e)
            else:
                e = gpu_check.rel_update_error(
                    ckp["buffers"][t["name"]],
                    arrays[f"s{i}"],
                    init[t["name"]][1],
                    idx,
                    t["norm_step1_delta"],
                )
                t["chaos_step1"] = max(t.get("chaos_step1", 0.0), e)
    # The trajectory's envelope, from the reference implementation itself:
    # all STEPS steps on perturbed inputs (PyTorch's float32 vs float64 on
    # the GPU is the other estimate; gpu_check.py takes the larger).
    chaos_losses = [0.0] * STEPS
    for r in range(CHAOS_TRAJ_RUNS):
        np.save(
            pert_x,
            (
                x.astype(np.float64) * (1 + CHAOS_EPS * rng.standard_normal(x.shape))
            ).astype(np.float32),
        )
        pck, plog = work / "final_perturbed.ckpt", work / "steps_perturbed.jsonl"
        pck.unlink(missing_ok=True)
        plog.unlink(missing_ok=True)
        pflags = [str(f) for f in gpu_check.ddpc_flags(pert_x, ypath)]
        sh(
            [
                prog,
                *pflags,
                "--epochs",
                1,
                "--stop-after-steps",
                STEPS,
                "--log-json",
                plog,
                "--checkpoint",
                pck,
            ],
            cwd=work,
        )
        plosses = [rec["loss"] for rec in gpu_check.read_jsonl(plog)]
        if len(plosses) != STEPS:
            sys.exit(
                f"gpu-prepare: error: perturbed CPU run logged {len(plosses)} steps, expected {STEPS}"
            )
        chaos_losses = [
            max(c, abs(a - b.get("loss")))
            for c, a, b in zip(chaos_losses, plosses, recs)
        ]
        pfinal = gpu_check.tensor_table(gpu_check.read_checkpoint(pck))
        for i, t in enumerate(tensors):
            e = gpu_check.rel_update_error(
                pfinal[t["name"]][1],
                arrays[f"t{i}"],
                init[t["name"]][1],
                arrays.get(f"idx{i}"),
                t["norm_delta"],
            )
            t["chaos_final"] = max(t.get("chaos_final", 0.0), e)
        pck.unlink(missing_ok=True)
        plog.unlink(missing_ok=True)
    pert_x.unlink(missing_ok=True)
    log(
        f"trajectory chaos envelope ({CHAOS_TRAJ_RUNS} perturbed runs of {STEPS} steps): loss up to "
        f"{max(chaos_losses):.3g}, final weights up to {max(t['chaos_final'] for t in tensors):.3g} of the update"
    )
    worst = max(tensors, key=lambda t: t.get("chaos_grad", t.get("chaos_step1", 0.0)))
    log(
        f"step-1 chaos envelope ({CHAOS_RUNS} runs, inputs x(1 + {CHAOS_EPS:g} N(0,1))): largest "
        f"{worst.get('chaos_grad', worst.get('chaos_step1', 0.0)):.3g} [{worst['name']}]"
    )
    sps = [r["samples_per_s"] for r in recs[1:]]
    ref = {
        "losses": [r["loss"] for r in recs],
        "chaos_losses": chaos_losses,
        "steps": STEPS,
        "batch": BATCH,
        "tensors": tensors,
        "cpu_samples_per_s_median": float(np.median(sps)) if sps else None,
        "cpu_wall_s": wall,
        "host": os.uname().nodename,
    }
    ref_json.write_text(json.dumps(ref, indent=1))
    np.savez(ref_npz, **arrays)
    stamp.write_text(key)
    return ref


# -- bundle ----------------------------------------------------------------------


def graph_export(
    model_path: pathlib.Path, work: pathlib.Path, model: onnx.ModelProto
) -> dict:
    """graph.json (bench/run_bench.py's export, read by torch_ref.OnnxModule)
    and graph_weights.npz: constants (c<i>), non-float initializers and, when
    small, the float initializers (i<i>), keyed by position because ONNX
    names may hold any character."""
    gdir = work / "graph"
    gdir.mkdir(exist_ok=True)
    gpath, wpath = run_bench.export_graph(model, gdir)
    graph = json.loads(gpath.read_text())
    w = np.load(wpath)
    floats = [n for n in graph["initializers"] if w[n].dtype == np.float32]
    float_bytes = sum(w[n].nbytes for n in floats)
    ship_floats = float_bytes <= INIT_SHIP_MAX
    arrays = {}
    for i, n in enumerate(graph["initializers"]):
        if n not in floats or ship_floats:
            arrays[f"i{i}"] = w[n]
    for i, n in enumerate(graph["constants"]):
        arrays[f"c{i}"] = w[n]
    np.savez(work / "graph_weights.npz", **arrays)
    return {
        "graph": gpath,
        "weights": work / "graph_weights.npz",
        "init_sha256": {n: gpu_check.sha256_array(w[n]) for n in floats},
        "float_inits_shipped": ship_floats,
        "params": int(sum(w[n].size for n in floats)),
    }


README = """\
ddpc GPU check bundle (made by scripts/gpu-prepare.sh on {host}, {created})
==========================================================================

Run ON THE GPU MACHINE, from this folder:

    bash gpu-check.sh            # results: $OUT/gpu-check.json (or ./gpu-check.json)

Needs there: an NVIDIA driver for CUDA 13 (>= 580), libcublas.so.13 +
libcublasLt.so.13 and libnccl.so.2, optionally libcudnn.so.9 (else the
convolutions run as im2col + cuBLAS) (system CUDA folders or PyTorch's
site-packages/nvidia/*/lib; gpu-check.sh finds them), python3 with numpy,
and PyTorch with CUDA for the comparison. No onnx, MPI or compiler.
Diagnosis: DDPC_CUDA_SYNC_CHECK=1 names a failing kernel or library call;
DDPC_CUDNN=0 / DDPC_GEMM_EPILOGUE=0 / DDPC_CONV_EPILOGUE=0 switch cuDNN /
cuBLASLt epilogues / fused cuDNN convolution epilogues off;
DDPC_CUDNN_BENCHMARK=0 keeps cuDNN's heuristic algorithms (untimed).
PYTHON=/path/to/python3 selects the interpreter. Takes ~1-3 min on an H200
(hard budget 7 min: DDPC_GPU_CHECK_BUDGET_S).

What it does, per model: runs the ddpc CUDA training program (one rank, no
mpirun) for {steps} steps of batch {batch} with --no-shuffle, compares its
per-step losses and final weights with the CPU reference made by the ddpc
CPU program on the build machine, times ddpc (median step from --log-json
after warm-up), then trains the same graph in PyTorch on the same GPU
from the same initial weights (torch_ref.py = bench/torch_ref.py) with
torch.optim.AdamW({opt}), TF32 off, and times it the same way. Exit status
non-zero if a program fails or a check fails; each failure names the
model and program.

Dry run without a GPU (build machine): DDPC_GPU_CHECK_TARGET=cpu
PYTHON=bench/.venv/bin/python bash gpu-check.sh  -- uses the CPU programs in
the sibling folder {cpu_dir} (not part of the bundle) and PyTorch on the
CPU; it is labelled DRY RUN and gives no GPU numbers.

Contents
  manifest.json           models, flags, optimizer, data recipes, fingerprints
  gpu-check.sh            library search + entry point
  gpu_check.py            the check (numpy; torch for the comparison)
  torch_ref.py            copy of bench/torch_ref.py (ONNX graph -> torch.nn.functional)
  <model>/train_cuda      ddpc CUDA training program (sm_80 + sm_90 kernels)
  <model>/infer_cuda      (fmnist_cnn) ddpc CUDA inference program: fused
                          Conv+bias+ReLU (cuDNN) and Gemm+bias+ReLU
                          (cuBLASLt) calls, each with its fallback
  <model>/infer_ref.npy   its CPU target's outputs on the first batch
  <model>/x_u8.npy        inputs as uint8; float32 = recipe in manifest.json
                          (exact IEEE float32 ops, verified by SHA-256)
  <model>/y.npy           int64 labels
  <model>/graph.json      the ONNX graph, torch-free (ops, attributes, names)
  <model>/graph_weights.npz  constants, non-float and (small models) the
                          initial float weights; large models' initial
                          weights come from the CUDA program itself
                          (--stop-after-steps 0 --checkpoint) and are
                          verified against the ONNX initializers' SHA-256
  <model>/ref.json        CPU reference: per-step losses, per-tensor norms
  <model>/ref_weights.npz CPU reference: final weights, step-1 gradient
                          (parameters) and step-1 BatchNorm statistics
                          (whole tensors up to {full_max} elements, else
                          {sample} fixed sampled elements + whole-tensor norms)

Checks (tolerances and their reasons: top of gpu_check.py)
  step 1 (strict, 1e-3 relative per tensor): gradient (from AdamW's first
    moment in the 1-step checkpoint), BatchNorm statistics, AdamW update
    recomputed from the program's own moments; step-1 loss within 1e-4
  steps 1..{steps}: losses and final weights vs the CPU reference within
    1e-3*max(1,|loss|) / 1e-2 of each tensor's training update, plus 4x
    the float32 chaos PyTorch itself shows (float32 vs float64 run from
    the same start): AdamW on the ResNet amplifies rounding to ~0.5 in
    loss within 20 steps, the CNN stays within 1e-6
  grad vs torch (information only): ddpc's step-1 gradient vs PyTorch
    float64's, a bug detector independent of the CPU reference

Models
{models}
"""


def embedding_bundle(ddpc, work, out, cpu_out, force, tool_sha) -> dict:
    """The token-embedding check (gpu_check.embedding_check): a token
    classifier (bench/embedding.token_model: a [1000, 32] table, 16 tokens,
    10 classes) as CUDA and CPU training programs, STEPS x BATCH int64 ids,
    the CPU program's trained weights, and ids with one out of range (row
    2 * BATCH + 5, in step 3) with the message the run must end with."""
    import embedding  # noqa: PLC0415  (bench/embedding.py)

    name = "token_embedding"
    ework = work / name
    ework.mkdir(exist_ok=True)
    model = ework / f"{name}.onnx"
    V, S, C = 1000, 16, 10
    embedding.token_model(model, V, 32, S, C, tied=False)
    rng = np.random.default_rng(5)
    n = STEPS * BATCH
    ids = rng.integers(0, V, (n, S)).astype(np.int64)
    labels = rng.integers(0, C, n).astype(np.int64)
    bad = ids.copy()
    bad[2 * BATCH + 5, 3] = V
    for f, a in (("ids.npy", ids), ("labels.npy", labels), ("bad_ids.npy", bad)):
        np.save(ework / f, a)
    cpu = compile_program(ddpc, model, "cpu", ework / "train_cpu", force, tool_sha)
    cuda = compile_program(ddpc, model, "cuda", ework / "train_cuda", force, tool_sha)
    sh(
        [
            cpu,
            *gpu_check.ddpc_flags(ework / "ids.npy", ework / "labels.npy"),
            "--epochs",
            1,
            "--save",
            ework / "ref.onnx",
        ]
    )
    ref = {
        t.name: numpy_helper.to_array(t)
        for t in onnx.load(str(ework / "ref.onnx")).graph.initializer
        if t.data_type == onnx.TensorProto.FLOAT
    }
    bdir = out / name
    bdir.mkdir()
    np.savez(bdir / "ref_weights.npz", **ref)
    for f in ("ids.npy", "labels.npy", "bad_ids.npy"):
        shutil.copy2(ework / f, bdir / f)
    shutil.copy2(cuda, bdir / "train_cuda")
    (cpu_out / name).mkdir()
    shutil.copy2(cpu, cpu_out / name / "train_cpu")
    log(
        f"token embedding check: {V}-row table, {n} samples of {S} ids, bad id in step 3"
    )
    return {
        "dir": name,
        "program_cuda": "train_cuda",
        "program_cpu": "train_cpu",
        "ids": "ids.npy",
        "labels": "labels.npy",
        "bad_ids": "bad_ids.npy",
        "ref_weights": "ref_weights.npz",
        "bad_message": f"step 3: index {V} is out of range in Gather node 'embed'",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=pathlib.Path)
    ap.add_argument("--ddpc", type=pathlib.Path, default=ROOT / "build/bin/ddpc")
    ap.add_argument(
        "--work", type=pathlib.Path, default=ROOT / "build/gpu-prepare-work"
    )
    ap.add_argument(
        "--force", action="store_true", help="ignore the compile/reference cache"
    )
    args = ap.parse_args()
    out = args.outdir.resolve()
    cpu_out = out.parent / (out.name + "-cpu")
    for d in (out, cpu_out):
        if d.exists():
            if (
                any(d.iterdir())
                and not (d / "manifest.json").exists()
                and not (d / ".ddpc-cpu-programs").exists()
            ):
                sys.exit(
                    f"gpu-prepare: error: {d} exists and is not a bundle made by this script; not touching it"
                )
            shutil.rmtree(d)
        d.mkdir(parents=True)
    (cpu_out / ".ddpc-cpu-programs").write_text(
        "CPU programs for the gpu-check dry run\n"
    )
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    ddpc = args.ddpc.resolve()
    # The programs depend on the compiler and on the runtime archives it
    # links (<bindir>/../lib/*.a, *.link): a changed runtime recompiles.
    ddpc_sha = file_sha(ddpc)
    tool_sha = hashlib.sha256(ddpc_sha.encode())
    for lib in sorted((ddpc.parent.parent / "lib").glob("*")):
        if lib.suffix in (".a", ".link") and lib.is_file():
            tool_sha.update(lib.name.encode() + file_sha(lib).encode())
    git = subprocess.run(
        ["git", "-C", ROOT, "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
    )
    n = STEPS * BATCH
    specs = [
        ("fmnist_cnn", fmnist_model(work), fmnist_data),
        ("resnet18_32", resnet_model(work), resnet_data),
    ]
    manifest = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "ddpc_git": git.stdout.strip() or "unknown",
        "ddpc_sha256": ddpc_sha,
        "batch": BATCH,
        "steps": STEPS,
        "optimizer": OPTIMIZER,
        "cuda_arch": CUDA_ARCH,
        "compile": f"ddpc compile MODEL --train --optimizer adamw --lr {OPTIMIZER['lr']} --batch-size {BATCH} "
        f"--target cuda --cuda-arch {CUDA_ARCH} (and --target cpu for the reference)",
        "run_flags": "--data x.npy --labels y.npy --no-shuffle --quiet --epochs 1 --stop-after-steps N",
        "models": [],
    }
    model_lines = []
    for name, model_path, data_fn in specs:
        log(f"== {name}")
        mwork = work / name
        mwork.mkdir(exist_ok=True)
        model = onnx.load(str(model_path))
        u8, y, recipe, data_desc = data_fn(n)
        x = gpu_check.reconstruct_x(u8, recipe)
        xpath, ypath = mwork / "x.npy", mwork / "y.npy"
        for p, a in ((xpath, x), (ypath, y)):
            if not p.exists() or not np.array_equal(np.load(p), a):
                np.save(p, a)
        cpu_prog = compile_program(
            ddpc,
            model_path,
            "cpu",
            mwork / "train_cpu",
            args.force,
            tool_sha.hexdigest(),
        )
        cuda_prog = compile_program(
            ddpc,
            model_path,
            "cuda",
            mwork / "train_cuda",
            args.force,
            tool_sha.hexdigest(),
        )
        log(f"CPU reference: {STEPS} steps of batch {BATCH}")
        ref = cpu_reference(
            cpu_prog, xpath, ypath, mwork, model, args.force, file_sha(cpu_prog)
        )
        log(
            f"CPU reference: loss {ref['losses'][0]:.4f} -> {ref['losses'][-1]:.4f}, "
            f"{ref['cpu_samples_per_s_median']:.1f} samples/s on this CPU"
        )
        g = graph_export(model_path, mwork, model)
        bdir = out / name
        bdir.mkdir()
        shutil.copy2(cuda_prog, bdir / "train_cuda")
        np.save(bdir / "x_u8.npy", u8)
        np.save(bdir / "y.npy", y)
        shutil.copy2(g["graph"], bdir / "graph.json")
        shutil.copy2(g["weights"], bdir / "graph_weights.npz")
        shutil.copy2(mwork / "ref.json", bdir / "ref.json")
        shutil.copy2(mwork / "ref_weights.npz", bdir / "ref_weights.npz")
        (cpu_out / name).mkdir()
        shutil.copy2(cpu_prog, cpu_out / name / "train_cpu")
        entry = {
            "name": name,
            "dir": name,
            "onnx": str(
                model_path.relative_to(ROOT)
                if model_path.is_relative_to(ROOT)
                else model_path
            ),
            "onnx_sha256": file_sha(model_path),
            "program_cuda": "train_cuda",
            "program_cpu": "train_cpu",
            "input_shape": list(u8.shape[1:]),
            "classes": 10,
            "params": g["params"],
            "float_inits_shipped": g["float_inits_shipped"],
            "init_sha256": g["init_sha256"],
            "data": {
                "x_u8": "x_u8.npy",
                "y": "y.npy",
                "recipe": recipe,
                "x_sha256": gpu_check.sha256_array(x),
                "samples": int(n),
                "description": data_desc,
            },
            "cpu_reference": {
                "losses_first_last": [ref["losses"][0], ref["losses"][-1]],
                "cpu_samples_per_s_median": ref["cpu_samples_per_s_median"],
            },
        }
        if name in INFERENCE_MODELS:
            io = (model.graph.input[0].name, model.graph.output[0].name)
            infer_cpu = compile_program(
                ddpc,
                model_path,
                "cpu",
                mwork / "infer_cpu",
                args.force,
                tool_sha.hexdigest(),
                train=False,
            )
            infer_cuda = compile_program(
                ddpc,
                model_path,
                "cuda",
                mwork / "infer_cuda",
                args.force,
                tool_sha.hexdigest(),
                train=False,
            )
            xi = mwork / "x_infer.npy"
            np.save(xi, x[:BATCH])
            sh(
                [
                    infer_cpu,
                    "--input",
                    f"{io[0]}={xi}",
                    "--output-dir",
                    mwork / "infer_out",
                ]
            )
            shutil.copy2(mwork / "infer_out" / f"{io[1]}.npy", bdir / "infer_ref.npy")
            shutil.copy2(infer_cuda, bdir / "infer_cuda")
            shutil.copy2(infer_cpu, cpu_out / name / "infer_cpu")
            entry["inference"] = {
                "program_cuda": "infer_cuda",
                "program_cpu": "infer_cpu",
                "input": io[0],
                "output": io[1],
                "batch": BATCH,
                "ref": "infer_ref.npy",
            }
            log(f"inference program and CPU outputs for {name} (batch {BATCH})")
        manifest["models"].append(entry)
        model_lines.append(
            f"  {name:<12} input {list(u8.shape[1:])}, {g['params'] / 1e6:.2f}M params, data: {data_desc}; "
            f"CPU reference loss {ref['losses'][0]:.4f} -> {ref['losses'][-1]:.4f}"
        )
    manifest["embedding"] = embedding_bundle(
        ddpc, work, out, cpu_out, args.force, tool_sha.hexdigest()
    )
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    shutil.copy2(ROOT / "scripts/gpu-check.sh", out / "gpu-check.sh")
    shutil.copy2(ROOT / "scripts/gpu_check.py", out / "gpu_check.py")
    shutil.copy2(ROOT / "bench/torch_ref.py", out / "torch_ref.py")
    (out / "README.txt").write_text(
        README.format(
            host=os.uname().nodename,
            created=manifest["created"],
            steps=STEPS,
            batch=BATCH,
            opt=", ".join(f"{k}={v}" for k, v in OPTIMIZER.items() if k != "name"),
            cpu_dir=f"../{cpu_out.name}",
            full_max=gpu_check.FULL_MAX,
            sample=gpu_check.SAMPLE,
            models="\n".join(model_lines),
        )
    )
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print()
    for p in sorted(out.rglob("*")):
        if p.is_file():
            print(f"  {p.stat().st_size / 2**20:8.2f} MiB  {p.relative_to(out)}")
    print(
        f"bundle: {out}  {total / 2**20:.2f} MiB ({total} bytes; limit {MAX_BUNDLE / 2**20:.0f} MiB)"
    )
    print(f"CPU programs for the dry run: {cpu_out}")
    if total > MAX_BUNDLE:
        print(
            f"gpu-prepare: error: bundle is {total / 2**20:.2f} MiB, over {MAX_BUNDLE / 2**20:.0f} MiB",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

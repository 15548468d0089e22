"""The CUDA target without a GPU: the bundled examples compile for sm_80 and
sm_90, the kernels assemble (ptxas + fatbinary), and the programs link
against cuBLAS, NCCL and the CUDA driver without any MPI dependency.

Running them needs a GPU: see scripts/gpu-prepare.sh and scripts/gpu-check.sh.
Skipped (with the reason) on machines without the CUDA toolkit, or when
CMake did not find CUDA and NCCL, since then the CUDA runtime is not built.
"""

import json
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

from ddpc_testing import BUILD, ROOT, cuda_root

READELF = shutil.which("llvm-readelf") or "/usr/lib/llvm-22/bin/llvm-readelf"

# (model, extra compile flags): training programs and one inference program.
CASES = [
    (
        "examples/fashion_mnist/fmnist_cnn.onnx",
        ["--train", "--batch-size", "32", "--optimizer", "adamw"],
    ),
    (
        "examples/digits/digits_mlp.onnx",
        ["--train", "--batch-size", "64", "--optimizer", "sgd", "--momentum", "0.9"],
    ),
    ("examples/models/resnet_mini.onnx", ["--batch-size", "4"]),
]


pytestmark = pytest.mark.skipif(
    cuda_root() is None
    or not (BUILD / "lib" / "libddpc_cuda_train_runtime.a").exists(),
    reason="CUDA toolkit (ptxas) or the CUDA runtime archive is missing",
)


def needed_libs(path):
    out = subprocess.run(
        [READELF, "--needed-libs", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return {line.strip() for line in out.splitlines()[1:] if line.strip()}


@pytest.mark.parametrize(
    "model,flags", CASES, ids=[pathlib.Path(m).stem for m, _ in CASES]
)
def test_compiles_and_links_for_sm80_sm90(ddpc, tmp_path, model, flags):
    prog = tmp_path / "prog"
    r = subprocess.run(
        [
            ddpc,
            "compile",
            str(ROOT / model),
            *flags,
            "--target",
            "cuda",
            "--cuda-arch",
            "sm_80,sm_90",
            "-o",
            str(prog),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    libs = needed_libs(prog)
    # libcuda.so.1 (the driver) is resolved at run time through cudart, so
    # a machine without a driver gets the program's own message.
    assert {"libcublas.so.13", "libcublasLt.so.13"} <= libs, libs
    assert "libcuda.so.1" not in libs, libs
    if "--train" in flags:
        assert "libnccl.so.2" in libs, libs
    assert not any("mpi" in lib for lib in libs), libs
    data = prog.read_bytes()
    # One embedded fatbin (header magic 0xBA55ED50, little endian).
    assert data.count(b"\x50\xed\x55\xba") >= 1

    ptx = subprocess.run(
        [
            ddpc,
            "compile",
            str(ROOT / model),
            *flags,
            "--target",
            "cuda",
            "--cuda-arch",
            "sm_80,sm_90",
            "--emit=ptx",
            "-o",
            "-",
        ],
        capture_output=True,
        text=True,
    )
    assert ptx.returncode == 0, ptx.stderr
    assert ".target sm_80" in ptx.stdout and ".target sm_90" in ptx.stdout
    kernels = ptx.stdout.count(".visible .entry")
    assert kernels >= 2, kernels


def test_newest_architectures_assemble(ddpc, tmp_path):
    """Architectures that need a newer PTX ISA than sm_90 (8.6 up to 9.0)
    get it: each assembles with ptxas into the program's fatbinary. sm_103,
    sm_110 and sm_121 once crashed LLVM ("PTX version 8.6 does not support
    target ...")."""
    archs = "sm_88,sm_100f,sm_103,sm_110,sm_120a,sm_121"
    r = subprocess.run(
        [
            ddpc,
            "compile",
            str(ROOT / "examples/digits/digits_mlp.onnx"),
            "--batch-size",
            "8",
            "--target",
            "cuda",
            "--cuda-arch",
            archs,
            "-o",
            str(tmp_path / "prog"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    ptx = subprocess.run(
        [
            ddpc,
            "compile",
            str(ROOT / "examples/digits/digits_mlp.onnx"),
            "--batch-size",
            "8",
            "--target",
            "cuda",
            "--cuda-arch",
            archs,
            "--emit=ptx",
            "-o",
            "-",
        ],
        capture_output=True,
        text=True,
    )
    assert ptx.returncode == 0, ptx.stderr
    for arch in archs.split(","):
        assert f".target {arch}" in ptx.stdout, arch
    assert ".version 9.0" in ptx.stdout and ".version 8.8" in ptx.stdout


def test_cpu_and_cuda_share_the_pipeline_up_to_bufferization(ddpc, tmp_path):
    """The graph stages are target independent: the fused IR (with its fusion
    groups) is identical for both targets."""
    model = ROOT / "examples/digits/digits_mlp.onnx"
    dumps = {}
    for target in ("cpu", "cuda"):
        d = tmp_path / target
        r = subprocess.run(
            [
                ddpc,
                "compile",
                str(model),
                "--batch-size",
                "8",
                "--target",
                target,
                "--emit=lowered-mlir",
                "-o",
                str(tmp_path / f"{target}.mlir"),
                "--dump-ir",
                str(d),
            ],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr
        fused = sorted(d.glob("*_ddpc-fuse-ops*.mlir"))
        assert fused, "no ddpc-fuse-ops dump"
        dumps[target] = fused[0].read_text()
    assert "ddpc.fusion_group" in dumps["cpu"]
    assert dumps["cpu"] == dumps["cuda"]


def test_bad_cuda_options(ddpc, tmp_path):
    model = str(ROOT / "examples/digits/digits_mlp.onnx")
    r = subprocess.run(
        [
            ddpc,
            "compile",
            model,
            "--target",
            "cuda",
            "--emit=shared",
            "-o",
            str(tmp_path / "x.so"),
        ],
        capture_output=True,
        text=True,
    )
    assert (
        r.returncode == 1
        and "--emit=shared is not supported with --target cuda" in r.stderr
    )
    assert not (tmp_path / "x.so").exists()
    r = subprocess.run(
        [ddpc, "compile", model, "--emit=ptx", "-o", str(tmp_path / "x.ptx")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "--emit=ptx needs --target cuda" in r.stderr
    r = subprocess.run(
        [ddpc, "compile", model, "--target", "tpu", "-o", str(tmp_path / "x")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "unknown --target 'tpu'" in r.stderr
    # Architectures: well-formed but unknown to the NVPTX backend, and a
    # list with an empty entry, fail in ddpc's own option check.
    for arch, message in [
        (
            "sm_81",
            "not an architecture both LLVM's NVPTX backend and the "
            "CUDA 13 ptxas support",
        ),
        ("sm_101", "CUDA 13 renamed sm_101 to sm_110"),
        ("sm_80,", "has an empty entry"),
    ]:
        r = subprocess.run(
            [
                ddpc,
                "compile",
                model,
                "--target",
                "cuda",
                "--cuda-arch",
                arch,
                "--emit=ptx",
                "-o",
                str(tmp_path / "x.ptx"),
            ],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 1 and message in r.stderr, (arch, r.stderr)
        assert "ptxas fatal" not in r.stderr and not (tmp_path / "x.ptx").exists()


def test_dump_ir_folder_holds_one_compile(ddpc, tmp_path):
    """--dump-ir clears an earlier compile's dumps, writes no file for a pass
    that left the module unchanged or ran on a function declaration, and its
    numbered names sort in pipeline order."""
    d = tmp_path / "ir"
    base = [
        ddpc,
        "compile",
        "--target",
        "cuda",
        "--batch-size",
        "8",
        "--dump-ir",
        str(d),
        "-o",
        str(tmp_path / "prog"),
    ]
    for model in (
        "examples/fashion_mnist/fmnist_cnn.onnx",
        "examples/digits/digits_mlp.onnx",
    ):
        r = subprocess.run(
            [*base[:2], str(ROOT / model), *base[2:]], capture_output=True, text=True
        )
        assert r.returncode == 0, r.stderr
    files = sorted(p.name for p in d.iterdir() if p.name != "stages.txt")
    assert files[0] == "0000_import.mlir"
    # stages.txt is the second compile's: its stages name its files only.
    named = {
        name
        for line in (d / "stages.txt").read_text().splitlines()
        if not line.startswith("#")
        for name in line.split("\t")[1:3]
    }
    assert named and named <= set(files), (named, files)
    assert [int(f[:4]) for f in files] == list(range(len(files)))
    texts = [(d / f).read_text() for f in files]
    assert "digits" in texts[0] or "Gemm" in texts[0]
    assert not any("Conv" in t for t in texts), "dumps of the earlier compile remain"
    assert all(
        a != b for a, b in zip(texts, texts[1:])
    ), "a dump repeats the previous one"
    assert not any(
        "ddpc_gemm_f32.mlir" in f or "OpToOpPassAdaptor" in f for f in files
    ), files


def ptx_entry_params(ptx: str) -> dict:
    """{kernel: [param kinds]} from PTX `.entry name(.param ..., ...)` lists;
    kinds: ptr, i64, i32, f32 (the PTX ISA's .param state space, sec. 5.1.6)."""
    import re

    kinds = {}
    for m in re.finditer(r"\.entry\s+(\w+)\(\s*(.*?)\)", ptx, re.S):
        out = []
        for p in (p.strip() for p in m.group(2).split(",") if p.strip()):
            if ".ptr" in p:
                out.append("ptr")
            elif ".f32" in p:
                out.append("f32")
            elif ".u64" in p or ".b64" in p or ".s64" in p:
                out.append("i64")
            elif ".u32" in p or ".b32" in p or ".s32" in p:
                out.append("i32")
            else:
                out.append(p)
        kinds[m.group(1)] = out
    return kinds


def host_launches(mlir: str) -> list:
    """[(kernel, [arg kinds])] of every gpu.launch_func in lowered host IR."""
    import re

    out = []
    for m in re.finditer(
        r"gpu\.launch_func\s+@\w+::@(\w+)[^\n]*?args\(([^\n]*)\)\s*$", mlir, re.M
    ):
        args = [a.rsplit(":", 1)[-1].strip() for a in m.group(2).split(",")]
        out.append((m.group(1), ["ptr" if a == "!llvm.ptr" else a for a in args]))
    return out


@pytest.mark.parametrize(
    "model,flags", CASES, ids=[pathlib.Path(m).stem for m, _ in CASES]
)
def test_host_launches_match_kernel_parameters(ddpc, tmp_path, model, flags):
    """Every kernel launch passes exactly the parameters the assembled kernel
    declares (count and kind), and the entry points take one pointer per
    tensor, the `void *` ABI of the generated glue. Both broke on a GPU
    while every CPU test passed: memref descriptors reached code expecting
    bare pointers, and back."""
    base = [
        ddpc,
        "compile",
        str(ROOT / model),
        *flags,
        "--target",
        "cuda",
        "--cuda-arch",
        "sm_90",
    ]
    ptx = subprocess.run(
        [*base, "--emit=ptx", "-o", "-"], capture_output=True, text=True
    )
    assert ptx.returncode == 0, ptx.stderr
    host = subprocess.run(
        [*base, "--emit=lowered-mlir", "-o", "-"], capture_output=True, text=True
    )
    assert host.returncode == 0, host.stderr
    entries = ptx_entry_params(ptx.stdout)
    launches = host_launches(host.stdout)
    assert launches and entries
    for kernel, args in launches:
        assert kernel in entries, f"launch of {kernel}, which the PTX does not define"
        assert (
            args == entries[kernel]
        ), f"{kernel}: host passes {args}, kernel declares {entries[kernel]}"
    import re

    public = re.findall(
        r"^  llvm\.func @(train_micro|apply|eval|main_graph|\w+)\(([^\n]*?)\)\s*(?:attributes[^\n]*)?\{",
        host.stdout,
        re.M,
    )
    entry_points = [
        (n, a)
        for n, a in public
        if n in ("train_micro", "apply", "eval") or "ddpc.name" in a
    ]
    assert entry_points
    for name, args in entry_points:
        kinds = re.findall(r"%arg\d+: ([^ ,{]+)", args)
        assert kinds and set(kinds) == {"!llvm.ptr"}, f"{name} takes {kinds}"


def test_report_counts_launches_of_called_helpers(ddpc, tmp_path):
    """--report's kernel_launches per step function counts the launches of
    the module's functions it calls (the SyncBatchNorm allreduce helpers of
    `train_micro`), checked against the lowered host IR's call graph."""
    import json
    import re
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    # Gemm -> BatchNormalization -> Relu -> Gemm: no convolutions.
    rng = np.random.default_rng(0)
    inits = {
        "W1": rng.standard_normal((6, 8)),
        "s": np.ones(8),
        "b": np.zeros(8),
        "mean": np.zeros(8),
        "var": np.ones(8),
        "W2": rng.standard_normal((8, 3)),
        "b2": np.zeros(3),
    }
    g = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "W1"], ["h"]),
            helper.make_node(
                "BatchNormalization", ["h", "s", "b", "mean", "var"], ["n"]
            ),
            helper.make_node("Relu", ["n"], ["r"]),
            helper.make_node("Gemm", ["r", "W2", "b2"], ["logits"]),
        ],
        "bnmlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    model = tmp_path / "bnmlp.onnx"
    onnx.save(m, model)
    flags = ["--train", "--batch-size", "16", "--sync-batchnorm"]
    base = [
        ddpc,
        "compile",
        str(model),
        *flags,
        "--target",
        "cuda",
        "--cuda-arch",
        "sm_90",
    ]
    rep = subprocess.run(
        [*base, "--report=json", "-o", str(tmp_path / "prog")],
        capture_output=True,
        text=True,
    )
    assert rep.returncode == 0, rep.stderr
    counts = {
        f["name"]: f["kernel_launches"]
        for f in json.loads(rep.stdout)["cuda"]["functions"]
    }
    host = subprocess.run(
        [*base, "--emit=lowered-mlir", "-o", "-"], capture_output=True, text=True
    ).stdout
    bodies = {
        m.group(1): m.group(2)
        for m in re.finditer(
            r"^  llvm\.func @(\w+)\([^\n]*\{\n(.*?)^  \}", host, re.M | re.S
        )
    }

    # Launches on the main path: each fused GEMM epilogue's fallback (taken
    # only when cuBLASLt declines) holds one kernel launch; there are no
    # convolution fallbacks (several launches each) in this model.
    assert "ddpc_conv2d_f32" not in host

    def launches(name):
        body = bodies[name]
        n = body.count("gpu.launch_func") - body.count(
            "llvm.call @ddpc_gemm_bias_act_f32("
        )
        for callee in re.findall(r"llvm\.call @(\w+)\(", body):
            if callee in bodies:
                n += launches(callee)
        return n

    for name in ("train_micro", "apply", "eval"):
        assert counts[name] == launches(name), (name, counts[name], launches(name))
    helpers = [n for n in bodies if n.startswith("ddpc_allreduce_sum")]
    assert helpers and counts["train_micro"] > bodies["train_micro"].count(
        "gpu.launch_func"
    )


def test_cuda_emulate_report_matches_cuda_report(ddpc, tmp_path):
    """cuda-emulate runs the CUDA pipeline's kernel-level IR on the CPU; its
    --report counts kernels (outermost parallel loops, before outlining) and
    library calls per step function, which must be what the CUDA target
    launches and calls (counted on gpu.launch_func after outlining)."""
    import json

    model, flags = CASES[0]  # Fashion-MNIST CNN: GEMMs, cuDNN convolutions.
    reports = {}
    for target in ("cuda", "cuda-emulate"):
        r = subprocess.run(
            [
                ddpc,
                "compile",
                str(ROOT / model),
                *flags,
                "--target",
                target,
                "--report=json",
                "-o",
                str(tmp_path / target),
            ],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr
        reports[target] = json.loads(r.stdout)["cuda"]
    assert reports["cuda-emulate"]["emulated"] and not reports["cuda"]["emulated"]
    assert reports["cuda-emulate"]["kernels"] == reports["cuda"]["kernels"]
    assert reports["cuda-emulate"]["functions"] == reports["cuda"]["functions"]
    assert any(
        f["kernel_launches"] > 0 and f["cudnn_convolutions"] > 0
        for f in reports["cuda"]["functions"]
    )


def driver_present():
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(driver_present(), reason="an NVIDIA driver is installed")
def test_program_without_driver_says_so(ddpc, tmp_path):
    """On a machine without the NVIDIA driver (CI) a CUDA program starts,
    exits 1 and says that no CUDA device is usable and what to do, instead
    of the dynamic loader failing on libcuda.so.1 before main()."""
    import numpy as np

    prog = tmp_path / "prog"
    r = subprocess.run(
        [
            ddpc,
            "compile",
            str(ROOT / "examples/digits/digits_mlp.onnx"),
            "--batch-size",
            "8",
            "--target",
            "cuda",
            "-o",
            str(prog),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    np.save(tmp_path / "x.npy", np.zeros((8, 64), np.float32))
    run = subprocess.run(
        [
            str(prog),
            "--input",
            f"input={tmp_path / 'x.npy'}",
            "--output-dir",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1, (run.returncode, run.stderr)
    assert "no CUDA device is usable" in run.stderr, run.stderr
    assert "NVIDIA GPU and driver" in run.stderr, run.stderr
    assert "error while loading shared libraries" not in run.stderr


def test_merged_kernels_fit_the_parameter_space(ddpc, tmp_path):
    """ddpc-merge-parallel-loops stops growing a kernel before its parameters
    pass 4096 bytes, the limit of PTX ISA 8.0 (sec. 5.1.6.1; ddpc emits
    8.0). A 60-layer MLP's AdamW step (120 parameter tensors, each with two
    moments and a gradient) merged without the bound would take about
    7.7 KB. It still merges: fewer `apply` launches than parameters."""
    import json
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(60):
        inits += [
            numpy_helper.from_array(
                rng.standard_normal((4, 4)).astype(np.float32), f"w{i}"
            ),
            numpy_helper.from_array(np.zeros(4, np.float32), f"b{i}"),
        ]
        nodes.append(
            helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"h{i}"], transB=1)
        )
        x = f"h{i}"
    g = helper.make_graph(
        nodes,
        "deep",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", 4])],
        inits,
    )
    path = tmp_path / "deep.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    base = [
        ddpc,
        "compile",
        str(path),
        "--train",
        "--batch-size",
        "8",
        "--optimizer",
        "adamw",
        "--target",
        "cuda",
        "--cuda-arch",
        "sm_80",
    ]
    ptx = subprocess.run(
        [*base, "--emit=ptx", "-o", "-"], capture_output=True, text=True
    )
    assert ptx.returncode == 0, ptx.stderr
    size = {"ptr": 8, "i64": 8, "i32": 4, "f32": 4}
    for kernel, params in ptx_entry_params(ptx.stdout).items():
        assert sum(size[p] for p in params) <= 4096, (kernel, len(params))
    report = subprocess.run(
        [*base, "--emit=obj", "-o", str(tmp_path / "d.o"), "--report=json"],
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0, report.stderr
    apply = [
        f
        for f in json.loads(report.stdout)["cuda"]["functions"]
        if f["name"] == "apply"
    ]
    assert 1 < apply[0]["kernel_launches"] < 120, apply


def test_constant_tensors_reach_the_device_through_one_copy(ddpc, tmp_path):
    """An inference program's weights are constants (memref.global) of the
    host program, which kernels and cuDNN cannot read: on an H200 the
    Fashion-MNIST inference program ended with "an illegal memory access"
    in its first cuDNN convolution (2026-11-30). ddpc-device-constants packs
    them into one array whose device copy (ddpc_device_constants) every
    kernel argument and library pointer is a view of. So the host code takes
    no constant tensor's address except the packed array's, once per
    function; training programs (weights are runtime buffers) have none."""

    def lowered(model, *flags):
        return subprocess.run(
            [
                ddpc,
                "compile",
                str(ROOT / model),
                *flags,
                "--target",
                "cuda",
                "--emit=lowered-mlir",
                "-o",
                "-",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    ir = lowered("examples/fashion_mnist/fmnist_cnn.onnx", "--batch-size", "4")
    assert "llvm.mlir.addressof @__constant" not in ir
    assert ir.count("llvm.mlir.addressof @__ddpc_device_constants") == 1
    assert ir.count("llvm.call @ddpc_device_constants(") == 1
    train = lowered(
        "examples/fashion_mnist/fmnist_cnn.onnx", "--train", "--batch-size", "4"
    )
    assert "ddpc_device_constants" not in train


@pytest.mark.parametrize("precision,mode", [(None, 0), ("fp32", 0), ("tf32", 1)])
def test_precision_reaches_the_cuda_runtime(ddpc, tmp_path, precision, mode):
    """--precision sets the glue's ddpc_math_mode, which the CUDA runtime
    reads to allow TF32 in cuBLAS(Lt) and cuDNN; the plan says what it
    means. (That TF32 math runs and changes results only a GPU shows:
    scripts/gpu-check.sh times and checks a tf32 program.)"""
    model = ROOT / "examples/fashion_mnist/fmnist_cnn.onnx"
    flags = ["--precision", precision] if precision else []
    obj = tmp_path / "p.o"
    proc = subprocess.run(
        [
            str(ddpc),
            "compile",
            str(model),
            "--train",
            "--batch-size",
            "8",
            "--target",
            "cuda",
            *flags,
            "--emit=obj",
            "-o",
            str(obj),
            "--report=json",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    glue = (tmp_path / "p.o.glue.c").read_text()
    assert f"const int32_t ddpc_math_mode = {mode};" in glue
    plan = json.loads(proc.stdout)["precision"]
    assert plan["mode"] == (precision or "fp32")
    assert ("TF32 tensor-core" in plan["meaning"]) == (mode == 1), plan

# -*- Python -*-
# lit configuration for ddpc: FileCheck tests of the importer, the pass
# pipelines, the driver and compiled programs.
import os
import shutil
import sys

import lit.formats
from lit.llvm import llvm_config

config.name = "ddpc"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".onnxtxt", ".test"]
config.excludes = [
    "backend",
    "lit-tools",
    "Inputs",
    "CMakeLists.txt",
    "lit.cfg.py",
    "lit.site.cfg.py",
]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.ddpc_obj_root, "test")

python = (
    getattr(config, "python_executable", "")
    or shutil.which("python3")
    or sys.executable
)
if not python or "@" in python:
    python = shutil.which("python3") or sys.executable
config.substitutions.append(("%python", python))
config.substitutions.append(
    (
        "%onnx-text",
        f"{python} {os.path.join(config.test_source_root, 'lit-tools', 'onnx_text.py')}",
    )
)

llvm_config.with_system_environment(["HOME", "TMPDIR", "PATH", "PYTHONPATH"])
llvm_config.use_default_substitutions()
tool_dirs = [config.ddpc_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(
    ["ddpc", "ddpc-opt", "FileCheck", "not", "count", "mlir-tblgen"], tool_dirs
)
# MLIR's .td files (mlir/Pass/PassBase.td), beside the LLVM tools' folder.
config.substitutions.append(
    (
        "%mlir_include",
        os.path.normpath(os.path.join(config.llvm_tools_dir, "..", "include")),
    )
)

# The CUDA target's tests need the CUDA toolkit (ptxas, fatbinary,
# libdevice) and, to link programs, the CUDA runtime archive, which CMake
# builds when it finds the toolkit and NCCL. No GPU is needed.
cuda_root = next(
    (
        r
        for r in [
            os.environ.get("CUDA_HOME"),
            os.environ.get("CUDA_PATH"),
            "/usr/local/cuda",
        ]
        if r and os.access(os.path.join(r, "bin", "ptxas"), os.X_OK)
    ),
    None,
)
if cuda_root:
    config.available_features.add("cuda-toolkit")
    if os.path.exists(
        os.path.join(config.ddpc_obj_root, "lib", "libddpc_cuda_train_runtime.a")
    ):
        config.available_features.add("cuda-runtime")
llvm_config.add_tool_substitutions(["llvm-readelf"], [config.llvm_tools_dir])

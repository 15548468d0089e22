"""ddpc: compile ONNX models through MLIR into native programs.

>>> import ddpc, numpy as np
>>> prog = ddpc.compile("lenet.onnx", batch_size=2)
>>> prog.stages
['import', 'fused', 'lowered']
>>> out = prog.run({"x": np.zeros((2, 1, 28, 28), np.float32)})

See :func:`compile`, :class:`Program`, :class:`TrainConfig`.
"""

from __future__ import annotations

from ._compile import compile, supported_ops
from ._config import CompileError, TrainConfig
from ._program import Program, TensorSpec, TrainResult

__version__ = "0.1.0"

__all__ = [
    "CompileError",
    "Program",
    "TensorSpec",
    "TrainConfig",
    "TrainResult",
    "compile",
    "supported_ops",
]

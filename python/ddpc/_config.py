"""Types that ``ddpc.compile`` and ``ddpc.Program`` share: :class:`CompileError`,
:class:`TrainConfig`, the keyword options of ``compile()`` and the compile
request (``_Request``) a Program recompiles from, plus the table of CLI
option names and their Python spellings that compile errors are annotated
with. Kept apart from ``_compile`` and ``_program`` so that neither imports
the other's module for them."""

from __future__ import annotations

import dataclasses
import numbers
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._native import native, runtime_lib_dir


class CompileError(Exception):
    """ddpc could not compile the model.

    Attributes:
        message: the one-line message the ``ddpc`` CLI prints after
            ``error:``; it names the op type, node, domain and opset when an
            op is at fault.
        unsupported: True when the model uses an op, attribute or dtype that
            ddpc does not support (CLI exit code 2), False for an invalid
            model, a bad option or a tool failure (exit code 1).
    """

    def __init__(self, message: str, unsupported: bool = False) -> None:
        hint = _python_names(message)
        super().__init__(f"{message} [in Python: {hint}]" if hint else message)
        self.message = message
        self.unsupported = unsupported


#: Python spellings of the CLI options that compile errors name.
_CLI_TO_PYTHON = {
    "--batch-size": "batch_size=",
    "--dim": "dims={name: value}",
    "--bind-input": "bind_inputs=",
    "--target": "target=",
    "--cuda-arch": "cuda_arch=",
    "--precision": "precision=",
    "--memory-budget": "memory_budget=",
    "--zero-stage": "zero_stage=",
    "--world-size": "world_size=",
    "--remat": "remat=",
    "--dump-ir": "dump_ir=",
    "--vjp": "vjp=True",
    "--train": "train=TrainConfig(...)",
    "--loss": "TrainConfig.loss",
    "--label-input": "TrainConfig.label_input",
    "--freeze": "TrainConfig.freeze",
    "--optimizer": "TrainConfig.optimizer",
}


def _python_names(message: str) -> str:
    """'--batch-size is batch_size=, ...' for the CLI options `message`
    names that are spelled differently in Python ('' when none); options
    already followed by their Python name in parentheses are skipped."""
    seen = []
    for m in re.finditer(r"(--[a-z][a-z-]*)(?![a-z-])( \(TrainConfig)?", message):
        flag = m.group(1)
        if m.group(2) or flag not in _CLI_TO_PYTHON or flag in seen:
            continue
        seen.append(flag)
    return ", ".join(f"{f} is {_CLI_TO_PYTHON[f]}" for f in seen)


@dataclasses.dataclass
class TrainConfig:
    """How ``ddpc.compile(..., train=TrainConfig(...))`` builds a training
    program (``ddpc compile --train``). Mirrors ``ddpc::TrainOptions``;
    optimizers follow ``torch.optim.SGD`` and ``torch.optim.AdamW``.

    Attributes:
        loss: ``"cross-entropy"`` (logits ``[B, C]`` float32, labels ``[B]``
            int64), ``"mse"`` (float32 labels shaped like the output) or
            ``"output"`` (the model's first output is already the loss).
        optimizer: ``"sgd"`` or ``"adamw"``.
        lr: learning rate.
        momentum, dampening, nesterov: SGD momentum settings.
        weight_decay: L2 penalty (SGD) or decoupled weight decay (AdamW).
        betas, eps: AdamW coefficients.
        batch_size: per-rank micro-batch size B; binds the leading dimension
            of every input (same as ``compile(batch_size=...)``).
        grad_accum_steps: micro-batches accumulated per optimizer step.
        freeze: names of initializers that are not trained.
        sync_batchnorm: BatchNormalization statistics over the global batch.
        bucket_cap_mb: gradient allreduce bucket cap in MiB (PyTorch DDP's
            ``bucket_cap_mb``); buckets start during backward. None: 25, or
            4 at ``zero_stage=2``.
        label_input: graph input holding the labels; None adds an input
            ``labels``.

    Raises:
        ValueError: on construction, for an unknown loss or optimizer or an
            out-of-range number.
    """

    loss: str = "cross-entropy"
    optimizer: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    batch_size: int | None = None
    grad_accum_steps: int = 1
    freeze: Sequence[str] = ()
    sync_batchnorm: bool = False
    bucket_cap_mb: float | None = None
    label_input: str | None = None

    def __post_init__(self) -> None:
        # Python's own checks: types and the fields that are not training
        # options of the compiler. The values are checked by the compiler's
        # TrainOptions::validate(), the check ddpc compile runs.
        def real(v: object) -> bool:  # numpy scalars count, bools do not
            return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))

        def integer(v: object) -> bool:
            return isinstance(v, numbers.Integral) and not isinstance(
                v, (bool, np.bool_)
            )

        for field in (
            "lr",
            "momentum",
            "dampening",
            "weight_decay",
            "eps",
            "bucket_cap_mb",
        ):
            v = getattr(self, field)
            if field == "bucket_cap_mb" and v is None:
                continue
            if not real(v):
                raise ValueError(f"TrainConfig.{field} must be a number, got {v!r}")
        for field in ("nesterov", "sync_batchnorm"):
            v = getattr(self, field)
            if not isinstance(v, (bool, np.bool_)):
                raise ValueError(
                    f"TrainConfig.{field} must be True or False, got {v!r}"
                )
        for field in ("loss", "optimizer"):
            if not isinstance(getattr(self, field), str):
                raise ValueError(
                    f"TrainConfig.{field} must be a string, got {getattr(self, field)!r}"
                )
        if self.label_input is not None and not isinstance(self.label_input, str):
            raise ValueError(
                "TrainConfig.label_input must be a graph input's name, "
                f"got {self.label_input!r}"
            )
        if (
            not isinstance(self.betas, (tuple, list))
            or len(self.betas) != 2
            or not all(real(b) for b in self.betas)
        ):
            raise ValueError(
                f"TrainConfig.betas must be two numbers in [0, 1), got {self.betas!r}"
            )
        if self.batch_size is not None and not (
            integer(self.batch_size) and self.batch_size > 0
        ):
            raise ValueError(
                f"TrainConfig.batch_size must be an integer > 0, got {self.batch_size!r}"
            )
        if not (integer(self.grad_accum_steps) and 1 <= self.grad_accum_steps < 2**31):
            raise ValueError(
                "TrainConfig.grad_accum_steps must be an integer in [1, 2^31), "
                f"got {self.grad_accum_steps!r}"
            )
        if isinstance(self.freeze, str) or not all(
            isinstance(n, str) for n in self.freeze
        ):
            raise ValueError(
                f"TrainConfig.freeze is a list of initializer names, got {self.freeze!r}"
            )
        self.freeze = tuple(self.freeze)
        self.betas = (float(self.betas[0]), float(self.betas[1]))
        error = self._to_native().validate()
        if error:
            raise ValueError(error)

    def _to_native(self) -> Any:
        opts = native().TrainOptions()
        opts.enabled = True
        opts.loss = self.loss
        opts.label_input = self.label_input or ""
        opts.optimizer = self.optimizer
        opts.lr = float(self.lr)
        opts.momentum = float(self.momentum)
        opts.dampening = float(self.dampening)
        opts.nesterov = bool(self.nesterov)
        opts.weight_decay = float(self.weight_decay)
        opts.beta1, opts.beta2 = self.betas
        opts.eps = float(self.eps)
        opts.grad_accum_steps = int(self.grad_accum_steps)
        opts.freeze = list(self.freeze)
        opts.sync_batchnorm = bool(self.sync_batchnorm)
        if self.bucket_cap_mb is not None:
            opts.bucket_cap_mb = float(self.bucket_cap_mb)
            opts.bucket_cap_given = True
        return opts


# Keyword options of compile() beyond the named ones, with their defaults.
_EXTRA_OPTIONS: dict[str, Any] = {
    "cpu": "native",  # LLVM CPU name: native, generic, skylake, ...
    "opt_level": 3,  # LLVM optimization level 0-3
    "fuse_elementwise": True,  # elementwise fusion (CLI: --no-fusion)
    "onnx_checker": True,  # the ONNX library's checker (IR <= 8, opset <= 17)
    "runtime_lib_dir": None,  # folder with libddpc_runtime.a
    "model_dir": None,  # folder external data is resolved against
    "dump_ir": None,  # folder for NNNN_<pass>.mlir dumps (CLI: --dump-ir)
    "verbose": False,  # progress lines on stderr
    "vjp": False,  # compile the vector-Jacobian product (CLI: --vjp)
    "cuda_arch": None,  # target="cuda": e.g. "sm_80,sm_90" (CLI: --cuda-arch)
    "runtime_checks": True,  # run-time index and division checks (CLI: --no-runtime-checks)
    "precision": "fp32",  # float32 contraction math: fp32, or tf32 on CUDA (CLI: --precision)
    "zero_stage": None,  # ZeRO stage: 0, 1 (optimizer state sharded), 2 (gradients too), 3 (parameters too; cpu) or "auto"; None: auto with memory_budget, else 0 (CLI: --zero-stage)
    "world_size": None,  # ranks the memory plan is for; the program refuses others (CLI: --world-size)
    "remat": None,  # rematerialization: "auto" (backward recomputes activations when no ZeRO stage fits memory_budget) or "off"; None: auto with memory_budget, else off (CLI: --remat)
    "memory_budget": None,  # per-rank bytes, e.g. "4GiB", 512 * 2**20 (CLI: --memory-budget)
}


@dataclasses.dataclass(frozen=True)
class _Request:
    """Everything needed to (re)compile the same model with other outputs."""

    model_bytes: bytes
    input_path: str
    model_dir: str
    target: str
    dims: dict[str, int]
    batch_size: int | None
    bound_inputs: dict[str, tuple[int, list[int], bytes]]
    train: TrainConfig | None
    options: dict[str, Any]

    def run(
        self, output_path: str, emit: str, capture_stages: bool = False
    ) -> tuple[list[tuple[str, str]], str]:
        """Compiles to ``output_path``; returns (stages, report JSON).

        Raises:
            CompileError: when ddpc::compile fails.
        """
        mod = native()
        o = self.options
        status, error, stages, report = mod.compile(
            output_path,
            getattr(mod.EmitKind, emit),
            input_path=self.input_path,
            model_bytes=self.model_bytes,
            model_dir=self.model_dir,
            target=self.target,
            dims=self.dims,
            batch_size=self.batch_size,
            bound_inputs=self.bound_inputs,
            train=self.train._to_native() if self.train else None,
            runtime_lib_dir=runtime_lib_dir(o["runtime_lib_dir"]),
            capture_stages=capture_stages,
            cpu=o["cpu"],
            opt_level=int(o["opt_level"]),
            fuse_elementwise=bool(o["fuse_elementwise"]),
            run_checker=bool(o["onnx_checker"]),
            dump_ir_dir=os.fspath(o["dump_ir"]) if o["dump_ir"] else "",
            verbose=bool(o["verbose"]),
            vjp=bool(o["vjp"]),
            cuda_arch=o["cuda_arch"] or "",
            runtime_checks=bool(o["runtime_checks"]),
            precision=str(o["precision"]),
            zero_stage="" if o["zero_stage"] is None else str(o["zero_stage"]),
            world_size=0 if o["world_size"] is None else int(o["world_size"]),
            remat="" if o["remat"] is None else str(o["remat"]),
            memory_budget=(
                "" if o["memory_budget"] is None else str(o["memory_budget"])
            ),
        )
        if status != mod.COMPILE_OK:
            raise CompileError(error, unsupported=status == mod.COMPILE_UNSUPPORTED)
        return stages, report

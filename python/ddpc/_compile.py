"""``ddpc.compile`` and ``ddpc.supported_ops``: reading the model and the
options into a compile request (the types they use live in ``_config``)."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping
from typing import Any, Union

import numpy as np

from . import _dtypes
from ._config import _EXTRA_OPTIONS, CompileError, TrainConfig, _Request
from ._native import native
from ._program import Program

ModelLike = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Any]


def supported_ops() -> list[str]:
    """The ONNX op types (default domain) ddpc imports, sorted; the same
    list as ``ddpc ops``. An op outside it fails to compile with
    :class:`CompileError` (``unsupported=True``) naming the node."""
    return list(native().supported_ops())


def _model_bytes(model: ModelLike) -> tuple[bytes, str, str]:
    """(serialized model, path or "", folder for external data or "")."""
    if isinstance(model, (str, os.PathLike)):
        path = pathlib.Path(model)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise CompileError(f"cannot read '{path}': {e.strerror}") from None
        return data, str(path), os.path.dirname(os.path.abspath(path))
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
    elif hasattr(model, "SerializeToString"):  # onnx.ModelProto
        data = model.SerializeToString()
    else:
        raise TypeError(
            "model must be a path, bytes or an onnx.ModelProto, got "
            f"{type(model).__name__}"
        )
    if not data:
        raise CompileError("invalid model: empty model bytes")
    return data, "", ""


def _bound_inputs(
    bind_inputs: Mapping[str, Any] | None,
) -> dict[str, tuple[int, list[int], bytes]]:
    out: dict[str, tuple[int, list[int], bytes]] = {}
    for name, value in (bind_inputs or {}).items():
        arr = np.asarray(value)
        try:
            dtype = _dtypes.onnx_dtype(arr.dtype)
        except ValueError as e:
            raise ValueError(f"bind_inputs['{name}']: {e}") from None
        arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
        out[str(name)] = (dtype, [int(d) for d in arr.shape], arr.tobytes())
    return out


def compile(  # noqa: A001 - the package's main entry point shadows a builtin
    model: ModelLike,
    *,
    target: str = "cpu",
    train: TrainConfig | None = None,
    dims: Mapping[str, int] | None = None,
    batch_size: int | None = None,
    bind_inputs: Mapping[str, np.ndarray] | None = None,
    **options: Any,
) -> Program:
    """Compiles an ONNX model with ddpc.

    The model is imported and taken through the graph and lowering pipelines
    right away, so errors surface here and :attr:`Program.stages` and
    :meth:`Program.report` are ready; native code is generated lazily by
    :meth:`Program.run` (a shared library) and :meth:`Program.save` /
    :meth:`Program.train` (an executable).

    Args:
        model: path of an ``.onnx`` file (external data is resolved against
            its folder), the serialized bytes, or an ``onnx.ModelProto``.
        target: code generation target: ``"cpu"`` (default), ``"cuda"``
            (GPU executables: :meth:`Program.save` / :meth:`Program.train`
            only, since :meth:`Program.run` needs a shared library, which
            the CUDA target does not build; kernels for sm_80 unless
            ``cuda_arch="sm_80,sm_90"`` names others) or
            ``"cuda-emulate"`` (the CUDA target's kernel IR on the CPU,
            for tests).
        train: a :class:`TrainConfig` to build a training program, or None
            for inference.
        dims: values of symbolic dimensions by ``dim_param`` name
            (CLI ``--dim NAME=V``).
        batch_size: value of the leading dimension of every input left
            symbolic (CLI ``--batch-size``); may also come from
            ``train.batch_size``.
        bind_inputs: graph inputs fixed at compile time (shapes, axes), as
            numpy arrays whose dtype is the input's type.
        **options: ``cpu`` (``"native"``), ``opt_level`` (3),
            ``fuse_elementwise`` (True), ``onnx_checker`` (True),
            ``runtime_lib_dir``, ``model_dir`` (external data folder for
            bytes/ModelProto input), ``dump_ir`` (folder), ``verbose``,
            ``cuda_arch`` (``target="cuda"`` only: ``"sm_80,sm_90"``),
            ``runtime_checks`` (True: an out-of-range Gather index or an
            integer division by zero raises IndexError / ZeroDivisionError
            in :meth:`Program.run` and ends a compiled program; False: the
            index reads the nearest valid row, the divisor becomes 1),
            ``precision`` (``"fp32"``; ``"tf32"``: on ``target="cuda"``
            cuBLAS GEMMs and cuDNN convolutions may use TF32 tensor-core
            math, float32 tensors and accumulation; ``"bf16"``/``"fp16"``
            raise CompileError(unsupported=True)), ``memory_budget``
            (training: the bytes one rank may hold, an int or ``"4GiB"``,
            ``"512MiB"``, ``"100KiB"``; a memory plan whose predicted peak
            exceeds it raises CompileError, whose message gives the peak,
            its largest categories and the smallest feasible budget),
            ``zero_stage`` (0, 1, 2, 3 (cpu target) or ``"auto"``; None:
            ``"auto"`` with a ``memory_budget``, else 0), ``world_size``
            (training: the ranks the memory plan is for; the program
            refuses another; None: any; ``"auto"`` considers stages 1 to 3
            only with it),
            ``remat`` (``"auto"``: when no stage fits ``memory_budget``,
            the backward pass recomputes activations until the plan fits,
            listed in ``report()["memory_plan"]["remat"]``; ``"off"``: every
            activation is kept; None: ``"auto"`` with a ``memory_budget``,
            else ``"off"``).

    Returns:
        A :class:`Program`.

    Raises:
        CompileError: the model is invalid or unsupported, or an option is
            wrong (``.message`` is the CLI's one-line message,
            ``.unsupported`` tells which).
        TypeError: for an unknown keyword option or model type.
        ValueError: for inconsistent options.
    """
    unknown = sorted(set(options) - set(_EXTRA_OPTIONS))
    if unknown:
        raise TypeError(
            f"compile() got unknown option(s) {', '.join(unknown)}; "
            f"valid: {', '.join(sorted(_EXTRA_OPTIONS))}"
        )
    opts = {**_EXTRA_OPTIONS, **options}
    ws = opts["world_size"]
    if ws is not None and (isinstance(ws, bool) or not isinstance(ws, int)):
        raise TypeError(f"world_size= must be an int or None, got {ws!r}")
    if opts["zero_stage"] == "":
        raise ValueError('zero_stage="" is empty: give 0, 1, 2, 3, "auto" or None')
    if train is not None and not isinstance(train, TrainConfig):
        if isinstance(train, Mapping):
            train = TrainConfig(**train)
        else:
            raise TypeError(
                f"train must be a TrainConfig or None, got {type(train).__name__}"
            )
    if train is not None and train.batch_size is not None:
        if batch_size is not None and batch_size != train.batch_size:
            raise ValueError(
                f"batch_size={batch_size} contradicts train.batch_size={train.batch_size}"
            )
        batch_size = train.batch_size
    if batch_size is not None and int(batch_size) <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    dims_out: dict[str, int] = {}
    for name, value in (dims or {}).items():
        if int(value) < 0:  # 0: a zero-size (empty) tensor
            raise ValueError(f"dims['{name}'] must be >= 0, got {value}")
        dims_out[str(name)] = int(value)

    data, path, folder = _model_bytes(model)
    if opts["model_dir"]:
        folder = os.fspath(opts["model_dir"])
    request = _Request(
        model_bytes=data,
        input_path=path,
        model_dir=folder,
        target=target,
        dims=dims_out,
        batch_size=None if batch_size is None else int(batch_size),
        bound_inputs=_bound_inputs(bind_inputs),
        train=train,
        options=opts,
    )
    return Program._compile(request)

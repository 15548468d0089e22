"""``ddpc.Program``: a compiled model, its IR stages, plan, and how to run it."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from . import _dtypes
from ._config import TrainConfig, _Request
from ._native import native

_ALIGN = 64  # ModelABI.h: buffers are 64-byte aligned

# Options train() always sets itself: extra_args may not name them.
_TRAIN_OWN_OPTIONS = ("--save", "--log-json")


@functools.cache
def _train_options() -> dict[str, str]:
    """The training program's options, name -> kind ('flag', 'int', 'double',
    'string', 'list'), in ``./train --help`` order: the runtime's own table
    (ProgramOptions.h, ``_ddpc.train_program_options``)."""
    return {name: kind for name, kind, _ in native().train_program_options()}


def _train_arg(name: str, value: object = None) -> list[str]:
    """``[name]`` for a flag, else ``[name, str(value)]``; the name must be one
    of the program's options."""
    kind = _train_options()[name]
    return [name] if kind == "flag" else [name, str(value)]


def _extra_option_names(extra: Sequence[str]) -> list[str]:
    """The option names in ``extra`` (values skipped, ``--opt=value`` cut at
    ``=``).

    Raises:
        ValueError: for a word the training program would refuse: an unknown
            option (or a flag given ``=value``), or a word in no option's
            value position; the message lists the valid options.
    """
    options = _train_options()
    names = []
    i = 0
    while i < len(extra):
        word = extra[i]
        name = word.split("=", 1)[0]
        kind = options.get(name)
        if kind is None or (kind == "flag" and "=" in word):
            raise ValueError(
                f"extra_args: unknown option {word!r} for the training program; "
                f"valid options: {', '.join(options)}"
            )
        names.append(name)
        i += 1 if kind == "flag" or "=" in word else 2
    return names


class TensorSpec(NamedTuple):
    """One input or output of a compiled model.

    Attributes:
        name: the ONNX graph input/output name.
        dtype: the numpy dtype of its buffer (bfloat16 travels as uint16).
        onnx_dtype: the ONNX TensorProto.DataType number.
        shape: the static shape.
    """

    name: str
    dtype: np.dtype
    onnx_dtype: int
    shape: tuple[int, ...]


@dataclasses.dataclass
class TrainResult:
    """What :meth:`Program.train` returns.

    Attributes:
        log: one dict per line of the training program's ``--log-json``
            file (JSON Lines), in order.
        model: the trained model (``--save``), an ``onnx.ModelProto``.
        stdout: what the training program printed.
    """

    log: list[dict[str, Any]]
    model: Any
    stdout: str = ""


def _data_columns(data: Any, what: str) -> list[tuple[str | None, np.ndarray]]:
    """The data inputs of train(): one array, a list or tuple of arrays (in
    graph-input order; name None), or a dict by input name."""
    if isinstance(data, Mapping):
        if not data:
            raise ValueError(f"{what} is an empty dict")
        return [(str(k), np.asarray(v)) for k, v in data.items()]
    if isinstance(data, (list, tuple)):
        if not data:
            raise ValueError(f"{what} is an empty list")
        return [(None, np.asarray(v)) for v in data]
    return [(None, np.asarray(data))]


def _save_columns(
    workdir: pathlib.Path,
    columns: list[tuple[str | None, np.ndarray]],
    stem: str,
    flag: str,
) -> list[str]:
    """Writes each data column as ``<stem><i>.npy``; returns the program's
    ``flag FILE`` (or ``flag NAME=FILE``) arguments."""
    args = []
    for i, (name, array) in enumerate(columns):
        file = f"{stem}{i}.npy"
        np.save(workdir / file, np.ascontiguousarray(array))
        args += _train_arg(flag, file if name is None else f"{name}={file}")
    return args


def _aligned_empty(shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """An uninitialized C-contiguous array whose data is 64-byte aligned and
    backed by at least one byte (ModelABI.h)."""
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * dtype.itemsize
    raw = np.empty(max(nbytes, 1) + _ALIGN, dtype=np.uint8)
    offset = (-raw.ctypes.data) % _ALIGN
    return raw[offset : offset + nbytes].view(dtype).reshape(tuple(shape))


class _SharedModel:
    """A compiled shared library (EmitKind.SharedLibrary) loaded with ctypes."""

    def __init__(self, path: str) -> None:
        self._lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
        self._symbols = native().GLUE_SYMBOLS
        self.name = (
            ctypes.c_char_p.in_dll(self._lib, self._symbols["model_name"]).value or b""
        ).decode()
        self.inputs = self._table("input")
        self.outputs = self._table("output")
        self._invoke = getattr(self._lib, self._symbols["invoke"])
        self._invoke.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        self._invoke.restype = None
        # Run-time checks (ModelABI.h); linked in only when the model has
        # some (an index input).
        self._take_error = getattr(self._lib, self._symbols["take_error"], None)
        if self._take_error is not None:
            self._take_error.argtypes = []
            self._take_error.restype = ctypes.c_char_p

    def _table(self, kind: str) -> list[TensorSpec]:
        lib, sym = self._lib, self._symbols[kind]
        count = ctypes.c_int32.in_dll(lib, sym["count"]).value
        slots = max(count, 1)  # the glue pads empty tables with one element
        names = (ctypes.c_char_p * slots).in_dll(lib, sym["names"])
        dtypes = (ctypes.c_int32 * slots).in_dll(lib, sym["dtypes"])
        ranks = (ctypes.c_int32 * slots).in_dll(lib, sym["ranks"])
        shapes = (ctypes.POINTER(ctypes.c_int64) * slots).in_dll(lib, sym["shapes"])
        return [
            TensorSpec(
                name=names[i].decode(),
                dtype=_dtypes.numpy_dtype(dtypes[i]),
                onnx_dtype=int(dtypes[i]),
                shape=tuple(int(shapes[i][k]) for k in range(ranks[i])),
            )
            for i in range(count)
        ]

    def invoke(self, buffers: Sequence[np.ndarray]) -> None:
        """Runs the model; raises IndexError (an index out of range) or
        ZeroDivisionError (an integer division by zero) when a run-time
        check of compiled code failed; the message names the node."""
        args = (ctypes.c_void_p * max(len(buffers), 1))(
            *[b.ctypes.data for b in buffers]
        )
        self._invoke(args)
        if self._take_error is not None:
            message = self._take_error()
            if message:
                text = message.decode("utf-8", "replace")
                if text.startswith("integer division by zero"):
                    raise ZeroDivisionError(text)
                raise IndexError(text)


class Program:
    """A model compiled by :func:`ddpc.compile`.

    Inference programs run in process (:meth:`run`); training programs are
    executables driven by :meth:`train`. Both can be written out with
    :meth:`save`. Instances are safe to use from several threads.
    """

    def __init__(self) -> None:
        raise TypeError("use ddpc.compile() to create a Program")

    @classmethod
    def _compile(cls, request: _Request) -> "Program":
        self = cls.__new__(cls)
        self._request = request
        # Generated files live until the Program is collected (a loaded
        # shared library stays mapped after its file is removed).
        self._dir = tempfile.mkdtemp(prefix="ddpc-")
        weakref.finalize(self, shutil.rmtree, self._dir, ignore_errors=True)
        self._lock = threading.Lock()
        self._artifacts: dict[str, str] = {}
        self._shared: _SharedModel | None = None
        # Import and all passes now: errors surface at compile(), and the IR
        # of every stage and the plan are available without code generation.
        stages, report = request.run(
            os.path.join(self._dir, "lowered.mlir"),
            "LOWERED_MLIR",
            capture_stages=True,
        )
        self._stages = dict(stages)
        self._stage_order = [name for name, _ in stages]
        self._report_json = report
        return self

    # -- inspection ---------------------------------------------------------

    @property
    def is_training(self) -> bool:
        """True for a program compiled with ``train=TrainConfig(...)``."""
        return self._request.train is not None

    @property
    def train_config(self) -> TrainConfig | None:
        """The :class:`TrainConfig` this program was compiled with, or None."""
        return self._request.train

    @property
    def stages(self) -> list[str]:
        """Names of the IR stages, in pipeline order: ``import``, (for
        training programs ``training``,) ``fused``, ``bufferized`` (CUDA:
        ``gpu-kernels``, ``nvvm``), ``lowered``: the stages of
        ``ddpc compile --dump-ir``, each replayable in ``ddpc-opt``."""
        return list(self._stage_order)

    def ir(self, stage: str) -> str:
        """The MLIR text of the module at the end of ``stage``.

        Raises:
            KeyError: for an unknown stage; the message lists the valid ones.
        """
        try:
            return self._stages[stage]
        except KeyError:
            raise KeyError(
                f"no stage {stage!r}; valid stages: {', '.join(self._stage_order)}"
            ) from None

    def report(self) -> dict[str, Any]:
        """The compiler's plan (CLI ``--report=json``) as a new dict:
        ``model``, ``inputs``/``outputs`` (name, ``dtype`` as the numpy
        name such as ``"float32"``, ``onnx_dtype`` as the ONNX
        TensorProto.DataType number, ``shape``), ``parameters`` (name,
        dtype, onnx_dtype, shape, ``bytes``, trainable),
        ``parameter_bytes``, ``collectives`` (op, ``bytes``),
        ``collective_bytes`` (per optimizer step), ``fusion_groups``; for
        training programs ``gradient_buckets`` (per bucket: ``bucket``,
        ``op`` (``"allreduce_bucket"``, or ``"reduce_scatter_bucket"`` at
        ZeRO stage 2), ``bytes``, ``params`` in the order backward finishes
        them, and ``function``, ``start_op``, ``function_ops``: the bucket's
        collective starts after top-level op ``start_op`` of
        ``function_ops``); for
        ``target="cuda"`` a ``cuda`` section (kernels, library calls and
        arena bytes per step function)."""
        return json.loads(self._report_json) if self._report_json else {}

    def __repr__(self) -> str:
        kind = "training" if self.is_training else "inference"
        name = self.report().get("model", "?")
        return f"<ddpc.Program {name!r} ({kind}), stages={self._stage_order}>"

    # -- artifacts ----------------------------------------------------------

    def _artifact(self, emit: str, filename: str) -> str:
        """Compiles the program once more to ``emit`` in the temp folder,
        once per kind."""
        with self._lock:
            path = self._artifacts.get(emit)
            if path is None:
                path = os.path.join(self._dir, filename)
                self._request.run(path, emit)
                self._artifacts[emit] = path
            return path

    def save(self, path: str | os.PathLike[str]) -> pathlib.Path:
        """Writes the native executable (inference: the ``./prog --input``
        CLI; training: the training program) to ``path``, atomically.

        Returns:
            ``path`` as a :class:`pathlib.Path`.

        Raises:
            CompileError: when code generation or linking fails.
            OSError: when ``path`` cannot be written.
        """
        exe = self._artifact("EXECUTABLE", "program")
        dest = pathlib.Path(path)
        if dest.is_symlink() and dest.exists():
            dest = dest.resolve()  # Write through the link, not over it.
        if (
            dest.exists()
            and not dest.is_file()
            and not dest.is_dir()
            or (dest.is_symlink() and not dest.exists())
        ):
            # A device, FIFO or dangling symlink: write it in place (renaming
            # over it would replace the special file itself).
            with open(exe, "rb") as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
            return pathlib.Path(path)
        tmp = dest.with_name(f".{dest.name}.tmp.{os.getpid()}.{threading.get_ident()}")
        try:
            shutil.copyfile(exe, tmp)
            os.chmod(tmp, 0o755)
            os.replace(tmp, dest)
        finally:
            if tmp.exists():
                tmp.unlink()
        return pathlib.Path(path)

    # -- inference ----------------------------------------------------------

    def _shared_model(self) -> _SharedModel:
        if self.is_training:
            raise RuntimeError(
                "run() executes inference programs; this program was compiled "
                "with train=TrainConfig(...): use train()"
            )
        if self._request.target == "cuda":
            raise RuntimeError(
                "run() loads a shared library into this process, and "
                "target='cuda' builds GPU executables only: use save(path) and "
                "run the program on a GPU machine, or compile with "
                "target='cuda-emulate' to run the CUDA target's code here"
            )
        path = self._artifact("SHARED_LIBRARY", "libmodel.so")
        with self._lock:
            if self._shared is None:
                self._shared = _SharedModel(path)
            return self._shared

    @property
    def inputs(self) -> list[TensorSpec]:
        """The inputs :meth:`run` expects (compiles the shared library)."""
        return list(self._shared_model().inputs)

    @property
    def outputs(self) -> list[TensorSpec]:
        """The outputs :meth:`run` returns (compiles the shared library)."""
        return list(self._shared_model().outputs)

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs an inference program once, in process.

        The first call generates native code (a shared library) and loads it.

        Args:
            inputs: one array per graph input (initializers excluded), by
                name, with exactly the input's numpy dtype (bool: ``np.bool_``;
                bfloat16: the raw bits as ``uint16``) and static shape (the
                bound symbolic dims included). Arrays need not be contiguous
                or aligned; they are copied when they are not.

        Returns:
            One new array per graph output, by name, in graph-output order.

        Raises:
            ValueError: a missing or unknown input name, or a dtype or shape
                that differs from the model's; the message names the input
                and gives the expected and the received value.
            IndexError: an index input (Gather's indices) holds a value
                outside [-size, size) of the axis it indexes; the message
                names the node, the index and the valid range (compile
                with ``runtime_checks=False`` to clamp instead).
            ZeroDivisionError: an integer Div divides by zero.
            RuntimeError: when called on a training program or a
                ``target="cuda"`` program (GPU executables only).
            CompileError: when code generation or linking fails.
        """
        if not isinstance(inputs, Mapping):
            raise TypeError(
                f"inputs must be a dict of name -> array, got {type(inputs).__name__}"
            )
        model = self._shared_model()
        expected = [spec.name for spec in model.inputs]
        missing = [name for name in expected if name not in inputs]
        unknown = [name for name in inputs if name not in expected]
        if missing or unknown:
            parts = []
            if missing:
                parts.append(f"missing input(s) {', '.join(map(repr, missing))}")
            if unknown:
                parts.append(f"unknown input(s) {', '.join(map(repr, unknown))}")
            raise ValueError(f"{'; '.join(parts)}; the model's inputs are {expected}")

        buffers: list[np.ndarray] = []
        for spec in model.inputs:
            value = inputs[spec.name]
            arr = value if isinstance(value, np.ndarray) else np.asarray(value)
            if arr.dtype != spec.dtype:
                raise ValueError(
                    f"input '{spec.name}': expected dtype "
                    f"{_dtypes.ONNX_NAMES.get(spec.onnx_dtype, spec.dtype)}, got {arr.dtype}"
                )
            if tuple(arr.shape) != spec.shape:
                raise ValueError(
                    f"input '{spec.name}': expected shape {list(spec.shape)}, "
                    f"got {list(arr.shape)}"
                )
            if (
                not arr.flags.c_contiguous
                or arr.ctypes.data % _ALIGN
                or arr.nbytes == 0
                or not arr.dtype.isnative
            ):
                aligned = _aligned_empty(spec.shape, spec.dtype)
                aligned[...] = arr
                arr = aligned
            buffers.append(arr)
        outputs = [_aligned_empty(spec.shape, spec.dtype) for spec in model.outputs]
        model.invoke(buffers + outputs)
        return {spec.name: out for spec, out in zip(model.outputs, outputs)}

    # -- training -----------------------------------------------------------

    def train(
        self,
        data: np.ndarray | Sequence[np.ndarray] | Mapping[str, np.ndarray],
        labels: np.ndarray,
        epochs: int = 1,
        ranks: int = 1,
        val_data: (
            np.ndarray | Sequence[np.ndarray] | Mapping[str, np.ndarray] | None
        ) = None,
        val_labels: np.ndarray | None = None,
        shuffle_seed: int = 0,
        shuffle: bool = True,
        extra_args: Sequence[str] = (),
        timeout: float | None = None,
        nan_policy: str = "stop",
    ) -> TrainResult:
        """Trains with the compiled training program (see TrainABI.h).

        Saves the program as ``./train`` in a temporary folder, writes the
        arrays there as ``.npy`` files and runs::

            ./train --data X.npy --labels Y.npy --epochs E \\
                --log-json steps.jsonl --save trained.onnx \\
                (--shuffle-seed S | --no-shuffle) \\
                [--val-data VX.npy --val-labels VY.npy] [extra_args...]

        through ``mpirun --oversubscribe -np ranks`` when ``ranks > 1``.

        Args:
            data: ``[N, ...]`` samples in the model input's dtype (float32,
                or int64/int32 token ids; float64 and other integer arrays
                are converted), N >= global batch. A model with several
                data inputs (token ids and an attention mask) takes a list
                of arrays in graph-input order or a dict by input name, all
                with the same N; row i of each is sample i, and they are
                sharded together (``--data NAME=FILE``, one per input).
            labels: ``[N]`` int64 class indices for cross-entropy, or
                ``[N, ...]`` float32 targets for mse.
            epochs: passes over the data.
            ranks: data-parallel processes (MPI ranks); each takes
                ``batch_size`` samples per micro-batch.
            val_data, val_labels: optional validation set, both or neither
                (``val_data`` in the form of ``data``).
            shuffle_seed: sampler seed; epoch e visits the samples in the
                order of permutation ``seed + e`` (same on every rank).
            shuffle: False visits the samples in file order every epoch
                (``--no-shuffle``; ``shuffle_seed`` is then unused).
            extra_args: more command-line arguments for the program, e.g.
                ``["--lr", "0.05"]``, ``["--timeout", "120"]``; see
                ``./train --help``. ``--no-shuffle`` or ``--shuffle-seed``
                here take the place of ``shuffle``/``shuffle_seed``;
                ``["--sample-assignment", "strided", "--buffer-sync",
                "broadcast"]`` reproduces DistributedDataParallel with
                ``DistributedSampler`` (README). The options are those of
                the program's own table (``./train --help``); any other word
                raises ValueError.
            timeout: seconds before the run is killed (None: no limit).
            nan_policy: what a non-finite loss (on any rank) or gradient
                norm does (``--nan-policy``): ``"stop"`` raises
                RuntimeError naming the step and the ranks, ``"skip"`` drops
                the step on every rank (``TrainResult.log`` marks it
                ``"skipped": true``), ``"ignore"`` applies it. A model with
                non-finite weights is never saved.

        Returns:
            A :class:`TrainResult` with the parsed JSON-lines log and the
            trained ``onnx.ModelProto``.

        Raises:
            RuntimeError: when called on an inference program, when the
                program (or mpirun) fails, with its stderr, or when mpirun is
                needed and not found.
            ValueError: for mismatched data/labels or bad arguments, ranks
                other than the program's ``world_size``, and for
                ``extra_args`` naming an option the program does not take
                (the message lists the valid ones) or ``--save``/``--log-json``.
            CompileError: when code generation or linking fails.
        """
        import onnx

        if not self.is_training:
            raise RuntimeError(
                "train() needs a training program: compile with train=TrainConfig(...)"
            )
        columns = _data_columns(data, "data")
        labels = np.asarray(labels)
        for name, array in columns:
            if array.ndim == 0 or labels.ndim == 0 or len(array) != len(labels):
                what = "data" if name is None else f"data[{name!r}]"
                raise ValueError(
                    f"{what} and labels must have the same leading dimension, "
                    f"got shapes {list(array.shape)} and {list(labels.shape)}"
                )
        if (val_data is None) != (val_labels is None):
            raise ValueError("pass both val_data and val_labels, or neither")
        if int(epochs) < 1 or int(ranks) < 1:
            raise ValueError(f"epochs and ranks must be >= 1, got {epochs} and {ranks}")
        if nan_policy not in ("stop", "skip", "ignore"):
            raise ValueError(
                f"nan_policy must be 'stop', 'skip' or 'ignore', got {nan_policy!r}"
            )
        planned = self.report().get("memory_plan", {}).get("world_size", 0)
        if planned and int(ranks) != planned:
            raise ValueError(
                f"this program was compiled with world_size={planned} (its memory "
                f"plan assumes that many ranks): call train(..., ranks={planned}), "
                f"or compile again with world_size={int(ranks)} (or without it)"
            )

        extra = [str(a) for a in extra_args]
        given = _extra_option_names(extra)
        taken = [a for a in given if a in _TRAIN_OWN_OPTIONS]
        if taken:
            raise ValueError(
                f"extra_args may not set {', '.join(sorted(set(taken)))}: train() "
                "writes the log and the trained model itself (TrainResult.log, "
                ".model); save result.model with onnx.save"
            )
        with tempfile.TemporaryDirectory(prefix="ddpc-train-") as work:
            workdir = pathlib.Path(work)
            self.save(workdir / "train")
            np.save(workdir / "Y.npy", np.ascontiguousarray(labels))
            cmd = [
                "./train",
                *_save_columns(workdir, columns, "X", "--data"),
                *_train_arg("--labels", "Y.npy"),
                *_train_arg("--epochs", int(epochs)),
                *_train_arg("--log-json", "steps.jsonl"),
                *_train_arg("--save", "trained.onnx"),
            ]
            if "--no-shuffle" not in given and "--shuffle-seed" not in given:
                cmd += (
                    _train_arg("--shuffle-seed", int(shuffle_seed))
                    if shuffle
                    else _train_arg("--no-shuffle")
                )
            if val_data is not None:
                val_columns = _data_columns(val_data, "val_data")
                cmd += _save_columns(workdir, val_columns, "VX", "--val-data")
                np.save(
                    workdir / "VY.npy", np.ascontiguousarray(np.asarray(val_labels))
                )
                cmd += _train_arg("--val-labels", "VY.npy")
            if "--nan-policy" not in given:
                cmd += _train_arg("--nan-policy", nan_policy)
            cmd += extra
            env = dict(os.environ)
            if int(ranks) > 1:
                mpirun = shutil.which("mpirun")
                if mpirun is None:
                    raise RuntimeError(
                        f"ranks={ranks} needs mpirun, which is not on PATH"
                    )
                cmd = [mpirun, "--oversubscribe", "-np", str(int(ranks))] + cmd
                if os.geteuid() == 0:
                    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
                    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
            proc = subprocess.run(
                cmd,
                cwd=workdir,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            if proc.returncode != 0:
                raise RuntimeError(
                    f"training program failed (exit code {proc.returncode}): "
                    f"{proc.stderr.strip() or proc.stdout.strip()}"
                )
            log_path = workdir / "steps.jsonl"
            saved = workdir / "trained.onnx"
            if not log_path.exists() or not saved.exists():
                raise RuntimeError(
                    "training program exited 0 but did not write steps.jsonl and "
                    f"trained.onnx; stderr: {proc.stderr.strip()}"
                )
            log = [
                json.loads(line)
                for line in log_path.read_text().splitlines()
                if line.strip()
            ]
            model = onnx.load(str(saved))
            return TrainResult(log=log, model=model, stdout=proc.stdout)

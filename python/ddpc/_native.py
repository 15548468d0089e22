"""Locating the native module ``_ddpc`` and the runtime libraries.

The package works from three layouts:

* a CMake build: ``<build>/python/ddpc`` holds the ``.py`` files and
  ``_ddpc*.so``; the runtime libraries are in ``<build>/lib`` (baked into the
  module as ``DEFAULT_RUNTIME_LIB_DIR``);
* ``pip install ./python``: the wheel holds ``_ddpc*.so`` and a copy of the
  runtime libraries in ``ddpc/lib``;
* ``pip install -e ./python`` (or ``PYTHONPATH=python``): the sources are
  imported from ``python/ddpc`` and the native module is taken from
  ``$DDPC_BUILD_DIR/python/ddpc`` (default ``<repo>/build``).
"""

from __future__ import annotations

import os
import pathlib
import sys
from types import ModuleType

_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
_native: ModuleType | None = None


def _build_dirs() -> list[pathlib.Path]:
    """Build folders that may hold the native module, most specific first."""
    dirs = []
    env = os.environ.get("DDPC_BUILD_DIR")
    if env:
        dirs.append(pathlib.Path(env))
    dirs.append(_PACKAGE_DIR.parents[1] / "build")
    return dirs


def native() -> ModuleType:
    """Returns the native module ``ddpc._ddpc``, importing it on first use.

    Raises:
        ImportError: when no built ``_ddpc`` extension can be found; the
            message says how to build it.
    """
    global _native
    if _native is not None:
        return _native
    # Only a missing module falls back to a build folder; a module that is
    # there but fails to load (undefined symbol, wrong Python) says why.
    try:
        from . import _ddpc  # type: ignore[attr-defined]
    except ModuleNotFoundError as first:
        package = sys.modules[__package__]
        for build in _build_dirs():
            folder = build / "python" / "ddpc"
            if not any(folder.glob("_ddpc*.so")):
                continue
            if str(folder) not in package.__path__:
                package.__path__.append(str(folder))
            try:
                from . import _ddpc  # type: ignore[attr-defined]
            except ModuleNotFoundError:
                continue
            break
        else:
            raise ImportError(
                "the ddpc native module (_ddpc) is not built: run "
                "'make build' (or set DDPC_BUILD_DIR to your CMake build "
                "folder) and use PYTHONPATH=<build>/python or "
                "'pip install ./python'"
            ) from first
    _native = _ddpc
    return _ddpc


def runtime_lib_dir(override: str | os.PathLike[str] | None = None) -> str:
    """The folder holding ``libddpc_runtime.a`` that compiled programs link.

    Order: ``override``, ``$DDPC_RUNTIME_LIB_DIR``, the copy inside an
    installed package (``ddpc/lib``), then the build's ``lib`` folder baked
    into the native module.
    """
    if override:
        return os.fspath(override)
    env = os.environ.get("DDPC_RUNTIME_LIB_DIR")
    if env:
        return env
    bundled = _PACKAGE_DIR / "lib"
    if (bundled / "libddpc_runtime.a").exists():
        return str(bundled)
    return str(native().DEFAULT_RUNTIME_LIB_DIR)

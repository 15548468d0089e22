"""A PEP 517 build backend that packages an existing CMake build of ddpc.

It builds nothing: ``cmake``/``ninja`` (``make build``) produce the native
module ``_ddpc`` and the runtime libraries; this backend puts them into a
wheel together with the pure-Python package ``ddpc/``.

The build folder is ``$DDPC_BUILD_DIR`` or the ``build-dir`` config setting
(absolute, or relative to the repository root), default ``<repo>/build``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import pathlib
import sys
import sysconfig
import tarfile
import tomllib
import zipfile

_PYTHON_DIR = pathlib.Path(__file__).resolve().parents[1]
_REPO = _PYTHON_DIR.parent


def _project() -> dict:
    with open(_PYTHON_DIR / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _build_dir(config_settings: dict | None) -> pathlib.Path:
    value = (config_settings or {}).get("build-dir") or os.environ.get("DDPC_BUILD_DIR")
    path = pathlib.Path(value) if value else pathlib.Path("build")
    return path if path.is_absolute() else (_REPO / path).resolve()


def _dist_info_name() -> str:
    p = _project()
    return f"{p['name']}-{p['version']}.dist-info"


def _metadata() -> str:
    p = _project()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
        f"Summary: {p['description']}",
        f"Requires-Python: {p['requires-python']}",
    ]
    lines += [f"Requires-Dist: {d}" for d in p.get("dependencies", [])]
    return "\n".join(lines) + "\n"


def _tag() -> str:
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{impl}-{impl}-{plat}"


def _write_wheel(directory: str, files: dict[str, bytes], tag: str) -> str:
    """Writes files (archive name -> content) plus dist-info; returns the
    wheel's file name."""
    p = _project()
    dist_info = _dist_info_name()
    files = dict(files)
    files[f"{dist_info}/METADATA"] = _metadata().encode()
    files[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: ddpc_build\n"
        f"Root-Is-Purelib: false\nTag: {tag}\n"
    ).encode()
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    name = f"{p['name']}-{p['version']}-{tag}.whl"
    with zipfile.ZipFile(
        os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED
    ) as whl:
        for arcname, data in files.items():
            info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if arcname.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info, data)
    return name


def get_requires_for_build_wheel(config_settings: dict | None = None) -> list[str]:
    return []


def get_requires_for_build_editable(config_settings: dict | None = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: dict | None = None) -> list[str]:
    return []


def build_wheel(
    wheel_directory: str,
    config_settings: dict | None = None,
    metadata_directory: str | None = None,
) -> str:
    build = _build_dir(config_settings)
    ext_suffix = sysconfig.get_config_var("EXT_SUFFIX")
    native = build / "python" / "ddpc" / f"_ddpc{ext_suffix}"
    if not native.exists():
        raise RuntimeError(
            f"{native} not found: build ddpc first ('make build', Python "
            f"{sys.version_info.major}.{sys.version_info.minor} with nanobind) or set "
            "DDPC_BUILD_DIR to the CMake build folder"
        )
    runtimes = sorted((build / "lib").glob("libddpc_*.a"))
    if not any(r.name == "libddpc_runtime.a" for r in runtimes):
        raise RuntimeError(
            f"{build / 'lib' / 'libddpc_runtime.a'} not found: build ddpc first"
        )
    files: dict[str, bytes] = {}
    for src in sorted((_PYTHON_DIR / "ddpc").iterdir()):
        if src.suffix == ".py" or src.name == "py.typed":
            files[f"ddpc/{src.name}"] = src.read_bytes()
    files[f"ddpc/{native.name}"] = native.read_bytes()
    # The link flags the driver adds after each archive (OpenBLAS, MPI).
    for lib in runtimes + sorted((build / "lib").glob("ddpc_*.link")):
        files[f"ddpc/lib/{lib.name}"] = lib.read_bytes()
    return _write_wheel(wheel_directory, files, _tag())


def build_editable(
    wheel_directory: str,
    config_settings: dict | None = None,
    metadata_directory: str | None = None,
) -> str:
    # The sources are imported from python/ddpc; ddpc/_native.py takes the
    # native module from DDPC_BUILD_DIR, which the .pth sets to this build.
    build = _build_dir(config_settings)
    pth = (
        f"{_PYTHON_DIR}\n"
        f"import os; os.environ.setdefault('DDPC_BUILD_DIR', {str(build)!r})\n"
    )
    return _write_wheel(wheel_directory, {"ddpc_editable.pth": pth.encode()}, _tag())


def build_sdist(sdist_directory: str, config_settings: dict | None = None) -> str:
    p = _project()
    base = f"{p['name']}-{p['version']}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        for src in sorted(_PYTHON_DIR.rglob("*")):
            rel = src.relative_to(_PYTHON_DIR)
            if src.is_file() and "__pycache__" not in rel.parts:
                tar.add(src, arcname=f"{base}/{rel}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return name

"""Fixtures for the Python API tests: the ddpc package from a build.

Run with the build's package on the path:

    PYTHONPATH=<build>/python python3 -m pytest -q test/python

or with DDPC_BUILD_DIR=<build> (default: <repo>/build), which this file puts
on sys.path itself.
"""

from __future__ import annotations

import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

try:
    import ddpc  # noqa: F401
except ImportError:
    build = pathlib.Path(os.environ.get("DDPC_BUILD_DIR", ROOT / "build"))
    sys.path.insert(0, str(build / "python"))

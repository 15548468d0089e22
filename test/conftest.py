"""pytest setup of the suites test/e2e, test/runtime and test/python.

Puts this folder on sys.path (the shared helpers are ``ddpc_testing``) and,
unless ``ddpc`` is importable already (PYTHONPATH=<build>/python, or an
installed package), the build's Python package
($DDPC_BUILD_DIR/python, default <repo>/build/python). Provides the ``ddpc``
fixture: the built CLI.

pytest loads this file when it runs from the repository root or a folder
above test/, as ``make test-python`` and ``ninja check-ddpc-python`` do:

    PYTHONPATH=build/python python3 -m pytest -q test/e2e test/runtime test/python
"""

import importlib.util
import os
import pathlib
import sys

import pytest

HERE = str(pathlib.Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from ddpc_testing import BUILD  # noqa: E402

if importlib.util.find_spec("ddpc") is None:
    sys.path.insert(0, str(BUILD / "python"))


@pytest.fixture(scope="session")
def ddpc() -> str:
    """Path of the ddpc CLI: $DDPC, default <build>/bin/ddpc."""
    path = os.environ.get("DDPC", str(BUILD / "bin" / "ddpc"))
    if not os.path.exists(path):
        pytest.fail(f"{path} not found: run 'make build' first")
    return path

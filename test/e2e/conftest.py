"""Shared fixtures for the end-to-end tests: the built ddpc binary."""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def ddpc() -> str:
    path = os.environ.get("DDPC", str(ROOT / "build" / "bin" / "ddpc"))
    if not os.path.exists(path):
        pytest.fail(f"{path} not found: run 'make build' first")
    return path

"""Program.train's command line and the training program's option table.

The table comes from the runtime (``_ddpc.train_program_options``, the same
one ``./train --help`` prints); train() refuses extra_args the program would
not take before it writes or runs anything.
"""

from __future__ import annotations

import numpy as np
import pytest

import ddpc
from ddpc import _program
from ddpc._native import native
from ddpc_testing import EXAMPLES


def test_table_is_the_runtime_one() -> None:
    table = native().train_program_options()
    names = [name for name, _, _ in table]
    assert names[:3] == ["--data", "--labels", "--epochs"]
    kinds = dict((name, kind) for name, kind, _ in table)
    assert kinds["--data"] == "list"
    assert kinds["--epochs"] == "int"
    assert kinds["--lr"] == "double"
    assert kinds["--nan-policy"] == "string"
    assert kinds["--no-shuffle"] == "flag"
    assert all(help for _, _, help in table)


def test_extra_option_names() -> None:
    assert _program._extra_option_names(
        ["--lr", "-1", "--timeout=5", "--quiet", "--sample-assignment", "strided"]
    ) == ["--lr", "--timeout", "--quiet", "--sample-assignment"]
    for bad in (["--bogus", "1"], ["--quiet=1"], ["stray"], ["--lr", "1", "x"]):
        with pytest.raises(ValueError, match="valid options: --data, --labels"):
            _program._extra_option_names(bad)


def test_train_refuses_unknown_extra_args() -> None:
    prog = ddpc.compile(
        EXAMPLES / "lenet.onnx",
        train=ddpc.TrainConfig(loss="cross-entropy", optimizer="sgd", batch_size=2),
    )
    x = np.zeros((4, 1, 28, 28), np.float32)
    y = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match=r"unknown option '--learning-rate'.*--lr"):
        prog.train(x, y, extra_args=["--learning-rate", "0.1"])
    with pytest.raises(ValueError, match="extra_args may not set --save"):
        prog.train(x, y, extra_args=["--save=x.onnx"])

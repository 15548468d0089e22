"""Helpers for the training-runtime tests (a plain module, not a conftest, so
its name cannot clash with other test folders): the fixture programs built
from unittests/Runtime/FakeTrainModel.cpp (softmax regression, SGD with
momentum) and a numpy oracle of the runtime's sampler and step loop."""
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
UNITTEST_DIR = pathlib.Path(
    os.environ.get("DDPC_UNITTEST_DIR", str(ROOT / "build" / "unittests")))
MPIRUN = shutil.which("mpirun")
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           # Keep OpenMPI off the network interfaces of the test machine.
           "OMPI_MCA_btl": "self,vader,tcp", "OMPI_MCA_btl_tcp_if_include": "lo",
           "OMPI_MCA_oob_tcp_if_include": "lo"}

# FakeTrainModel.cpp hyper-parameters.
MOMENTUM, WEIGHT_DECAY, BUFFER_MOMENTUM, DEFAULT_LR = 0.9, 1e-4, 0.1, 0.1
F, C = 4, 3


def fixture_path(name: str = "ddpc-train-fixture") -> str:
    path = UNITTEST_DIR / name
    if not path.exists():
        pytest.fail(f"{path} not found: build the ddpc-train-fixture* targets "
                    "(or set DDPC_UNITTEST_DIR)")
    return str(path)


def run_train(args, ranks=1, program="ddpc-train-fixture", env=None, timeout=60,
              plain=False):
    """Runs a fixture; ranks > 1 (or plain=False) goes through mpirun."""
    full_env = dict(os.environ, **MPI_ENV, **(env or {}))
    cmd = [fixture_path(program), *map(str, args)]
    if not plain:
        if MPIRUN is None:
            pytest.skip("mpirun not found")
        cmd = [MPIRUN, "--oversubscribe", "-np", str(ranks), *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=full_env)


def initial_params():
    i = np.arange(F * C)
    w = (0.05 * ((i * 7) % 11 - 5)).astype(np.float32).reshape(F, C)
    b = (0.01 * np.arange(C)).astype(np.float32)
    return w, b


def make_dataset(path: pathlib.Path, n=64, seed=0, label_dtype=np.int64):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, F)).astype(np.float32)
    y = np.argmax(x @ rng.normal(size=(F, C)) + 0.3 * rng.normal(size=(n, C)), 1)
    xp, yp = path / f"x{seed}.npy", path / f"y{seed}.npy"
    np.save(xp, x)
    np.save(yp, y.astype(label_dtype))
    return x, y.astype(np.int64), xp, yp


def load_onnx_weights(path):
    import onnx
    from onnx import numpy_helper
    model = onnx.load(str(path))
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


class MT19937_64:
    """std::mt19937_64 (the C++ standard fixes its output sequence)."""
    N, M = 312, 156
    MASK = (1 << 64) - 1

    def __init__(self, seed: int):
        self.mt = [seed & self.MASK]
        for i in range(1, self.N):
            prev = self.mt[-1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & self.MASK)
        self.index = self.N

    def __call__(self) -> int:
        if self.index >= self.N:
            upper, lower = 0xFFFFFFFF80000000, 0x7FFFFFFF
            mt = self.mt
            for i in range(self.N):
                x = (mt[i] & upper) | (mt[(i + 1) % self.N] & lower)
                xa = x >> 1
                if x & 1:
                    xa ^= 0xB5026F5AA96619E9
                mt[i] = mt[(i + self.M) % self.N] ^ xa
            self.index = 0
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & self.MASK


def permutation(n: int, seed: int):
    """Sampler.h: Fisher-Yates over mt19937_64 with rejection sampling."""
    perm = list(range(n))
    engine = MT19937_64(seed)
    for i in range(n - 1, 0, -1):
        bound = i + 1
        threshold = (2**64 - bound) % bound
        while True:
            x = engine()
            if x >= threshold:
                break
        j = x % bound
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def oracle_train(x, y, global_batch, accum, epochs, seed=0, shuffle=True,
                 lr=DEFAULT_LR, max_steps=None):
    """The runtime's step loop for FakeTrainModel on one rank, in float64.
    Returns (W, b, running_mean, per-step losses)."""
    w, b = (p.astype(np.float64) for p in initial_params())
    mom_w, mom_b = np.zeros_like(w), np.zeros_like(b)
    rmean = np.zeros(F)
    n = len(x)
    steps = n // (global_batch * accum)
    losses = []
    for epoch in range(epochs):
        order = permutation(n, seed + epoch) if shuffle else list(range(n))
        for s in range(steps):
            if max_steps is not None and len(losses) >= max_steps:
                return w, b, rmean, losses
            gw, gb, loss = np.zeros_like(w), np.zeros_like(b), 0.0
            for k in range(accum):
                idx = order[(s * accum + k) * global_batch:][:global_batch]
                xb, yb = x[idx].astype(np.float64), y[idx]
                logits = xb @ w + b
                logits -= logits.max(1, keepdims=True)
                p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
                loss += -np.log(p[np.arange(len(yb)), yb]).mean()
                d = p.copy()
                d[np.arange(len(yb)), yb] -= 1
                d /= len(yb)
                gw += xb.T @ d
                gb += d.sum(0)
                rmean = (1 - BUFFER_MOMENTUM) * rmean + BUFFER_MOMENTUM * xb.mean(0)
            gw, gb = gw / accum + WEIGHT_DECAY * w, gb / accum + WEIGHT_DECAY * b
            mom_w, mom_b = MOMENTUM * mom_w + gw, MOMENTUM * mom_b + gb
            w, b = w - lr * mom_w, b - lr * mom_b
            losses.append(loss / accum)
    return w, b, rmean, losses

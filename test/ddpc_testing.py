"""Helpers shared by the pytest suites test/e2e, test/runtime and test/python.

Test modules import from here (``from ddpc_testing import ...``; conftest.py
beside this file puts this folder on sys.path), never from each other:

- where the repository, the build and its unit-test programs are;
- the mpirun command and the environment every test program runs with;
- compiling and running a model with the ``ddpc`` CLI, and reading the
  weights a training program saved;
- the MLP of test_training.py with its data, optimizer settings and numpy
  oracle of forward, backward and torch.optim.SGD / AdamW;
- the finite-difference check of a ``vjp=True`` program;
- a numpy oracle of the training runtime's sampler (Sampler.h).

Only numpy is needed to import this module (the training-runtime suite runs
without onnx); onnx and the ddpc package are imported by the helpers that
use them.
"""

import os
import pathlib
import shutil
import subprocess

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = pathlib.Path(os.environ.get("DDPC_BUILD_DIR", str(ROOT / "build")))
# The fixture programs of unittests/Runtime (test/runtime).
UNITTEST_DIR = pathlib.Path(
    os.environ.get("DDPC_UNITTEST_DIR", str(BUILD / "unittests"))
)
EXAMPLES = ROOT / "examples" / "models"

# ------------------------------------------------------------------------ MPI

MPIRUN = shutil.which("mpirun")
# OpenMPI may run as root (CI does) and stays off the network interfaces of
# the test machine.
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_btl": "self,vader,tcp",
    "OMPI_MCA_btl_tcp_if_include": "lo",
    "OMPI_MCA_oob_tcp_if_include": "lo",
}
# The environment compiled programs run with, under mpirun or alone.


def run_env(extra=None):
    """The environment for a program run: the current one (read at the call,
    so monkeypatch.setenv reaches the program), MPI_ENV and `extra`."""
    return dict(os.environ, **MPI_ENV, **(extra or {}))


def cuda_root():
    """The CUDA toolkit folder with an executable bin/ptxas: $CUDA_HOME,
    $CUDA_PATH or /usr/local/cuda, as the driver looks; None when none."""
    for root in (
        os.environ.get("CUDA_HOME"),
        os.environ.get("CUDA_PATH"),
        "/usr/local/cuda",
    ):
        if root and os.access(os.path.join(root, "bin", "ptxas"), os.X_OK):
            return root
    return None


def weights(path):
    """{initializer name: numpy array} of the ONNX model at `path`."""
    import onnx
    from onnx import numpy_helper

    return {
        t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer
    }


# ------------------------------------------------------------------ inference


def run_ddpc(ddpc, model_path, feeds, tmp_path, *compile_args):
    """Compiles `model_path` to tmp_path/prog and runs it on `feeds` (name ->
    array); the outputs land in tmp_path/out/<name>.npy."""
    prog = tmp_path / "prog"
    proc = subprocess.run(
        [ddpc, "compile", str(model_path), "-o", str(prog), *compile_args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    cmd = [str(prog), "--output-dir", str(tmp_path / "out")]
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
        cmd += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return run


# ------------------------------------------------------------------- training

F, C, H = 12, 5, 16  # the MLP's features, classes, hidden units


def mlp_model(path, seed=0, dropout=0.0):
    """Writes MatMul -> Add -> Relu -> (Dropout) -> Gemm to `path`; returns
    its initializers."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits = {
        "W1": (rng.standard_normal((F, H)) * 0.3).astype(np.float32),
        "b1": (rng.standard_normal(H) * 0.1).astype(np.float32),
        "W2": (rng.standard_normal((H, C)) * 0.3).astype(np.float32),
        "b2": (rng.standard_normal(C) * 0.1).astype(np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r0"]),
    ]
    if dropout:
        nodes.append(helper.make_node("Dropout", ["r0", "ratio"], ["r"]))
        extra = [numpy_helper.from_array(np.array(dropout, np.float32), "ratio")]
    else:
        nodes.append(helper.make_node("Identity", ["r0"], ["r"]))
        extra = []
    nodes.append(helper.make_node("Gemm", ["r", "W2", "b2"], ["logits"]))
    save_classifier(path, "mlp", nodes, inits, F, extra)
    return inits


def save_classifier(path, name, nodes, inits, features, extra=()):
    """Writes the opset-17 graph `nodes` from x (float32 [N, features]) to
    logits (float32 [N, C]) with the initializers `inits` (name -> array)
    and the TensorProtos `extra` to `path`."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", C])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()] + list(extra),
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def data(n, seed=1, shape=(F,)):
    """n random float32 samples of `shape` and int64 labels in [0, C)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, *shape)).astype(np.float32)
    y = rng.integers(0, C, n).astype(np.int64)
    return x, y


def compile_train(ddpc, model, out, batch, *args):
    """`ddpc compile --train --batch-size batch`; returns `out`."""
    proc = subprocess.run(
        [
            ddpc,
            "compile",
            str(model),
            "--train",
            "--batch-size",
            str(batch),
            "-o",
            str(out),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return out


def run_train(prog, tmp, ranks=1, *args, check=True, env=None):
    """Runs the training program `prog` in `tmp` on tmp/x.npy and tmp/y.npy,
    through mpirun when ranks > 1."""
    x, y = tmp / "x.npy", tmp / "y.npy"
    cmd = [str(prog), "--data", str(x), "--labels", str(y), "--quiet", *args]
    if ranks > 1:
        cmd = [MPIRUN, "--oversubscribe", "-np", str(ranks), *cmd]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=300,
        env=run_env(env),
        cwd=tmp,
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def assert_close_weights(a, b, rtol=1e-5):
    """Same names and shapes, and each array within `rtol` of b's largest
    magnitude."""
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].shape == b[k].shape, f"{k}: shape {a[k].shape} != {b[k].shape}"
        if a[k].size == 0:
            continue
        scale = max(np.max(np.abs(b[k])), 1e-6)
        diff = np.max(np.abs(a[k] - b[k])) / scale
        assert diff <= rtol, f"{k}: max relative difference {diff:.3g}"


def numpy_train(p, x, y, batch, steps, opt):
    """The MLP of mlp_model with initializers `p` trained in float64 for
    `steps` batches in file order, `opt` an OPTIMIZERS spec."""
    p = {k: v.astype(np.float64) for k, v in p.items()}
    state = {k: [np.zeros_like(v), np.zeros_like(v)] for k, v in p.items()}
    for t in range(1, steps + 1):
        xb = x[(t - 1) * batch : t * batch].astype(np.float64)
        yb = y[(t - 1) * batch : t * batch]
        h = xb @ p["W1"] + p["b1"]
        r = np.maximum(h, 0)
        z = r @ p["W2"] + p["b2"]
        e = np.exp(z - z.max(1, keepdims=True))
        sm = e / e.sum(1, keepdims=True)
        dz = (sm - np.eye(C)[yb]) / batch
        g = {"W2": r.T @ dz, "b2": dz.sum(0)}
        dh = (dz @ p["W2"].T) * (h > 0)
        g["W1"], g["b1"] = xb.T @ dh, dh.sum(0)
        for k in p:
            if opt["name"] == "sgd":
                d = g[k] + opt["wd"] * p[k]
                buf = d if t == 1 else opt["momentum"] * state[k][0] + d
                state[k][0] = buf
                d = d + opt["momentum"] * buf if opt["nesterov"] else buf
                p[k] = p[k] - opt["lr"] * d
            else:
                b1, b2 = 0.9, 0.999
                p[k] = p[k] * (1 - opt["lr"] * opt["wd"])
                m = state[k][0] = b1 * state[k][0] + (1 - b1) * g[k]
                v = state[k][1] = b2 * state[k][1] + (1 - b2) * g[k] ** 2
                denom = np.sqrt(v) / np.sqrt(1 - b2**t) + 1e-8
                p[k] = p[k] - opt["lr"] / (1 - b1**t) * m / denom
    return p


# name: (ddpc compile flags, the same settings for numpy_train).
OPTIMIZERS = {
    "sgd-momentum": (
        [
            "--optimizer",
            "sgd",
            "--lr",
            "0.1",
            "--momentum",
            "0.9",
            "--weight-decay",
            "0.01",
        ],
        dict(name="sgd", lr=0.1, momentum=0.9, wd=0.01, nesterov=False),
    ),
    "sgd-nesterov": (
        ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.8", "--nesterov"],
        dict(name="sgd", lr=0.05, momentum=0.8, wd=0.0, nesterov=True),
    ),
    "adamw": (
        ["--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0.05"],
        dict(name="adamw", lr=0.01, wd=0.05),
    ),
}


# ------------------------------------------------------------------ gradients


def aligned(x, align=64):
    """A copy of `x` at a 64-byte aligned address, which Program.run passes
    to the compiled code without copying it."""
    raw = np.empty(x.nbytes + align, np.uint8)
    offset = (-raw.ctypes.data) % align
    out = raw[offset : offset + x.nbytes].view(x.dtype).reshape(x.shape)
    out[...] = x
    return out


def check_gradients(
    m, inputs, rng, h=1e-6, rtol=1e-5, atol=1e-7, positive=(), target="cpu", domain=None
):
    """Compiles the model `m` with vjp=True and checks d_<input> of every
    (name, shape) in `inputs` (random, |x| + 0.5 for names in `positive`,
    `domain(x)` for all when given) against central differences of
    <outputs, random cotangents>."""
    import ddpc

    prog = ddpc.compile(m, vjp=True, onnx_checker=False, target=target)
    feeds = {}
    for name, shape in inputs:
        x = rng.standard_normal(shape)
        if name in positive:
            x = np.abs(x) + 0.5
        if domain is not None:
            x = domain(x)
        feeds[name] = x
    outs = [o.name for o in m.graph.output]
    specs = {s.name: s for s in prog.inputs}
    # In the program's dtype (float64 for most cases, float32 for ops
    # that take nothing else).
    feeds = {k: aligned(v.astype(specs[k].dtype)) for k, v in feeds.items()}
    cts = {
        f"d_{o}": aligned(
            rng.standard_normal(tuple(specs[f"d_{o}"].shape)).astype(
                specs[f"d_{o}"].dtype
            )
        )
        for o in outs
    }

    def objective(f):
        r = prog.run({**f, **cts})
        return sum(float(np.sum(r[o] * cts[f"d_{o}"])) for o in outs)

    # The program reads its inputs in place (aligned arrays are not
    # copied) and must never write them: the Concat VJP once zeroed part of
    # its cotangent input, which made every later finite difference wrong.
    before = {k: v.copy() for k, v in {**feeds, **cts}.items()}
    res = prog.run({**feeds, **cts})
    for k, v in {**feeds, **cts}.items():
        np.testing.assert_array_equal(
            v, before[k], err_msg=f"the program wrote its input '{k}'"
        )
    for name, _ in inputs:
        analytic = res[f"d_{name}"]
        numeric = np.zeros_like(feeds[name])
        flat = feeds[name].reshape(-1)
        for i in range(flat.size):
            orig = flat[i]
            flat[i] = orig + h
            fp = objective(feeds)
            flat[i] = orig - h
            fm = objective(feeds)
            flat[i] = orig
            numeric.reshape(-1)[i] = (fp - fm) / (2 * h)
        np.testing.assert_allclose(
            analytic,
            numeric,
            rtol=rtol,
            atol=atol,
            err_msg=f"gradient of input '{name}'",
        )


# ----------------------------------------------------------- training runtime


class MT19937_64:
    """std::mt19937_64 (the C++ standard fixes its output sequence)."""

    N, M = 312, 156
    MASK = (1 << 64) - 1

    def __init__(self, seed: int):
        self.mt = [seed & self.MASK]
        for i in range(1, self.N):
            prev = self.mt[-1]
            self.mt.append(
                (6364136223846793005 * (prev ^ (prev >> 62)) + i) & self.MASK
            )
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


def conv_vjp_numpy(x, w, b, dy, strides, pads, dilations, group=1):
    """Forward and VJP of a 2-d Conv in float64, group by group and one
    window position (kh, kw) at a time: y += w[:, :, kh, kw] . x_window, and
    its transposes. Independent of ddpc's im2col/col2im formulation."""
    if group > 1:
        cg, kg = x.shape[1] // group, w.shape[0] // group
        parts = [
            conv_vjp_numpy(
                x[:, g * cg : (g + 1) * cg],
                w[g * kg : (g + 1) * kg],
                b[g * kg : (g + 1) * kg],
                dy[:, g * kg : (g + 1) * kg],
                strides,
                pads,
                dilations,
            )
            for g in range(group)
        ]
        return tuple(
            np.concatenate([p[i] for p in parts], axis=1 if i < 2 else 0)
            for i in range(4)
        )
    x, w, dy = (a.astype(np.float64) for a in (x, w, dy))
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilations, pads
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    _, _, kh_n, kw_n = w.shape
    oh, ow = dy.shape[2:]
    y = np.zeros(dy.shape) + b.reshape(1, -1, 1, 1)
    dxp, dwt = np.zeros_like(xp), np.zeros_like(w)
    for kh in range(kh_n):
        for kw in range(kw_n):
            win = (
                slice(None),
                slice(None),
                slice(kh * dh, kh * dh + sh * (oh - 1) + 1, sh),
                slice(kw * dw, kw * dw + sw * (ow - 1) + 1, sw),
            )
            y += np.einsum("nchw,oc->nohw", xp[win], w[:, :, kh, kw])
            dwt[:, :, kh, kw] = np.einsum("nohw,nchw->oc", dy, xp[win])
            dxp[win] += np.einsum("nohw,oc->nchw", dy, w[:, :, kh, kw])
    dx = dxp[:, :, pt : pt + x.shape[2], pl : pl + x.shape[3]]
    return y, dx, dwt, dy.sum(axis=(0, 2, 3))


def check_conv_vjp(prog, shapes, attrs):
    """Runs the compiled Conv VJP `prog` (inputs x, w, b and d_y of the
    float32 shapes `shapes`) on random data and checks y, d_x, d_w and d_b
    against conv_vjp_numpy in float64 (rtol = atol = 1e-4)."""
    group = attrs.get("group", 1)
    rng = np.random.default_rng(11)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    dy_shape = tuple(next(s.shape for s in prog.inputs if s.name == "d_y"))
    feeds["d_y"] = rng.standard_normal(dy_shape).astype(np.float32)
    got = prog.run(feeds)
    want = conv_vjp_numpy(
        feeds["x"],
        feeds["w"],
        feeds["b"],
        feeds["d_y"],
        attrs.get("strides", [1, 1]),
        attrs.get("pads", [0] * 4),
        attrs.get("dilations", [1, 1]),
        group,
    )
    for name, ref in zip(["y", "d_x", "d_w", "d_b"], want):
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-4, err_msg=name)

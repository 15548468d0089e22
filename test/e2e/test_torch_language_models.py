"""Transformers exported by PyTorch (torch.onnx.export, TorchScript
exporter, opset 17), eval and training mode, trained from int64 token
files (and images).

- `bert`: token and position embeddings, an int64 attention_mask input
  (padding), post-LayerNorm attention layers with GELU MLPs, a classifier
  on the first token; trained with --loss cross-entropy on class labels.
- `gpt`: token and position embeddings, a causal mask (a bool buffer),
  pre-LayerNorm layers, the head tied to the token embedding, and the
  next-token cross-entropy computed by the model (its first output), the
  labels an input: --loss output --label-input labels.
- `vit`: a vision transformer (strided-Conv patches, a class token and
  position embeddings as parameters, pre-LN layers) on float images.

`bert` and `gpt` have two data inputs. The programs are compiled with -O 0: LLVM's
optimizations take most of the compile time of these small models and
change no loss beyond the tolerance. The exports and PyTorch's losses on them come
from test/torch_exports/make_exports.py (this test does not need torch).
Oracles: PyTorch's per-step losses (SGD with momentum and AdamW at 1 rank,
SGD under DistributedDataParallel at 2 ranks with DistributedSampler
without shuffling) and its eval outputs after the SGD run; onnxruntime for
inference.
"""

import json
import subprocess

import numpy as np
import onnxruntime as ort
import pytest

from ddpc_testing import run_env, MPIRUN, ROOT

EXPORTS = ROOT / "test" / "torch_exports"
MODELS = ["bert", "gpt", "vit"]


def reference(name):
    return json.loads((EXPORTS / f"{name}.json").read_text())


def arrays(name, prefix):
    """The npz arrays `prefix`_<input> by input name, in input order."""
    data = np.load(EXPORTS / f"{name}.npz")
    return {k: data[f"{prefix}_{k}"] for k in reference(name)["inputs"]}


def train_losses(
    ddpc, tmp_path, name, form, opt, *run_args, ranks=1, label_flag=True, notes=None
):
    """Trains the export with ddpc at the reference's global batch over
    `ranks` ranks from int64 token files (one --data NAME=FILE per data
    input); returns (ddpc's losses, the reference). The trained model is
    tmp_path/trained.onnx."""
    ref = reference(name)
    inputs = arrays(name, "in")
    flags = ["--batch-size", str(ref["batch"] // ranks)]
    if ref["label_input"]:
        flags += ["--loss", "output"]
        if label_flag:
            flags += ["--label-input", ref["label_input"]]
        labels = inputs.pop(ref["label_input"])
    else:
        labels = np.load(EXPORTS / f"{name}.npz")["y"]
    if opt == "sgd":
        o = ref["sgd_options"]
        flags += ["--lr", str(o["lr"]), "--momentum", str(o["momentum"])]
    else:
        o = ref["adamw_options"]
        flags += ["--optimizer", "adamw", "--lr", str(o["lr"])]
        flags += ["--betas", f"{o['betas'][0]},{o['betas'][1]}"]
        flags += ["--eps", str(o["eps"]), "--weight-decay", str(o["weight_decay"])]
    prog = tmp_path / "prog"
    proc = subprocess.run(
        [ddpc, "compile", str(EXPORTS / f"{name}.{form}.onnx"), "--train"]
        + flags
        + ["-O", "0", "-o", str(prog)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    if notes is not None:
        notes.append(proc.stderr)
    data_args = []
    for k, v in inputs.items():
        assert v.dtype in (np.int64, np.float32)
        np.save(tmp_path / f"{k}.npy", v)
        data_args += ["--data", f"{k}={k}.npy"]
    np.save(tmp_path / "labels.npy", labels)
    mpi = [MPIRUN, "--oversubscribe", "-np", str(ranks)] if ranks > 1 else []
    proc = subprocess.run(
        mpi
        + [str(prog), *data_args, "--labels", "labels.npy", "--epochs", "1"]
        + ["--no-shuffle", "--quiet", "--log-json", "log.json"]
        + ["--save", "trained.onnx", *run_args],
        capture_output=True,
        text=True,
        timeout=600,
        env=run_env(),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = (tmp_path / "log.json").read_text().splitlines()
    return [json.loads(line)["loss"] for line in log], ref


@pytest.mark.parametrize("form,opt", [("eval", "sgd"), ("train", "adamw")])
@pytest.mark.parametrize("name", MODELS)
def test_trains_like_pytorch(ddpc, tmp_path, name, form, opt):
    """Losses of 10 steps at 1 rank; after the SGD run, the saved model
    under onnxruntime gives PyTorch's eval-mode outputs (logits). (SGD of
    the training-mode export runs at 2 ranks below.)"""
    ours, ref = train_losses(ddpc, tmp_path, name, form, opt)
    assert len(ours) == len(ref["losses"][opt])
    np.testing.assert_allclose(ours, ref["losses"][opt], rtol=1e-4)
    if opt == "sgd":
        sess = ort.InferenceSession(str(tmp_path / "trained.onnx"))
        got = sess.run(["logits"], arrays(name, "eval"))[0]
        want = np.array(ref["eval_y"], np.float32)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())


def test_graph_input_named_labels_is_the_default_label_input(ddpc, tmp_path):
    """--loss output without --label-input: the graph input 'labels' (the
    Hugging Face convention) holds the labels. It used to be taken for a
    data input while the program read a --labels file it did not use."""
    notes = []
    ours, ref = train_losses(
        ddpc, tmp_path, "gpt", "eval", "sgd", label_flag=False, notes=notes
    )
    assert "the graph input 'labels' holds the labels" in notes[0]
    np.testing.assert_allclose(ours, ref["losses"]["sgd"], rtol=1e-4)


@pytest.mark.skipif(MPIRUN is None, reason="needs mpirun")
@pytest.mark.parametrize("form", ["eval", "train"])
@pytest.mark.parametrize("name", MODELS)
def test_two_ranks_reproduce_distributed_data_parallel(ddpc, tmp_path, name, form):
    """2 ranks x batch 4 against DistributedDataParallel (gloo) with
    DistributedSampler(shuffle=False), from int64 token files."""
    ours, ref = train_losses(
        ddpc, tmp_path, name, form, "sgd", "--sample-assignment", "strided", ranks=2
    )
    np.testing.assert_allclose(ours, ref["ddp2"]["losses"], rtol=1e-4)


@pytest.mark.parametrize("form", ["eval", "train"])
@pytest.mark.parametrize("name", MODELS)
def test_inference_matches_onnxruntime(ddpc, tmp_path, name, form):
    model = EXPORTS / f"{name}.{form}.onnx"
    feeds = arrays(name, "eval")
    n = len(next(iter(feeds.values())))
    prog = tmp_path / "infer"
    proc = subprocess.run(
        [ddpc, "compile", str(model), "--batch-size", str(n), "-O", "0"]
        + ["-o", str(prog)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    args = []
    for k, v in feeds.items():
        np.save(tmp_path / f"{k}.npy", v)
        args += ["--input", f"{k}={tmp_path / f'{k}.npy'}"]
    out = tmp_path / "out"
    proc = subprocess.run(
        [str(prog), *args, "--output-dir", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    sess = ort.InferenceSession(str(model))
    for o, want in zip(sess.get_outputs(), sess.run(None, feeds)):
        got = np.load(out / f"{o.name}.npy")
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=o.name)

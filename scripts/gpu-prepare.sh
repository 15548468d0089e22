#!/usr/bin/env bash
# scripts/gpu-prepare.sh [OUTDIR]          (default OUTDIR: build/gpu-bundle)
#
# RUNS HERE, on the build machine (ddpc built or buildable, MPI, python3
# with onnx + numpy). Never on the GPU machine.
#
# Makes the bundle that scripts/gpu-check.sh checks ON THE GPU MACHINE:
#   - builds ddpc if build/bin/ddpc is missing (`make build`);
#   - two models: examples/fashion_mnist/fmnist_cnn.onnx and the bench's
#     ResNet-18 (bench/models/make_models.py) with a 3x32x32 input;
#   - compiles each with `ddpc compile --train --optimizer adamw --lr 0.001
#     --batch-size 32` for --target cuda --cuda-arch sm_80,sm_90 and for
#     --target cpu (cached under build/gpu-prepare-work; --force rebuilds);
#   - runs the CPU program here for 20 steps (--no-shuffle, 20 x 32
#     samples): the per-step losses and final weights are the reference;
#   - a token-embedding program (its table's gradient is atomic adds on the
#     GPU, its ids are checked on the device): CPU-trained weights, and ids
#     with one out of range that the GPU run must refuse;
#   - writes OUTDIR (CUDA programs, data, references, torch-free graph
#     description, gpu-check.sh, gpu_check.py, torch_ref.py, README.txt)
#     and OUTDIR-cpu (the CPU programs, only for the dry run here);
#   - prints the bundle size and fails if it is over 60 MiB.
# Takes ~5 minutes the first time (compiling the ResNet twice and 20 CPU
# steps of it), seconds when cached.
#
# Dry run of the check here, without a GPU:
#   (cd build/gpu-bundle && DDPC_GPU_CHECK_TARGET=cpu PYTHON=$PWD/../../bench/.venv/bin/python bash gpu-check.sh)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTDIR="${1:-$ROOT/build/gpu-bundle}"
shift || true
PY="${PREPARE_PYTHON:-python3}"

cd "$ROOT"
if [[ ! -x build/bin/ddpc ]]; then
  echo "gpu-prepare: build/bin/ddpc is missing: running make build"
  make build
fi
"$PY" -c 'import onnx, numpy' 2>/dev/null || {
  echo "gpu-prepare: error: $PY cannot import onnx and numpy (scripts/setup installs them)" >&2
  exit 1
}
exec "$PY" "$ROOT/scripts/gpu_prepare.py" "$OUTDIR" --ddpc "$ROOT/build/bin/ddpc" "$@"

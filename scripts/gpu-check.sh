#!/usr/bin/env bash
# gpu-check.sh — RUNS ON THE GPU MACHINE, from the bundle folder that
# scripts/gpu-prepare.sh made on the build machine:
#
#     cd gpu-bundle && bash gpu-check.sh
#
# Finds the CUDA libraries the ddpc CUDA programs link dynamically
# (libcublas.so.13, libcublasLt.so.13, libnccl.so.2, optionally libcudnn.so.9;
# libcuda.so.1 comes with
# the driver) in the system CUDA folders, ldconfig's cache or PyTorch's
# site-packages/nvidia/*/lib, then runs gpu_check.py: each CUDA training
# program for the fixed steps, compared with the CPU reference (losses and
# final weights), timed, and compared with PyTorch on the same GPU.
# Results: $OUT/gpu-check.json when $OUT is set, else ./gpu-check.json.
# Exit status 0 only if every program ran and every check passed.
#
# Environment:
#   PYTHON=python3                  interpreter with numpy (+ torch) [python3]
#   DDPC_GPU_CHECK_TARGET=cpu       DRY RUN on a machine without a GPU: the
#                                   CPU programs from ../<bundle>-cpu (or
#                                   DDPC_CPU_PROGRAMS) and PyTorch on the CPU;
#                                   no GPU numbers, clearly labelled so
#   DDPC_GPU_CHECK_BUDGET_S=420     stop starting new work after this long
#   DDPC_GPU_CHECK_WORK=DIR         scratch folder [a new mktemp -d folder]
set -euo pipefail

BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TARGET="${DDPC_GPU_CHECK_TARGET:-cuda}"
PYTHON="${PYTHON:-python3}"
export PYTHON

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "gpu-check: FAIL: python interpreter '$PYTHON' not found (set PYTHON)" >&2
  exit 1
fi

export DDPC_ORIG_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
LIBS_FOUND=""
if [[ "$TARGET" == "cuda" ]]; then
  # Candidate folders, in order: what LD_LIBRARY_PATH already names, the
  # CUDA toolkit, the driver's folders, then PyTorch's pip-installed NVIDIA
  # libraries (site-packages/nvidia/<pkg>/lib, e.g. nvidia/cu13/lib and
  # nvidia/nccl/lib) and torch/lib.
  declare -a DIRS=()
  IFS=: read -r -a LDP <<<"${LD_LIBRARY_PATH:-}"
  for d in "${LDP[@]}"; do [[ -n "$d" ]] && DIRS+=("$d"); done
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/local/cuda-13*/lib64 /usr/local/cuda-13*/targets/x86_64-linux/lib \
           /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
    [[ -d "$d" ]] && DIRS+=("$d")
  done
  # shellcheck disable=SC2016
  PYDIRS="$("$PYTHON" - <<'EOF' 2>/dev/null || true
import glob, os, site, sys
roots = []
try:
    roots += site.getsitepackages()
except Exception:
    pass
try:
    roots.append(site.getusersitepackages())
except Exception:
    pass
roots += [p for p in sys.path if p.endswith("-packages")]
seen = set()
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib"))) + [os.path.join(r, "torch", "lib")]:
        if os.path.isdir(d) and d not in seen:
            seen.add(d)
            print(d)
EOF
)"
  while IFS= read -r d; do [[ -n "$d" ]] && DIRS+=("$d"); done <<<"$PYDIRS"

  find_lib() {  # prints the folder holding $1, first match wins
    local name="$1" d p
    for d in "${DIRS[@]}"; do
      if [[ -e "$d/$name" ]]; then echo "$d"; return 0; fi
    done
    p="$(ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n { print $NF; exit }')"
    if [[ -n "$p" ]]; then dirname "$p"; return 0; fi
    return 1
  }

  declare -a USE=()
  MISSING=""
  CUBLAS_DIR=""
  for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcuda.so.1; do
    dir=""
    # libcublasLt must match libcublas: take it from the same folder if there.
    if [[ "$lib" == libcublasLt.so.13 && -n "$CUBLAS_DIR" && -e "$CUBLAS_DIR/$lib" ]]; then
      dir="$CUBLAS_DIR"
    else
      dir="$(find_lib "$lib" || true)"
    fi
    if [[ -z "$dir" ]]; then
      MISSING+=" $lib"
      echo "gpu-check: $lib: NOT FOUND"
      continue
    fi
    [[ "$lib" == libcublas.so.13 ]] && CUBLAS_DIR="$dir"
    echo "gpu-check: $lib: $dir"
    LIBS_FOUND+="$lib=$dir;"
    [[ " ${USE[*]-} " == *" $dir "* ]] || USE+=("$dir")
  done
  # cuDNN is optional: programs dlopen it for convolutions and otherwise run
  # them as im2col + cuBLAS GEMMs (PyTorch's wheels ship nvidia/cudnn/lib).
  if dir="$(find_lib libcudnn.so.9)"; then
    echo "gpu-check: libcudnn.so.9: $dir"
    LIBS_FOUND+="libcudnn.so.9=$dir;"
    [[ " ${USE[*]-} " == *" $dir "* ]] || USE+=("$dir")
  else
    echo "gpu-check: libcudnn.so.9: not found (optional; convolutions run as im2col + cuBLAS GEMMs)"
  fi
  if [[ -n "$MISSING" ]]; then
    echo "gpu-check: warning: not found:$MISSING (libcuda.so.1 is the NVIDIA driver's; cuBLAS 13 / NCCL 2 come" \
         "with the CUDA 13 toolkit or PyTorch's nvidia-* wheels). The programs will fail to start; gpu_check.py" \
         "reports which." >&2
  fi
  DDPC_PROGRAM_LD_LIBRARY_PATH="$(IFS=:; echo "${USE[*]-}")"
  [[ -n "${LD_LIBRARY_PATH:-}" ]] && DDPC_PROGRAM_LD_LIBRARY_PATH+="${DDPC_PROGRAM_LD_LIBRARY_PATH:+:}$LD_LIBRARY_PATH"
  export DDPC_PROGRAM_LD_LIBRARY_PATH
  for prog in "$BUNDLE"/*/train_cuda; do
    [[ -e "$prog" ]] || continue
    if command -v ldd >/dev/null 2>&1; then
      nf="$(LD_LIBRARY_PATH="$DDPC_PROGRAM_LD_LIBRARY_PATH" ldd "$prog" 2>&1 | grep 'not found' | tr -s ' \t\n' ' ' || true)"
      if [[ -n "$nf" ]]; then
        echo "gpu-check: warning: $(basename "$(dirname "$prog")")/train_cuda: unresolved:$nf" >&2
      fi
    fi
  done
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L 2>/dev/null | sed 's/^/gpu-check: /' || true
  fi
else
  echo "gpu-check: *** DRY RUN (DDPC_GPU_CHECK_TARGET=$TARGET): CPU programs, PyTorch on the CPU; NO GPU NUMBERS ***"
fi
export DDPC_GPU_LIBS="$LIBS_FOUND"

exec "$PYTHON" "$BUNDLE/gpu_check.py" --bundle "$BUNDLE" --target "$TARGET" "$@"

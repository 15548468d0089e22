//===- Passes.h - ddpc's own transformation passes --------------*- C++ -*-===//
//
// Part of ddpc. Passes that are ours (the rest of every pipeline is upstream
// MLIR, see lib/Pipelines), declared in Passes.td: each pass's summary,
// description (what it does, on what IR, and the sources of its
// algorithms) and options are there, and `ddpc-opt --help` prints them.
// registerTransformsPasses() registers all of them with `ddpc-opt`.
//
// Target-independent (tensor level):
//   ddpc-fuse-ops            operator fusion into kernel-sized groups
//   ddpc-read-only-arguments  entry-point tensor arguments are read-only
//   ddpc-clone-shared-fills  one linalg.fill per destination use
//
// Target-independent (memref level, bufferization):
//   ddpc-distinct-result-buffers    one allocation per returned buffer
//   ddpc-bucket-gradient-allreduce  gradient allreduce in buckets that
//                                   start during backward
//
// GPU lowering helpers (memref level, used by the CUDA pipeline only):
//   ddpc-plan-arena             temporaries at compile-time arena offsets
//   ddpc-gemm-to-library-call   contraction generics -> ddpc_gemm_f32 calls
//   ddpc-conv-to-gemm           convolutions and their gradients -> cuDNN
//                               calls, im2col + GEMM as fallback
//   ddpc-gemm-epilogues         GEMM + bias (+ ReLU) kernel -> one cuBLASLt
//                               call, with the two as fallback
//   ddpc-conv-epilogues         convolution + bias (+ ReLU) kernel -> one
//                               fused cuDNN call, with the two as fallback
//   ddpc-scatter-to-atomic      reduction generics with non-injective
//                               outputs -> parallel loops with atomic adds
//   ddpc-split-reductions       short reductions -> more threads + atomics
//   ddpc-parallel-loops-outermost  parallel loops before reduction loops
//   ddpc-serial-loops-to-device    host loops over device memory -> one
//                                  device thread
//   ddpc-memref-copy-to-linalg  memref.copy -> linalg.copy (device copies)
//   ddpc-collapse-parallel-loops  n-d scf.parallel -> 1-d (one thread/elem)
//   ddpc-gpu-host-sync          device/host ordering for host memory accesses
//   ddpc-gpu-merge-modules      all kernels in one gpu.module
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_TRANSFORMS_PASSES_H
#define DDPC_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace ddpc {

/// create<Name>() and create<Name>(const <Name>Options &) for every pass of
/// Passes.td, and the options structs.
#define GEN_PASS_DECL
#include "ddpc/Transforms/Passes.h.inc"

/// Registers all passes of Passes.td with the global pass registry.
void registerTransformsPasses();

} // namespace ddpc

#endif // DDPC_TRANSFORMS_PASSES_H

//===- Passes.h - Passes of the CUDA target ---------------------*- C++ -*-===//
//
// Part of ddpc. Declared in Passes.td next to this header (summary,
// description, options: `ddpc-opt --help` prints them);
// registerCUDATransformsPasses() registers them (include/ddpc/InitAllPasses.h
// registers every area).
//
//   ddpc-device-constants       device copies of constant tensors
//   ddpc-gpu-merge-modules      all kernels in one gpu.module
//   ddpc-gpu-host-sync          device/host ordering for host memory accesses
//   ddpc-gpu-assemble-fatbin    PTX objects -> one fatbin (ptxas, fatbinary)
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_TARGET_CUDA_TRANSFORMS_PASSES_H
#define DDPC_TARGET_CUDA_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

#include <memory>
#include <string>

namespace ddpc {

/// create<Name>() and create<Name>(const <Name>Options &) for every pass of
/// Passes.td, and the options structs.
#define GEN_PASS_DECL
#include "ddpc/Target/CUDA/Transforms/Passes.h.inc"

/// ddpc-gpu-assemble-fatbin that also appends the PTX of every object to
/// `*ptx` (--emit=ptx), when not null.
std::unique_ptr<mlir::Pass> createGPUAssembleFatBinariesPass(
    const GPUAssembleFatBinariesPassOptions &options, std::string *ptx);

/// Registers the passes of Passes.td with the global pass registry.
void registerCUDATransformsPasses();

} // namespace ddpc

#endif // DDPC_TARGET_CUDA_TRANSFORMS_PASSES_H

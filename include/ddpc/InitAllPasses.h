//===- InitAllPasses.h - register every ddpc pass ---------------*- C++ -*-===//
//
// Part of ddpc. One call registers the passes of every area (each folder
// with a Passes.td: Transforms, Training, Parallel, Codegen, Codegen/GPU,
// Target/CUDA/Transforms) and the named pipelines (lib/Pipelines). A new
// area adds its register<Area>Passes() here. Upstream passes are
// registered by registerAllDDPCPasses() (Pipelines.h).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_INITALLPASSES_H
#define DDPC_INITALLPASSES_H

#include "ddpc/Codegen/GPU/Passes.h"
#include "ddpc/Codegen/Passes.h"
#include "ddpc/Parallel/Passes.h"
#include "ddpc/Pipelines/Pipelines.h"
#include "ddpc/Target/CUDA/Transforms/Passes.h"
#include "ddpc/Training/Passes.h"
#include "ddpc/Transforms/Passes.h"

namespace ddpc {

/// Registers ddpc's own passes and pipelines with the global registry; safe
/// to call more than once.
inline void registerDDPCPasses() {
  static bool once = [] {
    registerTransformsPasses();
    registerTrainingPasses();
    registerParallelPasses();
    registerCodegenPasses();
    registerCodegenGPUPasses();
    registerCUDATransformsPasses();
    return true;
  }();
  (void)once;
  registerPipelines();
}

} // namespace ddpc

#endif // DDPC_INITALLPASSES_H

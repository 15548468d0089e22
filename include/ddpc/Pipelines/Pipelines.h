//===- Pipelines.h - ddpc pass pipelines ------------------------*- C++ -*-===//
//
// Part of ddpc. The pass pipelines the driver runs, as library functions so
// that `ddpc-opt --ddpc-lower-to-llvm` reproduces exactly what
// `ddpc compile` does.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_PIPELINES_PIPELINES_H
#define DDPC_PIPELINES_PIPELINES_H

#include "mlir/Support/LLVM.h"

namespace mlir {
class OpPassManager;
class DialectRegistry;
} // namespace mlir

namespace ddpc {

/// Options of the CPU lowering pipeline.
struct CPUPipelineOptions {
  /// Fuse producer/consumer elementwise linalg ops on tensors.
  bool fuseElementwise = true;
};

/// Graph-level cleanups on the imported linalg-on-tensors IR:
/// canonicalization, CSE and elementwise fusion (stage "fused").
void buildGraphOptimizationPipeline(mlir::OpPassManager &pm,
                                    const CPUPipelineOptions &options);

/// Bufferization: tensors to memrefs with identity layouts at function
/// boundaries, results turned into caller-provided out-parameters, and
/// ownership-based deallocation (stage "bufferized").
void buildBufferizationPipeline(mlir::OpPassManager &pm,
                                const CPUPipelineOptions &options);

/// memref/linalg to the LLVM dialect with the bare-pointer calling
/// convention for statically shaped memrefs (stage "lowered").
void buildLowerToLLVMPipeline(mlir::OpPassManager &pm,
                              const CPUPipelineOptions &options);

/// All three, in order: what `ddpc compile --target cpu` runs.
void buildCPUPipeline(mlir::OpPassManager &pm,
                      const CPUPipelineOptions &options);

/// Registers the pipelines above as `ddpc-graph-opt`, `ddpc-bufferize`,
/// `ddpc-lower-to-llvm` and `ddpc-cpu-pipeline`.
void registerPipelines();

/// Registers every dialect and upstream pass the pipelines use.
void registerAllDDPCDialects(mlir::DialectRegistry &registry);
void registerAllDDPCPasses();

} // namespace ddpc

#endif // DDPC_PIPELINES_PIPELINES_H

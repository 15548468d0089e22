//===- Pipelines.cpp - ddpc pass pipelines --------------------------------===//
//
// Part of ddpc. The pipelines are spelled with upstream pass names so that
// every step can be reproduced with `ddpc-opt` (or `mlir-opt`) by hand.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Pipelines/Pipelines.h"

#include "ddpc/Import/ONNX/Importer.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/ErrorHandling.h"

using namespace mlir;

namespace ddpc {

static void addPipeline(OpPassManager &pm, StringRef text) {
  if (failed(parsePassPipeline(text, pm)))
    llvm::report_fatal_error("ddpc: malformed built-in pass pipeline");
}

void buildGraphOptimizationPipeline(OpPassManager &pm,
                                    const CPUPipelineOptions &options) {
  addPipeline(pm, "func.func(canonicalize,cse)");
  if (options.fuseElementwise)
    addPipeline(pm, "func.func(linalg-fuse-elementwise-ops,canonicalize,cse)");
}

void buildBufferizationPipeline(OpPassManager &pm, const CPUPipelineOptions &) {
  addPipeline(pm, "eliminate-empty-tensors,empty-tensor-to-alloc-tensor,"
                  "one-shot-bufferize{bufferize-function-boundaries "
                  "function-boundary-type-conversion=identity-layout-map},"
                  "func.func(canonicalize),"
                  "buffer-results-to-out-params{hoist-static-allocs "
                  "modify-public-functions},"
                  "buffer-deallocation-pipeline,canonicalize");
}

void buildLowerToLLVMPipeline(OpPassManager &pm, const CPUPipelineOptions &) {
  addPipeline(pm, "func.func(convert-linalg-to-loops),"
                  "arith-expand{include-bf16},"
                  "expand-strided-metadata,lower-affine,convert-scf-to-cf,"
                  "convert-math-to-llvm,convert-math-to-libm,"
                  "convert-arith-to-llvm,convert-index-to-llvm,"
                  "finalize-memref-to-llvm,"
                  "convert-func-to-llvm{use-bare-ptr-memref-call-conv},"
                  "convert-cf-to-llvm,convert-ub-to-llvm,"
                  "reconcile-unrealized-casts");
}

void buildCPUPipeline(OpPassManager &pm, const CPUPipelineOptions &options) {
  buildGraphOptimizationPipeline(pm, options);
  buildBufferizationPipeline(pm, options);
  buildLowerToLLVMPipeline(pm, options);
}

void registerPipelines() {
  static bool once = [] {
    PassPipelineRegistration<>(
        "ddpc-graph-opt", "ddpc graph cleanups and elementwise fusion",
        [](OpPassManager &pm) { buildGraphOptimizationPipeline(pm, {}); });
    PassPipelineRegistration<>(
        "ddpc-bufferize", "ddpc bufferization with out-params and deallocation",
        [](OpPassManager &pm) { buildBufferizationPipeline(pm, {}); });
    PassPipelineRegistration<>(
        "ddpc-lower-to-llvm", "ddpc lowering of bufferized IR to LLVM",
        [](OpPassManager &pm) { buildLowerToLLVMPipeline(pm, {}); });
    PassPipelineRegistration<>(
        "ddpc-cpu-pipeline", "the whole ddpc CPU pipeline after import",
        [](OpPassManager &pm) { buildCPUPipeline(pm, {}); });
    return true;
  }();
  (void)once;
}

void registerAllDDPCDialects(DialectRegistry &registry) {
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerImportDialects(registry);
}

void registerAllDDPCPasses() {
  static bool once = [] {
    registerAllPasses();
    return true;
  }();
  (void)once;
  registerPipelines();
}

} // namespace ddpc

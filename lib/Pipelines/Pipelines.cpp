//===- Pipelines.cpp - ddpc pass pipelines --------------------------------===//
//
// Part of ddpc. The pipelines are spelled with upstream pass names so that
// every step can be reproduced with `ddpc-opt` (or `mlir-opt`) by hand.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Pipelines/Pipelines.h"

#include "ddpc/Import/ONNX/Importer.h"
#include "ddpc/InitAllPasses.h"
#include "ddpc/Target/CUDA/Archs.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "llvm/Support/ErrorHandling.h"

#include <cstdio>
#include <cstdlib>

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
    addPipeline(pm, "func.func(ddpc-fuse-ops,canonicalize,cse)");
}

void buildBufferizationPipeline(OpPassManager &pm,
                                const CPUPipelineOptions &options) {
  addPipeline(pm, "ddpc-lower-collectives,ddpc-read-only-arguments,"
                  "func.func(ddpc-clone-shared-fills),"
                  "eliminate-empty-tensors,empty-tensor-to-alloc-tensor,"
                  "one-shot-bufferize{bufferize-function-boundaries "
                  "function-boundary-type-conversion=identity-layout-map},"
                  "func.func(canonicalize,ddpc-distinct-result-buffers),"
                  "buffer-results-to-out-params{hoist-static-allocs "
                  "modify-public-functions},"
                  "buffer-deallocation-pipeline,canonicalize");
  char cap[64];
  std::snprintf(cap, sizeof(cap), "%.17g", options.bucketCapMB);
  addPipeline(pm, std::string("ddpc-bucket-gradient-allreduce{bucket-cap-mb=") +
                      cap + "}");
}

void buildLowerToLLVMPipeline(OpPassManager &pm, const CPUPipelineOptions &) {
  addPipeline(
      pm, "ddpc-flatten-empty-arguments,func.func(convert-linalg-to-loops),"
          "arith-expand{include-bf16},"
          "expand-strided-metadata,lower-affine,convert-scf-to-cf,"
          "convert-math-to-llvm{approximate-log1p=false},convert-math-to-libm,"
          "convert-arith-to-llvm,convert-index-to-llvm,"
          "finalize-memref-to-llvm,"
          "convert-func-to-llvm{use-bare-ptr-memref-call-conv},"
          "convert-cf-to-llvm,convert-ub-to-llvm,"
          "reconcile-unrealized-casts");
}

void buildGPULoopPipeline(OpPassManager &pm) {
  addPipeline(
      pm, "func.func(ddpc-conv-to-library-call,ddpc-plan-arena,"
          "ddpc-gemm-to-library-call,ddpc-gemm-epilogues,ddpc-conv-epilogues,"
          "ddpc-scatter-to-atomic,"
          "ddpc-memref-copy-to-linalg,ddpc-parallel-loops-outermost,"
          "ddpc-split-reductions,"
          "convert-linalg-to-parallel-loops,"
          "ddpc-serial-loops-to-device,ddpc-collapse-parallel-loops,"
          "ddpc-merge-parallel-loops,"
          "scf-parallel-loop-tiling{parallel-loop-tile-sizes=256 "
          "no-min-max-bounds}),"
          "ddpc-device-constants");
}

void buildGPUKernelPipeline(OpPassManager &pm, const CUDAPipelineOptions &) {
  buildGPULoopPipeline(pm);
  addPipeline(pm,
              "func.func(gpu-map-parallel-loops,convert-parallel-loops-to-gpu),"
              "gpu-kernel-outlining,ddpc-gpu-merge-modules,ddpc-gpu-host-sync");
}

void buildNVVMPipeline(OpPassManager &pm, const CUDAPipelineOptions &options) {
  // Host control flow stays structured through the "gpu-kernels" stage, so
  // the plan report can tell the epilogue fallbacks (scf.if) apart.
  addPipeline(pm, "lower-affine,convert-scf-to-cf,canonicalize,cse");
  for (const std::string &chip : options.chips) {
    // The oldest PTX ISA LLVM accepts for the chip (Archs.h).
    const CUDAArch *arch = findCUDAArch(chip);
    const char *ptx = arch ? arch->ptxFeature : "+ptx80";
    std::string attach =
        "nvvm-attach-target{chip=" + chip + " features=" + ptx + " O=3";
    if (!options.libdevice.empty())
      attach += " l=" + options.libdevice;
    addPipeline(pm, attach + "}");
  }
  addPipeline(pm,
              "gpu.module(convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv},"
              "canonicalize,cse,"
              "reconcile-unrealized-casts),"
              "gpu-module-to-binary{format=isa}");
}

void buildCUDAHostLoweringPipeline(OpPassManager &pm,
                                   const CUDAPipelineOptions &) {
  addPipeline(
      pm, "ddpc-flatten-empty-arguments,expand-strided-metadata,lower-affine,"
          "arith-expand{include-bf16},"
          "convert-math-to-llvm{approximate-log1p=false},convert-math-to-libm,"
          // Before gpu-to-llvm, whose own memref patterns would
          // lower allocations to host malloc.
          "finalize-memref-to-llvm{use-generic-functions},"
          "gpu-to-llvm{use-bare-pointers-for-host "
          "use-bare-pointers-for-kernels},"
          "convert-arith-to-llvm,convert-index-to-llvm,"
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
        "ddpc-gpu-kernels",
        "ddpc CUDA target: bufferized IR to outlined gpu kernels, GEMM "
        "library calls and host synchronization",
        [](OpPassManager &pm) { buildGPUKernelPipeline(pm, {}); });
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
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  // gpu-module-to-binary translates kernels to LLVM IR in-process.
  registerAllToLLVMIRTranslations(registry);
}

void registerAllDDPCPasses() {
  static bool once = [] {
    registerAllPasses();
    return true;
  }();
  (void)once;
  registerDDPCPasses();
}

} // namespace ddpc

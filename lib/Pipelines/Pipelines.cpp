//===- Pipelines.cpp - ddpc pass pipelines --------------------------------===//
//
// Part of ddpc. The pipelines are built from the passes' typed options; the
// driver's --dump-ir writes each stage's pipeline as text (stages.txt), and
// registerPipelines() names each stage for `ddpc-opt`.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Pipelines/Pipelines.h"

#include "ddpc/Import/ONNX/Importer.h"
#include "ddpc/InitAllPasses.h"
#include "ddpc/Target/CUDA/Archs.h"
#include "ddpc/Target/CUDA/Transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace ddpc {

/// The nested pass manager of every func.func of the module.
static OpPassManager &funcs(OpPassManager &pm) {
  return pm.nest<func::FuncOp>();
}

void buildGraphOptimizationPipeline(OpPassManager &pm,
                                    const CPUPipelineOptions &options) {
  OpPassManager &fpm = funcs(pm);
  fpm.addPass(createCanonicalizerPass());
  fpm.addPass(createCSEPass());
  if (options.fuseElementwise) {
    fpm.addPass(createFuseOpsPass());
    fpm.addPass(createCanonicalizerPass());
    fpm.addPass(createCSEPass());
  }
  // Last: a CSE after it would merge the copies back into the originals.
  if (!options.rematNodes.empty()) {
    RematerializePassOptions remat;
    remat.nodes.assign(options.rematNodes.begin(), options.rematNodes.end());
    fpm.addPass(createRematerializePass(remat));
  }
}

void buildBufferizationPipeline(OpPassManager &pm,
                                const CPUPipelineOptions &options) {
  pm.addPass(createLowerCollectivesPass());
  pm.addPass(createReadOnlyArgumentsPass());
  funcs(pm).addPass(createCloneSharedFillsPass());
  pm.addPass(bufferization::createEmptyTensorEliminationPass());
  pm.addPass(bufferization::createEmptyTensorToAllocTensorPass());
  bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  bufferize.functionBoundaryTypeConversion =
      bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  OpPassManager &fpm = funcs(pm);
  fpm.addPass(createCanonicalizerPass());
  fpm.addPass(createDistinctResultBuffersPass());
  bufferization::BufferResultsToOutParamsPassOptions outParams;
  outParams.hoistStaticAllocs = true;
  outParams.modifyPublicFunctions = true;
  pm.addPass(bufferization::createBufferResultsToOutParamsPass(outParams));
  bufferization::buildBufferDeallocationPipeline(pm);
  pm.addPass(createCanonicalizerPass());
  if (options.freeAtLastUse)
    funcs(pm).addPass(createFreeAtLastUsePass());
  BucketGradientAllReducePassOptions buckets;
  buckets.bucketCapMB = options.bucketCapMB;
  buckets.shardGradients = options.shardGradients;
  pm.addPass(createBucketGradientAllReducePass(buckets));
  if (options.gatherParameters) {
    GatherParametersPassOptions gather;
    gather.keepGathered.assign(options.keepGathered.begin(),
                               options.keepGathered.end());
    pm.addPass(createGatherParametersPass(gather));
  }
}

/// The math lowering both targets share: exact log1p, libm for the rest.
static void addMathToLLVM(OpPassManager &pm) {
  arith::ArithExpandOpsPassOptions expand;
  expand.includeBf16 = true;
  pm.addPass(arith::createArithExpandOpsPass(expand));
  ConvertMathToLLVMPassOptions math;
  math.approximateLog1p = false;
  pm.addPass(createConvertMathToLLVMPass(math));
  pm.addPass(createConvertMathToLibmPass());
}

/// From the arith lowering on: the tail both targets share.
static void addLLVMTail(OpPassManager &pm) {
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertIndexToLLVMPass());
}

static void addFuncToLLVM(OpPassManager &pm) {
  ConvertFuncToLLVMPassOptions func;
  func.useBarePtrCallConv = true;
  pm.addPass(createConvertFuncToLLVMPass(func));
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createUBToLLVMConversionPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
}

void buildLowerToLLVMPipeline(OpPassManager &pm, const CPUPipelineOptions &) {
  pm.addPass(createFlattenEmptyArgumentsPass());
  funcs(pm).addPass(createCollapseLoopDimsPass());
  funcs(pm).addPass(createConvertLinalgToLoopsPass());
  pm.addPass(createOutlineLoopNestsPass());
  arith::ArithExpandOpsPassOptions expand;
  expand.includeBf16 = true;
  pm.addPass(arith::createArithExpandOpsPass(expand));
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  ConvertMathToLLVMPassOptions math;
  math.approximateLog1p = false;
  pm.addPass(createConvertMathToLLVMPass(math));
  pm.addPass(createConvertMathToLibmPass());
  addLLVMTail(pm);
  // The runtime's allocation functions (HostMemory.cpp), which count the
  // compiled code's temporaries for the reported high-water mark.
  FinalizeMemRefToLLVMConversionPassOptions memref;
  memref.useGenericFunctions = true;
  memref.useAlignedAlloc = true;
  pm.addPass(createFinalizeMemRefToLLVMConversionPass(memref));
  addFuncToLLVM(pm);
}

void buildCPULibraryCallPipeline(OpPassManager &pm) {
  OpPassManager &fpm = funcs(pm);
  ConvToLibraryCallPassOptions conv;
  conv.convLibrary = "openblas";
  conv.gemmLibrary = "openblas";
  fpm.addPass(createConvToLibraryCallPass(conv));
  GemmToLibraryCallPassOptions gemm;
  gemm.library = "openblas";
  fpm.addPass(createGemmToLibraryCallPass(gemm));
  GemmEpiloguesPassOptions epilogues;
  epilogues.library = "openblas";
  fpm.addPass(createGemmEpiloguesPass(epilogues));
}

void buildGPULoopPipeline(OpPassManager &pm) {
  OpPassManager &fpm = funcs(pm);
  fpm.addPass(createConvToLibraryCallPass());
  fpm.addPass(createPlanArenaPass());
  fpm.addPass(createGemmToLibraryCallPass());
  fpm.addPass(createGemmEpiloguesPass());
  fpm.addPass(createConvEpiloguesPass());
  fpm.addPass(createStageHostSharedOutputsPass());
  fpm.addPass(createScatterToAtomicPass());
  fpm.addPass(createMemRefCopyToLinalgPass());
  fpm.addPass(createParallelLoopsOutermostPass());
  fpm.addPass(createSplitReductionsPass());
  fpm.addPass(createConvertLinalgToParallelLoopsPass());
  fpm.addPass(createSerialLoopsToDevicePass());
  fpm.addPass(createCollapseParallelLoopsPass());
  fpm.addPass(createMergeParallelLoopsPass());
  fpm.addPass(createParallelLoopTilingPass({kGPUBlockSize},
                                           /*noMinMaxBounds=*/true));
  pm.addPass(createDeviceConstantsPass());
}

void buildGPUKernelPipeline(OpPassManager &pm, const CUDAPipelineOptions &) {
  buildGPULoopPipeline(pm);
  OpPassManager &fpm = funcs(pm);
  fpm.addPass(createGpuMapParallelLoopsPass());
  fpm.addPass(createConvertParallelLoopToGpuPass());
  pm.addPass(createGpuKernelOutliningPass());
  pm.addPass(createGPUMergeModulesPass());
  pm.addPass(createGPUHostSyncPass());
}

void buildNVVMPipeline(OpPassManager &pm, const CUDAPipelineOptions &options) {
  // Host control flow stays structured through the "gpu-kernels" stage, so
  // the plan report can tell the epilogue fallbacks (scf.if) apart.
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  for (const std::string &chip : options.chips) {
    if (chip.empty()) // "chips=sm_80,,sm_90"
      continue;
    // The oldest PTX ISA LLVM accepts for the chip (Archs.h).
    const CUDAArch *arch = findCUDAArch(chip);
    GpuNVVMAttachTargetOptions attach;
    attach.chip = chip;
    attach.features = arch ? arch->ptxFeature : "+ptx80";
    attach.optLevel = 3;
    if (!options.libdevice.empty())
      attach.linkLibs.push_back(options.libdevice);
    pm.addPass(createGpuNVVMAttachTarget(attach));
  }
  OpPassManager &gpm = pm.nest<gpu::GPUModuleOp>();
  ConvertGpuOpsToNVVMOpsOptions nvvm;
  nvvm.useBarePtrCallConv = true;
  gpm.addPass(createConvertGpuOpsToNVVMOps(nvvm));
  gpm.addPass(createCanonicalizerPass());
  gpm.addPass(createCSEPass());
  gpm.addPass(createReconcileUnrealizedCastsPass());
  GpuModuleToBinaryPassOptions binary;
  binary.compilationTarget = "isa";
  pm.addPass(createGpuModuleToBinaryPass(binary));
}

void buildCUDAHostLoweringPipeline(OpPassManager &pm,
                                   const CUDAPipelineOptions &) {
  pm.addPass(createFlattenEmptyArgumentsPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  addMathToLLVM(pm);
  // Before gpu-to-llvm, whose own memref patterns would lower allocations
  // to host malloc.
  FinalizeMemRefToLLVMConversionPassOptions memref;
  memref.useGenericFunctions = true;
  pm.addPass(createFinalizeMemRefToLLVMConversionPass(memref));
  GpuToLLVMConversionPassOptions gpu;
  gpu.hostBarePtrCallConv = true;
  gpu.kernelBarePtrCallConv = true;
  pm.addPass(createGpuToLLVMConversionPass(gpu));
  addLLVMTail(pm);
  addFuncToLLVM(pm);
}

void buildCPUPipeline(OpPassManager &pm, const CPUPipelineOptions &options) {
  buildGraphOptimizationPipeline(pm, options);
  buildBufferizationPipeline(pm, options);
  buildCPULibraryCallPipeline(pm);
  buildLowerToLLVMPipeline(pm, options);
}

namespace {
/// `ddpc-opt --ddpc-graph-opt='fuse-elementwise=false'`.
struct GraphOptPipelineOptions : PassPipelineOptions<GraphOptPipelineOptions> {
  Option<bool> fuseElementwise{
      *this, "fuse-elementwise",
      llvm::cl::desc("Fuse producer/consumer elementwise ops (ddpc-fuse-ops)"),
      llvm::cl::init(true)};
};

/// `ddpc-opt --ddpc-bufferize='bucket-cap-mb=4'`.
struct BufferizePipelineOptions
    : PassPipelineOptions<BufferizePipelineOptions> {
  Option<double> bucketCapMB{
      *this, "bucket-cap-mb",
      llvm::cl::desc("Gradient bucket cap in MiB (PyTorch DDP's "
                     "bucket_cap_mb)"),
      llvm::cl::init(25.0)};
  Option<bool> shardGradients{
      *this, "shard-gradients",
      llvm::cl::desc("ZeRO stage 2: gradients leave the training step only "
                     "through the buckets"),
      llvm::cl::init(false)};
  Option<bool> gatherParameters{
      *this, "gather-parameters",
      llvm::cl::desc("ZeRO stage 3: all-gather parameters where the step "
                     "reads them (ddpc-gather-parameters)"),
      llvm::cl::init(false)};
  Option<bool> freeAtLastUse{
      *this, "free-at-last-use",
      llvm::cl::desc("Free temporaries right after their last use "
                     "(ddpc-free-at-last-use)"),
      llvm::cl::init(true)};
};

/// `ddpc-opt --ddpc-cpu-pipeline='fuse-elementwise=false bucket-cap-mb=4'`.
struct CPUPipelineRegistrationOptions
    : PassPipelineOptions<CPUPipelineRegistrationOptions> {
  Option<bool> fuseElementwise{
      *this, "fuse-elementwise",
      llvm::cl::desc("Fuse producer/consumer elementwise ops (ddpc-fuse-ops)"),
      llvm::cl::init(true)};
  Option<double> bucketCapMB{
      *this, "bucket-cap-mb",
      llvm::cl::desc("Gradient bucket cap in MiB (PyTorch DDP's "
                     "bucket_cap_mb)"),
      llvm::cl::init(25.0)};
  Option<bool> shardGradients{
      *this, "shard-gradients",
      llvm::cl::desc("ZeRO stage 2: gradients leave the training step only "
                     "through the buckets"),
      llvm::cl::init(false)};
  Option<bool> gatherParameters{
      *this, "gather-parameters",
      llvm::cl::desc("ZeRO stage 3: all-gather parameters where the step "
                     "reads them (ddpc-gather-parameters)"),
      llvm::cl::init(false)};
  Option<bool> freeAtLastUse{
      *this, "free-at-last-use",
      llvm::cl::desc("Free temporaries right after their last use "
                     "(ddpc-free-at-last-use)"),
      llvm::cl::init(true)};
};

/// `ddpc-opt --ddpc-nvvm='chips=sm_80,sm_90 libdevice=PATH'`.
struct NVVMPipelineOptions : PassPipelineOptions<NVVMPipelineOptions> {
  ListOption<std::string> chips{
      *this, "chips",
      llvm::cl::desc("GPU architectures to compile kernels for (default "
                     "sm_80)")};
  Option<std::string> libdevice{
      *this, "libdevice",
      llvm::cl::desc("Path of NVIDIA's libdevice bitcode (math functions)"),
      llvm::cl::init("")};
};
} // namespace

void registerPipelines() {
  static bool once = [] {
    PassPipelineRegistration<GraphOptPipelineOptions>(
        "ddpc-graph-opt",
        "ddpc graph cleanups and elementwise fusion (stage \"fused\")",
        [](OpPassManager &pm, const GraphOptPipelineOptions &o) {
          CPUPipelineOptions options;
          options.fuseElementwise = o.fuseElementwise;
          buildGraphOptimizationPipeline(pm, options);
        });
    PassPipelineRegistration<BufferizePipelineOptions>(
        "ddpc-bufferize",
        "ddpc bufferization with out-params, deallocation and gradient "
        "buckets (stage \"bufferized\" of --target cpu; cuda-emulate adds "
        "ddpc-gpu-loops, cuda runs ddpc-gpu-kernels after it)",
        [](OpPassManager &pm, const BufferizePipelineOptions &o) {
          CPUPipelineOptions options;
          options.bucketCapMB = o.bucketCapMB;
          options.shardGradients = o.shardGradients;
          options.gatherParameters = o.gatherParameters;
          options.freeAtLastUse = o.freeAtLastUse;
          buildBufferizationPipeline(pm, options);
        });
    PassPipelineRegistration<>(
        "ddpc-lower-to-llvm",
        "ddpc CPU target: bufferized IR to LLVM (stage \"lowered\")",
        [](OpPassManager &pm) { buildLowerToLLVMPipeline(pm, {}); });
    PassPipelineRegistration<>(
        "ddpc-cpu-library-calls",
        "ddpc CPU target: convolutions to im2col + GEMM, contractions and "
        "their bias/ReLU epilogues to OpenBLAS calls (end of stage "
        "\"bufferized\" of --target cpu)",
        [](OpPassManager &pm) { buildCPULibraryCallPipeline(pm); });
    PassPipelineRegistration<>(
        "ddpc-gpu-loops",
        "ddpc CUDA kernel IR as parallel loops, before outlining (what "
        "--target cuda-emulate runs serially on the CPU)",
        [](OpPassManager &pm) { buildGPULoopPipeline(pm); });
    PassPipelineRegistration<>(
        "ddpc-gpu-kernels",
        "ddpc CUDA target: bufferized IR to outlined gpu kernels, GEMM "
        "library calls and host synchronization (stage \"gpu-kernels\", "
        "after ddpc-bufferize)",
        [](OpPassManager &pm) { buildGPUKernelPipeline(pm, {}); });
    PassPipelineRegistration<NVVMPipelineOptions>(
        "ddpc-nvvm",
        "ddpc CUDA target: kernels to NVVM and PTX objects, one per chip "
        "(stage \"nvvm\" is this, with libdevice=<cuda>/nvvm/libdevice/"
        "libdevice.10.bc, then ddpc-gpu-assemble-fatbin)",
        [](OpPassManager &pm, const NVVMPipelineOptions &o) {
          CUDAPipelineOptions options;
          if (!o.chips.empty())
            options.chips.assign(o.chips.begin(), o.chips.end());
          options.libdevice = o.libdevice;
          buildNVVMPipeline(pm, options);
        });
    PassPipelineRegistration<>(
        "ddpc-cuda-host-lowering",
        "ddpc CUDA target: host code to LLVM with mgpu* launches (stage "
        "\"lowered\")",
        [](OpPassManager &pm) { buildCUDAHostLoweringPipeline(pm, {}); });
    PassPipelineRegistration<CPUPipelineRegistrationOptions>(
        "ddpc-cpu-pipeline",
        "the whole ddpc CPU pipeline after import (inference) or after the "
        "training stage (ddpc-build-training-step)",
        [](OpPassManager &pm, const CPUPipelineRegistrationOptions &o) {
          CPUPipelineOptions options;
          options.fuseElementwise = o.fuseElementwise;
          options.bucketCapMB = o.bucketCapMB;
          options.shardGradients = o.shardGradients;
          options.gatherParameters = o.gatherParameters;
          options.freeAtLastUse = o.freeAtLastUse;
          buildCPUPipeline(pm, options);
        });
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

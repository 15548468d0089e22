//===- Pipelines.h - ddpc pass pipelines ------------------------*- C++ -*-===//
//
// Part of ddpc. The pass pipelines the driver runs, as library functions so
// that `ddpc-opt --ddpc-lower-to-llvm` reproduces exactly what
// `ddpc compile` does. Each driver stage (Driver.cpp) is one or two of
// these; `--dump-ir DIR` writes DIR/stages.txt with the textual pipeline
// that replays each stage in `ddpc-opt`.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_PIPELINES_PIPELINES_H
#define DDPC_PIPELINES_PIPELINES_H

#include "mlir/Support/LLVM.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir {
class OpPassManager;
class DialectRegistry;
} // namespace mlir

namespace ddpc {

/// Options of the CPU lowering pipeline.
struct CPUPipelineOptions {
  /// Fuse producer/consumer elementwise linalg ops on tensors.
  bool fuseElementwise = true;
  /// Gradient bucket cap in MiB (ddpc-bucket-gradient-allreduce; PyTorch
  /// DDP's bucket_cap_mb). A bucket closes once it holds at least its cap;
  /// the first bucket's cap is 1 MiB, so communication starts early.
  double bucketCapMB = 25.0;
  /// ZeRO stage 2: the training step's gradients leave it only through the
  /// buckets (ddpc-bucket-gradient-allreduce's shard-gradients).
  bool shardGradients = false;
  /// ZeRO stage 3: parameters are all-gathered where the step reads them
  /// (ddpc-gather-parameters); implies shardGradients.
  bool gatherParameters = false;
  /// ZeRO stage 3: parameters kept whole from forward into backward
  /// (ddpc-gather-parameters' keep-gathered).
  std::vector<std::string> keepGathered;
  /// Free each temporary right after its last use (ddpc-free-at-last-use)
  /// instead of at the end of its function.
  bool freeAtLastUse = true;
  /// ONNX nodes whose activations the backward pass recomputes
  /// (ddpc-rematerialize, first pass of the "fused" stage); empty: none.
  std::vector<std::string> rematNodes;
};

/// Graph-level cleanups on the imported linalg-on-tensors IR:
/// canonicalization, CSE and elementwise fusion (stage "fused").
void buildGraphOptimizationPipeline(mlir::OpPassManager &pm,
                                    const CPUPipelineOptions &options);

/// Bufferization: tensors to memrefs with identity layouts at function
/// boundaries, results turned into caller-provided out-parameters, and
/// ownership-based deallocation moved up to each buffer's last use (stage
/// "bufferized"); then the gradient
/// allreduce buckets of training steps (ddpc-bucket-gradient-allreduce).
void buildBufferizationPipeline(mlir::OpPassManager &pm,
                                const CPUPipelineOptions &options);

/// CPU target, end of stage "bufferized": ungrouped convolutions and their
/// gradients to im2col + GEMM (ddpc-conv-to-library-call without a
/// convolution library), float32 contractions to ddpc_gemm_f32 calls and
/// bias/ReLU epilogues to ddpc_gemm_bias_act_f32 calls, all run by OpenBLAS
/// (lib/Runtime/CpuBlas.cpp).
void buildCPULibraryCallPipeline(mlir::OpPassManager &pm);

/// memref/linalg to the LLVM dialect with the bare-pointer calling
/// convention for statically shaped memrefs (stage "lowered"); memref
/// allocations call the runtime's _mlir_memref_to_llvm_aligned_alloc/free
/// (HostMemory.cpp), which count them for the reported high-water mark.
void buildLowerToLLVMPipeline(mlir::OpPassManager &pm,
                              const CPUPipelineOptions &options);

/// Graph optimization, bufferization, the CPU library calls and the
/// lowering to LLVM, in order: what `ddpc compile --target cpu` runs.
void buildCPUPipeline(mlir::OpPassManager &pm,
                      const CPUPipelineOptions &options);

/// Options of the CUDA target.
struct CUDAPipelineOptions {
  /// GPU architectures to compile kernels for ("sm_80", "sm_90", ...).
  std::vector<std::string> chips = {"sm_80"};
  /// Path of NVIDIA's libdevice bitcode (math functions); empty: none.
  std::string libdevice;
};

/// Threads per block of the generated CUDA kernels (the tile size of every
/// parallel loop; the runtime launches what the IR says).
constexpr int64_t kGPUBlockSize = 256;

/// The target-independent half of the CUDA kernel stage, on bufferized IR:
/// convolutions to ddpc_conv2d_f32 (cuDNN) calls with an im2col + GEMM
/// fallback (ddpc-conv-to-library-call), temporaries planned into one arena
/// (ddpc-plan-arena), contractions to ddpc_gemm_f32 calls, bias/ReLU
/// epilogues to ddpc_gemm_bias_act_f32 (cuBLASLt) calls with a fallback,
/// additive scatters to atomic parallel loops, copies to linalg, every
/// linalg op to one 1-d scf.parallel tiled by the block size (256) with
/// bounds guards. The `cuda-emulate` target runs exactly this IR serially
/// on the CPU.
void buildGPULoopPipeline(mlir::OpPassManager &pm);

/// CUDA target, stage "gpu-kernels": on bufferized IR, convolutions and
/// contractions become library calls (above), every other linalg op one
/// outlined gpu.func (one thread per output element, blocks of 256), and
/// host code waits for the compute stream before touching memory
/// (ddpc-gpu-host-sync). Host control flow stays structured (scf) until
/// the "nvvm" stage, so the plan report can tell library fallbacks apart.
void buildGPUKernelPipeline(mlir::OpPassManager &pm,
                            const CUDAPipelineOptions &options);

/// CUDA target, stage "nvvm": attaches one NVVM target per chip, lowers the
/// kernels to NVVM and serializes each gpu.module to PTX (one object per
/// chip). The driver then
/// assembles the PTX into one fatbin (lib/Target/CUDA).
void buildNVVMPipeline(mlir::OpPassManager &pm,
                       const CUDAPipelineOptions &options);

/// CUDA target, stage "lowered": host code to LLVM; memref allocations call
/// the runtime's _mlir_memref_to_llvm_alloc/free (device-visible memory),
/// kernel launches become mgpu* runtime calls (gpu-to-llvm, after the memref
/// lowering so that its own patterns never allocate with host malloc).
void buildCUDAHostLoweringPipeline(mlir::OpPassManager &pm,
                                   const CUDAPipelineOptions &options);

/// Registers the pipelines above, with typed options, as `ddpc-graph-opt`
/// {fuse-elementwise}, `ddpc-bufferize` {bucket-cap-mb},
/// `ddpc-lower-to-llvm`, `ddpc-gpu-loops`, `ddpc-gpu-kernels`, `ddpc-nvvm`
/// {chips, libdevice}, `ddpc-cuda-host-lowering` and `ddpc-cpu-pipeline`
/// {fuse-elementwise, bucket-cap-mb}.
void registerPipelines();

/// Registers every dialect and upstream pass the pipelines use.
void registerAllDDPCDialects(mlir::DialectRegistry &registry);
void registerAllDDPCPasses();

} // namespace ddpc

#endif // DDPC_PIPELINES_PIPELINES_H

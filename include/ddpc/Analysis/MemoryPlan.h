//===- MemoryPlan.h - per-rank memory plan of training -------*- C++ -*-===//
//
// Part of ddpc. What one rank of a training program holds, in bytes, by
// category, and the predicted peak: the runtime's state as TrainMain.cpp
// allocates it (two halves of parameters, buffers, gradients and optimizer
// state that the step functions write into alternately), the micro-batch
// buffers and their staging copies, the gradient buckets' staging memory,
// and the compiled step functions' temporaries, from the live ranges of
// the bufferized IR (BufferLiveness; on the CUDA target and cuda-emulate
// the arena that ddpc-plan-arena placed them in). The runtime counts its
// allocations (Runtime/Memory.h countAllocation) and prints its high-water
// mark at exit beside this plan's peak. ZeRO stages 1 to 3 change the
// optimizer-state, gradient, collective-buffer and (stage 3) parameter
// categories
// (Support/ZeroLayout.h); ddpc-rematerialize lowers the saved
// activations (Analysis/RematSolver.h chooses which).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_ANALYSIS_MEMORYPLAN_H
#define DDPC_ANALYSIS_MEMORYPLAN_H

#include "ddpc/Support/ByteSize.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddpc {

/// What the runtime allocates besides the compiled code's temporaries, as
/// the driver knows it from the training program (TrainABI.h).
struct RuntimeFootprint {
  /// Bytes of each trainable parameter and each buffer (float32).
  std::vector<int64_t> paramBytes, bufferBytes;
  /// Optimizer state slots per parameter (0, 1 or 2).
  int64_t optSlots = 0;
  /// Bytes of one micro-batch of each data input and of the labels.
  std::vector<int64_t> batchBytes;
  /// Per-rank micro-batch size (sizes the per-sample outputs).
  int64_t batchSize = 1;
  /// Copies of parameters/buffers/gradients/optimizer state the runtime
  /// keeps (TrainMain.cpp: 2, the step reads one half and writes the other).
  int64_t stateCopies = 2;
  /// Micro-batches the prefetch thread stages ahead (BatchPrefetcher).
  int64_t stagingSlots = 2;
  /// Rounding of each runtime buffer (Memory.h kBufferAlignment) and of
  /// each compiled-code allocation (CPU: 16 unless the IR asks for more;
  /// CUDA: the pool's 256-byte blocks).
  int64_t bufferAlignment = 64, allocGranule = 16;
  /// The CPU runtime copies each gradient bucket into host staging memory
  /// for MPI (more than one rank only); NCCL sums in place.
  bool bucketStaging = true;
  /// The world size the plan is for (`--world-size`); 0: not known, so
  /// the bucket staging is counted and ZeRO's state is counted whole.
  int64_t worldSize = 0;
  /// ZeRO stage (0 to 3) and stage 1's chunk of float32 elements: with a
  /// known world size, stage 1's optimizer state is one rank's slice and
  /// buffers (Support/ZeroLayout.h) in place of the whole state.
  int64_t zeroStage = 0, zeroChunk = 4096;
  /// ZeRO stage 2: the gradient buckets (parameter indices, bucket order;
  /// TrainingProgramInfo::zeroBuckets). The gradients are then one rank's
  /// slice and the collective buffers those of the buckets in flight
  /// (Support/ZeroLayout.h), at the world size (1 when not known). Stage 3
  /// also counts one parameter slice in place of the parameters' two
  /// halves; the gathered parameters are @train_micro's temporaries.
  std::vector<std::vector<int32_t>> zeroBuckets;
};

/// One function's temporaries: the most bytes its compiled code holds at
/// once, and where.
struct FunctionMemory {
  std::string function;
  int64_t peakBytes = 0;
  /// The top-level op at which `peakBytes` are live: "<op> (<ONNX node>)".
  std::string peakOp;
  /// ddpc-plan-arena's arena of the function (CUDA, cuda-emulate); 0 when
  /// the temporaries are allocated one by one (CPU).
  int64_t arenaBytes = 0;
};

/// The forward activations of one producer that the backward pass reads
/// (train_micro): one entry per producer, however many buffers it wrote.
struct SavedActivation {
  std::string producer; ///< the ONNX node(s) that wrote it
  int64_t bytes = 0;    ///< all its saved buffers together
  int64_t buffers = 0;  ///< how many buffers that is
};

struct MemoryPlan {
  int64_t parameters = 0, gradients = 0, optimizerState = 0, buffers = 0;
  /// Of the peak function's temporaries: the saved activations, the rest.
  int64_t savedActivations = 0, temporaries = 0;
  int64_t collectiveBuffers = 0, stagingBuffers = 0, dataBatches = 0;
  /// The sum of the categories; `peakFunction`/`peakOp` say where.
  int64_t peak = 0;
  /// What the plan assumed (RuntimeFootprint): 0 ranks: any world size.
  int64_t worldSize = 0, zeroStage = 0;
  std::string peakFunction, peakOp;
  std::vector<FunctionMemory> functions;
  /// Largest first.
  std::vector<SavedActivation> saved;

  /// (category, bytes) in a fixed order.
  std::vector<std::pair<std::string, int64_t>> categories() const;
  /// "params 1.2 MiB, grads 1.2 MiB, ..." with the `n` largest categories.
  std::string largestCategories(size_t n) const;
};

/// The plan of a bufferized training module (the step functions of
/// Support/RuntimeSymbols.h) for `runtime`.
MemoryPlan computeMemoryPlan(mlir::ModuleOp module,
                             const RuntimeFootprint &runtime);

/// Parses a --memory-budget value: plain bytes or a number with B, KiB,
/// MiB, GiB, TiB (binary) or KB, MB, GB, TB (decimal); nothing when it is
/// not one of these or not positive.
std::optional<int64_t> parseByteSize(llvm::StringRef text);

} // namespace ddpc

#endif // DDPC_ANALYSIS_MEMORYPLAN_H

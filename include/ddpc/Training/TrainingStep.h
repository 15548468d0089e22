//===- TrainingStep.h - Training-step synthesis -----------------*- C++ -*-===//
//
// Part of ddpc. Builds, from imported forward functions, the functions of a
// training program (include/ddpc/Runtime/TrainABI.h): loss, reverse-mode
// autodiff (Autodiff.h), gradient accumulation and the optimizer update, and
// the gradient-check ("VJP") form used by tests.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_TRAINING_TRAININGSTEP_H
#define DDPC_TRAINING_TRAININGSTEP_H

#include "ddpc/Training/TrainOptions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

#include "llvm/ADT/SmallVector.h"

namespace ddpc {

/// Rewrites `func` (inputs -> outputs) into its vector-Jacobian product:
/// (inputs..., d_<output> for every float output) -> (outputs...,
/// d_<input> for every float input). For gradient checks against finite
/// differences. Fails with a one-line `error` naming an op without a VJP.
mlir::LogicalResult makeVJPFunction(mlir::func::FuncOp func,
                                    std::string &error);

/// What the training functions look like, for the driver's glue and report.
struct TrainingProgramInfo {
  struct State {
    std::string name;
    llvm::SmallVector<int64_t> shape;
  };
  std::vector<State> params, buffers;
  /// Optimizer state slots per parameter (TrainABI.h).
  int optSlots = 0;
  /// ZeRO stage (TrainOptions::zeroStage) and the float32 elements of the
  /// chunk @apply_shard updates (16 KiB: small enough that padding a slice
  /// to whole chunks costs little, large enough that a call per chunk does
  /// not).
  int64_t zeroStage = 0;
  int64_t zeroChunk = 4096;
  /// ZeRO stage 2: the gradient buckets of @train_micro in bucket order,
  /// each the indices into `params` of its gradients in the order the step
  /// hands them to the runtime (filled after ddpc-bucket-gradient-allreduce;
  /// the glue's ddpc_zero_bucket_* tables).
  std::vector<std::vector<int32_t>> zeroBuckets;
  std::string optimizerDesc;
  int64_t batchSize = 0;
  /// The data inputs, in graph-input order (every graph input but the
  /// labels): name, ONNX dtype (1 float32, 7 int64 or 6 int32) and shape
  /// with the per-rank batch B first.
  struct DataInput {
    std::string name;
    int32_t dtype = 1;
    llvm::SmallVector<int64_t> shape;
  };
  std::vector<DataInput> data;
  llvm::SmallVector<int64_t> labelShape;
  int32_t labelDType = 7;
  bool classification = true;
  /// Classes of a cross-entropy loss (logits' last dim); 0 otherwise.
  int64_t numClasses = 0;
  /// One line each for the user about choices made (printed as notes).
  std::vector<std::string> notes;
};

/// Builds the TrainABI functions @train_micro, @apply and @eval in `module`
/// from the imported forward functions (`fwdTrain`: training-mode ops with
/// buffer updates; `fwdEval`: inference-mode ops), then erases those two.
/// Parameters are float32 function arguments with `ddpc.role = "param"`.
/// Loss: softmax cross-entropy over logits [B, C] with int64 labels [B]
/// (mean over B), mse, or the model's own scalar output. Optimizers follow
/// torch.optim.SGD (momentum, dampening, nesterov, weight decay) and
/// torch.optim.AdamW (Loshchilov & Hutter, "Decoupled Weight Decay
/// Regularization", ICLR 2019).
///
/// Data parallelism: @train_micro's gradient accumulator results carry
/// `ddpc.role = "new_grad_acc"`, and each is computed right after its
/// gradient, in backward order. After bufferization,
/// ddpc-bucket-gradient-allreduce sums them over ranks in buckets that start
/// during backward (Passes.h); @apply reads the summed accumulators.
mlir::LogicalResult
buildTrainingFunctions(mlir::ModuleOp module, mlir::func::FuncOp fwdTrain,
                       mlir::func::FuncOp fwdEval, const TrainOptions &options,
                       TrainingProgramInfo &info, std::string &error);

} // namespace ddpc

#endif // DDPC_TRAINING_TRAININGSTEP_H

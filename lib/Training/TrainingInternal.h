//===- TrainingInternal.h - Shared pieces of training synthesis -*- C++ -*-===//
//
// Part of ddpc. What TrainingStep.cpp (step assembly), Loss.cpp and
// Optimizers.cpp share: tensor-building shorthands and the two tables of
// the training step, losses and optimizers. Not installed.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_LIB_TRAINING_TRAININGINTERNAL_H
#define DDPC_LIB_TRAINING_TRAININGINTERNAL_H

#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"
#include "ddpc/Import/ONNX/TensorBuilders.h"
#include "ddpc/Training/TrainingStep.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <functional>
#include <string>

namespace ddpc::training {

using BodyFn = std::function<mlir::Value(mlir::OpBuilder &, mlir::Location,
                                         mlir::ValueRange)>;

/// An elementwise linalg.generic over `ins` (broadcast to `shape`) with
/// element type `elem` and body `fn`.
inline mlir::Value ew(mlir::OpBuilder &b, mlir::Location loc,
                      mlir::ValueRange ins, llvm::ArrayRef<int64_t> shape,
                      mlir::Type elem, const BodyFn &fn) {
  return buildElementwise(b, loc, ins, shape, elem,
                          [&](mlir::OpBuilder &nb, mlir::Location l,
                              mlir::ValueRange a) { return fn(nb, l, a); });
}

inline mlir::RankedTensorType ttype(mlir::Value v) {
  return llvm::cast<mlir::RankedTensorType>(v.getType());
}

/// Sum of every element of `x` (f32 or integer): a rank-0 tensor.
mlir::Value sumAll(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x);
/// `x` * `s` elementwise (float tensors).
mlir::Value scaleTensor(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                        double s);

//===----------------------------------------------------------------------===//
// Losses (Loss.cpp)
//===----------------------------------------------------------------------===//

/// The labels' type for `opts.loss` given the first output's type `outType`
/// and the per-rank batch `batch`: int64 [B] for cross-entropy, `outType`
/// for mse, and for "output" the graph input `labelInputType` (null: int64
/// [B], unused). Fills `info`'s label fields. Fails with a one-line `error`
/// when the output does not fit the loss or the loss is unknown.
mlir::FailureOr<mlir::RankedTensorType>
labelTypeForLoss(const TrainOptions &opts, mlir::RankedTensorType outType,
                 int64_t batch, mlir::RankedTensorType labelInputType,
                 TrainingProgramInfo &info, std::string &error);

/// @train_micro's loss of one micro-batch from the first output `out` and
/// `labels`: `loss` (f32 scalar, mean over the batch or the elements),
/// `correct` (i64 scalar, 0 but for cross-entropy) and `seed`, d loss /
/// d out (the cotangent that starts the backward pass).
struct MicroBatchLoss {
  mlir::Value loss, correct, seed;
};
MicroBatchLoss buildMicroBatchLoss(mlir::OpBuilder &b, mlir::Location loc,
                                   llvm::StringRef loss, mlir::Value out,
                                   mlir::Value labels, int64_t batch);

/// @eval's per-sample loss (f32 [B]) and correct flags (i64 [B]).
std::pair<mlir::Value, mlir::Value>
buildPerSampleLoss(mlir::OpBuilder &b, mlir::Location loc, llvm::StringRef loss,
                   mlir::Value out, mlir::Value labels, int64_t batch);

//===----------------------------------------------------------------------===//
// Optimizers (Optimizers.cpp)
//===----------------------------------------------------------------------===//

/// One optimizer of @apply: a row of optimizers(). Adding an optimizer is
/// one row and its update function.
struct Optimizer {
  /// The --optimizer / TrainConfig.optimizer value.
  llvm::StringLiteral name;
  /// State slots per parameter (TrainABI.h's ddpc_opt_slots), at most 2.
  int (*stateSlots)(const TrainOptions &);
  /// Slot k's name before ".<parameter>" (torch.optim's state keys).
  const char *slotNames[2];
  /// The hyper-parameters as the program's banner prints them.
  std::string (*describe)(const TrainOptions &);
  /// One parameter's update: `p` and its averaged gradient `g` (f32, same
  /// shape), its `state` slots, `lr` (f32 scalar) and `step` (i64 scalar,
  /// 1 on the first step). Returns the new parameter and appends the new
  /// state slots to `newState`.
  mlir::Value (*update)(mlir::OpBuilder &b, mlir::Location loc,
                        const TrainOptions &opts, mlir::Value p, mlir::Value g,
                        mlir::ValueRange state, mlir::Value lr,
                        mlir::Value step,
                        llvm::SmallVectorImpl<mlir::Value> &newState);
};

/// Every optimizer, in the order --help lists them.
llvm::ArrayRef<Optimizer> optimizers();
/// The row named `name`, or null.
const Optimizer *findOptimizer(llvm::StringRef name);
/// The optimizers' names joined by `separator` ("sgd, adamw").
std::string optimizerNames(llvm::StringRef separator);

} // namespace ddpc::training

#endif // DDPC_LIB_TRAINING_TRAININGINTERNAL_H

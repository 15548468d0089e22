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

namespace ddpc {

/// Rewrites `func` (inputs -> outputs) into its vector-Jacobian product:
/// (inputs..., d_<output> for every float output) -> (outputs...,
/// d_<input> for every float input). For gradient checks against finite
/// differences. Fails with a one-line `error` naming an op without a VJP.
mlir::LogicalResult makeVJPFunction(mlir::func::FuncOp func,
                                    std::string &error);

} // namespace ddpc

#endif // DDPC_TRAINING_TRAININGSTEP_H

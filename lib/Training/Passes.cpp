//===- Passes.cpp - Training passes ---------------------------------------===//
//
// Part of ddpc. ddpc-build-training-step and ddpc-make-vjp: the training
// step synthesis (TrainingStep.cpp) as passes, so that `ddpc-opt` replays
// the driver's "training" and "vjp" stages.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Training/Passes.h"

#include "ddpc/Support/RuntimeSymbols.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace ddpc {

#define GEN_PASS_DEF_BUILDTRAININGSTEPPASS
#define GEN_PASS_DEF_MAKEVJPPASS
#include "ddpc/Training/Passes.h.inc"

namespace {

struct BuildTrainingStepPass
    : impl::BuildTrainingStepPassBase<BuildTrainingStepPass> {
  using Base::Base;
  BuildTrainingStepPass(const BuildTrainingStepPassOptions &options,
                        TrainingProgramInfo *info)
      : Base(options), info(info) {}

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    auto fwdTrain = module.lookupSymbol<mlir::func::FuncOp>(kForwardTrainFunc);
    auto fwdEval = module.lookupSymbol<mlir::func::FuncOp>(kForwardEvalFunc);
    if (!fwdTrain || !fwdEval) {
      module.emitError() << "ddpc-build-training-step needs @"
                         << kForwardTrainFunc << " and @" << kForwardEvalFunc
                         << " (ddpc compile --train imports both)";
      return signalPassFailure();
    }
    TrainOptions options;
    options.enabled = true;
    options.loss = loss;
    options.labelInput = labelInput;
    options.optimizer = optimizer;
    options.lr = lr;
    options.momentum = momentum;
    options.dampening = dampening;
    options.nesterov = nesterov;
    options.weightDecay = weightDecay;
    options.beta1 = beta1;
    options.beta2 = beta2;
    options.eps = eps;
    if (std::string bad = options.validate(); !bad.empty()) {
      module.emitError(bad);
      return signalPassFailure();
    }
    TrainingProgramInfo local;
    std::string error;
    if (failed(buildTrainingFunctions(module, fwdTrain, fwdEval, options,
                                      info ? *info : local, error))) {
      module.emitError(error);
      return signalPassFailure();
    }
  }

  TrainingProgramInfo *info = nullptr;
};

struct MakeVJPPass : impl::MakeVJPPassBase<MakeVJPPass> {
  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    auto f = module.lookupSymbol<mlir::func::FuncOp>(kMainGraphFunc);
    if (!f) {
      module.emitError() << "ddpc-make-vjp needs @" << kMainGraphFunc;
      return signalPassFailure();
    }
    std::string error;
    if (failed(makeVJPFunction(f, error))) {
      module.emitError(error);
      return signalPassFailure();
    }
  }
};

#define GEN_PASS_REGISTRATION
#include "ddpc/Training/Passes.h.inc"

} // namespace

BuildTrainingStepPassOptions
toBuildTrainingStepPassOptions(const TrainOptions &options) {
  BuildTrainingStepPassOptions o;
  o.loss = options.loss;
  o.labelInput = options.labelInput;
  o.optimizer = options.optimizer;
  o.lr = options.lr;
  o.momentum = options.momentum;
  o.dampening = options.dampening;
  o.nesterov = options.nesterov;
  o.weightDecay = options.weightDecay;
  o.beta1 = options.beta1;
  o.beta2 = options.beta2;
  o.eps = options.eps;
  return o;
}

std::unique_ptr<mlir::Pass>
createBuildTrainingStepPass(const BuildTrainingStepPassOptions &options,
                            TrainingProgramInfo *info) {
  return std::make_unique<BuildTrainingStepPass>(options, info);
}

void registerTrainingPasses() { registerDDPCTrainingPasses(); }

} // namespace ddpc

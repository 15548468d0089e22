//===- Passes.cpp - Training passes ---------------------------------------===//
//
// Part of ddpc. ddpc-build-training-step and ddpc-make-vjp: the training
// step synthesis (TrainingStep.cpp) as passes, so that `ddpc-opt` replays
// the driver's "training" and "vjp" stages.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Training/Passes.h"

#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"
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

/// The importer's contract that the step builder relies on, checked so
/// that hand-written input fails with an error rather than a crash: both
/// functions have bodies; every argument is a ranked tensor with a
/// `ddpc.name` and a role among input/param/buffer/rng (rng: tensor<2xi64>,
/// last); @forward_eval takes @forward_train's arguments but the rng.
mlir::LogicalResult verifyForwardFunctions(mlir::ModuleOp module,
                                           mlir::func::FuncOp train,
                                           mlir::func::FuncOp eval) {
  auto fail = [&](mlir::func::FuncOp f, const llvm::Twine &what) {
    f.emitError() << "ddpc-build-training-step: @" << f.getSymName() << " "
                  << what;
    return mlir::failure();
  };
  for (mlir::func::FuncOp f : {train, eval}) {
    if (f.isExternal())
      return fail(f, "is a declaration; it needs a body");
    for (unsigned i = 0; i < f.getNumArguments(); ++i) {
      auto name = f.getArgAttrOfType<mlir::StringAttr>(i, attrs::kName);
      if (!name)
        return fail(f, "argument " + llvm::Twine(i) + " has no ddpc.name");
      auto type =
          llvm::dyn_cast<mlir::RankedTensorType>(f.getArgument(i).getType());
      if (!type)
        return fail(f, "argument '" + name.getValue() +
                           "' is not a ranked tensor");
      auto roleAttr = f.getArgAttrOfType<mlir::StringAttr>(i, attrs::kRole);
      llvm::StringRef role = roleAttr ? roleAttr.getValue() : "input";
      if (role != "input" && role != "param" && role != "buffer" &&
          role != "rng")
        return fail(f, "argument '" + name.getValue() + "' has ddpc.role '" +
                           role + "' (input, param, buffer or rng)");
      if (role == "rng" && !(type.getRank() == 1 && type.getDimSize(0) == 2 &&
                             type.getElementType().isInteger(64)))
        return fail(f, "argument '" + name.getValue() +
                           "' (ddpc.role rng) must be tensor<2xi64>");
    }
  }
  // @forward_eval takes @forward_train's arguments but the rng (Dropout's
  // seed, inference needs none), which comes last.
  unsigned n = train.getNumArguments();
  if (n && train.getArgAttr(n - 1, attrs::kRole) ==
               mlir::StringAttr::get(train.getContext(), "rng"))
    --n;
  for (unsigned i = 0; i < n; ++i)
    if (train.getArgAttr(i, attrs::kRole) ==
        mlir::StringAttr::get(train.getContext(), "rng"))
      return fail(train, "argument " + llvm::Twine(i) +
                             " has ddpc.role rng; only the last one may");
  if (eval.getNumArguments() != n)
    return fail(eval, "must take the " + llvm::Twine(n) + " arguments of @" +
                          train.getSymName() + " (without its rng)");
  for (unsigned i = 0; i < n; ++i)
    if (train.getArgument(i).getType() != eval.getArgument(i).getType() ||
        train.getArgAttr(i, attrs::kName) != eval.getArgAttr(i, attrs::kName) ||
        train.getArgAttr(i, attrs::kRole) != eval.getArgAttr(i, attrs::kRole))
      return fail(eval, "argument " + llvm::Twine(i) + " differs from @" +
                            train.getSymName() +
                            "'s in type, ddpc.name or ddpc.role");
  (void)module;
  return mlir::success();
}

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
    if (failed(verifyForwardFunctions(module, fwdTrain, fwdEval)))
      return signalPassFailure();
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
    options.zeroStage = zeroStage;
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
    if (f.isExternal()) {
      f.emitError("ddpc-make-vjp: @main_graph is a declaration; it needs a "
                  "body");
      return signalPassFailure();
    }
    // The importer's contract: every argument and result a ranked tensor
    // with ddpc.name and ddpc.dtype (the VJP's new ones are named d_<name>).
    auto check = [&](mlir::Type type, mlir::DictionaryAttr attrs,
                     const llvm::Twine &what) {
      if (!llvm::isa<mlir::RankedTensorType>(type) || !attrs ||
          !llvm::isa_and_nonnull<mlir::StringAttr>(attrs.get(attrs::kName)) ||
          !llvm::isa_and_nonnull<mlir::IntegerAttr>(attrs.get(attrs::kDType))) {
        f.emitError() << "ddpc-make-vjp: " << what
                      << " of @main_graph needs a ranked tensor type, "
                         "ddpc.name and ddpc.dtype";
        return false;
      }
      return true;
    };
    auto fty = f.getFunctionType();
    for (unsigned i = 0; i < fty.getNumInputs(); ++i)
      if (!check(fty.getInput(i), f.getArgAttrDict(i),
                 "argument " + llvm::Twine(i)))
        return signalPassFailure();
    for (unsigned i = 0; i < fty.getNumResults(); ++i)
      if (!check(fty.getResult(i), f.getResultAttrDict(i),
                 "result " + llvm::Twine(i)))
        return signalPassFailure();
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
  o.zeroStage = options.zeroStage;
  return o;
}

std::unique_ptr<mlir::Pass>
createBuildTrainingStepPass(const BuildTrainingStepPassOptions &options,
                            TrainingProgramInfo *info) {
  return std::make_unique<BuildTrainingStepPass>(options, info);
}

void registerTrainingPasses() { registerDDPCTrainingPasses(); }

} // namespace ddpc

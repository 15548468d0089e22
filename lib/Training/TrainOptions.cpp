//===- TrainOptions.cpp - Checks of the training options ------------------===//
//
// Part of ddpc. TrainOptions::validate(), the one check of the training
// options that every front end (CLI, driver, pass, Python) shares.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Training/TrainOptions.h"

#include "TrainingInternal.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace ddpc {

std::string TrainOptions::validate() const {
  auto bad = [](const char *cli, const char *py, double v, const char *want) {
    char got[32];
    std::snprintf(got, sizeof(got), "%g", v);
    return std::string(cli) + " (TrainConfig." + py + ") must be " + want +
           ", got " + got;
  };
  auto finite32 = [](double v) {
    return std::isfinite(v) && std::fabs(v) <= FLT_MAX;
  };
  if (loss != "cross-entropy" && loss != "mse" && loss != "output")
    return "--loss (TrainConfig.loss) must be cross-entropy, mse or output, "
           "got '" +
           loss + "'";
  if (!training::findOptimizer(optimizer))
    return "--optimizer (TrainConfig.optimizer) must be " +
           training::optimizerNames(" or ") + ", got '" + optimizer + "'";
  // Options of the other optimizer: torch.optim refuses them (TypeError);
  // taking them silently would train something other than what was asked.
  if (optimizer == "adamw" && (momentum != 0 || dampening != 0 || nesterov))
    return "--momentum, --dampening and --nesterov (TrainConfig.momentum, "
           "dampening, nesterov) apply to --optimizer sgd only";
  if (optimizer == "sgd" && (beta1 != 0.9 || beta2 != 0.999 || eps != 1e-8))
    return "--betas and --eps (TrainConfig.betas, eps) apply to --optimizer "
           "adamw only";
  if (!(finite32(lr) && lr >= 0))
    return bad("--lr", "lr", lr, "a finite float32 >= 0");
  if (!(finite32(momentum) && momentum >= 0))
    return bad("--momentum", "momentum", momentum, "a finite number >= 0");
  if (!finite32(dampening))
    return bad("--dampening", "dampening", dampening, "a finite number");
  if (nesterov && (momentum <= 0 || dampening != 0))
    return "--nesterov (TrainConfig.nesterov) needs --momentum > 0 and "
           "--dampening 0, as torch.optim.SGD";
  if (!(finite32(weightDecay) && weightDecay >= 0))
    return bad("--weight-decay", "weight_decay", weightDecay,
               "a finite number >= 0");
  if (!(finite32(eps) && eps >= 0))
    return bad("--eps", "eps", eps, "a finite number >= 0");
  for (double beta : {beta1, beta2})
    if (!(beta >= 0 && beta < 1))
      return bad("--betas", "betas", beta, "in [0, 1)");
  // The program holds it as int32 (TrainABI.h).
  if (gradAccumSteps < 1 || gradAccumSteps > INT32_MAX)
    return bad("--grad-accum-steps", "grad_accum_steps",
               static_cast<double>(gradAccumSteps), "in [1, 2^31)");
  if (!(std::isfinite(bucketCapMB) && bucketCapMB > 0)) {
    char got[32];
    std::snprintf(got, sizeof(got), "%g", bucketCapMB);
    return std::string("the gradient bucket cap (--bucket-cap-mb, "
                       "TrainConfig.bucket_cap_mb) must be a positive "
                       "number of MiB, got ") +
           got;
  }
  if (zeroStage < 0 || zeroStage > 3)
    return bad("--zero-stage", "zero_stage", static_cast<double>(zeroStage),
               "0, 1, 2 or 3");
  return "";
}

} // namespace ddpc

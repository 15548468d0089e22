//===- Passes.h - Training passes (lib/Training) ----------------*- C++ -*-===//
//
// Part of ddpc. Declared in Passes.td next to this header;
// registerTrainingPasses() registers them (include/ddpc/InitAllPasses.h
// registers every area).
//
//   ddpc-build-training-step  forward functions -> @train_micro, @apply,
//                             @eval (stage "training")
//   ddpc-make-vjp             @main_graph -> its VJP (stage "vjp")
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_TRAINING_PASSES_H
#define DDPC_TRAINING_PASSES_H

#include "ddpc/Training/TrainingStep.h"

#include "mlir/Pass/Pass.h"

#include <memory>

namespace ddpc {

#define GEN_PASS_DECL
#include "ddpc/Training/Passes.h.inc"

/// The options of ddpc-build-training-step that `options` sets (what
/// buildTrainingFunctions reads of it).
BuildTrainingStepPassOptions
toBuildTrainingStepPassOptions(const TrainOptions &options);

/// ddpc-build-training-step that also hands the driver what it built: when
/// `info` is not null the pass fills it (TrainingProgramInfo: parameters,
/// data inputs, labels, notes) for the glue and the report.
std::unique_ptr<mlir::Pass>
createBuildTrainingStepPass(const BuildTrainingStepPassOptions &options,
                            TrainingProgramInfo *info);

/// Registers the passes of Passes.td with the global pass registry.
void registerTrainingPasses();

} // namespace ddpc

#endif // DDPC_TRAINING_PASSES_H

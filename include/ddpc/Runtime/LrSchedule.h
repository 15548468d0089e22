//===- LrSchedule.h - Learning-rate schedules -------------------*- C++ -*-===//
//
// The learning rate of every optimizer step (--lr-schedule, --warmup-steps),
// as torch.optim.lr_scheduler computes it when the scheduler steps once per
// optimizer step. With step index t (0 for the first step, counted across
// resumes like --stop-after-steps, skipped steps included), base rate LR and
// W warm-up steps:
//
//   t < W     LR * (f + (1 - f) * t / W)              LinearLR(start_factor=f,
//             (f = --warmup-factor,              end_factor=1,
//             default 1 / (W + 1))                     total_iters=W)
//   t >= W    the schedule at u = t - W:               SequentialLR(
//                                                        milestones=[W])
//     constant  LR
//     step      LR * gamma^floor(u / step_size)         StepLR
//     cosine    min + (LR - min) * (1 + cos(pi * v / D)) / 2,
//               v = min(u, D)                           CosineAnnealingLR(
//                                                        T_max=D, eta_min=min)
//     linear    LR * (1 - min(u, D) / D) LinearLR(start_factor=1,
//                                                        end_factor=0,
//                                                        total_iters=D)
//
// D is --lr-decay-steps, by default the run's steps after warm-up
// (max(1, epochs * steps per epoch - W)). Past D, cosine stays at min and
// linear at 0 (torch's CosineAnnealingLR would rise again).
//
// No MLIR, LLVM or MPI here: this is linked into the emitted programs.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_RUNTIME_LRSCHEDULE_H
#define DDPC_RUNTIME_LRSCHEDULE_H

#include <cstdint>
#include <string>

namespace ddpc::runtime {

/// One run's schedule (the options above).
struct LrSchedule {
  enum class Kind { Constant, Step, Cosine, Linear } kind = Kind::Constant;
  double baseLr = 0;
  int64_t warmupSteps = 0;
  /// LinearLR's start_factor for the warm-up; < 0: 1 / (warmupSteps + 1).
  double warmupStartFactor = -1;
  int64_t stepSize = 0; ///< step: steps between decays (>= 1)
  double gamma = 0.1;   ///< step: the decay factor
  double minLr = 0;     ///< cosine: eta_min
  /// cosine, linear: steps of decay after warm-up; < 0: the run's.
  int64_t decaySteps = -1;
};

/// The learning rate of step `t` (0-based) of a run of `totalSteps` steps.
double scheduledLr(const LrSchedule &s, int64_t t, int64_t totalSteps);

/// "constant", "step", "cosine" or "linear".
const char *lrScheduleName(LrSchedule::Kind kind);

} // namespace ddpc::runtime

#endif // DDPC_RUNTIME_LRSCHEDULE_H

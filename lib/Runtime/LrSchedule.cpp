//===- LrSchedule.cpp - Learning-rate schedules of training programs ------===//
//
// The closed forms of LrSchedule.h. torch's schedulers update the rate
// recursively (each step multiplies the last one); the closed form is the
// same rate up to float64 rounding, and the program passes a float32.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/LrSchedule.h"

#include <algorithm>
#include <cmath>

namespace ddpc::runtime {

double scheduledLr(const LrSchedule &s, int64_t t, int64_t totalSteps) {
  const double lr = s.baseLr;
  const int64_t w = std::max<int64_t>(0, s.warmupSteps);
  if (t < w) {
    double f = s.warmupStartFactor >= 0 ? s.warmupStartFactor
                                        : 1.0 / static_cast<double>(w + 1);
    return lr * (f + (1 - f) * static_cast<double>(t) / static_cast<double>(w));
  }
  const int64_t u = t - w;
  const int64_t d =
      s.decaySteps >= 1 ? s.decaySteps : std::max<int64_t>(1, totalSteps - w);
  const double progress =
      static_cast<double>(std::min(u, d)) / static_cast<double>(d);
  switch (s.kind) {
  case LrSchedule::Kind::Constant:
    return lr;
  case LrSchedule::Kind::Step:
    return lr * std::pow(s.gamma, static_cast<double>(
                                      u / std::max<int64_t>(1, s.stepSize)));
  case LrSchedule::Kind::Cosine:
    return s.minLr + (lr - s.minLr) * (1 + std::cos(M_PI * progress)) / 2;
  case LrSchedule::Kind::Linear:
    return lr * (1 - progress);
  }
  return lr;
}

const char *lrScheduleName(LrSchedule::Kind kind) {
  switch (kind) {
  case LrSchedule::Kind::Constant:
    return "constant";
  case LrSchedule::Kind::Step:
    return "step";
  case LrSchedule::Kind::Cosine:
    return "cosine";
  case LrSchedule::Kind::Linear:
    return "linear";
  }
  return "constant";
}

} // namespace ddpc::runtime

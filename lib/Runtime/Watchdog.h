//===- Watchdog.h - polling a collective against a timeout ------*- C++ -*-===//
//
// Part of ddpc's runtime (internal): the wait loop of the process group's
// MPI collectives (ProcessGroup.cpp), in both runtimes.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_LIB_RUNTIME_WATCHDOG_H
#define DDPC_LIB_RUNTIME_WATCHDOG_H

#include "ddpc/Runtime/Collectives.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

namespace ddpc {
namespace runtime {

/// Calls `test()` (true once the operation completed) until it succeeds;
/// ends the job with fatalError("<what> did not complete within T s; a peer
/// rank has probably died") after `timeoutSeconds`. Spins briefly first
/// (collectives of small steps finish in microseconds), then sleeps with a
/// growing interval capped at 1 ms.
template <typename Test>
void waitWithWatchdog(Test test, double timeoutSeconds, const char *what) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point start = Clock::now();
  auto limit = std::chrono::duration<double>(timeoutSeconds);
  int sleepMicros = 0;
  for (int iter = 0;; ++iter) {
    if (test())
      return;
    if (Clock::now() - start > limit) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", timeoutSeconds);
      fatalError(std::string(what) + " did not complete within " + secs +
                 " s; a peer rank has probably died");
    }
    if (iter < 2000)
      continue;
    sleepMicros = std::min(1000, std::max(10, sleepMicros * 2));
    std::this_thread::sleep_for(std::chrono::microseconds(sleepMicros));
  }
}

} // namespace runtime
} // namespace ddpc

#endif // DDPC_LIB_RUNTIME_WATCHDOG_H

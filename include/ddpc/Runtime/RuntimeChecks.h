//===- RuntimeChecks.h - errors compiled code reports at run time -*- C++
//-*-===//
//
// Part of ddpc. Compiled code does not exit: a check that fails (an index
// out of range, ModelABI.h's ddpc_rt_check_indices) records one message,
// the step function runs to its end with clamped (in-bounds) reads, and
// the caller reports the message after the function returns: the programs'
// mains end with `error: rank R: <message>` before using any result, and
// Program.run raises IndexError. On the CUDA target the checked values are
// copied back asynchronously and examined at the next host synchronization
// (which every step function does before it returns). Plain C++, no MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_RUNTIME_RUNTIMECHECKS_H
#define DDPC_RUNTIME_RUNTIMECHECKS_H

#include <cstdint>
#include <string>

namespace ddpc {
namespace runtime {

/// Records `message` for the calling thread unless an earlier one is
/// pending there (the first wins).
void recordRuntimeError(const std::string &message);

/// The message for indices whose smallest value is `min` and largest is
/// `max`, checked against [-bound, bound) for `what` (ModelABI.h), or ""
/// when they are in range: "index 12 is out of range in <what>: the axis
/// has size 11, valid indices are -11..10", naming the largest index when
/// it is too large, else the smallest.
std::string indexRangeError(int64_t min, int64_t max, int64_t bound,
                            const char *what);

/// The message of a count check (ddpc_rt_check_count), or "" for 0:
/// "<what> (3 elements)".
std::string countError(int64_t count, const char *what);

} // namespace runtime
} // namespace ddpc

#endif // DDPC_RUNTIME_RUNTIMECHECKS_H

//===- RuntimeChecks.cpp - errors compiled code reports at run time -------===//
//
// Part of ddpc. See RuntimeChecks.h. Linked into every runtime archive.
// The pending message is per thread: compiled code reports to the thread
// that called it, so two threads running one Program each get their own.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/RuntimeChecks.h"

#include "ddpc/Runtime/ModelABI.h"

namespace ddpc {
namespace runtime {

namespace {
/// The pending message ("" when none) and the one last handed out.
thread_local std::string pending, taken;
} // namespace

void recordRuntimeError(const std::string &message) {
  if (pending.empty())
    pending = message;
}

std::string indexRangeError(int64_t min, int64_t max, int64_t bound,
                            const char *what) {
  if (min >= -bound && max < bound)
    return "";
  int64_t bad = max >= bound ? max : min;
  return "index " + std::to_string(bad) + " is out of range in " +
         (what ? what : "an index input") + ": the axis has size " +
         std::to_string(bound) + ", valid indices are " +
         std::to_string(-bound) + ".." + std::to_string(bound - 1);
}

std::string countError(int64_t count, const char *what) {
  if (count == 0)
    return "";
  return std::string(what ? what : "a run-time check failed") + " (" +
         std::to_string(count) + (count == 1 ? " element)" : " elements)");
}

} // namespace runtime
} // namespace ddpc

extern "C" const char *ddpc_rt_take_error(void) {
  using namespace ddpc::runtime;
  if (pending.empty())
    return nullptr;
  taken = pending;
  pending.clear();
  return taken.c_str();
}

//===- HostChecks.cpp - run-time checks of the CPU targets ----------------===//
//
// Part of ddpc. ddpc_rt_check_indices and ddpc_rt_check_count (ModelABI.h)
// for programs whose
// compiled code runs on the host (the CPU and cuda-emulate targets): the
// checked values are in host memory and are read at once. The CUDA runtime
// has its own (CUDA/CudaDevice.cpp).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/ModelABI.h"
#include "ddpc/Runtime/RuntimeChecks.h"

extern "C" void ddpc_rt_check_indices(const int64_t *min, const int64_t *max,
                                      int64_t bound, const char *what) {
  std::string message = ddpc::runtime::indexRangeError(*min, *max, bound, what);
  if (!message.empty())
    ddpc::runtime::recordRuntimeError(message);
}

extern "C" void ddpc_rt_check_count(const int64_t *count, const char *what) {
  std::string message = ddpc::runtime::countError(*count, what);
  if (!message.empty())
    ddpc::runtime::recordRuntimeError(message);
}

//===- ConstantCopies.h - one copy of the packed constants -----*- C++ -*-===//
//
// ddpc-device-constants packs the constant tensors a function reads into one
// host array and calls ddpc_device_constants(host, bytes) at its top; the
// GPU runtimes answer with a copy made once per process (the CUDA runtime:
// device memory; cuda-emulate: a separate host buffer).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_RUNTIME_CONSTANTCOPIES_H
#define DDPC_RUNTIME_CONSTANTCOPIES_H

#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace ddpc {
namespace runtime {

/// The copy of the `bytes` bytes at `host`: made by `make(host, bytes)` on
/// the first call for that address (which must not return null; it reports
/// its own errors), then returned. Thread-safe; copies are never freed.
inline void *onceCopiedConstants(const void *host, int64_t bytes,
                                 void *(*make)(const void *, int64_t)) {
  static std::mutex mutex;
  static auto *copies = new std::unordered_map<const void *, void *>;
  std::lock_guard<std::mutex> lock(mutex);
  void *&copy = (*copies)[host];
  if (!copy)
    copy = make(host, bytes);
  return copy;
}

} // namespace runtime
} // namespace ddpc

#endif // DDPC_RUNTIME_CONSTANTCOPIES_H

//===- HostMemory.cpp - runtime buffers of the CPU target -----------------===//
//
// See Memory.h.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/Memory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace ddpc {
namespace runtime {

void *allocateBuffer(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + kBufferAlignment - 1) /
                   kBufferAlignment * kBufferAlignment;
  void *ptr = std::aligned_alloc(kBufferAlignment, rounded);
  if (ptr)
    std::memset(ptr, 0, rounded);
  return ptr;
}

void freeBuffer(void *ptr) { std::free(ptr); }

void *allocateHostShared(size_t bytes) { return allocateBuffer(bytes); }

void freeHostShared(void *ptr) { freeBuffer(ptr); }

void zeroBuffer(void *ptr, size_t bytes) { std::memset(ptr, 0, bytes); }

void *allocateStaging(size_t bytes) { return allocateBuffer(bytes); }

void freeStaging(void *ptr) { freeBuffer(ptr); }

uint64_t copyFromStaging(void *dst, const void *src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  return 0;
}

void waitStagingCopy(uint64_t) {}

} // namespace runtime
} // namespace ddpc

//===- HostMemory.cpp - runtime buffers of the CPU target -----------------===//
//
// See Memory.h. Also the allocation functions of finalize-memref-to-llvm
// with use-generic-functions, which the CPU lowering selects so that the
// compiled code's temporaries are counted with the runtime's buffers.
// Every block is counted by malloc_usable_size, so that a release
// subtracts exactly what its allocation added.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/Memory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <malloc.h>

namespace ddpc {
namespace runtime {

namespace {
/// `bytes` (at least 1) rounded up to `alignment`, from aligned_alloc.
void *countedAlloc(size_t alignment, size_t bytes) {
  size_t rounded =
      (std::max<size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
  void *ptr = std::aligned_alloc(alignment, rounded);
  if (ptr)
    countAllocation(static_cast<int64_t>(malloc_usable_size(ptr)));
  return ptr;
}

void countedFree(void *ptr) {
  if (!ptr)
    return;
  countAllocation(-static_cast<int64_t>(malloc_usable_size(ptr)));
  std::free(ptr);
}
} // namespace

void *allocateBuffer(size_t bytes) {
  void *ptr = countedAlloc(kBufferAlignment, bytes);
  if (ptr)
    std::memset(ptr, 0, malloc_usable_size(ptr));
  return ptr;
}

void freeBuffer(void *ptr) { countedFree(ptr); }

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

extern "C" {

// finalize-memref-to-llvm{use-generic-functions use-aligned-alloc}: the
// compiled code's allocations (at least 16-byte aligned, as malloc's).
void *_mlir_memref_to_llvm_alloc(size_t size) {
  return ddpc::runtime::countedAlloc(16, size);
}

void *_mlir_memref_to_llvm_aligned_alloc(size_t alignment, size_t size) {
  return ddpc::runtime::countedAlloc(std::max<size_t>(alignment, 16), size);
}

void _mlir_memref_to_llvm_free(void *ptr) { ddpc::runtime::countedFree(ptr); }

} // extern "C"

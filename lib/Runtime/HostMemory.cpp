//===- HostMemory.cpp - runtime buffers of the CPU target -----------------===//
//
// See Memory.h. Also the allocation functions of finalize-memref-to-llvm
// with use-generic-functions, which the CPU lowering selects so that the
// compiled code's temporaries are counted with the runtime's buffers.
// Every block is counted as the bytes asked for, rounded up to its
// alignment (what the memory plan predicts), not malloc's own overhead;
// the count sits in a header in front of the block, so that a release
// subtracts exactly what its allocation added.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/Memory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace ddpc {
namespace runtime {

namespace {
/// The header in front of each counted block: its counted bytes and the
/// offset back to the start of the malloc'ed memory.
struct BlockHeader {
  int64_t bytes;
  int64_t offset;
};

/// `bytes` (at least 1) rounded up to `alignment`, `alignment`-aligned,
/// with a BlockHeader in front; nullptr when out of memory.
void *countedAlloc(size_t alignment, size_t bytes) {
  alignment = std::max<size_t>(alignment, alignof(BlockHeader));
  size_t rounded =
      (std::max<size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
  size_t offset = (sizeof(BlockHeader) + alignment - 1) / alignment * alignment;
  char *raw =
      static_cast<char *>(std::aligned_alloc(alignment, offset + rounded));
  if (!raw)
    return nullptr;
  char *ptr = raw + offset;
  auto *header = reinterpret_cast<BlockHeader *>(ptr) - 1;
  header->bytes = static_cast<int64_t>(rounded);
  header->offset = static_cast<int64_t>(offset);
  countAllocation(header->bytes);
  return ptr;
}

/// The counted bytes of a block from countedAlloc.
size_t countedSize(void *ptr) {
  return static_cast<size_t>((static_cast<BlockHeader *>(ptr) - 1)->bytes);
}

void countedFree(void *ptr) {
  if (!ptr)
    return;
  BlockHeader header = *(static_cast<BlockHeader *>(ptr) - 1);
  countAllocation(-header.bytes);
  std::free(static_cast<char *>(ptr) - header.offset);
}
} // namespace

void *allocateBuffer(size_t bytes) {
  void *ptr = countedAlloc(kBufferAlignment, bytes);
  if (ptr)
    std::memset(ptr, 0, countedSize(ptr));
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

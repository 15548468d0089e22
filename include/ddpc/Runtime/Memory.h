//===- Memory.h - runtime buffers shared with compiled code ----*- C++ -*-===//
//
// Every tensor the runtime hands to compiled code (inputs, outputs,
// parameters, optimizer state, scalars) is allocated here, so that each
// target can put it where its kernels can read it:
//   CPU target  (HostMemory.cpp):  std::aligned_alloc, 64-byte aligned.
//   CUDA target (CUDA/CudaMemory.cpp): cudaMallocManaged on the rank's
//       device (readable by the host after the compiled function returned,
//       which waits for the device).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_RUNTIME_MEMORY_H
#define DDPC_RUNTIME_MEMORY_H

#include <atomic>
#include <cstddef>
#include <cstdint>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ddpc {
namespace runtime {

/// Alignment of every buffer, in bytes.
constexpr size_t kBufferAlignment = 64;

/// Makes glibc's malloc keep freed host memory for the next allocation
/// instead of returning it to the kernel: blocks up to 32 MiB (glibc's
/// largest M_MMAP_THRESHOLD) come from the heap, and up to 1 GiB of free
/// heap top is kept (M_TRIM_THRESHOLD). Every step frees and reallocates
/// the same temporaries; returned memory cost a page fault and a zeroed
/// page per 4 KiB on each reuse (docs/cpu-speed.md). The peak resident set is
/// unchanged. Called first by the programs' main(); not by the shared library,
/// whose host process owns malloc's settings. No-op where mallopt is
/// unavailable.
inline void keepFreedHostMemory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

/// Allocates max(bytes, 1) bytes rounded up to kBufferAlignment, zero-filled.
/// Returns nullptr when out of memory (callers report it).
void *allocateBuffer(size_t bytes);

/// Frees a buffer from allocateBuffer (nullptr is ignored).
void freeBuffer(void *ptr);

/// A small buffer the host reads or writes around every compiled call (the
/// loss, the correct count, the learning rate, step and loss scale, the RNG
/// input), zero-filled, aligned like allocateBuffer; nullptr when out of
/// memory. CPU: allocateBuffer. CUDA: page-locked host memory
/// (cudaMallocHost), which kernels read and write directly through unified
/// addressing. Managed memory would move the whole page on each host
/// access, taking along the small parameters allocated next to it, and the
/// next kernels reading those would stall on page faults.
void *allocateHostShared(size_t bytes);

/// Frees a buffer from allocateHostShared (nullptr is ignored).
void freeHostShared(void *ptr);

/// Sets `bytes` bytes of a buffer from allocateBuffer to zero, ordered
/// before compiled code called afterwards (CUDA: cudaMemsetAsync on the
/// compute stream, so the host never touches device-resident pages).
void zeroBuffer(void *ptr, size_t bytes);

/// Host staging memory for input batches, filled by the prefetch thread:
/// page-locked on CUDA (cudaMallocHost), so copies from it are
/// asynchronous DMA; allocateBuffer memory on the CPU. nullptr when out of
/// memory.
void *allocateStaging(size_t bytes);
void freeStaging(void *ptr);

/// Copies `bytes` from staging memory into a buffer from allocateBuffer,
/// ordered before compiled code called afterwards (CUDA: cudaMemcpyAsync on
/// the compute stream). Returns a token for waitStagingCopy.
uint64_t copyFromStaging(void *dst, const void *src, size_t bytes);

/// Blocks until the copy of `token` has read its source, so the staging
/// memory may be refilled. Immediate on the CPU.
void waitStagingCopy(uint64_t token);

/// The allocation count every allocator of this header and the compiled
/// code's (_mlir_memref_to_llvm_*) keeps: bytes held now and the most ever
/// held, for the high-water mark the training runtime reports at exit
/// beside the compiler's memory plan (Analysis/MemoryPlan.h). `delta` is
/// positive for an allocation, negative for a release.
inline std::atomic<int64_t> gHeldBytes{0};
inline std::atomic<int64_t> gPeakHeldBytes{0};
inline void countAllocation(int64_t delta) {
  int64_t now = gHeldBytes.fetch_add(delta, std::memory_order_relaxed) + delta;
  int64_t peak = gPeakHeldBytes.load(std::memory_order_relaxed);
  while (now > peak && !gPeakHeldBytes.compare_exchange_weak(
                           peak, now, std::memory_order_relaxed))
    ;
}
inline int64_t peakAllocatedBytes() {
  return gPeakHeldBytes.load(std::memory_order_relaxed);
}

} // namespace runtime
} // namespace ddpc

#endif // DDPC_RUNTIME_MEMORY_H

//===- CudaMemory.cpp - allocators of the CUDA runtime -----------------===//
//
// Part of ddpc's CUDA runtime:
//   * the allocation functions of finalize-memref-to-llvm with
//     use-generic-functions (_mlir_memref_to_llvm_alloc/aligned_alloc/free):
//     a caching allocator over cudaMallocManaged. Freed blocks are kept per
//     size and reused; reuse is safe without synchronization because all
//     device work is ordered on the one compute stream;
//   * Memory.h for the runtime's own buffers (cudaMallocManaged), the
//     page-locked staging buffers of input batches and their copies;
//     both count what they hold (countAllocation; cached free blocks of
//     the pool are not counted);
//   * ddpc_device_constants (one device copy of the packed constants).
//
//===----------------------------------------------------------------------===//

#include "CudaRuntime.h"

#include "ddpc/Runtime/Collectives.h"
#include "ddpc/Runtime/ConstantCopies.h"
#include "ddpc/Runtime/Memory.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

namespace ddpc {
namespace runtime {
namespace cuda {

/// Managed memory that the device computes on: keeps its pages on the
/// device (cudaMemAdviseSetPreferredLocation), so that an occasional host
/// access (a checkpoint, a metric) migrates them back instead of letting the
/// driver's thrashing heuristics pin them to host memory, where every kernel
/// would reach them over the bus; with `prefetch`, moves them there now
/// (ordered on the compute stream). Hints only: without concurrent managed
/// access support, or on any error, nothing is done.
void preferDevice(void *ptr, size_t bytes, bool prefetch) {
  static const bool supported = [] {
    int value = 0;
    return cudaDeviceGetAttribute(&value, cudaDevAttrConcurrentManagedAccess,
                                  device()) == cudaSuccess &&
           value != 0;
  }();
  if (!supported || !ptr || bytes == 0)
    return;
  cudaMemLocation location{};
  location.type = cudaMemLocationTypeDevice;
  location.id = device();
  if (cudaMemAdvise(ptr, bytes, cudaMemAdviseSetPreferredLocation, location) !=
          cudaSuccess ||
      (prefetch && cudaMemPrefetchAsync(ptr, bytes, location, 0,
                                        computeStream()) != cudaSuccess))
    (void)cudaGetLastError(); // A hint: clear the error, go on.
}

} // namespace cuda

//===----------------------------------------------------------------------===//
// Memory.h: the runtime's buffers
//===----------------------------------------------------------------------===//

/// The sizes of the runtime's live buffers, for countAllocation.
static std::mutex gSizesMutex;
static std::unordered_map<void *, size_t> gSizes;

static void *counted(void *ptr, size_t bytes) {
  if (ptr) {
    std::lock_guard<std::mutex> lock(gSizesMutex);
    gSizes[ptr] = bytes;
    countAllocation(static_cast<int64_t>(bytes));
  }
  return ptr;
}

static void uncount(void *ptr) {
  std::lock_guard<std::mutex> lock(gSizesMutex);
  auto it = gSizes.find(ptr);
  if (it == gSizes.end())
    return;
  countAllocation(-static_cast<int64_t>(it->second));
  gSizes.erase(it);
}

void *allocateBuffer(size_t bytes) {
  cuda::ensureDevice();
  size_t rounded = (std::max<size_t>(bytes, 1) + kBufferAlignment - 1) /
                   kBufferAlignment * kBufferAlignment;
  void *ptr = nullptr;
  if (cudaMallocManaged(&ptr, rounded, cudaMemAttachGlobal) != cudaSuccess)
    return nullptr;
  std::memset(ptr, 0, rounded);
  // Parameters, gradients, optimizer state and input batches live on the
  // device, however small (the per-step scalars the host touches come from
  // allocateHostShared). No prefetch: the host fills most of them first.
  cuda::preferDevice(ptr, rounded, /*prefetch=*/false);
  return counted(ptr, rounded);
}

void *allocateHostShared(size_t bytes) {
  cuda::ensureDevice();
  size_t rounded = (std::max<size_t>(bytes, 1) + kBufferAlignment - 1) /
                   kBufferAlignment * kBufferAlignment;
  void *ptr = nullptr;
  if (cudaMallocHost(&ptr, rounded) != cudaSuccess)
    return nullptr;
  std::memset(ptr, 0, rounded);
  return counted(ptr, rounded);
}

/// Frees `ptr` with `release` once the compiled work that may still read it
/// (queued on the compute stream) is done.
static void freeAfterQueuedWork(void *ptr, cudaError_t (*release)(void *),
                                const char *what) {
  if (!ptr)
    return;
  uncount(ptr);
  cuda::check(cudaStreamSynchronize(cuda::computeStream()),
              "cudaStreamSynchronize");
  cuda::check(release(ptr), what);
}

void freeHostShared(void *ptr) {
  freeAfterQueuedWork(ptr, cudaFreeHost, "cudaFreeHost");
}

void freeBuffer(void *ptr) { freeAfterQueuedWork(ptr, cudaFree, "cudaFree"); }

void zeroBuffer(void *ptr, size_t bytes) {
  cuda::check(cudaMemsetAsync(ptr, 0, bytes, cuda::computeStream()),
              "cudaMemsetAsync");
}

void *allocateStaging(size_t bytes) {
  cuda::ensureDevice();
  void *ptr = nullptr;
  if (cudaMallocHost(&ptr, std::max<size_t>(bytes, 1)) != cudaSuccess)
    return nullptr;
  return counted(ptr, std::max<size_t>(bytes, 1));
}

void freeStaging(void *ptr) {
  if (!ptr)
    return;
  uncount(ptr);
  cuda::check(cudaFreeHost(ptr), "cudaFreeHost");
}

uint64_t copyFromStaging(void *dst, const void *src, size_t bytes) {
  cudaStream_t stream = cuda::computeStream();
  cudaEvent_t done;
  cuda::check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
              "cudaEventCreateWithFlags");
  cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync (input batch)");
  cuda::check(cudaEventRecord(done, stream), "cudaEventRecord");
  return reinterpret_cast<uint64_t>(done);
}

void waitStagingCopy(uint64_t token) {
  auto done = reinterpret_cast<cudaEvent_t>(token);
  for (;;) {
    cudaError_t rc = cudaEventQuery(done);
    if (rc == cudaSuccess)
      break;
    if (rc != cudaErrorNotReady)
      cuda::check(rc, "cudaEventQuery (input batch copy)");
    cuda::pollCollectives();
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  cuda::check(cudaEventDestroy(done), "cudaEventDestroy");
}

} // namespace runtime
} // namespace ddpc

using namespace ddpc::runtime;
using namespace ddpc::runtime::cuda;

namespace {

//===----------------------------------------------------------------------===//
// Caching allocator for compiled code
//===----------------------------------------------------------------------===//

/// Blocks are multiples of 256 bytes (cudaMallocManaged returns 256-byte
/// aligned memory, more than any alignment the compiled code asks for).
constexpr size_t kBlock = 256;

struct Pool {
  std::mutex mutex;
  std::unordered_map<void *, size_t> live;
  std::multimap<size_t, void *> cached;

  void *allocate(size_t bytes) {
    size_t size = (std::max<size_t>(bytes, 1) + kBlock - 1) / kBlock * kBlock;
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cached.find(size);
    if (it != cached.end()) {
      void *ptr = it->second;
      cached.erase(it);
      live.emplace(ptr, size);
      countAllocation(static_cast<int64_t>(size));
      return ptr;
    }
    ensureDevice();
    void *ptr = nullptr;
    if (cudaMallocManaged(&ptr, size, cudaMemAttachGlobal) != cudaSuccess) {
      (void)cudaGetLastError();
      // Give the cached blocks back and retry once.
      check(cudaStreamSynchronize(computeStream()), "cudaStreamSynchronize");
      for (auto &entry : cached)
        check(cudaFree(entry.second), "cudaFree");
      cached.clear();
      check(cudaMallocManaged(&ptr, size, cudaMemAttachGlobal),
            ("cudaMallocManaged(" + std::to_string(size) + " bytes)").c_str());
    }
    // Compiled code's arenas and temporaries: device memory in all but name.
    preferDevice(ptr, size, /*prefetch=*/true);
    live.emplace(ptr, size);
    countAllocation(static_cast<int64_t>(size));
    return ptr;
  }

  void release(void *ptr) {
    if (!ptr)
      return;
    std::lock_guard<std::mutex> lock(mutex);
    auto it = live.find(ptr);
    if (it == live.end())
      return; // Not ours (a runtime buffer); never freed by compiled code.
    // Counted as released: the high-water mark is what compiled code held,
    // not what the cache keeps for reuse.
    countAllocation(-static_cast<int64_t>(it->second));
    cached.emplace(it->second, ptr);
    live.erase(it);
  }
};

Pool &pool() {
  static Pool *p = new Pool; // Never destroyed: used until exit.
  return *p;
}

} // namespace

extern "C" {

//===----------------------------------------------------------------------===//
// finalize-memref-to-llvm{use-generic-functions}
//===----------------------------------------------------------------------===//

void *_mlir_memref_to_llvm_alloc(size_t size) { return pool().allocate(size); }

void *_mlir_memref_to_llvm_aligned_alloc(size_t alignment, size_t size) {
  if (alignment > kBlock)
    fatalError("compiled code asked for " + std::to_string(alignment) +
               "-byte alignment; the CUDA allocator provides 256");
  return pool().allocate(size);
}

void _mlir_memref_to_llvm_free(void *ptr) { pool().release(ptr); }

/// ddpc-device-constants: the packed constant tensors at `host` (`bytes`
/// bytes), copied to the device on the first call and returned from then on
/// (one copy per process; never freed). Managed memory kept on the device,
/// so host code may still read a constant.
void *ddpc_device_constants(const void *host, int64_t bytes) {
  return onceCopiedConstants(host, bytes, [](const void *src, int64_t n) {
    ensureDevice();
    void *copy = nullptr;
    size_t size = std::max<size_t>(static_cast<size_t>(n), 1);
    check(cudaMallocManaged(&copy, size, cudaMemAttachGlobal),
          ("cudaMallocManaged(" + std::to_string(size) +
           " bytes of constant tensors)")
              .c_str());
    preferDevice(copy, size, /*prefetch=*/false);
    // Ordered before every kernel: the compute stream waits for it.
    check(cudaMemcpyAsync(copy, src, static_cast<size_t>(n),
                          cudaMemcpyHostToDevice, computeStream()),
          "cudaMemcpyAsync (constant tensors)");
    check(cudaStreamSynchronize(computeStream()),
          "cudaStreamSynchronize (constant tensors)");
    return copy;
  });
}

} // extern "C"

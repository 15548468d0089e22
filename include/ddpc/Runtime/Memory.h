//===- Memory.h - runtime buffers shared with compiled code ----*- C++ -*-===//
//
// Every tensor the runtime hands to compiled code (inputs, outputs,
// parameters, optimizer state, scalars) is allocated here, so that each
// target can put it where its kernels can read it:
//   CPU target  (HostMemory.cpp):  std::aligned_alloc, 64-byte aligned.
//   CUDA target (CUDA/CudaRuntime.cpp): cudaMallocManaged on the rank's
//       device (readable by the host after the compiled function returned,
//       which waits for the device).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_RUNTIME_MEMORY_H
#define DDPC_RUNTIME_MEMORY_H

#include <cstddef>

namespace ddpc {
namespace runtime {

/// Alignment of every buffer, in bytes.
constexpr size_t kBufferAlignment = 64;

/// Allocates max(bytes, 1) bytes rounded up to kBufferAlignment, zero-filled.
/// Returns nullptr when out of memory (callers report it).
void *allocateBuffer(size_t bytes);

/// Frees a buffer from allocateBuffer (nullptr is ignored).
void freeBuffer(void *ptr);

} // namespace runtime
} // namespace ddpc

#endif // DDPC_RUNTIME_MEMORY_H

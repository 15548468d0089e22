//===- CudaRuntime.h - CUDA runtime internals -------------------*- C++ -*-===//
//
// Part of ddpc's CUDA runtime (libddpc_cuda_runtime.a and
// libddpc_cuda_train_runtime.a). Not installed; compiled code sees only the
// C entry points. The files:
//   CudaDevice.cpp       device, stream, driver API, kernel launches (mgpu*),
//                        ddpc_gpu_host_sync and the index checks it examines
//   CudaMemory.cpp       allocators (_mlir_memref_to_llvm_*, Memory.h),
//                        ddpc_device_constants
//   CudaProfiler.cpp     DDPC_CUDA_PROFILE=1
//   CudaBlas.cpp         ddpc_gemm_f32, ddpc_gemm_bias_act_f32 (cuBLAS(Lt))
//   CudnnConv.cpp        ddpc_conv2d_f32 and its gradients (cuDNN)
//   CudaCollectives.cpp  NCCL, ddpc_rt_allreduce_sum_f32, ddpc_rt_bucket_*
//
// One process per GPU: the device is the local rank (from the launcher's
// environment: OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID or
// LOCAL_RANK; 0 without a launcher) modulo the number of visible devices.
// All compiled work runs in order on one compute stream; gradient
// allreduces run on a communication stream ordered with events.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_LIB_RUNTIME_CUDA_CUDARUNTIME_H
#define DDPC_LIB_RUNTIME_CUDA_CUDARUNTIME_H

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace ddpc {
namespace runtime {
namespace cuda {

/// Local rank from the launcher's environment (0 when not launched).
int localRankFromEnvironment();

/// Selects the rank's device and creates the compute stream on first use.
/// Ends the job (fatalError) when no device is usable.
void ensureDevice();

/// The device chosen by ensureDevice().
int device();

/// The stream all compiled kernels, GEMMs and allocations are ordered on.
cudaStream_t computeStream();

/// Ends the job: "CUDA call <call> failed: <message>" (rank prefixed by
/// fatalError).
[[noreturn]] void callFailed(const char *call, const std::string &message);

/// Checks a CUDA runtime API result.
void check(cudaError_t result, const char *call);

/// Managed memory the device computes on: keeps its pages on the device
/// (a hint; nothing is done without concurrent managed access), and with
/// `prefetch` moves them there now, ordered on the compute stream.
void preferDevice(void *ptr, size_t bytes, bool prefetch);

/// Whether the program was compiled with --precision tf32 (the glue's
/// ddpc_math_mode, RuntimeSymbols.h kGlueMathMode): cuBLAS(Lt) and cuDNN
/// may then use TF32 tensor-core math for float32 data. DDPC_TF32=0 or 1
/// overrides it.
bool allowTF32();

/// DDPC_CUDA_SYNC_CHECK=1: library calls and launches wait for the device
/// and check it (checkCompleted) so a failure is named.
bool syncCheck();

/// In DDPC_CUDA_SYNC_CHECK mode: waits for the compute stream and ends the
/// job naming `what` if the device reported an error; no-op otherwise.
void checkCompleted(const std::string &what);

/// DDPC_CUDA_PROFILE=1: whether device work is timed; profileBegin/End
/// bracket one piece of it on the compute stream (events), reported per
/// name at exit.
bool profiling();
size_t profileBegin(const std::string &name);
void profileEnd(size_t token);

/// Called while the host waits for the compute stream: checks NCCL for
/// asynchronous errors and pending allreduces against the collective
/// timeout (CudaCollectives.cpp). Ends the job on failure.
void pollCollectives();

} // namespace cuda
} // namespace runtime
} // namespace ddpc

#endif // DDPC_LIB_RUNTIME_CUDA_CUDARUNTIME_H

//===- CudaCollectives.cpp - process group of CUDA programs: MPI + NCCL ---===//
//
// Part of ddpc. Implements Collectives.h for programs compiled with
// `--target cuda`, and the collectives of TrainABI.h that compiled code
// calls: ddpc_rt_allreduce_sum_f32 and the gradient buckets ddpc_rt_bucket_*.
//
// * The process group is the CPU runtime's (ProcessGroup.h). A program
//   started without a launcher is a single rank and never loads MPI; under
//   mpirun/srun it loads Open MPI with dlopen (MpiLoaded.cpp), so the
//   executable has no link-time dependency on MPI.
// * Gradients (device memory) are summed with NCCL. The communicator is
//   bootstrapped by broadcasting rank 0's ncclUniqueId over MPI. Each
//   gradient bucket is one NCCL group of in-place allreduces on a
//   communication stream, after an event recorded on the compute stream;
//   the compute stream goes on with backward and waits for an event
//   recorded after the last bucket only at the end of the step function
//   (ddpc_rt_bucket_allreduce_wait), so the buckets overlap backward.
//   ddpc_rt_allreduce_sum_f32 (SyncBatchNorm) is ordered the same way but
//   waited for at once.
// * Host-side values (metrics, checkpoint agreement) go through the
//   process group's MPI collectives, as in the CPU runtime.
// * While the host waits for the device (ddpc_gpu_host_sync), pending
//   allreduces are checked: ncclCommGetAsyncError reports a failed peer; an
//   allreduce pending longer than the timeout means a peer hangs or died.
//   Either way the communicator is aborted (ncclCommAbort) and the job ends
//   with the rank and the reason, on every rank that sees it.
//
//===----------------------------------------------------------------------===//

#include "CudaRuntime.h"

#include "ddpc/Runtime/Collectives.h"
#include "ddpc/Runtime/TrainABI.h"

#include "../ProcessGroup.h"
#include "../ZeroShard.h"

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace ddpc {
namespace runtime {

namespace {

using Clock = std::chrono::steady_clock;

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

//===----------------------------------------------------------------------===//
// NCCL
//===----------------------------------------------------------------------===//

ncclComm_t gComm = nullptr;
cudaStream_t gCommStream = nullptr;
cudaEvent_t gComputeReady = nullptr, gCommDone = nullptr;
/// When the oldest allreduce that may still be pending was enqueued.
bool gPending = false;
Clock::time_point gPendingSince;
/// Gradient buckets: whether this micro-batch synchronizes, the gradients
/// of the bucket being filled, and whether a bucket is in flight.
bool gGradientSync = false;
std::vector<std::pair<float *, int64_t>> gBucket;
bool gBucketsInFlight = false;
/// DDPC_NCCL_SELF_TEST=1 on a single rank: a 1-rank NCCL communicator, so
/// the gradient buckets run through NCCL (a sum over one rank: the values
/// must not change) on a machine with one GPU and no MPI (the GPU check).
bool gSelfTest = false;
int64_t gBucketsAllreduced = 0;

/// Whether this micro-batch's gradient buckets go through NCCL.
bool bucketsActive() { return gGradientSync && gComm != nullptr; }

void notePending() {
  if (!gPending) {
    gPending = true;
    gPendingSince = Clock::now();
  }
}

void checkNccl(ncclResult_t rc, const char *call) {
  if (rc == ncclSuccess || rc == ncclInProgress)
    return;
  std::string msg = ncclGetErrorString(rc);
  if (const char *last = ncclGetLastError(gComm))
    if (*last)
      msg += std::string(" (") + last + ")";
  if (gComm && rc != ncclInvalidArgument)
    ncclCommAbort(gComm), gComm = nullptr;
  fatalError(std::string("NCCL call ") + call + " failed: " + msg);
}

void initNccl() {
  ncclUniqueId id;
  if (worldRank() == 0)
    checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  broadcastBytes(&id, sizeof(id), "broadcast of the NCCL unique id");
  cuda::ensureDevice();
  checkNccl(ncclCommInitRank(&gComm, worldSize(), id, worldRank()),
            "ncclCommInitRank");
  cuda::check(cudaStreamCreateWithFlags(&gCommStream, cudaStreamNonBlocking),
              "cudaStreamCreateWithFlags (communication stream)");
  cuda::check(cudaEventCreateWithFlags(&gComputeReady, cudaEventDisableTiming),
              "cudaEventCreateWithFlags");
  cuda::check(cudaEventCreateWithFlags(&gCommDone, cudaEventDisableTiming),
              "cudaEventCreateWithFlags");
}

} // namespace

namespace cuda {

void pollCollectives() {
  if (!gComm || !gPending)
    return;
  cudaError_t rc = cudaEventQuery(gCommDone);
  if (rc == cudaSuccess) {
    gPending = false;
    return;
  }
  if (rc != cudaErrorNotReady)
    check(rc, "cudaEventQuery (gradient allreduce)");
  ncclResult_t async = ncclSuccess;
  checkNccl(ncclCommGetAsyncError(gComm, &async), "ncclCommGetAsyncError");
  checkNccl(async, "ncclAllReduce (asynchronous error)");
  if (Clock::now() - gPendingSince >
      std::chrono::duration<double>(collectiveTimeout())) {
    ncclCommAbort(gComm);
    gComm = nullptr;
    fatalError("NCCL allreduce of gradients did not complete within " +
               seconds(collectiveTimeout()) +
               " s; a peer rank has probably died (communicator aborted)");
  }
}

} // namespace cuda

void collectivesInit(int *argc, char ***argv) {
  startProcessGroup(argc, argv, launchedByMpi() ? &loadedOpenMpi() : nullptr);
  // The device is chosen on first use (so --help works anywhere); NCCL
  // needs it now.
  const char *selfTest = std::getenv("DDPC_NCCL_SELF_TEST");
  gSelfTest = worldSize() == 1 && selfTest && std::string(selfTest) == "1";
  if (worldSize() > 1 || gSelfTest)
    initNccl();
}

void collectivesFinalize() {
  if (gSelfTest)
    std::fprintf(stderr,
                 "ddpc: note: DDPC_NCCL_SELF_TEST: %lld gradient bucket(s) "
                 "allreduced through a 1-rank NCCL communicator\n",
                 static_cast<long long>(gBucketsAllreduced));
  if (gComm) {
    cudaStreamSynchronize(gCommStream);
    ncclCommDestroy(gComm);
    gComm = nullptr;
  }
  stopProcessGroup();
}

void setGradientSync(bool on) { gGradientSync = on; }

// ZeRO stage 2 is compiled for the host targets only (--target cuda exits
// 2 at compile time).
void setGradientShard(ZeroGradients *grads) {
  if (grads)
    fatalError("ZeRO stage 2 is not implemented for the CUDA target");
}

} // namespace runtime
} // namespace ddpc

/// Sums `count` floats of device memory over all ranks, in place, ordered
/// after the compute stream's work so far and before its later work.
extern "C" void ddpc_rt_allreduce_sum_f32(float *data, int64_t count) {
  using namespace ddpc::runtime;
  if (worldSize() == 1 || count <= 0)
    return;
  cudaStream_t compute = cuda::computeStream();
  cuda::check(cudaEventRecord(gComputeReady, compute), "cudaEventRecord");
  cuda::check(cudaStreamWaitEvent(gCommStream, gComputeReady, 0),
              "cudaStreamWaitEvent");
  checkNccl(ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat,
                          ncclSum, gComm, gCommStream),
            "ncclAllReduce");
  cuda::check(cudaEventRecord(gCommDone, gCommStream), "cudaEventRecord");
  cuda::check(cudaStreamWaitEvent(compute, gCommDone, 0),
              "cudaStreamWaitEvent");
  notePending();
}

extern "C" void ddpc_rt_bucket_add_f32(float *data, int64_t count) {
  using namespace ddpc::runtime;
  if (bucketsActive() && count > 0)
    gBucket.emplace_back(data, count);
}

/// Enqueues the bucket's allreduces as one NCCL group (one launch) on the
/// communication stream, after the compute stream's work so far; the
/// compute stream goes on with backward.
extern "C" void ddpc_rt_bucket_allreduce_start(int64_t bucket) {
  using namespace ddpc::runtime;
  if (!bucketsActive() || gBucket.empty())
    return;
  cudaStream_t compute = cuda::computeStream();
  cuda::check(cudaEventRecord(gComputeReady, compute),
              "cudaEventRecord (gradient bucket)");
  cuda::check(cudaStreamWaitEvent(gCommStream, gComputeReady, 0),
              "cudaStreamWaitEvent (gradient bucket)");
  std::string call =
      "ncclAllReduce (gradient bucket " + std::to_string(bucket) + ")";
  checkNccl(ncclGroupStart(), "ncclGroupStart");
  for (auto [data, count] : gBucket)
    checkNccl(ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat,
                            ncclSum, gComm, gCommStream),
              call.c_str());
  checkNccl(ncclGroupEnd(), "ncclGroupEnd");
  gBucket.clear();
  ++gBucketsAllreduced;
  cuda::check(cudaEventRecord(gCommDone, gCommStream),
              "cudaEventRecord (gradient bucket)");
  gBucketsInFlight = true;
  notePending();
}

/// Makes the compute stream wait for every bucket (stream order: the last
/// event recorded on the communication stream covers them all).
extern "C" void ddpc_rt_bucket_allreduce_wait(void) {
  using namespace ddpc::runtime;
  if (!gBucketsInFlight)
    return;
  cuda::check(cudaStreamWaitEvent(cuda::computeStream(), gCommDone, 0),
              "cudaStreamWaitEvent (gradient buckets)");
  gBucketsInFlight = false;
}

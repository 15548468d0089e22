//===- CudaCollectives.cpp - process group of CUDA programs: MPI + NCCL ---===//
//
// Part of ddpc. Implements Collectives.h for programs compiled with
// `--target cuda`, and the collectives of TrainABI.h that compiled code
// calls: ddpc_rt_allreduce_sum_f32 and the gradient buckets ddpc_rt_bucket_*.
//
// * A program started without a launcher is a single rank and never loads
//   MPI. Under mpirun/srun (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE or
//   SLURM_NTASKS set) it loads Open MPI with dlopen (DDPC_MPI_LIBRARY, else
//   libmpi.so.40, else libmpi.so), so the executable has no link-time
//   dependency on MPI.
// * Gradients (device memory) are summed with NCCL. The communicator is
//   bootstrapped by broadcasting rank 0's ncclUniqueId over MPI. Each
//   gradient bucket is one NCCL group of in-place allreduces on a
//   communication stream, after an event recorded on the compute stream;
//   the compute stream goes on with backward and waits for an event
//   recorded after the last bucket only at the end of the step function
//   (ddpc_rt_bucket_allreduce_wait), so the buckets overlap backward.
//   ddpc_rt_allreduce_sum_f32 (SyncBatchNorm) is ordered the same way but
//   waited for at once.
// * Host-side values (metrics, checkpoint agreement) go through MPI with
//   non-blocking calls polled against the collective timeout, as in the CPU
//   runtime (Collectives.cpp).
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

#include "../Watchdog.h"

#include <nccl.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ddpc {
namespace runtime {

namespace {

using Clock = std::chrono::steady_clock;

int gRank = 0;
int gSize = 1;
double gTimeoutSeconds = 30.0;

//===----------------------------------------------------------------------===//
// Open MPI through dlopen. Handles are pointers to the library's predefined
// objects (Open MPI's ABI); MPI_IN_PLACE is (void *)1 and
// MPI_STATUS_IGNORE is a null pointer there.
//===----------------------------------------------------------------------===//

using Handle = void *;
struct MpiApi {
  void *lib = nullptr;
  int (*Init)(int *, char ***);
  int (*Initialized)(int *);
  int (*Finalized)(int *);
  int (*Finalize)();
  int (*Abort)(Handle, int);
  int (*Comm_rank)(Handle, int *);
  int (*Comm_size)(Handle, int *);
  int (*Comm_set_errhandler)(Handle, Handle);
  int (*Error_string)(int, char *, int *);
  int (*Iallreduce)(const void *, void *, int, Handle, Handle, Handle,
                    Handle *);
  int (*Ibcast)(void *, int, Handle, int, Handle, Handle *);
  int (*Ibarrier)(Handle, Handle *);
  int (*Test)(Handle *, int *, void *);
  Handle commWorld, typeByte, typeFloat, typeDouble, opSum, errorsReturn;
};
MpiApi gMpi;
bool gMpiInitialized = false;

void *const kInPlace = reinterpret_cast<void *>(1);
constexpr int64_t kMaxChunk = int64_t(1) << 30;

bool launchedByMpi() {
  for (const char *name :
       {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "SLURM_NTASKS"})
    if (std::getenv(name))
      return true;
  return false;
}

/// Whether collectivesInit ran: a training program (even on one rank).
bool gProcessGroup = false;

/// "rank R: " in the messages of training programs (as the CPU runtime
/// writes them) and of launched jobs; nothing for an inference program.
std::string rankPrefix() {
  return gProcessGroup || gSize > 1 || launchedByMpi()
             ? "rank " + std::to_string(gRank) + ": "
             : "";
}

[[noreturn]] void startupError(const std::string &message) {
  std::fprintf(stderr, "error: %s%s\n", rankPrefix().c_str(), message.c_str());
  std::_Exit(1);
}

template <typename T> void resolve(T &fn, const char *name) {
  fn = reinterpret_cast<T>(dlsym(gMpi.lib, name));
  if (!fn)
    startupError(std::string("the MPI library has no symbol '") + name +
                 "' (ddpc's CUDA programs support Open MPI 4 and 5; set "
                 "DDPC_MPI_LIBRARY to its libmpi.so)");
}

Handle object(const char *name) {
  void *p = dlsym(gMpi.lib, name);
  if (!p)
    startupError(std::string("the MPI library has no symbol '") + name +
                 "' (not Open MPI?); set DDPC_MPI_LIBRARY to Open MPI's "
                 "libmpi.so");
  return p;
}

void loadMpi() {
  std::string tried;
  const char *env = std::getenv("DDPC_MPI_LIBRARY");
  for (const char *name : {env, "libmpi.so.40", "libmpi.so"}) {
    if (!name)
      continue;
    gMpi.lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (gMpi.lib)
      break;
    tried += std::string(tried.empty() ? "" : "; ") + dlerror();
  }
  if (!gMpi.lib)
    startupError("started by a launcher (mpirun/srun) but the MPI library "
                 "cannot be loaded: " +
                 tried + ". Install Open MPI or set DDPC_MPI_LIBRARY");
  resolve(gMpi.Init, "MPI_Init");
  resolve(gMpi.Initialized, "MPI_Initialized");
  resolve(gMpi.Finalized, "MPI_Finalized");
  resolve(gMpi.Finalize, "MPI_Finalize");
  resolve(gMpi.Abort, "MPI_Abort");
  resolve(gMpi.Comm_rank, "MPI_Comm_rank");
  resolve(gMpi.Comm_size, "MPI_Comm_size");
  resolve(gMpi.Comm_set_errhandler, "MPI_Comm_set_errhandler");
  resolve(gMpi.Error_string, "MPI_Error_string");
  resolve(gMpi.Iallreduce, "MPI_Iallreduce");
  resolve(gMpi.Ibcast, "MPI_Ibcast");
  resolve(gMpi.Ibarrier, "MPI_Ibarrier");
  resolve(gMpi.Test, "MPI_Test");
  gMpi.commWorld = object("ompi_mpi_comm_world");
  gMpi.typeByte = object("ompi_mpi_byte");
  gMpi.typeFloat = object("ompi_mpi_float");
  gMpi.typeDouble = object("ompi_mpi_double");
  gMpi.opSum = object("ompi_mpi_op_sum");
  gMpi.errorsReturn = object("ompi_mpi_errors_return");
}

bool mpiRunning() {
  if (!gMpiInitialized)
    return false;
  int initialized = 0, finalized = 0;
  gMpi.Initialized(&initialized);
  gMpi.Finalized(&finalized);
  return initialized && !finalized;
}

void checkMpi(int rc, const char *call) {
  if (rc == 0)
    return;
  char buf[512];
  int len = 0;
  std::string msg = gMpi.Error_string(rc, buf, &len) == 0
                        ? std::string(buf, static_cast<size_t>(len))
                        : "MPI error " + std::to_string(rc);
  fatalError(std::string(call) + " failed: " + msg);
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

void waitWithWatchdog(Handle &request, const char *what) {
  runtime::waitWithWatchdog(
      [&] {
        int done = 0;
        checkMpi(gMpi.Test(&request, &done, nullptr), "MPI_Test");
        return done != 0;
      },
      gTimeoutSeconds, what);
}

template <typename T>
void hostAllreduce(T *data, int64_t count, Handle type, const char *what) {
  if (gSize == 1 || count <= 0)
    return;
  for (int64_t off = 0; off < count; off += kMaxChunk) {
    int n = static_cast<int>(std::min(kMaxChunk, count - off));
    Handle request = nullptr;
    checkMpi(gMpi.Iallreduce(kInPlace, data + off, n, type, gMpi.opSum,
                             gMpi.commWorld, &request),
             "MPI_Iallreduce");
    waitWithWatchdog(request, what);
  }
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
  if (gRank == 0)
    checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  broadcastBytes(&id, sizeof(id), "broadcast of the NCCL unique id");
  cuda::ensureDevice();
  checkNccl(ncclCommInitRank(&gComm, gSize, id, gRank), "ncclCommInitRank");
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
      std::chrono::duration<double>(gTimeoutSeconds)) {
    ncclCommAbort(gComm);
    gComm = nullptr;
    fatalError("NCCL allreduce of gradients did not complete within " +
               seconds(gTimeoutSeconds) +
               " s; a peer rank has probably died (communicator aborted)");
  }
}

} // namespace cuda

void collectivesInit(int *argc, char ***argv) {
  gProcessGroup = true;
  if (launchedByMpi()) {
    loadMpi();
    int rc = gMpi.Init(argc, argv);
    if (rc != 0)
      startupError("MPI_Init failed (code " + std::to_string(rc) + ")");
    gMpiInitialized = true;
    checkMpi(gMpi.Comm_set_errhandler(gMpi.commWorld, gMpi.errorsReturn),
             "MPI_Comm_set_errhandler");
    checkMpi(gMpi.Comm_rank(gMpi.commWorld, &gRank), "MPI_Comm_rank");
    checkMpi(gMpi.Comm_size(gMpi.commWorld, &gSize), "MPI_Comm_size");
  }
  // The device is chosen on first use (so --help works anywhere); NCCL
  // needs it now.
  const char *selfTest = std::getenv("DDPC_NCCL_SELF_TEST");
  gSelfTest = gSize == 1 && selfTest && std::string(selfTest) == "1";
  if (gSize > 1 || gSelfTest)
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
  if (mpiRunning())
    gMpi.Finalize();
}

int worldRank() { return gRank; }
int worldSize() { return gSize; }

void setGradientSync(bool on) { gGradientSync = on; }

void setCollectiveTimeout(double s) { gTimeoutSeconds = s; }
double collectiveTimeout() { return gTimeoutSeconds; }

void fatalError(const std::string &message) {
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s%s\n", rankPrefix().c_str(), message.c_str());
  std::fflush(stderr);
  if (gSize > 1 && mpiRunning())
    gMpi.Abort(gMpi.commWorld, 1);
  std::_Exit(1);
}

void warning(const std::string &message) {
  std::fprintf(stderr, "warning: %s%s\n", rankPrefix().c_str(),
               message.c_str());
}

void allreduceSum(float *data, int64_t count, const char *what) {
  hostAllreduce(data, count, gMpi.typeFloat, what);
}

void allreduceSum(double *data, int64_t count, const char *what) {
  hostAllreduce(data, count, gMpi.typeDouble, what);
}

void broadcastBytes(void *data, int64_t bytes, const char *what) {
  if (gSize == 1 || bytes <= 0)
    return;
  char *ptr = static_cast<char *>(data);
  for (int64_t off = 0; off < bytes; off += kMaxChunk) {
    int n = static_cast<int>(std::min(kMaxChunk, bytes - off));
    Handle request = nullptr;
    checkMpi(
        gMpi.Ibcast(ptr + off, n, gMpi.typeByte, 0, gMpi.commWorld, &request),
        "MPI_Ibcast");
    waitWithWatchdog(request, what);
  }
}

void barrier(const char *what) {
  if (gSize == 1)
    return;
  Handle request = nullptr;
  checkMpi(gMpi.Ibarrier(gMpi.commWorld, &request), "MPI_Ibarrier");
  waitWithWatchdog(request, what);
}

} // namespace runtime
} // namespace ddpc

/// Sums `count` floats of device memory over all ranks, in place, ordered
/// after the compute stream's work so far and before its later work.
extern "C" void ddpc_rt_allreduce_sum_f32(float *data, int64_t count) {
  using namespace ddpc::runtime;
  if (gSize == 1 || count <= 0)
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

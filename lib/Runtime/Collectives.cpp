//===- Collectives.cpp - MPI process group with a watchdog ----------------===//
//
// See Collectives.h. Also defines the collectives of TrainABI.h that
// compiled code calls: ddpc_rt_allreduce_sum_f32 (SyncBatchNorm) and the
// gradient buckets ddpc_rt_bucket_* (one MPI_Iallreduce per bucket on a
// host staging copy, started during backward, waited for at its end).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/Collectives.h"
#include "ddpc/Runtime/TrainABI.h"

#include "Watchdog.h"

// The C API only: keep OpenMPI/MPICH from pulling in their C++ bindings,
// which would need libmpi_cxx at link time.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

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

int gRank = 0;
int gSize = 1;
bool gInitialized = false;
double gTimeoutSeconds = 30.0;

/// Largest element count passed to one MPI call (MPI counts are int).
constexpr int64_t kMaxChunk = int64_t(1) << 30;

bool mpiRunning() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

std::string mpiErrorString(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

/// Ends the job when an MPI call failed.
void check(int rc, const char *call) {
  if (rc != MPI_SUCCESS)
    fatalError(std::string(call) + " failed: " + mpiErrorString(rc));
}

/// Polls `request` until it completes (Watchdog.h).
void waitWithWatchdog(MPI_Request &request, const char *what) {
  runtime::waitWithWatchdog(
      [&] {
        int done = 0;
        check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
        return done != 0;
      },
      gTimeoutSeconds, what);
}

template <typename T>
void allreduceImpl(T *data, int64_t count, MPI_Datatype type,
                   const char *what) {
  if (gSize == 1 || count <= 0)
    return;
  for (int64_t off = 0; off < count; off += kMaxChunk) {
    int n = static_cast<int>(std::min(kMaxChunk, count - off));
    MPI_Request request;
    check(MPI_Iallreduce(MPI_IN_PLACE, data + off, n, type, MPI_SUM,
                         MPI_COMM_WORLD, &request),
          "MPI_Iallreduce");
    waitWithWatchdog(request, what);
  }
}

/// Gradient buckets of the current ddpc_train_micro call.
struct Bucket {
  std::vector<std::pair<float *, int64_t>> members;
  std::vector<float> staging;
  std::vector<MPI_Request> requests;
  int64_t index = 0;
};
bool gGradientSync = false;
std::vector<std::pair<float *, int64_t>> gFilling;
/// Buckets started in this call (first gStarted entries); the vector and
/// its staging memory are kept from call to call.
std::vector<Bucket> gBuckets;
size_t gStarted = 0;

} // namespace

void setGradientSync(bool on) { gGradientSync = on; }

void collectivesInit(int *argc, char ***argv) {
  int rc = MPI_Init(argc, argv);
  if (rc != MPI_SUCCESS) {
    std::fprintf(stderr, "error: MPI_Init failed: %s\n",
                 mpiErrorString(rc).c_str());
    std::exit(1);
  }
  gInitialized = true;
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
        "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(MPI_COMM_WORLD, &gRank), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &gSize), "MPI_Comm_size");
}

void collectivesFinalize() {
  if (gInitialized && mpiRunning())
    MPI_Finalize();
}

int worldRank() { return gRank; }
int worldSize() { return gSize; }

void setCollectiveTimeout(double seconds) { gTimeoutSeconds = seconds; }
double collectiveTimeout() { return gTimeoutSeconds; }

void fatalError(const std::string &message) {
  std::fflush(stdout);
  std::fprintf(stderr, "error: rank %d: %s\n", gRank, message.c_str());
  std::fflush(stderr);
  // With no peers there is nobody to take down: exit directly (OpenMPI's
  // singleton MPI_Abort prints internal noise). Under `mpirun -np 1` the
  // launcher sees an exit without MPI_Finalize and fails the job anyway.
  if (gInitialized && gSize > 1 && mpiRunning())
    MPI_Abort(MPI_COMM_WORLD, 1);
  // MPI_Abort should not return; make sure the process ends regardless.
  std::_Exit(1);
}

void warning(const std::string &message) {
  std::fprintf(stderr, "warning: rank %d: %s\n", gRank, message.c_str());
}

void allreduceSum(float *data, int64_t count, const char *what) {
  allreduceImpl(data, count, MPI_FLOAT, what);
}

void allreduceSum(double *data, int64_t count, const char *what) {
  allreduceImpl(data, count, MPI_DOUBLE, what);
}

void broadcastBytes(void *data, int64_t bytes, const char *what) {
  if (gSize == 1 || bytes <= 0)
    return;
  char *ptr = static_cast<char *>(data);
  for (int64_t off = 0; off < bytes; off += kMaxChunk) {
    int n = static_cast<int>(std::min(kMaxChunk, bytes - off));
    MPI_Request request;
    check(MPI_Ibcast(ptr + off, n, MPI_BYTE, 0, MPI_COMM_WORLD, &request),
          "MPI_Ibcast");
    waitWithWatchdog(request, what);
  }
}

void barrier(const char *what) {
  if (gSize == 1)
    return;
  MPI_Request request;
  check(MPI_Ibarrier(MPI_COMM_WORLD, &request), "MPI_Ibarrier");
  waitWithWatchdog(request, what);
}

} // namespace runtime
} // namespace ddpc

extern "C" void ddpc_rt_allreduce_sum_f32(float *data, int64_t count) {
  ddpc::runtime::allreduceSum(data, count, "allreduce of gradients");
}

extern "C" void ddpc_rt_bucket_add_f32(float *data, int64_t count) {
  using namespace ddpc::runtime;
  if (gGradientSync && gSize > 1 && count > 0)
    gFilling.emplace_back(data, count);
}

/// Copies the bucket's gradients into one staging buffer and starts one
/// MPI_Iallreduce on it (more if it exceeds MPI's int counts); MPI_Testall
/// on the buckets already in flight lets MPI progress them meanwhile.
extern "C" void ddpc_rt_bucket_allreduce_start(int64_t bucket) {
  using namespace ddpc::runtime;
  if (!gGradientSync || gSize == 1 || gFilling.empty())
    return;
  if (gStarted == gBuckets.size())
    gBuckets.emplace_back();
  Bucket &b = gBuckets[gStarted++];
  b.members.swap(gFilling);
  gFilling.clear();
  b.index = bucket;
  int64_t total = 0;
  for (auto [data, count] : b.members)
    total += count;
  b.staging.resize(static_cast<size_t>(total));
  float *out = b.staging.data();
  for (auto [data, count] : b.members)
    out = std::copy(data, data + count, out);
  b.requests.clear();
  for (int64_t off = 0; off < total; off += kMaxChunk) {
    int n = static_cast<int>(std::min(kMaxChunk, total - off));
    b.requests.emplace_back();
    check(MPI_Iallreduce(MPI_IN_PLACE, b.staging.data() + off, n, MPI_FLOAT,
                         MPI_SUM, MPI_COMM_WORLD, &b.requests.back()),
          "MPI_Iallreduce (gradient bucket)");
  }
  for (size_t i = 0; i + 1 < gStarted; ++i) {
    Bucket &earlier = gBuckets[i];
    int done = 0;
    check(MPI_Testall(static_cast<int>(earlier.requests.size()),
                      earlier.requests.data(), &done, MPI_STATUSES_IGNORE),
          "MPI_Testall (gradient bucket)");
  }
}

/// Waits for every bucket started in this call (watchdog: --timeout) and
/// copies the sums back into the gradient accumulators.
extern "C" void ddpc_rt_bucket_allreduce_wait(void) {
  using namespace ddpc::runtime;
  for (size_t i = 0; i < gStarted; ++i) {
    Bucket &b = gBuckets[i];
    std::string what =
        "allreduce of gradient bucket " + std::to_string(b.index);
    for (MPI_Request &request : b.requests)
      if (request != MPI_REQUEST_NULL)
        waitWithWatchdog(request, what.c_str());
    const float *in = b.staging.data();
    for (auto [data, count] : b.members) {
      std::copy(in, in + count, data);
      in += count;
    }
    b.members.clear();
  }
  gStarted = 0;
}

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
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
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

void drainCommThread();

template <typename T>
void allreduceImpl(T *data, int64_t count, MPI_Datatype type,
                   const char *what) {
  if (gSize == 1 || count <= 0)
    return;
  drainCommThread();
  for (int64_t off = 0; off < count; off += kMaxChunk) {
    int n = static_cast<int>(std::min(kMaxChunk, count - off));
    MPI_Request request;
    check(MPI_Iallreduce(MPI_IN_PLACE, data + off, n, type, MPI_SUM,
                         MPI_COMM_WORLD, &request),
          "MPI_Iallreduce");
    waitWithWatchdog(request, what);
  }
}

/// A gradient bucket of the current ddpc_train_micro call: its gradients
/// and the staging copy that is summed over ranks.
struct Bucket {
  std::vector<std::pair<float *, int64_t>> members;
  std::vector<float> staging;
  std::vector<MPI_Request> requests;
  int64_t index = 0;

  /// Starts the sum of `staging`: one MPI_Iallreduce per chunk that fits
  /// MPI's int counts.
  void start() {
    requests.clear();
    int64_t total = static_cast<int64_t>(staging.size());
    for (int64_t off = 0; off < total; off += kMaxChunk) {
      int n = static_cast<int>(std::min(kMaxChunk, total - off));
      requests.emplace_back();
      check(MPI_Iallreduce(MPI_IN_PLACE, staging.data() + off, n, MPI_FLOAT,
                           MPI_SUM, MPI_COMM_WORLD, &requests.back()),
            "MPI_Iallreduce (gradient bucket)");
    }
  }
  /// Waits for the requests still pending (watchdog: --timeout).
  void finish() {
    std::string what = "allreduce of gradient bucket " + std::to_string(index);
    for (MPI_Request &request : requests)
      if (request != MPI_REQUEST_NULL)
        waitWithWatchdog(request, what.c_str());
  }
};
bool gGradientSync = false;
std::vector<std::pair<float *, int64_t>> gFilling;
/// Buckets started in this call (first gStarted entries); the buckets and
/// their staging memory are kept from call to call (a deque: the
/// communication thread holds references while more are added).
std::deque<Bucket> gBuckets;
size_t gStarted = 0;

/// The communication thread: runs collectives in submission order, so a
/// bucket's allreduce makes progress (MPI_Test polling) while the main
/// thread computes the rest of backward. MPI is initialized with
/// MPI_THREAD_SERIALIZED: the main thread calls MPI only after drain(), when
/// this thread is idle. Without that thread level (or with
/// DDPC_COMM_THREAD=0) buckets are started and waited for on the main
/// thread, and MPI progresses them only inside MPI calls.
class CommThread {
public:
  CommThread() : worker([this] { loop(); }) {}
  ~CommThread() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    worker.join();
  }
  void submit(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      jobs.push_back(std::move(job));
      ++submitted;
    }
    wake.notify_all();
  }
  /// Returns once every submitted job has finished.
  void drain() {
    std::unique_lock<std::mutex> lock(mutex);
    idle.wait(lock, [&] { return finished == submitted; });
  }

private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return stopping || !jobs.empty(); });
      if (jobs.empty())
        return;
      std::function<void()> job = std::move(jobs.front());
      jobs.pop_front();
      lock.unlock();
      job();
      lock.lock();
      ++finished;
      idle.notify_all();
    }
  }
  std::mutex mutex;
  std::condition_variable wake, idle;
  std::deque<std::function<void()>> jobs;
  size_t submitted = 0, finished = 0;
  bool stopping = false;
  std::thread worker; // Last: starts after the members above exist.
};

bool gThreadSerialized = false;
std::unique_ptr<CommThread> gCommThread;

/// Makes the main thread the only MPI caller: waits until the
/// communication thread has finished its collectives.
void drainCommThread() {
  if (gCommThread)
    gCommThread->drain();
}

} // namespace

void setGradientSync(bool on) { gGradientSync = on; }

void collectivesInit(int *argc, char ***argv) {
  int provided = MPI_THREAD_SINGLE;
  int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
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
  const char *env = std::getenv("DDPC_COMM_THREAD");
  gThreadSerialized =
      provided >= MPI_THREAD_SERIALIZED && !(env && std::string(env) == "0");
}

void collectivesFinalize() {
  gCommThread.reset();
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
  drainCommThread();
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
  drainCommThread();
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

/// Copies the bucket's gradients into one staging buffer and starts its
/// allreduce: on the communication thread (MPI_Iallreduce polled with the
/// watchdog there), else one MPI_Iallreduce here (more if it exceeds MPI's
/// int counts), with MPI_Testall on the buckets in flight to progress them.
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
  if (gThreadSerialized) {
    if (!gCommThread)
      gCommThread = std::make_unique<CommThread>();
    gCommThread->submit([&b] {
      b.start();
      b.finish();
    });
    return;
  }
  b.start();
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
  drainCommThread();
  for (size_t i = 0; i < gStarted; ++i) {
    Bucket &b = gBuckets[i];
    b.finish();
    const float *in = b.staging.data();
    for (auto [data, count] : b.members) {
      std::copy(in, in + count, data);
      in += count;
    }
    b.members.clear();
  }
  gStarted = 0;
}

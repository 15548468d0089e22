//===- Collectives.cpp - gradient buckets of the CPU runtime over MPI -----===//
//
// The CPU runtime's side of Collectives.h: the process group
// (ProcessGroup.cpp) over the linked MPI, a communication thread, and the
// collectives of TrainABI.h that compiled code calls:
// ddpc_rt_allreduce_sum_f32 (SyncBatchNorm) and the gradient buckets
// ddpc_rt_bucket_* (one MPI_Iallreduce per bucket on a host staging copy,
// started during backward, waited for at its end).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/Collectives.h"
#include "ddpc/Runtime/Memory.h"
#include "ddpc/Runtime/TrainABI.h"

#include "ProcessGroup.h"
#include "ZeroShard.h"

#include <algorithm>
#include <condition_variable>
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

/// A gradient bucket of the current ddpc_train_micro call: its gradients
/// and the staging copy that is summed over ranks.
struct Bucket {
  std::vector<std::pair<float *, int64_t>> members;
  std::vector<float> staging;
  PendingCollective pending;
  int64_t index = 0;

  /// Starts the sum of `staging`.
  void start() {
    pending =
        startAllreduceSum(staging.data(), static_cast<int64_t>(staging.size()),
                          MpiType::Float, "MPI_Iallreduce (gradient bucket)");
  }
  /// Waits for the requests still pending (watchdog: --timeout).
  void finish() {
    std::string what = "allreduce of gradient bucket " + std::to_string(index);
    waitCollective(pending, what.c_str());
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
/// this thread is idle (the process group's host collectives drain first).
/// Without that thread level (or with DDPC_COMM_THREAD=0) buckets are started
/// and waited for on the main thread, and MPI progresses them only inside MPI
/// calls.
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

/// Whether buckets run on the communication thread (MPI gives
/// MPI_THREAD_SERIALIZED and DDPC_COMM_THREAD is not 0).
bool gThreadSerialized = false;
std::unique_ptr<CommThread> gCommThread;

/// Makes the main thread the only MPI caller: waits until the
/// communication thread has finished its collectives.
void drainCommThread() {
  if (gCommThread)
    gCommThread->drain();
}

/// ZeRO stage 2 (ZeroShard.h): the gradient slice and bucket buffers, and
/// per buffer pair the bucket in it (-1: free) and its collective. With
/// the communication thread a pair is freed there, after its sum has been
/// added into the slice; without it, when the pair is needed again or at
/// the wait.
ZeroGradients *gShard = nullptr;
struct ShardSlot {
  int64_t bucket = -1;
  std::vector<int64_t> counts;
  PendingCollective pending;
};
std::vector<ShardSlot> gShardSlots;
std::mutex gShardMutex;
std::condition_variable gShardFreed;

std::string bucketWhat(int64_t bucket) {
  return "reduce-scatter of gradient bucket " + std::to_string(bucket) +
         " (ZeRO stage 2)";
}

/// Main thread, no communication thread: completes the bucket in `slot`.
void finishShardSlot(int64_t slot) {
  ShardSlot &s = gShardSlots[slot];
  if (s.bucket < 0)
    return;
  waitCollective(s.pending, bucketWhat(s.bucket).c_str());
  gShard->accumulate(s.bucket, gShard->recvBuffer(slot));
  s.bucket = -1;
}

/// Packs the bucket's gradients into a free buffer pair and starts its
/// reduce-scatter (on the communication thread when there is one).
void startShardBucket(int64_t bucket) {
  int64_t slot = bucket % gShard->slots();
  ShardSlot &s = gShardSlots[slot];
  if (gCommThread) {
    std::unique_lock<std::mutex> lock(gShardMutex);
    gShardFreed.wait(lock, [&] { return s.bucket < 0; });
  } else {
    finishShardSlot(slot);
  }
  gShard->pack(bucket, gFilling, gShard->sendBuffer(slot), s.counts);
  gFilling.clear();
  s.bucket = bucket;
  auto start = [slot] {
    ShardSlot &t = gShardSlots[slot];
    t.pending = startReduceScatterSum(gShard->sendBuffer(slot),
                                      gShard->recvBuffer(slot), t.counts,
                                      "MPI_Ireduce_scatter (gradient bucket)");
  };
  if (gCommThread) {
    gCommThread->submit([slot, bucket, start] {
      start();
      ShardSlot &t = gShardSlots[slot];
      waitCollective(t.pending, bucketWhat(bucket).c_str());
      gShard->accumulate(bucket, gShard->recvBuffer(slot));
      {
        std::lock_guard<std::mutex> lock(gShardMutex);
        t.bucket = -1;
      }
      gShardFreed.notify_all();
    });
    return;
  }
  start();
  for (ShardSlot &t : gShardSlots)
    if (t.bucket >= 0)
      testCollective(t.pending);
}

} // namespace

void setGradientSync(bool on) { gGradientSync = on; }

void setGradientShard(ZeroGradients *grads) {
  drainCommThread();
  gShard = grads;
  gShardSlots.assign(grads ? static_cast<size_t>(grads->slots()) : 0,
                     ShardSlot{});
  // The buckets run on the communication thread from the first one on.
  if (grads && gThreadSerialized && !gCommThread)
    gCommThread = std::make_unique<CommThread>();
}

void collectivesInit(int *argc, char ***argv) {
  startProcessGroup(argc, argv, &linkedMpi());
  const char *env = std::getenv("DDPC_COMM_THREAD");
  gThreadSerialized =
      mpiThreadSerialized() && !(env && std::string(env) == "0");
  setHostCollectiveHook(drainCommThread);
}

void collectivesFinalize() {
  gCommThread.reset();
  stopProcessGroup();
}

} // namespace runtime
} // namespace ddpc

extern "C" void ddpc_rt_allreduce_sum_f32(float *data, int64_t count) {
  ddpc::runtime::allreduceSum(data, count, "allreduce of gradients");
}

extern "C" void ddpc_rt_bucket_add_f32(float *data, int64_t count) {
  using namespace ddpc::runtime;
  // ZeRO stage 2: every call, at any world size (the gradients exist only
  // until their bucket starts).
  if (gShard || (gGradientSync && worldSize() > 1 && count > 0))
    gFilling.emplace_back(data, count);
}

/// Copies the bucket's gradients into one staging buffer and starts its
/// allreduce: on the communication thread (MPI_Iallreduce polled with the
/// watchdog there), else one MPI_Iallreduce here (more if it exceeds MPI's
/// int counts), with MPI_Test on the buckets in flight to progress them.
extern "C" void ddpc_rt_bucket_allreduce_start(int64_t bucket) {
  using namespace ddpc::runtime;
  if (gShard)
    return startShardBucket(bucket);
  if (!gGradientSync || worldSize() == 1 || gFilling.empty())
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
  size_t capacity = b.staging.capacity();
  b.staging.resize(static_cast<size_t>(total));
  // Staging memory is kept from call to call: count what it grows by.
  countAllocation(
      static_cast<int64_t>((b.staging.capacity() - capacity) * sizeof(float)));
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
  for (size_t i = 0; i + 1 < gStarted; ++i)
    testCollective(gBuckets[i].pending);
}

/// Waits for every bucket started in this call (watchdog: --timeout) and
/// copies the sums back into the gradient accumulators.
extern "C" void ddpc_rt_bucket_allreduce_wait(void) {
  using namespace ddpc::runtime;
  drainCommThread();
  if (gShard) {
    for (size_t i = 0; i < gShardSlots.size(); ++i)
      finishShardSlot(static_cast<int64_t>(i));
    return;
  }
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

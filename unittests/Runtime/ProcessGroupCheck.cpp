//===- ProcessGroupCheck.cpp - the process group under mpirun -------------===//
//
// A fixture of test/runtime/test_process_group.py, built twice: over the
// linked MPI (ddpc-process-group-check-linked, the CPU runtime's) and over
// Open MPI loaded with dlopen (ddpc-process-group-check-loaded, the CUDA
// runtime's; one rank without MPI when no launcher started it).
//
//   ddpc-process-group-check-* sums     every collective against closed-form
//                                       sums of rank-dependent values; prints
//                                       "ok: rank R of N" on success
//   ddpc-process-group-check-* fatal    the last rank calls fatalError
//   ddpc-process-group-check-* timeout  collective timeout 1 s; the last rank
//                                       sleeps 10 s before the barrier
//
//===----------------------------------------------------------------------===//

#include "ProcessGroup.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

using namespace ddpc::runtime;

namespace {

int gHookCalls = 0;

void fail(const std::string &what) {
  std::fprintf(stderr, "check failed: rank %d: %s\n", worldRank(),
               what.c_str());
  std::exit(1);
}

void checkSums() {
  int r = worldRank(), n = worldSize();
  // Sums of (rank + 1) * (i + 1) over ranks: (i + 1) * n (n + 1) / 2.
  const int64_t count = 1000;
  std::vector<float> f(count);
  std::vector<double> d(count);
  for (int64_t i = 0; i < count; ++i) {
    f[i] = float((r + 1) * (i + 1));
    d[i] = double(r + 1) * double(i + 1) + 0.25;
  }
  allreduceSum(f.data(), count, "allreduce of floats");
  allreduceSum(d.data(), count, "allreduce of doubles");
  for (int64_t i = 0; i < count; ++i) {
    double want = double(i + 1) * n * (n + 1) / 2;
    if (f[i] != float(want))
      fail("float sum at " + std::to_string(i) + ": " + std::to_string(f[i]) +
           " != " + std::to_string(want));
    if (std::fabs(d[i] - (want + 0.25 * n)) > 1e-9)
      fail("double sum at " + std::to_string(i));
  }

  std::vector<unsigned char> bytes(300, 0);
  if (r == 0)
    for (size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = static_cast<unsigned char>(i * 7 + 3);
  broadcastBytes(bytes.data(), int64_t(bytes.size()), "broadcast");
  for (size_t i = 0; i < bytes.size(); ++i)
    if (bytes[i] != static_cast<unsigned char>(i * 7 + 3))
      fail("broadcast byte " + std::to_string(i));

  barrier("barrier");

  // The non-blocking form the gradient buckets use.
  std::vector<float> g(64, float(r));
  PendingCollective pending =
      startAllreduceSum(g.data(), int64_t(g.size()), MpiType::Float, "start");
  if (n == 1 && !pending.requests.empty())
    fail("one rank started an MPI request");
  while (!testCollective(pending)) {
  }
  waitCollective(pending, "wait");
  for (float v : g)
    if (v != float(n * (n - 1) / 2))
      fail("started sum " + std::to_string(v));

  // The hook runs before each host collective, and only with peers.
  int want = n > 1 ? 4 : 0;
  if (gHookCalls != want)
    fail("hook ran " + std::to_string(gHookCalls) + " times, want " +
         std::to_string(want));
  std::printf("ok: rank %d of %d\n", r, n);
}

} // namespace

int main(int argc, char **argv) {
  std::string mode = argc > 1 ? argv[1] : "sums";
#ifdef DDPC_CHECK_LOADED_MPI
  startProcessGroup(&argc, &argv, launchedByMpi() ? &loadedOpenMpi() : nullptr);
#else
  startProcessGroup(&argc, &argv, &linkedMpi());
#endif
  setHostCollectiveHook([] { ++gHookCalls; });
  int last = worldSize() - 1;
  if (mode == "sums") {
    checkSums();
  } else if (mode == "fatal") {
    if (worldRank() == last)
      fatalError("deliberate failure");
    barrier("barrier after the failure");
  } else if (mode == "timeout") {
    setCollectiveTimeout(1);
    if (worldRank() == last && last > 0)
      std::this_thread::sleep_for(std::chrono::seconds(10));
    barrier("barrier of the timeout check");
  } else {
    fail("unknown mode '" + mode + "'");
  }
  stopProcessGroup();
  return 0;
}

//===- ProcessGroup.cpp - the process group of both runtimes --------------===//
//
// See ProcessGroup.h. The host-side functions of Collectives.h, written once
// over an MpiCalls table.
//
//===----------------------------------------------------------------------===//

#include "ProcessGroup.h"

#include "Watchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ddpc {
namespace runtime {

namespace {

const MpiCalls *gMpi = nullptr;
bool gStarted = false;
int gRank = 0;
int gSize = 1;
double gTimeoutSeconds = 30.0;
bool gSerialized = false;
void (*gHook)() = nullptr;

/// Largest element count passed to one MPI call (MPI counts are int).
constexpr int64_t kMaxChunk = int64_t(1) << 30;

bool mpiRunning() { return gMpi && gMpi->running(); }

/// "rank R: " in the messages of training programs and of launched jobs;
/// nothing for an inference program started by hand.
std::string rankPrefix() {
  return gStarted || gSize > 1 || launchedByMpi()
             ? "rank " + std::to_string(gRank) + ": "
             : "";
}

void runHook() {
  if (gHook)
    gHook();
}

/// A collective of one request, to be filled by the caller.
PendingCollective oneRequest() {
  PendingCollective pending;
  pending.requests.emplace_back();
  pending.done.push_back(0);
  return pending;
}

int64_t typeBytes(MpiType type) {
  switch (type) {
  case MpiType::Byte:
    return 1;
  case MpiType::Float:
    return 4;
  case MpiType::Double:
    return 8;
  }
  return 1;
}

/// A blocking in-place sum for the host collectives of Collectives.h.
void hostAllreduceSum(void *data, int64_t count, MpiType type,
                      const char *what) {
  if (gSize == 1 || count <= 0)
    return;
  runHook();
  PendingCollective pending =
      startAllreduceSum(data, count, type, "MPI_Iallreduce");
  waitCollective(pending, what);
}

} // namespace

bool launchedByMpi() {
  for (const char *name :
       {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "SLURM_NTASKS"})
    if (std::getenv(name))
      return true;
  return false;
}

void startProcessGroup(int *argc, char ***argv, const MpiCalls *mpi) {
  gStarted = true;
  if (!mpi)
    return;
  bool serialized = false;
  int rc = mpi->initThread(argc, argv, &serialized);
  if (rc != 0)
    startupError("MPI_Init failed: " + mpi->errorString(rc));
  gMpi = mpi;
  gSerialized = serialized;
  checkMpi(mpi->setErrorsReturn(), "MPI_Comm_set_errhandler");
  checkMpi(mpi->rank(&gRank), "MPI_Comm_rank");
  checkMpi(mpi->size(&gSize), "MPI_Comm_size");
}

void stopProcessGroup() {
  if (mpiRunning())
    gMpi->finalize();
}

bool mpiThreadSerialized() { return gSerialized; }

void setHostCollectiveHook(void (*hook)()) { gHook = hook; }

void startupError(const std::string &message) {
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s%s\n", rankPrefix().c_str(), message.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

void checkMpi(int rc, const char *call) {
  if (rc != 0)
    fatalError(
        std::string(call) + " failed: " +
        (gMpi ? gMpi->errorString(rc) : "MPI error " + std::to_string(rc)));
}

PendingCollective startAllreduceSum(void *data, int64_t count, MpiType type,
                                    const char *call) {
  PendingCollective pending;
  if (gSize == 1 || count <= 0)
    return pending;
  char *bytes = static_cast<char *>(data);
  for (int64_t off = 0; off < count; off += kMaxChunk) {
    pending.requests.emplace_back();
    pending.done.push_back(0);
    checkMpi(
        gMpi->iallreduceSum(bytes + off * typeBytes(type),
                            static_cast<int>(std::min(kMaxChunk, count - off)),
                            type, &pending.requests.back()),
        call);
  }
  return pending;
}

PendingCollective startReduceScatterSum(const float *send, float *recv,
                                        const std::vector<int64_t> &counts,
                                        const char *call) {
  PendingCollective pending;
  if (gSize == 1) {
    if (!counts.empty() && counts[0] > 0)
      std::memmove(recv, send, static_cast<size_t>(counts[0]) * sizeof(float));
    return pending;
  }
  if (static_cast<int>(counts.size()) != gSize)
    fatalError(std::string(call) + ": " + std::to_string(counts.size()) +
               " counts for " + std::to_string(gSize) + " ranks");
  std::vector<int> ints;
  int64_t total = 0;
  for (int64_t c : counts) {
    if (c < 0 || c > kMaxChunk)
      fatalError(std::string(call) + ": " + std::to_string(c) +
                 " elements for one rank exceed MPI's int counts; use a "
                 "smaller --bucket-cap-mb");
    ints.push_back(static_cast<int>(c));
    total += c;
  }
  if (total == 0)
    return pending;
  pending = oneRequest();
  pending.counts = std::move(ints);
  checkMpi(gMpi->ireduceScatterSum(send, recv, pending.counts.data(),
                                   MpiType::Float, &pending.requests.back()),
           call);
  return pending;
}

bool testCollective(PendingCollective &pending) {
  bool all = true;
  for (size_t i = 0; i < pending.requests.size(); ++i) {
    if (pending.done[i])
      continue;
    bool done = false;
    checkMpi(gMpi->test(&pending.requests[i], &done), "MPI_Test");
    pending.done[i] = done;
    all = all && done;
  }
  return all;
}

void waitCollective(PendingCollective &pending, const char *what) {
  if (pending.requests.empty())
    return;
  waitWithWatchdog([&] { return testCollective(pending); }, gTimeoutSeconds,
                   what);
}

//===----------------------------------------------------------------------===//
// Collectives.h
//===----------------------------------------------------------------------===//

int worldRank() { return gRank; }
int worldSize() { return gSize; }

void setCollectiveTimeout(double seconds) { gTimeoutSeconds = seconds; }
double collectiveTimeout() { return gTimeoutSeconds; }

void fatalError(const std::string &message) {
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s%s\n", rankPrefix().c_str(), message.c_str());
  std::fflush(stderr);
  // With no peers there is nobody to take down: exit directly (Open MPI's
  // singleton MPI_Abort prints internal noise). Under `mpirun -np 1` the
  // launcher sees an exit without MPI_Finalize and fails the job anyway.
  if (gSize > 1 && mpiRunning())
    gMpi->abort(1);
  // MPI_Abort should not return; make sure the process ends regardless.
  std::_Exit(1);
}

void warning(const std::string &message) {
  std::fprintf(stderr, "warning: %s%s\n", rankPrefix().c_str(),
               message.c_str());
}

void allreduceSum(float *data, int64_t count, const char *what) {
  hostAllreduceSum(data, count, MpiType::Float, what);
}

void allreduceSum(double *data, int64_t count, const char *what) {
  hostAllreduceSum(data, count, MpiType::Double, what);
}

void broadcastBytes(void *data, int64_t bytes, const char *what) {
  if (gSize == 1 || bytes <= 0)
    return;
  runHook();
  char *p = static_cast<char *>(data);
  for (int64_t off = 0; off < bytes; off += kMaxChunk) {
    PendingCollective pending = oneRequest();
    checkMpi(gMpi->ibcast(p + off,
                          static_cast<int>(std::min(kMaxChunk, bytes - off)), 0,
                          &pending.requests.back()),
             "MPI_Ibcast");
    waitCollective(pending, what);
  }
}

void allgatherBytes(const void *send, void *recv, int64_t bytes,
                    const char *what) {
  if (gSize == 1) {
    std::memmove(recv, send, static_cast<size_t>(bytes));
    return;
  }
  if (bytes <= 0)
    return;
  if (bytes > kMaxChunk)
    fatalError(std::string(what) + ": " + std::to_string(bytes) +
               " bytes per rank exceed one MPI_Iallgather's count");
  runHook();
  PendingCollective pending = oneRequest();
  checkMpi(gMpi->iallgather(send, recv, static_cast<int>(bytes),
                            &pending.requests.back()),
           "MPI_Iallgather");
  waitCollective(pending, what);
}

void barrier(const char *what) {
  if (gSize == 1)
    return;
  runHook();
  PendingCollective pending = oneRequest();
  checkMpi(gMpi->ibarrier(&pending.requests.back()), "MPI_Ibarrier");
  waitCollective(pending, what);
}

} // namespace runtime
} // namespace ddpc

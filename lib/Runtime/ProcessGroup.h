//===- ProcessGroup.h - the process group of both runtimes -------*- C++
//-*-===//
//
// Part of ddpc's runtime (internal). MPI_COMM_WORLD behind an MpiCalls
// table (MpiCalls.h), shared by the CPU runtime (Collectives.cpp: linked
// MPI, gradient buckets on a communication thread) and the CUDA runtime
// (CUDA/CudaCollectives.cpp: Open MPI through dlopen, gradients over NCCL).
// ProcessGroup.cpp defines the host-side functions of Collectives.h (rank,
// size, timeout, fatalError, warning, allreduceSum, broadcastBytes,
// barrier); each runtime defines collectivesInit/collectivesFinalize and
// setGradientSync on top of the functions below.
//
// Collectives are non-blocking MPI calls polled with the watchdog
// (Watchdog.h) against the collective timeout; counts of any size are split
// into calls that fit MPI's int counts.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_LIB_RUNTIME_PROCESSGROUP_H
#define DDPC_LIB_RUNTIME_PROCESSGROUP_H

#include "MpiCalls.h"

#include "ddpc/Runtime/Collectives.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ddpc {
namespace runtime {

/// Starts the process group: MPI_Init_thread through `mpi`, MPI_ERRORS_RETURN,
/// rank and size. With `mpi` null, one rank without MPI (a CUDA program
/// started without a launcher). Exits with status 1 and one line when MPI
/// cannot start. From then on messages carry "rank R: ".
void startProcessGroup(int *argc, char ***argv, const MpiCalls *mpi);

/// MPI_Finalize, if MPI runs.
void stopProcessGroup();

/// Whether MPI provides MPI_THREAD_SERIALIZED (false without MPI).
bool mpiThreadSerialized();

/// `hook` runs before every host collective of Collectives.h (the CPU
/// runtime drains its communication thread there, so that one thread calls
/// MPI at a time).
void setHostCollectiveHook(void (*hook)());

/// Prints `error: [rank R: ]<message>` and exits with status 1, without
/// MPI_Abort (for failures before MPI runs).
[[noreturn]] void startupError(const std::string &message);

/// Ends the job (fatalError) when an MPI call returned an error code.
void checkMpi(int rc, const char *call);

/// A non-blocking collective in flight: one MPI request per chunk.
struct PendingCollective {
  std::vector<MpiRequest> requests;
  std::vector<char> done;
  /// The counts of a reduce-scatter: MPI reads them until it completes.
  std::vector<int> counts;
};

/// Starts an in-place sum of `count` elements over all ranks (`call` names
/// it in error messages). Nothing is started when the world size is 1.
PendingCollective startAllreduceSum(void *data, int64_t count, MpiType type,
                                    const char *call);

/// Starts the sum over ranks of the `counts[0] + ... + counts[N-1]` floats
/// of `send`, of which this rank receives its counts[rank] into `recv`
/// (MPI_Ireduce_scatter; ZeRO stage 2's gradient buckets). A copy when the
/// world size is 1. Each count must fit an int (ends the job otherwise).
PendingCollective startReduceScatterSum(const float *send, float *recv,
                                        const std::vector<int64_t> &counts,
                                        const char *call);

/// Tests every request still pending once (MPI progress); true when all
/// have completed.
bool testCollective(PendingCollective &pending);

/// Waits until `pending` completes; the watchdog ends the job after the
/// collective timeout, naming `what`.
void waitCollective(PendingCollective &pending, const char *what);

} // namespace runtime
} // namespace ddpc

#endif // DDPC_LIB_RUNTIME_PROCESSGROUP_H

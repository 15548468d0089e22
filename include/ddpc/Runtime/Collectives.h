//===- Collectives.h - MPI process group with a watchdog --------*- C++ -*-===//
//
// The process group of training programs: MPI_COMM_WORLD, initialized with
// MPI_Init_thread(MPI_THREAD_SERIALIZED) (a program started without mpirun
// is a singleton: rank 0 of 1; a CUDA program started without a launcher
// does not load MPI). Both runtimes share one implementation
// (lib/Runtime/ProcessGroup.cpp); collectivesInit/collectivesFinalize and
// setGradientSync are each runtime's (Collectives.cpp: MPI and a
// communication thread; CUDA/CudaCollectives.cpp: NCCL). The CPU runtime
// runs gradient buckets on a communication thread when MPI provides that
// level (TrainABI.h); every host collective below first waits for that
// thread to be idle.
// Every collective here is non-blocking MPI (MPI_Iallreduce / MPI_Ibcast)
// polled with MPI_Test and a short sleep, so a collective that does not
// complete within the timeout (a peer rank died or hangs) ends the job:
//
//   error: rank R: <operation> did not complete within T s; a peer rank has
//   probably died
//
// and MPI_Abort(MPI_COMM_WORLD, 1). MPI calls use MPI_ERRORS_RETURN and a
// failing call ends the job the same way with
// `error: rank R: MPI_xxx failed: <MPI_Error_string>`. None of these
// functions returns on failure and none throws.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_RUNTIME_COLLECTIVES_H
#define DDPC_RUNTIME_COLLECTIVES_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace ddpc {
namespace runtime {

/// Calls MPI_Init and sets MPI_ERRORS_RETURN on MPI_COMM_WORLD. Exits the
/// process with status 1 (message on stderr) when MPI cannot start.
void collectivesInit(int *argc, char ***argv);

/// Calls MPI_Finalize if MPI was initialized and not yet finalized.
void collectivesFinalize();

/// Rank and size of MPI_COMM_WORLD (0 and 1 before collectivesInit).
int worldRank();
int worldSize();

/// Seconds a collective may take before the watchdog ends the job
/// (default 30).
void setCollectiveTimeout(double seconds);
double collectiveTimeout();

/// Prints `error: rank R: <message>` to stderr and ends the whole job with
/// MPI_Abort(MPI_COMM_WORLD, 1) (plain exit(1) when MPI is not running).
[[noreturn]] void fatalError(const std::string &message);

/// Prints `warning: rank R: <message>` to stderr.
void warning(const std::string &message);

/// In-place sums over all ranks; `what` names the operation in watchdog
/// messages. No-ops when the world size is 1. Counts of any size (split into
/// chunks that fit MPI's int counts).
void allreduceSum(float *data, int64_t count, const char *what);
void allreduceSum(double *data, int64_t count, const char *what);

/// Whether the next ddpc_train_micro calls sum their gradient buckets over
/// ranks (TrainABI.h: ddpc_rt_bucket_*); off at start. The training loop
/// turns it on for the last micro-batch of each optimizer step. Ignored
/// when the world size is 1 (except by the CUDA runtime's
/// DDPC_NCCL_SELF_TEST=1, which runs the buckets through a 1-rank NCCL
/// communicator).
void setGradientSync(bool on);

/// Broadcasts `bytes` bytes from rank 0 to all ranks. No-op when the world
/// size is 1.
void broadcastBytes(void *data, int64_t bytes, const char *what);

/// Gathers `bytes` bytes (at most 2^31 - 1) from every rank: rank q's
/// `send` lands at `recv + q * bytes` on every rank (MPI_Iallgather; ZeRO
/// stage 1's parameter all-gather). A copy when the world size is 1.
void allgatherBytes(const void *send, void *recv, int64_t bytes,
                    const char *what);

/// Waits until every rank has arrived (MPI_Ibarrier, same watchdog).
void barrier(const char *what);

} // namespace runtime
} // namespace ddpc

#endif // DDPC_RUNTIME_COLLECTIVES_H

//===- MpiCalls.h - the MPI calls of the process group, as a table -*- C++
//-*-===//
//
// Part of ddpc's runtime (internal). The process group (ProcessGroup.h)
// makes its MPI calls through an MpiCalls table, so that one implementation
// serves both runtimes:
//   linkedMpi()     the CPU runtime's, linked against libmpi (MpiLinked.cpp)
//   loadedOpenMpi() the CUDA runtime's: Open MPI loaded with dlopen under a
//                   launcher (MpiLoaded.cpp), so CUDA programs have no
//                   link-time dependency on MPI
// Every entry returns MPI's error code (0: MPI_SUCCESS) unless it says
// otherwise; all of them act on MPI_COMM_WORLD.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_LIB_RUNTIME_MPICALLS_H
#define DDPC_LIB_RUNTIME_MPICALLS_H

#include <cstdint>
#include <string>

namespace ddpc {
namespace runtime {

/// An MPI_Request (a pointer in Open MPI, an int in MPICH), copied in and
/// out by value.
using MpiRequest = std::uintptr_t;

/// Element types of the collectives: MPI_BYTE, MPI_FLOAT, MPI_DOUBLE.
enum class MpiType { Byte, Float, Double };

struct MpiCalls {
  /// MPI_Init_thread asking for MPI_THREAD_SERIALIZED; `*serialized` tells
  /// whether MPI provides it.
  int (*initThread)(int *argc, char ***argv, bool *serialized);
  /// MPI_Initialized and not MPI_Finalized.
  bool (*running)();
  int (*finalize)();
  int (*abort)(int code);
  int (*rank)(int *rank);
  int (*size)(int *size);
  /// MPI_Comm_set_errhandler(MPI_ERRORS_RETURN).
  int (*setErrorsReturn)();
  /// MPI_Error_string, or "MPI error <code>".
  std::string (*errorString)(int code);
  /// MPI_Iallreduce(MPI_IN_PLACE, ..., MPI_SUM).
  int (*iallreduceSum)(void *data, int count, MpiType type,
                       MpiRequest *request);
  /// MPI_Ibcast of `bytes` bytes from `root`.
  int (*ibcast)(void *data, int bytes, int root, MpiRequest *request);
  /// MPI_Iallgather of `bytes` bytes from each rank: rank q's `send` lands
  /// at recv + q * bytes.
  int (*iallgather)(const void *send, void *recv, int bytes,
                    MpiRequest *request);
  /// MPI_Ireduce_scatter(send, recv, recvcounts, ..., MPI_SUM): the sum
  /// over ranks of `send`, whose first recvcounts[0] elements go to rank 0,
  /// the next recvcounts[1] to rank 1, ...; this rank's lands in `recv`.
  int (*ireduceScatterSum)(const void *send, void *recv, const int *recvcounts,
                           MpiType type, MpiRequest *request);
  int (*ibarrier)(MpiRequest *request);
  /// MPI_Test: `*done` once the request has completed.
  int (*test)(MpiRequest *request, bool *done);
};

/// The MPI the program is linked with (MpiLinked.cpp).
const MpiCalls &linkedMpi();

/// Open MPI loaded with dlopen: DDPC_MPI_LIBRARY, else libmpi.so.40, else
/// libmpi.so (MpiLoaded.cpp). Ends the process with one line when no MPI
/// library loads or it lacks a symbol (not Open MPI 4 or 5).
const MpiCalls &loadedOpenMpi();

/// Whether a launcher started this process (mpirun/srun: one of
/// OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE, SLURM_NTASKS is set).
bool launchedByMpi();

} // namespace runtime
} // namespace ddpc

#endif // DDPC_LIB_RUNTIME_MPICALLS_H

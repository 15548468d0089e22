//===- MpiLinked.cpp - MpiCalls over the MPI the program links ------------===//
//
// See MpiCalls.h. The CPU runtime's MPI: calls straight into libmpi
// (Open MPI or MPICH) through mpi.h.
//
//===----------------------------------------------------------------------===//

#include "MpiCalls.h"

// The C API only: keep Open MPI/MPICH from pulling in their C++ bindings,
// which would need libmpi_cxx at link time.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstring>

namespace ddpc {
namespace runtime {

namespace {

static_assert(sizeof(MPI_Request) <= sizeof(MpiRequest),
              "MPI_Request does not fit an MpiRequest");

MPI_Request toMpi(MpiRequest r) {
  MPI_Request request;
  std::memcpy(&request, &r, sizeof(request));
  return request;
}

MpiRequest fromMpi(MPI_Request request) {
  MpiRequest r = 0;
  std::memcpy(&r, &request, sizeof(request));
  return r;
}

MPI_Datatype mpiType(MpiType type) {
  switch (type) {
  case MpiType::Byte:
    return MPI_BYTE;
  case MpiType::Float:
    return MPI_FLOAT;
  case MpiType::Double:
    return MPI_DOUBLE;
  }
  return MPI_BYTE;
}

int initThread(int *argc, char ***argv, bool *serialized) {
  int provided = MPI_THREAD_SINGLE;
  int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  *serialized = rc == MPI_SUCCESS && provided >= MPI_THREAD_SERIALIZED;
  return rc;
}

bool running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

std::string errorString(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

/// Runs a call that makes a request and copies the request out.
template <typename Call> int withRequest(MpiRequest *out, Call call) {
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = call(&request);
  *out = fromMpi(request);
  return rc;
}

const MpiCalls kLinked = {
    initThread,
    running,
    [] { return MPI_Finalize(); },
    [](int code) { return MPI_Abort(MPI_COMM_WORLD, code); },
    [](int *rank) { return MPI_Comm_rank(MPI_COMM_WORLD, rank); },
    [](int *size) { return MPI_Comm_size(MPI_COMM_WORLD, size); },
    [] { return MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); },
    errorString,
    [](void *data, int count, MpiType type, MpiRequest *out) {
      return withRequest(out, [&](MPI_Request *request) {
        return MPI_Iallreduce(MPI_IN_PLACE, data, count, mpiType(type), MPI_SUM,
                              MPI_COMM_WORLD, request);
      });
    },
    [](void *data, int bytes, int root, MpiRequest *out) {
      return withRequest(out, [&](MPI_Request *request) {
        return MPI_Ibcast(data, bytes, MPI_BYTE, root, MPI_COMM_WORLD, request);
      });
    },
    [](const void *send, void *recv, int bytes, MpiRequest *out) {
      return withRequest(out, [&](MPI_Request *request) {
        return MPI_Iallgather(send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE,
                              MPI_COMM_WORLD, request);
      });
    },
    [](const void *send, void *recv, const int *counts, MpiType type,
       MpiRequest *out) {
      return withRequest(out, [&](MPI_Request *request) {
        return MPI_Ireduce_scatter(send, recv, counts, mpiType(type), MPI_SUM,
                                   MPI_COMM_WORLD, request);
      });
    },
    [](MpiRequest *out) {
      return withRequest(out, [&](MPI_Request *request) {
        return MPI_Ibarrier(MPI_COMM_WORLD, request);
      });
    },
    [](MpiRequest *r, bool *done) {
      MPI_Request request = toMpi(*r);
      int flag = 0;
      int rc = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
      *r = fromMpi(request);
      *done = flag != 0;
      return rc;
    },
};

} // namespace

const MpiCalls &linkedMpi() { return kLinked; }

} // namespace runtime
} // namespace ddpc

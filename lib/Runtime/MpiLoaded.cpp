//===- MpiLoaded.cpp - MpiCalls over Open MPI loaded with dlopen ----------===//
//
// See MpiCalls.h. The CUDA runtime's MPI: CUDA programs have no link-time
// dependency on MPI and load it only under a launcher. Handles are
// pointers to the library's predefined objects (Open MPI's ABI, versions 4
// and 5); MPI_IN_PLACE is (void *)1 and MPI_STATUS_IGNORE a null pointer
// there.
//
//===----------------------------------------------------------------------===//

#include "MpiCalls.h"
#include "ProcessGroup.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

namespace ddpc {
namespace runtime {

namespace {

using Handle = void *;

struct OpenMpi {
  void *lib = nullptr;
  int (*Init_thread)(int *, char ***, int, int *);
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
  int (*Iallgather)(const void *, int, Handle, void *, int, Handle, Handle,
                    Handle *);
  int (*Ireduce_scatter)(const void *, void *, const int *, Handle, Handle,
                         Handle, Handle *);
  int (*Ibarrier)(Handle, Handle *);
  int (*Test)(Handle *, int *, void *);
  Handle commWorld, typeByte, typeFloat, typeDouble, opSum, errorsReturn;
};
OpenMpi gOmpi;

void *const kInPlace = reinterpret_cast<void *>(1);
/// Open MPI's MPI_THREAD_SERIALIZED (mpi.h: SINGLE, FUNNELED, SERIALIZED,
/// MULTIPLE are 0..3).
constexpr int kThreadSerialized = 2;

static_assert(sizeof(Handle) <= sizeof(MpiRequest),
              "an Open MPI request does not fit an MpiRequest");

template <typename T> void resolve(T &fn, const char *name) {
  fn = reinterpret_cast<T>(dlsym(gOmpi.lib, name));
  if (!fn)
    startupError(std::string("the MPI library has no symbol '") + name +
                 "' (ddpc's CUDA programs support Open MPI 4 and 5; set "
                 "DDPC_MPI_LIBRARY to its libmpi.so)");
}

Handle object(const char *name) {
  void *p = dlsym(gOmpi.lib, name);
  if (!p)
    startupError(std::string("the MPI library has no symbol '") + name +
                 "' (not Open MPI?); set DDPC_MPI_LIBRARY to Open MPI's "
                 "libmpi.so");
  return p;
}

void load() {
  std::string tried;
  const char *env = std::getenv("DDPC_MPI_LIBRARY");
  for (const char *name : {env, "libmpi.so.40", "libmpi.so"}) {
    if (!name)
      continue;
    gOmpi.lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (gOmpi.lib)
      break;
    tried += std::string(tried.empty() ? "" : "; ") + dlerror();
  }
  if (!gOmpi.lib)
    startupError("started by a launcher (mpirun/srun) but the MPI library "
                 "cannot be loaded: " +
                 tried + ". Install Open MPI or set DDPC_MPI_LIBRARY");
  resolve(gOmpi.Init_thread, "MPI_Init_thread");
  resolve(gOmpi.Initialized, "MPI_Initialized");
  resolve(gOmpi.Finalized, "MPI_Finalized");
  resolve(gOmpi.Finalize, "MPI_Finalize");
  resolve(gOmpi.Abort, "MPI_Abort");
  resolve(gOmpi.Comm_rank, "MPI_Comm_rank");
  resolve(gOmpi.Comm_size, "MPI_Comm_size");
  resolve(gOmpi.Comm_set_errhandler, "MPI_Comm_set_errhandler");
  resolve(gOmpi.Error_string, "MPI_Error_string");
  resolve(gOmpi.Iallreduce, "MPI_Iallreduce");
  resolve(gOmpi.Ibcast, "MPI_Ibcast");
  resolve(gOmpi.Iallgather, "MPI_Iallgather");
  resolve(gOmpi.Ireduce_scatter, "MPI_Ireduce_scatter");
  resolve(gOmpi.Ibarrier, "MPI_Ibarrier");
  resolve(gOmpi.Test, "MPI_Test");
  gOmpi.commWorld = object("ompi_mpi_comm_world");
  gOmpi.typeByte = object("ompi_mpi_byte");
  gOmpi.typeFloat = object("ompi_mpi_float");
  gOmpi.typeDouble = object("ompi_mpi_double");
  gOmpi.opSum = object("ompi_mpi_op_sum");
  gOmpi.errorsReturn = object("ompi_mpi_errors_return");
}

Handle ompiType(MpiType type) {
  switch (type) {
  case MpiType::Byte:
    return gOmpi.typeByte;
  case MpiType::Float:
    return gOmpi.typeFloat;
  case MpiType::Double:
    return gOmpi.typeDouble;
  }
  return gOmpi.typeByte;
}

/// Runs a call that makes a request and copies the request handle out.
template <typename Call> int withRequest(MpiRequest *out, Call call) {
  Handle request = nullptr;
  int rc = call(&request);
  std::memcpy(out, &request, sizeof(request));
  return rc;
}

const MpiCalls kLoaded = {
    [](int *argc, char ***argv, bool *serialized) {
      int provided = 0;
      int rc = gOmpi.Init_thread(argc, argv, kThreadSerialized, &provided);
      *serialized = rc == 0 && provided >= kThreadSerialized;
      return rc;
    },
    [] {
      int initialized = 0, finalized = 0;
      gOmpi.Initialized(&initialized);
      gOmpi.Finalized(&finalized);
      return initialized && !finalized;
    },
    [] { return gOmpi.Finalize(); },
    [](int code) { return gOmpi.Abort(gOmpi.commWorld, code); },
    [](int *rank) { return gOmpi.Comm_rank(gOmpi.commWorld, rank); },
    [](int *size) { return gOmpi.Comm_size(gOmpi.commWorld, size); },
    [] {
      return gOmpi.Comm_set_errhandler(gOmpi.commWorld, gOmpi.errorsReturn);
    },
    [](int code) {
      char buf[512];
      int len = 0;
      if (gOmpi.Error_string(code, buf, &len) != 0)
        return "MPI error " + std::to_string(code);
      return std::string(buf, static_cast<size_t>(len));
    },
    [](void *data, int count, MpiType type, MpiRequest *out) {
      return withRequest(out, [&](Handle *request) {
        return gOmpi.Iallreduce(kInPlace, data, count, ompiType(type),
                                gOmpi.opSum, gOmpi.commWorld, request);
      });
    },
    [](void *data, int bytes, int root, MpiRequest *out) {
      return withRequest(out, [&](Handle *request) {
        return gOmpi.Ibcast(data, bytes, gOmpi.typeByte, root, gOmpi.commWorld,
                            request);
      });
    },
    [](const void *send, void *recv, int bytes, MpiRequest *out) {
      return withRequest(out, [&](Handle *request) {
        return gOmpi.Iallgather(send, bytes, gOmpi.typeByte, recv, bytes,
                                gOmpi.typeByte, gOmpi.commWorld, request);
      });
    },
    [](const void *send, void *recv, const int *counts, MpiType type,
       MpiRequest *out) {
      return withRequest(out, [&](Handle *request) {
        return gOmpi.Ireduce_scatter(send, recv, counts, ompiType(type),
                                     gOmpi.opSum, gOmpi.commWorld, request);
      });
    },
    [](MpiRequest *out) {
      return withRequest(out, [&](Handle *request) {
        return gOmpi.Ibarrier(gOmpi.commWorld, request);
      });
    },
    [](MpiRequest *r, bool *done) {
      Handle request = nullptr;
      std::memcpy(&request, r, sizeof(request));
      int flag = 0;
      int rc = gOmpi.Test(&request, &flag, nullptr);
      std::memcpy(r, &request, sizeof(request));
      *done = flag != 0;
      return rc;
    },
};

} // namespace

const MpiCalls &loadedOpenMpi() {
  if (!gOmpi.lib)
    load();
  return kLoaded;
}

} // namespace runtime
} // namespace ddpc

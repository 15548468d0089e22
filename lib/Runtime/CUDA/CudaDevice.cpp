//===- CudaDevice.cpp - device, context, kernels, host sync (CUDA) ------===//
//
// Part of ddpc's CUDA runtime. The rank's device and compute stream, the
// driver API (resolved through cudart, not linked), and the GPU runtime
// calls that MLIR's gpu-to-llvm lowering emits (mgpuModuleLoad,
// mgpuModuleGetFunction, mgpuLaunchKernel, mgpuStream*). Modules are loaded
// lazily, on the first launch, because their loads run from global
// constructors, before main() has chosen the rank's device. Also
// ddpc_gpu_host_sync (see ddpc-gpu-host-sync) and the index checks of
// compiled code it examines. Every CUDA and driver call is checked; a
// failure ends the job with the call, the rank and the library's message.
//
//===----------------------------------------------------------------------===//

#include "CudaRuntime.h"

#include "ddpc/Runtime/Collectives.h"
#include "ddpc/Runtime/RuntimeChecks.h"

#include <cuda.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

/// The glue's --precision (RuntimeSymbols.h kGlueMathMode). A weak
/// reference, not a weak default: the compiler folds a const default into
/// its readers. Programs without it (the runtime's own tests) run float32.
extern "C" __attribute__((weak)) const int32_t ddpc_math_mode;

namespace ddpc {
namespace runtime {
namespace cuda {

namespace {

int gDevice = -1;
cudaStream_t gCompute = nullptr;
std::mutex gInitMutex;
/// Name of the last kernel launched (for error messages).
const char *gLastKernel = "(none)";

} // namespace

bool allowTF32() {
  // DDPC_TF32=0/1 overrides the compiled choice (diagnosis, and the GPU
  // check's TF32 timing of a float32 program).
  static const bool allowed = [] {
    const char *v = std::getenv("DDPC_TF32");
    if (v && *v)
      return std::strcmp(v, "0") != 0;
    return &ddpc_math_mode && ddpc_math_mode == 1;
  }();
  return allowed;
}

/// DDPC_CUDA_SYNC_CHECK=1: wait for every kernel and GEMM right after it is
/// queued and check for errors, so a failing kernel is named (device errors
/// are otherwise reported by a later call). Slow; for diagnosis, like
/// CUDA_LAUNCH_BLOCKING.
bool syncCheck() {
  static const bool enabled = [] {
    const char *v = std::getenv("DDPC_CUDA_SYNC_CHECK");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

/// In DDPC_CUDA_SYNC_CHECK mode: waits for the compute stream and fails,
/// naming `what`, if the device reported an error.
void checkCompleted(const std::string &what) {
  if (!syncCheck())
    return;
  cudaError_t rc = cudaStreamSynchronize(gCompute);
  if (rc != cudaSuccess)
    fatalError("CUDA error in " + what + ": " + cudaGetErrorString(rc) +
               " (found by DDPC_CUDA_SYNC_CHECK)");
}

namespace {

/// The driver API functions the runtime calls, resolved through the CUDA
/// runtime (cudaGetDriverEntryPointByVersion, ABI of CUDA 12.0; else dlsym
/// in libcuda.so.1) rather than by linking libcuda.so.1: without the NVIDIA
/// driver a program then starts and ensureDevice() says what is missing,
/// instead of the dynamic loader failing before main().
struct DriverApi {
  decltype(&::cuModuleLoadData) moduleLoadData = nullptr;
  decltype(&::cuModuleGetFunction) moduleGetFunction = nullptr;
  decltype(&::cuLaunchKernel) launchKernel = nullptr;
  decltype(&::cuGetErrorString) getErrorString = nullptr;
};

const DriverApi &driver() {
  static const DriverApi api = [] {
    ensureDevice();
    DriverApi a;
    auto resolve = [](const char *name, auto &fn) {
      void *p = nullptr;
      cudaDriverEntryPointQueryResult found =
          cudaDriverEntryPointSymbolNotFound;
      cudaError_t rc = cudaGetDriverEntryPointByVersion(
          name, &p, 12000, cudaEnableDefault, &found);
      if (rc != cudaSuccess || found != cudaDriverEntryPointSuccess || !p) {
        // The classic way: the driver library's own export (unversioned
        // names are the CUDA 12 ABI for these four functions).
        static void *libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        p = libcuda ? dlsym(libcuda, name) : nullptr;
      }
      if (!p)
        fatalError(
            std::string("the NVIDIA driver does not provide ") + name +
            " (cudaGetDriverEntryPointByVersion: " + cudaGetErrorString(rc) +
            "; not exported by libcuda.so.1 either); install a driver for "
            "CUDA 13 (R580 or newer)");
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    resolve("cuModuleLoadData", a.moduleLoadData);
    resolve("cuModuleGetFunction", a.moduleGetFunction);
    resolve("cuLaunchKernel", a.launchKernel);
    resolve("cuGetErrorString", a.getErrorString);
    return a;
  }();
  return api;
}

void checkDriver(CUresult result, const char *call) {
  if (result == CUDA_SUCCESS)
    return;
  const char *msg = nullptr;
  driver().getErrorString(result, &msg);
  callFailed(call, msg ? msg : ("CUresult " + std::to_string(result)));
}

} // namespace

int localRankFromEnvironment() {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                           "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char *v = std::getenv(name))
      return std::atoi(v);
  return 0;
}

[[noreturn]] void callFailed(const char *call, const std::string &message) {
  fatalError(std::string("CUDA call ") + call + " failed: " + message);
}

void check(cudaError_t result, const char *call) {
  if (result != cudaSuccess)
    callFailed(call, cudaGetErrorString(result));
}

void ensureDevice() {
  if (gCompute)
    return;
  std::lock_guard<std::mutex> lock(gInitMutex);
  if (gCompute)
    return;
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    // cudart reports a missing driver as an "insufficient" one.
    void *libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!libcuda)
      libcuda = dlopen("libcuda.so.1", RTLD_NOW);
    std::string why =
        !libcuda ? "the NVIDIA driver library libcuda.so.1 was not found"
        : rc == cudaSuccess
            ? "0 devices"
            : std::string("cudaGetDeviceCount: ") + cudaGetErrorString(rc);
    fatalError("no CUDA device is usable (" + why +
               "); run programs compiled with --target cuda on a machine "
               "with an NVIDIA GPU and driver (R580 or newer)");
  }
  gDevice = localRankFromEnvironment() % count;
  check(cudaSetDevice(gDevice), "cudaSetDevice");
  check(cudaFree(nullptr), "cudaFree(0) (context creation)");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
        "cudaStreamCreateWithFlags");
  gCompute = stream;
}

int device() {
  ensureDevice();
  return gDevice;
}

cudaStream_t computeStream() {
  ensureDevice();
  return gCompute;
}

} // namespace cuda
} // namespace runtime
} // namespace ddpc

using namespace ddpc::runtime;
using namespace ddpc::runtime::cuda;

extern "C" void ddpc_gpu_host_sync();

namespace {

/// A gpu.module binary, loaded into the rank's context on first use.
struct LazyModule {
  const void *data;
  size_t size;
  CUmodule module = nullptr;
  std::mutex mutex;
  std::unordered_map<std::string, CUfunction> functions;
  /// By the address of the name (compiled code passes string constants),
  /// so that each launch finds its function without building a string.
  std::unordered_map<const char *, CUfunction> byAddress;
};

std::unordered_map<CUfunction, const char *> &kernelNames() {
  static auto *names = new std::unordered_map<CUfunction, const char *>;
  return *names;
}

/// Index checks of compiled code (ddpc_rt_check_indices): the min and max
/// of each check, copied on the compute stream into page-locked slots, and
/// examined by ddpc_gpu_host_sync once the stream has passed the copies.
class PendingIndexChecks {
public:
  static PendingIndexChecks &get() {
    static PendingIndexChecks checks;
    return checks;
  }

  /// An index check (min, max against bound) or, with `max` null, a count
  /// check (min points at the count).
  void add(const int64_t *min, const int64_t *max, int64_t bound,
           const char *what) {
    if (pending.size() == kSlots)
      ddpc_gpu_host_sync(); // Examines (and empties) the full table.
    if (!slots) {
      void *p = nullptr;
      check(cudaMallocHost(&p, kSlots * 2 * sizeof(int64_t)),
            "cudaMallocHost (index check slots)");
      slots = static_cast<int64_t *>(p);
    }
    int64_t *slot = slots + 2 * pending.size();
    check(cudaMemcpyAsync(slot, min, sizeof(int64_t), cudaMemcpyDefault,
                          computeStream()),
          "cudaMemcpyAsync (index check)");
    if (max)
      check(cudaMemcpyAsync(slot + 1, max, sizeof(int64_t), cudaMemcpyDefault,
                            computeStream()),
            "cudaMemcpyAsync (index check)");
    pending.push_back({max ? bound : -1, what});
  }

  /// After the compute stream is idle: records the first violation.
  void examine() {
    for (size_t i = 0; i < pending.size(); ++i) {
      std::string message =
          pending[i].bound < 0
              ? countError(slots[2 * i], pending[i].what)
              : indexRangeError(slots[2 * i], slots[2 * i + 1],
                                pending[i].bound, pending[i].what);
      if (!message.empty())
        recordRuntimeError(message);
    }
    pending.clear();
  }

private:
  static constexpr size_t kSlots = 256;
  struct Check {
    int64_t bound;
    const char *what;
  };
  int64_t *slots = nullptr;
  std::vector<Check> pending;
};

} // namespace

extern "C" {

void ddpc_rt_check_indices(const int64_t *min, const int64_t *max,
                           int64_t bound, const char *what) {
  PendingIndexChecks::get().add(min, max, bound, what);
}

void ddpc_rt_check_count(const int64_t *count, const char *what) {
  PendingIndexChecks::get().add(count, nullptr, 0, what);
}

//===----------------------------------------------------------------------===//
// MLIR gpu-to-llvm runtime calls
//===----------------------------------------------------------------------===//

void *mgpuModuleLoad(void *data, size_t size) {
  // Runs from a global constructor: only record the image.
  return new LazyModule{data, size};
}

void mgpuModuleUnload(void *) {
  // Runs from a global destructor, possibly after the CUDA context is gone:
  // the driver frees modules with the context at exit.
}

void *mgpuModuleGetFunction(void *handle, const char *name) {
  auto *m = static_cast<LazyModule *>(handle);
  std::lock_guard<std::mutex> lock(m->mutex);
  auto fast = m->byAddress.find(name);
  if (fast != m->byAddress.end())
    return fast->second;
  auto it = m->functions.find(name);
  if (it != m->functions.end()) {
    m->byAddress.emplace(name, it->second);
    return it->second;
  }
  ensureDevice();
  if (!m->module)
    checkDriver(driver().moduleLoadData(&m->module, m->data),
                "cuModuleLoadData (kernel image; was the program compiled "
                "with --cuda-arch for this GPU?)");
  CUfunction fn = nullptr;
  checkDriver(driver().moduleGetFunction(&fn, m->module, name),
              (std::string("cuModuleGetFunction(") + name + ")").c_str());
  m->functions.emplace(name, fn);
  m->byAddress.emplace(name, fn);
  kernelNames().emplace(fn, strdup(name));
  return fn;
}

void mgpuLaunchKernel(void *function, intptr_t gridX, intptr_t gridY,
                      intptr_t gridZ, intptr_t blockX, intptr_t blockY,
                      intptr_t blockZ, int32_t smem, void *stream,
                      void **params, void **extra, size_t /*paramsCount*/) {
  auto fn = static_cast<CUfunction>(function);
  auto name = kernelNames().find(fn);
  gLastKernel = name == kernelNames().end() ? "(unknown)" : name->second;
  if (gridX <= 0 || gridY <= 0 || gridZ <= 0)
    return; // Zero-size launch: nothing to do.
  size_t token = profiling() ? profileBegin(gLastKernel) : 0;
  checkDriver(driver().launchKernel(fn, gridX, gridY, gridZ, blockX, blockY,
                                    blockZ, smem, static_cast<CUstream>(stream),
                                    params, extra),
              (std::string("cuLaunchKernel(") + gLastKernel + ")").c_str());
  if (profiling())
    profileEnd(token);
  if (syncCheck())
    checkCompleted(std::string("kernel ") + gLastKernel + " (grid " +
                   std::to_string(gridX) + "x" + std::to_string(gridY) + "x" +
                   std::to_string(gridZ) + ", block " + std::to_string(blockX) +
                   ")");
}

/// gpu-to-llvm brackets each synchronous launch with a stream create,
/// synchronize and destroy. All of them use the one compute stream; host
/// ordering comes from ddpc_gpu_host_sync calls (ddpc-gpu-host-sync).
void *mgpuStreamCreate() { return computeStream(); }
void mgpuStreamDestroy(void *) {}
void mgpuStreamSynchronize(void *) {}

//===----------------------------------------------------------------------===//
// ddpc entry points
//===----------------------------------------------------------------------===//

/// Waits for all work queued on the compute stream. While waiting, checks
/// NCCL for errors and allreduces that exceed the collective timeout.
void ddpc_gpu_host_sync() {
  cudaStream_t stream = computeStream();
  for (int iter = 0;; ++iter) {
    cudaError_t rc = cudaStreamQuery(stream);
    if (rc == cudaSuccess) {
      PendingIndexChecks::get().examine();
      return;
    }
    if (rc != cudaErrorNotReady)
      callFailed("cudaStreamQuery",
                 std::string(cudaGetErrorString(rc)) +
                     " (last kernel launched: " + gLastKernel + ")");
    pollCollectives();
    if (iter > 1000)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

} // extern "C"

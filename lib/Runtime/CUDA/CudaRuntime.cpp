//===- CudaRuntime.cpp - device, kernels, memory, GEMM (CUDA) -----------===//
//
// Part of ddpc. Implements, for programs compiled with `--target cuda`:
//   * the GPU runtime calls that MLIR's gpu-to-llvm lowering emits
//     (mgpuModuleLoad, mgpuModuleGetFunction, mgpuLaunchKernel,
//     mgpuStream*), on the driver API. Modules are loaded lazily, on the
//     first launch, because their loads run from global constructors,
//     before main() has chosen the rank's device;
//   * the allocation functions of finalize-memref-to-llvm with
//     use-generic-functions (_mlir_memref_to_llvm_alloc/aligned_alloc/free):
//     a caching allocator over cudaMallocManaged. Freed blocks are kept per
//     size and reused; reuse is safe without synchronization because all
//     device work is ordered on the one compute stream;
//   * Memory.h for the runtime's own buffers (cudaMallocManaged);
//   * ddpc_gpu_host_sync (see ddpc-gpu-host-sync) and ddpc_gemm_f32
//     (cublasSgemmStridedBatched, FP32 math, no TF32).
// Every CUDA, driver and cuBLAS call is checked; a failure ends the job with
// the call, the rank and the library's message.
//
//===----------------------------------------------------------------------===//

#include "CudaRuntime.h"

#include "ddpc/Runtime/Collectives.h"
#include "ddpc/Runtime/ConstantCopies.h"
#include "ddpc/Runtime/Gemm.h"
#include "ddpc/Runtime/Memory.h"
#include "ddpc/Runtime/ModelABI.h"
#include "ddpc/Runtime/RuntimeChecks.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ddpc {
namespace runtime {
namespace cuda {

namespace {

int gDevice = -1;
cudaStream_t gCompute = nullptr;
cublasHandle_t gBlas = nullptr;
std::mutex gInitMutex;
/// Name of the last kernel launched (for error messages).
const char *gLastKernel = "(none)";

} // namespace

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

void checkBlas(cublasStatus_t status, const char *call,
               const std::string &detail = "") {
  if (status != CUBLAS_STATUS_SUCCESS)
    callFailed(call, cublasGetStatusString(status) + detail);
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
  checkBlas(cublasCreate(&gBlas), "cublasCreate");
  checkBlas(cublasSetStream(gBlas, stream), "cublasSetStream");
  checkBlas(cublasSetMathMode(gBlas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
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

/// Managed memory that the device computes on: keeps its pages on the
/// device (cudaMemAdviseSetPreferredLocation), so that an occasional host
/// access (a checkpoint, a metric) migrates them back instead of letting the
/// driver's thrashing heuristics pin them to host memory, where every kernel
/// would reach them over the bus; with `prefetch`, moves them there now
/// (ordered on the compute stream). Hints only: without concurrent managed
/// access support, or on any error, nothing is done.
void preferDevice(void *ptr, size_t bytes, bool prefetch) {
  static const bool supported = [] {
    int value = 0;
    return cudaDeviceGetAttribute(&value, cudaDevAttrConcurrentManagedAccess,
                                  gDevice) == cudaSuccess &&
           value != 0;
  }();
  if (!supported || !ptr || bytes == 0)
    return;
  cudaMemLocation location{};
  location.type = cudaMemLocationTypeDevice;
  location.id = gDevice;
  if (cudaMemAdvise(ptr, bytes, cudaMemAdviseSetPreferredLocation, location) !=
          cudaSuccess ||
      (prefetch &&
       cudaMemPrefetchAsync(ptr, bytes, location, 0, gCompute) != cudaSuccess))
    (void)cudaGetLastError(); // A hint: clear the error, go on.
}

} // namespace cuda

//===----------------------------------------------------------------------===//
// Memory.h: the runtime's buffers
//===----------------------------------------------------------------------===//

void *allocateBuffer(size_t bytes) {
  cuda::ensureDevice();
  size_t rounded = (std::max<size_t>(bytes, 1) + kBufferAlignment - 1) /
                   kBufferAlignment * kBufferAlignment;
  void *ptr = nullptr;
  if (cudaMallocManaged(&ptr, rounded, cudaMemAttachGlobal) != cudaSuccess)
    return nullptr;
  std::memset(ptr, 0, rounded);
  // Parameters, gradients, optimizer state and input batches live on the
  // device, however small (the per-step scalars the host touches come from
  // allocateHostShared). No prefetch: the host fills most of them first.
  cuda::preferDevice(ptr, rounded, /*prefetch=*/false);
  return ptr;
}

void *allocateHostShared(size_t bytes) {
  cuda::ensureDevice();
  size_t rounded = (std::max<size_t>(bytes, 1) + kBufferAlignment - 1) /
                   kBufferAlignment * kBufferAlignment;
  void *ptr = nullptr;
  if (cudaMallocHost(&ptr, rounded) != cudaSuccess)
    return nullptr;
  std::memset(ptr, 0, rounded);
  return ptr;
}

/// Frees `ptr` with `release` once the compiled work that may still read it
/// (queued on the compute stream) is done.
static void freeAfterQueuedWork(void *ptr, cudaError_t (*release)(void *),
                                const char *what) {
  if (!ptr)
    return;
  cuda::check(cudaStreamSynchronize(cuda::computeStream()),
              "cudaStreamSynchronize");
  cuda::check(release(ptr), what);
}

void freeHostShared(void *ptr) {
  freeAfterQueuedWork(ptr, cudaFreeHost, "cudaFreeHost");
}

void freeBuffer(void *ptr) { freeAfterQueuedWork(ptr, cudaFree, "cudaFree"); }

void zeroBuffer(void *ptr, size_t bytes) {
  cuda::check(cudaMemsetAsync(ptr, 0, bytes, cuda::computeStream()),
              "cudaMemsetAsync");
}

void *allocateStaging(size_t bytes) {
  cuda::ensureDevice();
  void *ptr = nullptr;
  if (cudaMallocHost(&ptr, std::max<size_t>(bytes, 1)) != cudaSuccess)
    return nullptr;
  return ptr;
}

void freeStaging(void *ptr) {
  if (ptr)
    cuda::check(cudaFreeHost(ptr), "cudaFreeHost");
}

uint64_t copyFromStaging(void *dst, const void *src, size_t bytes) {
  cudaStream_t stream = cuda::computeStream();
  cudaEvent_t done;
  cuda::check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
              "cudaEventCreateWithFlags");
  cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync (input batch)");
  cuda::check(cudaEventRecord(done, stream), "cudaEventRecord");
  return reinterpret_cast<uint64_t>(done);
}

void waitStagingCopy(uint64_t token) {
  auto done = reinterpret_cast<cudaEvent_t>(token);
  for (;;) {
    cudaError_t rc = cudaEventQuery(done);
    if (rc == cudaSuccess)
      break;
    if (rc != cudaErrorNotReady)
      cuda::check(rc, "cudaEventQuery (input batch copy)");
    cuda::pollCollectives();
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  cuda::check(cudaEventDestroy(done), "cudaEventDestroy");
}

} // namespace runtime
} // namespace ddpc

using namespace ddpc::runtime;
using namespace ddpc::runtime::cuda;

namespace {

//===----------------------------------------------------------------------===//
// Caching allocator for compiled code
//===----------------------------------------------------------------------===//

/// Blocks are multiples of 256 bytes (cudaMallocManaged returns 256-byte
/// aligned memory, more than any alignment the compiled code asks for).
constexpr size_t kBlock = 256;

struct Pool {
  std::mutex mutex;
  std::unordered_map<void *, size_t> live;
  std::multimap<size_t, void *> cached;

  void *allocate(size_t bytes) {
    size_t size = (std::max<size_t>(bytes, 1) + kBlock - 1) / kBlock * kBlock;
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cached.find(size);
    if (it != cached.end()) {
      void *ptr = it->second;
      cached.erase(it);
      live.emplace(ptr, size);
      return ptr;
    }
    ensureDevice();
    void *ptr = nullptr;
    if (cudaMallocManaged(&ptr, size, cudaMemAttachGlobal) != cudaSuccess) {
      (void)cudaGetLastError();
      // Give the cached blocks back and retry once.
      check(cudaStreamSynchronize(computeStream()), "cudaStreamSynchronize");
      for (auto &entry : cached)
        check(cudaFree(entry.second), "cudaFree");
      cached.clear();
      check(cudaMallocManaged(&ptr, size, cudaMemAttachGlobal),
            ("cudaMallocManaged(" + std::to_string(size) + " bytes)").c_str());
    }
    // Compiled code's arenas and temporaries: device memory in all but name.
    preferDevice(ptr, size, /*prefetch=*/true);
    live.emplace(ptr, size);
    return ptr;
  }

  void release(void *ptr) {
    if (!ptr)
      return;
    std::lock_guard<std::mutex> lock(mutex);
    auto it = live.find(ptr);
    if (it == live.end())
      return; // Not ours (a runtime buffer); never freed by compiled code.
    cached.emplace(it->second, ptr);
    live.erase(it);
  }
};

Pool &pool() {
  static Pool *p = new Pool; // Never destroyed: used until exit.
  return *p;
}

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

//===----------------------------------------------------------------------===//
// DDPC_CUDA_PROFILE=1: device time per kernel and GEMM
//===----------------------------------------------------------------------===//

/// Brackets each kernel and GEMM with CUDA events on the compute stream and,
/// at exit, prints the device time per kernel name to stderr (largest
/// first), with the sum of device time against the wall time: a large gap
/// means the host, not the kernels, bounds the step. The first call of each
/// name is left out of both (module loading, library plan selection and
/// first-touch page migration, which would swamp a short run), and the
/// wall time starts at the first repeated name (the second step).
class Profiler {
public:
  static bool enabled() {
    static const bool on = [] {
      const char *v = std::getenv("DDPC_CUDA_PROFILE");
      return v && *v && std::strcmp(v, "0") != 0;
    }();
    return on;
  }

  static Profiler &get() {
    static Profiler *p = new Profiler; // Never destroyed: used until exit.
    return *p;
  }

  /// Records the start of `name`'s work; returns a token for end().
  size_t begin(const std::string &name) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!registered) {
      registered = true;
      wallStart = std::chrono::steady_clock::now();
      std::atexit([] { Profiler::get().report(); });
    }
    bool first = begun.insert(name).second;
    if (!first && !steady) {
      steady = true;
      wallStart = std::chrono::steady_clock::now();
    }
    if (pending.size() >= 8192)
      drainLocked();
    Record r{name, event(), event(), first};
    check(cudaEventRecord(r.start, gCompute), "cudaEventRecord (profile)");
    pending.push_back(r);
    return pending.size() - 1;
  }

  void end(size_t token) {
    std::lock_guard<std::mutex> lock(mutex);
    check(cudaEventRecord(pending[token].stop, gCompute),
          "cudaEventRecord (profile)");
  }

private:
  struct Record {
    std::string name;
    cudaEvent_t start, stop;
    bool first; // The name's first call: counted apart.
  };
  struct Total {
    int64_t calls = 0;
    double ms = 0;
  };

  cudaEvent_t event() {
    if (!freeEvents.empty()) {
      cudaEvent_t e = freeEvents.back();
      freeEvents.pop_back();
      return e;
    }
    cudaEvent_t e;
    check(cudaEventCreate(&e), "cudaEventCreate (profile)");
    return e;
  }

  void drainLocked() {
    for (Record &r : pending) {
      check(cudaEventSynchronize(r.stop), "cudaEventSynchronize (profile)");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, r.start, r.stop),
            "cudaEventElapsedTime (profile)");
      Total &t = r.first ? firstCalls : totals[r.name];
      ++t.calls;
      t.ms += ms;
      freeEvents.push_back(r.start);
      freeEvents.push_back(r.stop);
    }
    pending.clear();
  }

  void report() {
    std::lock_guard<std::mutex> lock(mutex);
    if (cudaStreamSynchronize(gCompute) != cudaSuccess)
      return; // The job is failing; its error was reported.
    drainLocked();
    double wallMs = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - wallStart)
                        .count();
    std::vector<std::pair<std::string, Total>> rows(totals.begin(),
                                                    totals.end());
    std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) {
      return a.second.ms > b.second.ms;
    });
    double deviceMs = 0;
    int64_t calls = 0;
    for (const auto &row : rows) {
      deviceMs += row.second.ms;
      calls += row.second.calls;
    }
    std::fprintf(stderr,
                 "ddpc CUDA profile (rank device %d): %lld launches of %zu "
                 "kernels/GEMMs, %.3f ms device time in %.3f ms wall time "
                 "(%.1f%% busy)\n",
                 gDevice, static_cast<long long>(calls), rows.size(), deviceMs,
                 wallMs, wallMs > 0 ? 100.0 * deviceMs / wallMs : 0.0);
    std::fprintf(stderr,
                 "  (left out: the first call of each name, %lld calls, "
                 "%.3f ms device time)\n",
                 static_cast<long long>(firstCalls.calls), firstCalls.ms);
    std::fprintf(stderr, "  %10s %8s %12s %7s  %s\n", "total_ms", "calls",
                 "mean_us", "share", "kernel");
    size_t shown = 0;
    for (const auto &[name, t] : rows) {
      if (++shown > 25)
        break;
      std::fprintf(stderr, "  %10.3f %8lld %12.2f %6.1f%%  %s\n", t.ms,
                   static_cast<long long>(t.calls),
                   1000.0 * t.ms / std::max<int64_t>(1, t.calls),
                   deviceMs > 0 ? 100.0 * t.ms / deviceMs : 0.0, name.c_str());
    }
  }

  std::mutex mutex;
  bool registered = false;
  std::chrono::steady_clock::time_point wallStart;
  std::vector<Record> pending;
  std::vector<cudaEvent_t> freeEvents;
  std::map<std::string, Total> totals;
  Total firstCalls;
  std::unordered_set<std::string> begun;
  bool steady = false;
};

} // namespace

namespace ddpc {
namespace runtime {
namespace cuda {
bool profiling() { return Profiler::enabled(); }
size_t profileBegin(const std::string &name) {
  return Profiler::get().begin(name);
}
void profileEnd(size_t token) { Profiler::get().end(token); }
} // namespace cuda
} // namespace runtime
} // namespace ddpc

extern "C" void ddpc_gpu_host_sync();

namespace {

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
  size_t token = Profiler::enabled() ? Profiler::get().begin(gLastKernel) : 0;
  checkDriver(driver().launchKernel(fn, gridX, gridY, gridZ, blockX, blockY,
                                    blockZ, smem, static_cast<CUstream>(stream),
                                    params, extra),
              (std::string("cuLaunchKernel(") + gLastKernel + ")").c_str());
  if (Profiler::enabled())
    Profiler::get().end(token);
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
// finalize-memref-to-llvm{use-generic-functions}
//===----------------------------------------------------------------------===//

void *_mlir_memref_to_llvm_alloc(size_t size) { return pool().allocate(size); }

void *_mlir_memref_to_llvm_aligned_alloc(size_t alignment, size_t size) {
  if (alignment > kBlock)
    fatalError("compiled code asked for " + std::to_string(alignment) +
               "-byte alignment; the CUDA allocator provides 256");
  return pool().allocate(size);
}

void _mlir_memref_to_llvm_free(void *ptr) { pool().release(ptr); }

/// ddpc-device-constants: the packed constant tensors at `host` (`bytes`
/// bytes), copied to the device on the first call and returned from then on
/// (one copy per process; never freed). Managed memory kept on the device,
/// so host code may still read a constant.
void *ddpc_device_constants(const void *host, int64_t bytes) {
  return onceCopiedConstants(host, bytes, [](const void *src, int64_t n) {
    ensureDevice();
    void *copy = nullptr;
    size_t size = std::max<size_t>(static_cast<size_t>(n), 1);
    check(cudaMallocManaged(&copy, size, cudaMemAttachGlobal),
          ("cudaMallocManaged(" + std::to_string(size) +
           " bytes of constant tensors)")
              .c_str());
    preferDevice(copy, size, /*prefetch=*/false);
    // Ordered before every kernel: the compute stream waits for it.
    check(cudaMemcpyAsync(copy, src, static_cast<size_t>(n),
                          cudaMemcpyHostToDevice, computeStream()),
          "cudaMemcpyAsync (constant tensors)");
    check(cudaStreamSynchronize(computeStream()),
          "cudaStreamSynchronize (constant tensors)");
    return copy;
  });
}

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

/// See Gemm.h: the row-major product as cuBLAS's column-major call.
void ddpc_gemm_f32(int64_t batch, int64_t m, int64_t n, int64_t k,
                   int32_t transA, int32_t transB, int64_t a, int64_t b,
                   int64_t c, int64_t strideA, int64_t strideB, int64_t strideC,
                   int32_t accumulate) {
  computeStream(); // Initializes cuBLAS.
  const float one = 1.0f, zero = 0.0f;
  ColumnMajorGemm g = toColumnMajor(batch, m, n, k, transA, transB, a, b, c,
                                    strideA, strideB, strideC, accumulate);
  auto op = [](bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; };
  // Built only for messages: this runs for every GEMM of every step.
  auto shape = [&] {
    return " (batch " + std::to_string(batch) + ", m " + std::to_string(m) +
           ", n " + std::to_string(n) + ", k " + std::to_string(k) +
           ", transA " + std::to_string(transA) + ", transB " +
           std::to_string(transB) + ")";
  };
  if (syncCheck())
    checkCompleted("the kernels before the GEMM" + shape());
  size_t token = 0;
  if (Profiler::enabled())
    token = Profiler::get().begin(
        "cublasSgemmStridedBatched " + std::to_string(batch) + "x" +
        std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
        (transA ? " tA" : "") + (transB ? " tB" : "") +
        (accumulate ? "" : " beta0"));
  cublasStatus_t status = cublasSgemmStridedBatched(
      gBlas, op(g.transFirst), op(g.transSecond), static_cast<int>(g.rows),
      static_cast<int>(g.cols), static_cast<int>(g.inner), &one, g.first,
      static_cast<int>(g.ldFirst), g.strideFirst, g.second,
      static_cast<int>(g.ldSecond), g.strideSecond, g.accumulate ? &one : &zero,
      g.out, static_cast<int>(g.ldOut), g.strideOut, static_cast<int>(g.batch));
  if (status != CUBLAS_STATUS_SUCCESS)
    checkBlas(status, "cublasSgemmStridedBatched",
              shape() + "; if an earlier kernel failed, rerun with "
                        "DDPC_CUDA_SYNC_CHECK=1 to name it");
  if (Profiler::enabled())
    Profiler::get().end(token);
  if (syncCheck())
    checkCompleted("cublasSgemmStridedBatched" + shape());
}

} // extern "C"

namespace {

/// cuBLASLt state for ddpc_gemm_bias_act_f32: the handle and a workspace
/// (device memory, kLtWorkspaceBytes) made on first use, and the chosen
/// algorithm per problem (shape, transposes, epilogue, pointer alignment);
/// std::nullopt records that cuBLASLt has none (the caller falls back).
constexpr size_t kLtWorkspaceBytes = 32u << 20;
struct LtState {
  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  std::map<std::vector<int64_t>, std::optional<cublasLtMatmulAlgo_t>> algos;
  std::mutex mutex;
};

LtState &lt() {
  static LtState *state = [] {
    computeStream();       // The workspace lives on the rank's device.
    auto *s = new LtState; // Never destroyed: used until exit.
    checkBlas(cublasLtCreate(&s->handle), "cublasLtCreate");
    check(cudaMalloc(&s->workspace, kLtWorkspaceBytes),
          "cudaMalloc (cuBLASLt workspace)");
    return s;
  }();
  return *state;
}

/// Largest power of two (at most 256) dividing the address `p`.
uint32_t alignmentOf(const void *p) {
  auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 1;
  while (a < 256 && v % (2 * a) == 0)
    a *= 2;
  return a;
}

/// Owns the cuBLASLt descriptors of one call.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescriptors() {
    if (pref)
      cublasLtMatmulPreferenceDestroy(pref);
    for (cublasLtMatrixLayout_t l : {a, b, d})
      if (l)
        cublasLtMatrixLayoutDestroy(l);
    if (op)
      cublasLtMatmulDescDestroy(op);
  }
};

} // namespace

extern "C" {

/// See Gemm.h: D = act(op(A) op(B) + bias) as one cuBLASLt matmul with the
/// BIAS / RELU_BIAS epilogue, on cuBLAS's column-major view of the
/// row-major operands (toColumnMajor), where the bias runs along D's rows.
/// Returns 0 (D untouched) when cuBLASLt offers no algorithm or rejects the
/// call, after a one-time warning per problem; the compiled fallback then
/// runs cublasSgemm and the generated bias/ReLU kernel.
int32_t ddpc_gemm_bias_act_f32(int64_t m, int64_t n, int64_t k, int32_t transA,
                               int32_t transB, int64_t a, int64_t b, int64_t d,
                               int64_t bias, int32_t act) {
  if (!gemmEpiloguesEnabled())
    return 0;
  cudaStream_t stream = computeStream();
  ColumnMajorGemm g = toColumnMajor(1, m, n, k, transA, transB, a, b, d, 0, 0,
                                    0, /*accumulate=*/0);
  LtState &state = lt();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto problem = [&] {
    return " (m " + std::to_string(m) + ", n " + std::to_string(n) + ", k " +
           std::to_string(k) + ", transA " + std::to_string(transA) +
           ", transB " + std::to_string(transB) +
           (act ? ", bias + ReLU)" : ", bias)");
  };
  uint32_t alignA = alignmentOf(g.first), alignB = alignmentOf(g.second),
           alignD = alignmentOf(g.out);
  LtDescriptors desc;
  cublasOperation_t opA = g.transFirst ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = g.transSecond ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue =
      act ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  const void *biasPtr = reinterpret_cast<const void *>(bias);
  uint64_t workspace = kLtWorkspaceBytes;
  auto set = [](cublasStatus_t s, const char *what) { checkBlas(s, what); };
  set(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
      "cublasLtMatmulDescCreate");
  set(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &opA,
                                     sizeof(opA)),
      "cublasLtMatmulDescSetAttribute(TRANSA)");
  set(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, &opB,
                                     sizeof(opB)),
      "cublasLtMatmulDescSetAttribute(TRANSB)");
  set(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                     &epilogue, sizeof(epilogue)),
      "cublasLtMatmulDescSetAttribute(EPILOGUE)");
  set(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                     &biasPtr, sizeof(biasPtr)),
      "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  // Stored shapes: op(X) is rows x inner (first) and inner x cols (second).
  set(cublasLtMatrixLayoutCreate(&desc.a, CUDA_R_32F,
                                 g.transFirst ? g.inner : g.rows,
                                 g.transFirst ? g.rows : g.inner, g.ldFirst),
      "cublasLtMatrixLayoutCreate(A)");
  set(cublasLtMatrixLayoutCreate(&desc.b, CUDA_R_32F,
                                 g.transSecond ? g.cols : g.inner,
                                 g.transSecond ? g.inner : g.cols, g.ldSecond),
      "cublasLtMatrixLayoutCreate(B)");
  set(cublasLtMatrixLayoutCreate(&desc.d, CUDA_R_32F, g.rows, g.cols, g.ldOut),
      "cublasLtMatrixLayoutCreate(D)");

  std::vector<int64_t> key = {m,   n,      k,      transA, transB,
                              act, alignA, alignB, alignD};
  auto it = state.algos.find(key);
  if (it == state.algos.end()) {
    set(cublasLtMatmulPreferenceCreate(&desc.pref),
        "cublasLtMatmulPreferenceCreate");
    set(cublasLtMatmulPreferenceSetAttribute(
            desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
            sizeof(workspace)),
        "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
    for (auto [attr, align] :
         {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignA},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignB},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignD},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignD}})
      set(cublasLtMatmulPreferenceSetAttribute(desc.pref, attr, &align,
                                               sizeof(align)),
          "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(
        state.handle, desc.op, desc.a, desc.b, desc.d, desc.d, desc.pref, 1,
        &result, &found);
    std::optional<cublasLtMatmulAlgo_t> algo;
    if (s == CUBLAS_STATUS_SUCCESS && found > 0)
      algo = result.algo;
    else
      std::fprintf(stderr,
                   "ddpc: note: cuBLASLt has no algorithm for a GEMM with "
                   "epilogue%s: %s; running the GEMM and the epilogue kernel "
                   "separately\n",
                   problem().c_str(),
                   s == CUBLAS_STATUS_SUCCESS ? "none found"
                                              : cublasGetStatusString(s));
    it = state.algos.emplace(key, algo).first;
  }
  if (!it->second)
    return 0;

  if (syncCheck())
    checkCompleted("the kernels before the GEMM" + problem());
  size_t token = 0;
  if (Profiler::enabled())
    token = Profiler::get().begin(
        std::string("cublasLtMatmul ") + std::to_string(m) + "x" +
        std::to_string(n) + "x" + std::to_string(k) + (transA ? " tA" : "") +
        (transB ? " tB" : "") + (act ? " +bias,relu" : " +bias"));
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t s =
      cublasLtMatmul(state.handle, desc.op, &one, g.first, desc.a, g.second,
                     desc.b, &zero, g.out, desc.d, g.out, desc.d, &*it->second,
                     state.workspace, kLtWorkspaceBytes, stream);
  if (Profiler::enabled())
    Profiler::get().end(token);
  if (s != CUBLAS_STATUS_SUCCESS) {
    // Rejected when queued (nothing ran): fall back from now on.
    std::fprintf(stderr,
                 "ddpc: note: cublasLtMatmul failed for a GEMM with "
                 "epilogue%s: %s; running the GEMM and the epilogue kernel "
                 "separately\n",
                 problem().c_str(), cublasGetStatusString(s));
    it->second.reset();
    return 0;
  }
  if (syncCheck())
    checkCompleted("cublasLtMatmul" + problem());
  return 1;
}

} // extern "C"

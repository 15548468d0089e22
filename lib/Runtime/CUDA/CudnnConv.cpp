//===- CudnnConv.cpp - ddpc_conv2d[_bias_act]_f32 on cuDNN ----------------===//
//
// Part of ddpc's CUDA runtime. Compiled code calls ddpc_conv2d_f32 (Gemm.h)
// for every 2-d convolution, its data gradient and its filter gradient
// (ddpc-conv-to-library-call), and falls back to its own im2col + cuBLAS
// lowering when the call returns 0. A forward convolution followed by a
// per-channel bias (+ ReLU) first tries ddpc_conv2d_bias_act_f32
// (ddpc-conv-epilogues): cudnnConvolutionBiasActivationForward with the
// identity (which cuDNN runs with the IMPLICIT_PRECOMP_GEMM algorithm only) or
// the NaN-propagating ReLU, falling back to ddpc_conv2d_f32 and a kernel when
// it returns 0 (also with DDPC_CONV_EPILOGUE=0).
//
// cuDNN is loaded with dlopen (libcudnn.so.9, which exports the convolution
// API and loads its engine libraries itself), so programs neither link nor
// require it: without it, or with DDPC_CUDNN=0, every call returns 0. Per
// problem (kind and shapes) the descriptors, the algorithm and its
// workspace size are cached. The algorithm is the fastest FMA-math one (no
// TF32, to match the CPU target's float32; with --precision tf32, of any
// math type, set on the descriptor as cuDNN asks) that cudnnFind*AlgorithmEx
// measures on the problem's first call, else (DDPC_CUDNN_BENCHMARK=0, or
// measuring fails) the first such result of cuDNN's heuristics
// (cudnnGet*Algorithm_v7). The workspace is one device buffer that grows as
// needed. A
// problem cuDNN rejects is remembered and falls back from then on, with a
// one-time note on stderr.
//
//===----------------------------------------------------------------------===//

#include "CudaRuntime.h"

#include "ddpc/Runtime/Gemm.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if __has_include(<cudnn.h>)
#include <cudnn.h>

#include <dlfcn.h>

#include <array>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>

using namespace ddpc::runtime;

namespace {

/// The cuDNN functions used, resolved from libcudnn.so.9.
struct CudnnApi {
  decltype(&::cudnnCreate) create;
  decltype(&::cudnnSetStream) setStream;
  decltype(&::cudnnGetErrorString) getErrorString;
  decltype(&::cudnnCreateTensorDescriptor) createTensor;
  decltype(&::cudnnSetTensor4dDescriptor) setTensor4d;
  decltype(&::cudnnCreateFilterDescriptor) createFilter;
  decltype(&::cudnnSetFilter4dDescriptor) setFilter4d;
  decltype(&::cudnnCreateConvolutionDescriptor) createConv;
  decltype(&::cudnnSetConvolution2dDescriptor) setConv2d;
  decltype(&::cudnnSetConvolutionMathType) setMathType;
  decltype(&::cudnnSetConvolutionGroupCount) setGroupCount;
  decltype(&::cudnnGetConvolution2dForwardOutputDim) forwardOutputDim;
  decltype(&::cudnnGetConvolutionForwardAlgorithm_v7) forwardAlgos;
  decltype(&::cudnnGetConvolutionForwardWorkspaceSize) forwardWorkspace;
  decltype(&::cudnnConvolutionForward) forward;
  decltype(&::cudnnGetConvolutionBackwardDataAlgorithm_v7) dataAlgos;
  decltype(&::cudnnGetConvolutionBackwardDataWorkspaceSize) dataWorkspace;
  decltype(&::cudnnConvolutionBackwardData) backwardData;
  decltype(&::cudnnGetConvolutionBackwardFilterAlgorithm_v7) filterAlgos;
  decltype(&::cudnnGetConvolutionBackwardFilterWorkspaceSize) filterWorkspace;
  decltype(&::cudnnConvolutionBackwardFilter) backwardFilter;
  // Optional: without them DDPC_CUDNN_BENCHMARK=1 keeps the heuristics.
  decltype(&::cudnnFindConvolutionForwardAlgorithmEx) findForward;
  decltype(&::cudnnFindConvolutionBackwardDataAlgorithmEx) findData;
  decltype(&::cudnnFindConvolutionBackwardFilterAlgorithmEx) findFilter;
  // Optional: without them ddpc_conv2d_bias_act_f32 declines.
  decltype(&::cudnnCreateActivationDescriptor) createActivation;
  decltype(&::cudnnSetActivationDescriptor) setActivation;
  decltype(&::cudnnConvolutionBiasActivationForward) biasActivationForward;
};

/// One cached problem: descriptors, algorithm and workspace bytes; `ok`
/// false when cuDNN rejected it. `bias` and `act` only for the fused
/// convolution + bias + activation.
struct Problem {
  bool ok = false;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;
  size_t workspace = 0;
  /// The chosen algorithm's math type (set on `conv`, as cuDNN asks).
  cudnnMathType_t math = CUDNN_FMA_MATH;
};

struct Cudnn {
  CudnnApi api{};
  cudnnHandle_t handle = nullptr;
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
  std::map<std::array<int64_t, 15>, Problem> problems;
  std::mutex mutex;
};

void note(const std::string &message) {
  std::fprintf(stderr, "ddpc: note: %s\n", message.c_str());
}

/// The loaded library, or null (not installed, DDPC_CUDNN=0, or unusable;
/// said once on stderr except for DDPC_CUDNN=0).
Cudnn *cudnn() {
  if (!libraryConvEnabled())
    return nullptr;
  static Cudnn *state = []() -> Cudnn * {
    void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
      note("cuDNN (libcudnn.so.9) not found; convolutions run as im2col + "
           "cuBLAS GEMMs");
      return nullptr;
    }
    auto *s = new Cudnn; // Never destroyed: used until exit.
    bool complete = true;
    auto resolve = [&](const char *name, auto &fn) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
          dlsym(lib, name));
      complete = complete && fn;
    };
    CudnnApi &a = s->api;
    resolve("cudnnCreate", a.create);
    resolve("cudnnSetStream", a.setStream);
    resolve("cudnnGetErrorString", a.getErrorString);
    resolve("cudnnCreateTensorDescriptor", a.createTensor);
    resolve("cudnnSetTensor4dDescriptor", a.setTensor4d);
    resolve("cudnnCreateFilterDescriptor", a.createFilter);
    resolve("cudnnSetFilter4dDescriptor", a.setFilter4d);
    resolve("cudnnCreateConvolutionDescriptor", a.createConv);
    resolve("cudnnSetConvolution2dDescriptor", a.setConv2d);
    resolve("cudnnSetConvolutionMathType", a.setMathType);
    resolve("cudnnSetConvolutionGroupCount", a.setGroupCount);
    resolve("cudnnGetConvolution2dForwardOutputDim", a.forwardOutputDim);
    resolve("cudnnGetConvolutionForwardAlgorithm_v7", a.forwardAlgos);
    resolve("cudnnGetConvolutionForwardWorkspaceSize", a.forwardWorkspace);
    resolve("cudnnConvolutionForward", a.forward);
    resolve("cudnnGetConvolutionBackwardDataAlgorithm_v7", a.dataAlgos);
    resolve("cudnnGetConvolutionBackwardDataWorkspaceSize", a.dataWorkspace);
    resolve("cudnnConvolutionBackwardData", a.backwardData);
    resolve("cudnnGetConvolutionBackwardFilterAlgorithm_v7", a.filterAlgos);
    resolve("cudnnGetConvolutionBackwardFilterWorkspaceSize",
            a.filterWorkspace);
    resolve("cudnnConvolutionBackwardFilter", a.backwardFilter);
    bool required = complete;
    resolve("cudnnFindConvolutionForwardAlgorithmEx", a.findForward);
    resolve("cudnnFindConvolutionBackwardDataAlgorithmEx", a.findData);
    resolve("cudnnFindConvolutionBackwardFilterAlgorithmEx", a.findFilter);
    complete = required;
    resolve("cudnnCreateActivationDescriptor", a.createActivation);
    resolve("cudnnSetActivationDescriptor", a.setActivation);
    resolve("cudnnConvolutionBiasActivationForward", a.biasActivationForward);
    if (!complete) {
      a.biasActivationForward = nullptr;
      complete = required;
    }
    // The handle belongs to the current device: choose the rank's first.
    cudaStream_t stream = cuda::computeStream();
    cudnnStatus_t st = CUDNN_STATUS_NOT_INITIALIZED;
    if (complete)
      st = a.create(&s->handle);
    if (!complete || st != CUDNN_STATUS_SUCCESS ||
        a.setStream(s->handle, stream) != CUDNN_STATUS_SUCCESS) {
      note(std::string("cuDNN is unusable (") +
           (complete ? a.getErrorString(st) : "missing functions") +
           "); convolutions run as im2col + cuBLAS GEMMs");
      return nullptr;
    }
    return s;
  }();
  return state;
}

/// The first entry of a cudnnGet*Algorithm_v7 or cudnnFind*AlgorithmEx
/// list (best first) that cuDNN supports without tensor-core (TF32) math
/// (with --precision tf32: with any math), or -1.
template <typename Perf> int pickIndex(const Perf *perf, int count) {
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS &&
        (cuda::allowTF32() ||
         (perf[i].mathType != CUDNN_TENSOR_OP_MATH &&
          perf[i].mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)))
      return i;
  return -1;
}

/// Algorithm choice from a cudnnGet*Algorithm_v7 list: p.algo and p.math
/// (p.algo -1 when none).
template <typename Perf>
void pickAlgo(const Perf *perf, int count, Problem &p) {
  int i = pickIndex(perf, count);
  p.algo = i < 0 ? -1 : static_cast<int>(perf[i].algo);
  if (i >= 0)
    p.math = perf[i].mathType;
}

/// Each problem's algorithm is the fastest one cudnnFind*AlgorithmEx
/// measures on its first call (as PyTorch's torch.backends.cudnn.benchmark;
/// on an H200, ResNet-18 at 32x32 took 5.77 ms per step instead of 6.57
/// with the heuristics' first choice). DDPC_CUDNN_BENCHMARK=0 keeps the
/// heuristics' choice, which does not depend on timing.
bool benchmarkEnabled() {
  static const bool on = [] {
    const char *v = std::getenv("DDPC_CUDNN_BENCHMARK");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

/// Measures the algorithms of problem `p` (kind 0-2) on the call's own
/// inputs with cudnnFind*AlgorithmEx; the output goes to a scratch buffer,
/// so an accumulating call's output is untouched. Keeps the heuristic
/// choice when measuring fails or finds nothing better supported.
void measureAlgorithm(Cudnn &c, int32_t kind, const Conv2dShape &d, Problem &p,
                      const void *x, const void *w, const void *y) {
  CudnnApi &a = c.api;
  if (!a.findForward || !a.findData || !a.findFilter)
    return;
  // Room for the algorithms that need workspace; those needing more than
  // 256 MiB are not measured.
  constexpr size_t kFindWorkspace = size_t(256) << 20;
  size_t outBytes =
      sizeof(float) *
      static_cast<size_t>(kind == 0   ? d.n * d.k * d.p * d.q
                          : kind == 1 ? d.n * d.c * d.h * d.w
                                      : d.k * (d.c / d.groups) * d.r * d.s);
  cudaStream_t stream = cuda::computeStream();
  void *scratch = nullptr, *work = nullptr;
  if (cudaMallocAsync(&scratch, outBytes, stream) != cudaSuccess ||
      cudaMallocAsync(&work, kFindWorkspace, stream) != cudaSuccess) {
    (void)cudaGetLastError();
    if (scratch)
      (void)cudaFreeAsync(scratch, stream);
    return;
  }
  constexpr int kMax = 16;
  int count = 0, algo = -1;
  size_t memory = 0;
  cudnnMathType_t math = p.math;
  // The fastest supported result of a cudnnFind*AlgorithmEx call.
  auto take = [&](cudnnStatus_t st, const auto *perf) {
    int best = st == CUDNN_STATUS_SUCCESS ? pickIndex(perf, count) : -1;
    if (best >= 0) {
      algo = static_cast<int>(perf[best].algo);
      memory = perf[best].memory;
      math = perf[best].mathType;
    }
  };
  if (kind == 0) {
    cudnnConvolutionFwdAlgoPerf_t perf[kMax];
    take(a.findForward(c.handle, p.x, x, p.w, w, p.conv, p.y, scratch, kMax,
                       &count, perf, work, kFindWorkspace),
         perf);
  } else if (kind == 1) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
    take(a.findData(c.handle, p.w, w, p.y, y, p.conv, p.x, scratch, kMax,
                    &count, perf, work, kFindWorkspace),
         perf);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
    take(a.findFilter(c.handle, p.x, x, p.y, y, p.conv, p.w, scratch, kMax,
                      &count, perf, work, kFindWorkspace),
         perf);
  }
  cuda::check(cudaFreeAsync(work, stream), "cudaFreeAsync (cuDNN find)");
  cuda::check(cudaFreeAsync(scratch, stream), "cudaFreeAsync (cuDNN find)");
  if (algo >= 0) {
    p.algo = algo;
    p.workspace = memory;
    p.math = math;
  }
}

/// Sets p.algo and p.workspace from cuDNN's heuristics for one convolution
/// kind (`algos`: its cudnnGet*Algorithm_v7, `workspace`: its
/// cudnnGet*WorkspaceSize, `descs`: their descriptors in cuDNN's order);
/// returns why it failed, or "".
template <typename Perf, typename Algo, typename AlgosFn, typename WorkspaceFn,
          typename... Descs>
std::string chooseAlgorithm(Cudnn &c, AlgosFn algos, WorkspaceFn workspace,
                            const char *what, Problem &p, Descs... descs) {
  constexpr int kMaxAlgos = 16;
  Perf perf[kMaxAlgos];
  int count = 0;
  cudnnStatus_t st = algos(c.handle, descs..., kMaxAlgos, &count, perf);
  if (st != CUDNN_STATUS_SUCCESS)
    return std::string(what) + " algorithms: " + c.api.getErrorString(st);
  pickAlgo(perf, count, p);
  if (p.algo < 0)
    return cuda::allowTF32() ? "no supported algorithm"
                             : "no supported FMA (non-TF32) algorithm";
  st = workspace(c.handle, descs..., static_cast<Algo>(p.algo), &p.workspace);
  if (st != CUDNN_STATUS_SUCCESS)
    return std::string(what) + " workspace size: " + c.api.getErrorString(st);
  return "";
}

/// Builds `p` for a problem of `kind`; returns why cuDNN rejects it, or "".
std::string prepare(Cudnn &c, int32_t kind, const Conv2dShape &d, Problem &p) {
  CudnnApi &a = c.api;
  auto i = [](int64_t v) { return static_cast<int>(v); };
  auto fail = [&](cudnnStatus_t st, const char *what) -> std::string {
    return st == CUDNN_STATUS_SUCCESS
               ? std::string()
               : std::string(what) + ": " + a.getErrorString(st);
  };
  std::string why;
  auto step = [&](cudnnStatus_t st, const char *what) {
    if (why.empty())
      why = fail(st, what);
    return why.empty();
  };
  step(a.createTensor(&p.x), "cudnnCreateTensorDescriptor");
  step(a.createTensor(&p.y), "cudnnCreateTensorDescriptor");
  step(a.createFilter(&p.w), "cudnnCreateFilterDescriptor");
  step(a.createConv(&p.conv), "cudnnCreateConvolutionDescriptor");
  if (!why.empty())
    return why;
  step(a.setTensor4d(p.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(d.n), i(d.c),
                     i(d.h), i(d.w)),
       "cudnnSetTensor4dDescriptor(x)");
  step(a.setTensor4d(p.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(d.n), i(d.k),
                     i(d.p), i(d.q)),
       "cudnnSetTensor4dDescriptor(y)");
  step(a.setFilter4d(p.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(d.k),
                     i(d.c / d.groups), i(d.r), i(d.s)),
       "cudnnSetFilter4dDescriptor");
  step(a.setConv2d(p.conv, 0, 0, i(d.strideH), i(d.strideW), i(d.dilationH),
                   i(d.dilationW), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
       "cudnnSetConvolution2dDescriptor");
  // FMA math keeps float32 products; DEFAULT lets cuDNN pick TF32 tensor
  // cores (--precision tf32).
  step(a.setMathType(p.conv,
                     cuda::allowTF32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH),
       "cudnnSetConvolutionMathType");
  step(a.setGroupCount(p.conv, i(d.groups)), "cudnnSetConvolutionGroupCount");
  if (!why.empty())
    return why;
  int n = 0, k = 0, oh = 0, ow = 0;
  if (!step(a.forwardOutputDim(p.conv, p.x, p.w, &n, &k, &oh, &ow),
            "cudnnGetConvolution2dForwardOutputDim"))
    return why;
  if (n != d.n || k != d.k || oh != d.p || ow != d.q)
    return "cuDNN computes a different output shape";
  if (kind == 0)
    why = chooseAlgorithm<cudnnConvolutionFwdAlgoPerf_t,
                          cudnnConvolutionFwdAlgo_t>(
        c, a.forwardAlgos, a.forwardWorkspace, "forward", p, p.x, p.w, p.conv,
        p.y);
  else if (kind == 1)
    why = chooseAlgorithm<cudnnConvolutionBwdDataAlgoPerf_t,
                          cudnnConvolutionBwdDataAlgo_t>(
        c, a.dataAlgos, a.dataWorkspace, "backward data", p, p.w, p.y, p.conv,
        p.x);
  else
    why = chooseAlgorithm<cudnnConvolutionBwdFilterAlgoPerf_t,
                          cudnnConvolutionBwdFilterAlgo_t>(
        c, a.filterAlgos, a.filterWorkspace, "backward filter", p, p.x, p.y,
        p.conv, p.w);
  if (!why.empty())
    return why;
  p.ok = true;
  return "";
}

/// Builds `p` for a forward convolution fused with a per-channel bias and
/// activation `act` (0 identity, 1 ReLU); returns why cuDNN rejects it, or
/// "".
std::string prepareFused(Cudnn &c, int32_t act, const Conv2dShape &d,
                         Problem &p) {
  CudnnApi &a = c.api;
  if (!a.biasActivationForward)
    return "this cuDNN lacks cudnnConvolutionBiasActivationForward";
  std::string why = prepare(c, /*kind=*/0, d, p);
  if (!why.empty())
    return why;
  p.ok = false;
  auto step = [&](cudnnStatus_t st, const char *what) {
    if (why.empty() && st != CUDNN_STATUS_SUCCESS)
      why = std::string(what) + ": " + a.getErrorString(st);
    return why.empty();
  };
  step(a.createTensor(&p.bias), "cudnnCreateTensorDescriptor(bias)");
  step(a.createActivation(&p.act), "cudnnCreateActivationDescriptor");
  if (!why.empty())
    return why;
  step(a.setTensor4d(p.bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                     static_cast<int>(d.k), 1, 1),
       "cudnnSetTensor4dDescriptor(bias)");
  // The compiled Relu keeps NaN: propagate it.
  step(a.setActivation(p.act,
                       act ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
                       CUDNN_PROPAGATE_NAN, 0.0),
       "cudnnSetActivationDescriptor");
  if (!act) {
    // cuDNN supports the identity activation only with this algorithm.
    p.algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    p.math = CUDNN_DEFAULT_MATH; // Used with --precision tf32 only.
    step(a.forwardWorkspace(c.handle, p.x, p.w, p.conv, p.y,
                            CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                            &p.workspace),
         "forward workspace size (IMPLICIT_PRECOMP_GEMM)");
  }
  if (!why.empty())
    return why;
  p.ok = true;
  return "";
}

std::string shapeText(int32_t kind, const Conv2dShape &d) {
  static const char *const kNames[] = {"forward", "backward data",
                                       "backward filter", "forward + bias",
                                       "forward + bias + ReLU"};
  auto s = [](int64_t v) { return std::to_string(v); };
  return std::string(kNames[kind]) + " convolution x " + s(d.n) + "x" + s(d.c) +
         "x" + s(d.h) + "x" + s(d.w) + ", w " + s(d.k) + "x" +
         s(d.c / d.groups) + "x" + s(d.r) + "x" + s(d.s) + ", stride " +
         s(d.strideH) + "," + s(d.strideW) + ", dilation " + s(d.dilationH) +
         "," + s(d.dilationW) +
         (d.groups > 1 ? ", " + s(d.groups) + " groups" : "");
}

/// Runs one convolution of `kind` (0-2: ddpc_conv2d_f32's kinds; 3, 4: the
/// fused forward + bias with the identity or ReLU) through cuDNN: finds or
/// prepares its cached problem, grows the workspace, and enqueues
/// `launch(problem)`. Returns 1, or 0 when cuDNN declines (said once).
template <typename Launch>
int32_t runConv(Cudnn &lib, int32_t kind, const Conv2dShape &d, Launch launch,
                const void *x = nullptr, const void *w = nullptr,
                const void *y = nullptr) {
  std::lock_guard<std::mutex> lock(lib.mutex);
  std::array<int64_t, 15> key = {
      kind, d.n, d.c,       d.h,       d.w,         d.k,         d.r,     d.s,
      d.p,  d.q, d.strideH, d.strideW, d.dilationH, d.dilationW, d.groups};
  const char *fallback = kind >= 3 ? "the convolution and its epilogue kernel"
                                   : "im2col + cuBLAS GEMMs";
  auto it = lib.problems.find(key);
  if (it == lib.problems.end()) {
    Problem problem;
    std::string why = kind >= 3 ? prepareFused(lib, kind - 3, d, problem)
                                : prepare(lib, kind, d, problem);
    if (!why.empty())
      note("cuDNN declined the " + shapeText(kind, d) + " (" + why +
           "); it runs as " + fallback);
    else if (kind <= 2 && x && benchmarkEnabled())
      measureAlgorithm(lib, kind, d, problem, x, w, y);
    // The descriptor runs the chosen algorithm's math (float32 programs
    // keep FMA math: their candidates were FMA ones).
    if (problem.ok && cuda::allowTF32())
      (void)lib.api.setMathType(problem.conv, problem.math);
    it = lib.problems.emplace(key, problem).first;
  }
  Problem &pr = it->second;
  if (!pr.ok)
    return 0;
  cudaStream_t stream = cuda::computeStream();
  if (pr.workspace > lib.workspaceBytes) {
    // Earlier calls may still use the old buffer: free it in stream order.
    if (lib.workspace)
      cuda::check(cudaFreeAsync(lib.workspace, stream),
                  "cudaFreeAsync (cuDNN workspace)");
    cuda::check(cudaMallocAsync(&lib.workspace, pr.workspace, stream),
                "cudaMallocAsync (cuDNN workspace)");
    lib.workspaceBytes = pr.workspace;
  }
  if (cuda::syncCheck())
    cuda::checkCompleted("the kernels before the cuDNN " + shapeText(kind, d));
  size_t token =
      cuda::profiling() ? cuda::profileBegin("cudnn " + shapeText(kind, d)) : 0;
  cudnnStatus_t st = launch(pr);
  if (cuda::profiling())
    cuda::profileEnd(token);
  if (st != CUDNN_STATUS_SUCCESS) {
    // Rejected when queued (nothing ran): fall back from now on.
    note("cuDNN failed on the " + shapeText(kind, d) + " (" +
         lib.api.getErrorString(st) + "); it runs as " + fallback +
         " from now on");
    pr.ok = false;
    return 0;
  }
  if (cuda::syncCheck())
    cuda::checkCompleted("cuDNN " + shapeText(kind, d));
  return 1;
}

} // namespace

extern "C" int32_t ddpc_conv2d_f32(int32_t kind, int64_t n, int64_t c,
                                   int64_t h, int64_t w, int64_t k, int64_t r,
                                   int64_t s, int64_t p, int64_t q,
                                   int64_t strideH, int64_t strideW,
                                   int64_t dilationH, int64_t dilationW,
                                   int64_t groups, int64_t x, int64_t filter,
                                   int64_t y, int32_t accumulate) {
  Cudnn *lib = cudnn();
  if (!lib || kind < 0 || kind > 2 || groups < 1 || c % groups || k % groups)
    return 0;
  Conv2dShape d{n, c, h,       w,       k,         r,         s,
                p, q, strideH, strideW, dilationH, dilationW, groups};
  const float one = 1.0f, zero = 0.0f;
  const float *beta = accumulate ? &one : &zero;
  auto *xp = reinterpret_cast<float *>(x);
  auto *wp = reinterpret_cast<float *>(filter);
  auto *yp = reinterpret_cast<float *>(y);
  CudnnApi &a = lib->api;
  return runConv(
      *lib, kind, d,
      [&](Problem &pr) {
        if (kind == 0)
          return a.forward(lib->handle, &one, pr.x, xp, pr.w, wp, pr.conv,
                           static_cast<cudnnConvolutionFwdAlgo_t>(pr.algo),
                           lib->workspace, pr.workspace, beta, pr.y, yp);
        if (kind == 1)
          return a.backwardData(
              lib->handle, &one, pr.w, wp, pr.y, yp, pr.conv,
              static_cast<cudnnConvolutionBwdDataAlgo_t>(pr.algo),
              lib->workspace, pr.workspace, beta, pr.x, xp);
        return a.backwardFilter(
            lib->handle, &one, pr.x, xp, pr.y, yp, pr.conv,
            static_cast<cudnnConvolutionBwdFilterAlgo_t>(pr.algo),
            lib->workspace, pr.workspace, beta, pr.w, wp);
      },
      xp, wp, yp);
}

extern "C" int32_t
ddpc_conv2d_bias_act_f32(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                         int64_t r, int64_t s, int64_t p, int64_t q,
                         int64_t strideH, int64_t strideW, int64_t dilationH,
                         int64_t dilationW, int64_t groups, int64_t x,
                         int64_t filter, int64_t bias, int64_t d, int32_t act) {
  if (!convEpiloguesEnabled())
    return 0;
  Cudnn *lib = cudnn();
  if (!lib || act < 0 || act > 1 || groups < 1 || c % groups || k % groups)
    return 0;
  Conv2dShape shape{n, c, h,       w,       k,         r,         s,
                    p, q, strideH, strideW, dilationH, dilationW, groups};
  const float one = 1.0f, zero = 0.0f;
  auto *dp = reinterpret_cast<float *>(d);
  CudnnApi &a = lib->api;
  // D = act(1 * conv(x, w) + 0 * z + bias), z = D (ignored with alpha2 0).
  return runConv(*lib, 3 + act, shape, [&](Problem &pr) {
    return a.biasActivationForward(
        lib->handle, &one, pr.x, reinterpret_cast<const float *>(x), pr.w,
        reinterpret_cast<const float *>(filter), pr.conv,
        static_cast<cudnnConvolutionFwdAlgo_t>(pr.algo), lib->workspace,
        pr.workspace, &zero, pr.y, dp, pr.bias,
        reinterpret_cast<const float *>(bias), pr.act, pr.y, dp);
  });
}

#else // No cudnn.h at build time: always the im2col + GEMM lowering.

extern "C" int32_t ddpc_conv2d_f32(int32_t, int64_t, int64_t, int64_t, int64_t,
                                   int64_t, int64_t, int64_t, int64_t, int64_t,
                                   int64_t, int64_t, int64_t, int64_t, int64_t,
                                   int64_t, int64_t, int64_t, int32_t) {
  return 0;
}

extern "C" int32_t ddpc_conv2d_bias_act_f32(int64_t, int64_t, int64_t, int64_t,
                                            int64_t, int64_t, int64_t, int64_t,
                                            int64_t, int64_t, int64_t, int64_t,
                                            int64_t, int64_t, int64_t, int64_t,
                                            int64_t, int64_t, int32_t) {
  return 0;
}

#endif

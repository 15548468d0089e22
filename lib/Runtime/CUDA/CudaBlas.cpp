//===- CudaBlas.cpp - GEMMs of the CUDA runtime: cuBLAS and cuBLASLt -----===//
//
// Part of ddpc's CUDA runtime: ddpc_gemm_f32 (cublasSgemmStridedBatched,
// FP32 math, or TF32 tensor-core math with --precision tf32) and
// ddpc_gemm_bias_act_f32 (one cuBLASLt matmul with a bias or bias + ReLU
// epilogue), both of Gemm.h, on the compute stream.
//
//===----------------------------------------------------------------------===//

#include "CudaRuntime.h"

#include "ddpc/Runtime/Gemm.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

using namespace ddpc::runtime;
using namespace ddpc::runtime::cuda;

namespace {

void checkBlas(cublasStatus_t status, const char *call,
               const std::string &detail = "") {
  if (status != CUBLAS_STATUS_SUCCESS)
    callFailed(call, cublasGetStatusString(status) + detail);
}

/// The cuBLAS handle of the rank's device, on the compute stream, made on
/// first use.
cublasHandle_t blas() {
  static const cublasHandle_t handle = [] {
    cudaStream_t stream = computeStream();
    cublasHandle_t h = nullptr;
    checkBlas(cublasCreate(&h), "cublasCreate");
    checkBlas(cublasSetStream(h, stream), "cublasSetStream");
    checkBlas(cublasSetMathMode(h, allowTF32() ? CUBLAS_TF32_TENSOR_OP_MATH
                                               : CUBLAS_DEFAULT_MATH),
              "cublasSetMathMode");
    return h;
  }();
  return handle;
}

} // namespace

extern "C" {

/// See Gemm.h: the row-major product as cuBLAS's column-major call.
void ddpc_gemm_f32(int64_t batch, int64_t m, int64_t n, int64_t k,
                   int32_t transA, int32_t transB, int64_t a, int64_t b,
                   int64_t c, int64_t strideA, int64_t strideB, int64_t strideC,
                   int32_t accumulate) {
  cublasHandle_t handle = blas();
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
  if (profiling())
    token = profileBegin("cublasSgemmStridedBatched " + std::to_string(batch) +
                         "x" + std::to_string(m) + "x" + std::to_string(n) +
                         "x" + std::to_string(k) + (transA ? " tA" : "") +
                         (transB ? " tB" : "") + (accumulate ? "" : " beta0"));
  cublasStatus_t status = cublasSgemmStridedBatched(
      handle, op(g.transFirst), op(g.transSecond), static_cast<int>(g.rows),
      static_cast<int>(g.cols), static_cast<int>(g.inner), &one, g.first,
      static_cast<int>(g.ldFirst), g.strideFirst, g.second,
      static_cast<int>(g.ldSecond), g.strideSecond, g.accumulate ? &one : &zero,
      g.out, static_cast<int>(g.ldOut), g.strideOut, static_cast<int>(g.batch));
  if (status != CUBLAS_STATUS_SUCCESS)
    checkBlas(status, "cublasSgemmStridedBatched",
              shape() + "; if an earlier kernel failed, rerun with "
                        "DDPC_CUDA_SYNC_CHECK=1 to name it");
  if (profiling())
    profileEnd(token);
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
  set(cublasLtMatmulDescCreate(&desc.op,
                               allowTF32() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                           : CUBLAS_COMPUTE_32F,
                               CUDA_R_32F),
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
  if (profiling())
    token = profileBegin(std::string("cublasLtMatmul ") + std::to_string(m) +
                         "x" + std::to_string(n) + "x" + std::to_string(k) +
                         (transA ? " tA" : "") + (transB ? " tB" : "") +
                         (act ? " +bias,relu" : " +bias"));
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t s =
      cublasLtMatmul(state.handle, desc.op, &one, g.first, desc.a, g.second,
                     desc.b, &zero, g.out, desc.d, g.out, desc.d, &*it->second,
                     state.workspace, kLtWorkspaceBytes, stream);
  if (profiling())
    profileEnd(token);
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

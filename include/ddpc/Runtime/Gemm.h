//===- Gemm.h - ddpc_gemm_f32 as a column-major BLAS call -------*- C++ -*-===//
//
// Compiled code calls (see ddpc-gemm-to-library-call)
//   void ddpc_gemm_f32(int64_t batch, int64_t m, int64_t n, int64_t k,
//                      int32_t transA, int32_t transB,
//                      int64_t A, int64_t B, int64_t C,     // addresses
//                      int64_t strideA, int64_t strideB,
//                      int64_t strideC,                      // elements
//                      int32_t accumulate);
// computing, for every b < batch, on dense row-major float32 buffers,
//   C[b] (m x n) += op(A[b]) (m x k) * op(B[b]) (k x n)   (accumulate = 1)
//   C[b] (m x n)  = op(A[b]) (m x k) * op(B[b]) (k x n)   (accumulate = 0;
//                                     C's old contents are not read)
// where X[b] starts strideX elements after X[b-1] (0: one matrix shared by
// the whole batch, e.g. a convolution's weights), A[b] is stored m x k, or
// k x m when transA, and B[b] is stored k x n, or n x k when transB.
// accumulate is BLAS's beta (alpha is 1). BLAS libraries (cuBLAS) are
// column-major: a
// row-major matrix is its transpose in column-major order, so C = A B is
// computed as C^T = B^T A^T, with the operands swapped. toColumnMajor()
// derives that call once, for both the CUDA runtime (cublasSgemmStrided-
// Batched) and the CPU reference used by the `cuda-emulate` target
// (referenceGemm), so tests on the CPU check the argument mapping the GPU
// uses.
//
// Compiled code may also call (see ddpc-gemm-epilogues)
//   int32_t ddpc_gemm_bias_act_f32(int64_t m, int64_t n, int64_t k,
//                                  int32_t transA, int32_t transB,
//                                  int64_t A, int64_t B, int64_t D,
//                                  int64_t bias, int32_t act);
// computing D (m x n) = act(op(A) * op(B) + bias[n]) (bias broadcast along
// the rows of the row-major D, act 0: none, 1: ReLU) in one library call
// (cuBLASLt's BIAS / RELU_BIAS epilogue), returning 1; or returning 0
// without touching D when it cannot, and the caller then runs the GEMM and
// the epilogue kernel itself.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_RUNTIME_GEMM_H
#define DDPC_RUNTIME_GEMM_H

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace ddpc {
namespace runtime {

/// One strided-batched column-major SGEMM with alpha = 1, beta = 1 when
/// `accumulate` (else 0): out[b] (rows x cols, leading dim ldOut) (+)=
/// op(first[b]) (rows x inner) * op(second[b]) (inner x cols), op =
/// transpose when the flag is set.
struct ColumnMajorGemm {
  bool accumulate;
  bool transFirst, transSecond;
  int64_t rows, cols, inner;
  const float *first;
  int64_t ldFirst, strideFirst;
  const float *second;
  int64_t ldSecond, strideSecond;
  float *out;
  int64_t ldOut, strideOut;
  int64_t batch;
};

inline ColumnMajorGemm toColumnMajor(int64_t batch, int64_t m, int64_t n,
                                     int64_t k, int32_t transA, int32_t transB,
                                     int64_t a, int64_t b, int64_t c,
                                     int64_t strideA, int64_t strideB,
                                     int64_t strideC, int32_t accumulate) {
  ColumnMajorGemm g;
  g.accumulate = accumulate != 0;
  // C^T (n x m) = op(B)^T (n x k) * op(A)^T (k x m).
  g.transFirst = transB != 0;
  g.rows = n;
  g.cols = m;
  g.inner = k;
  // Row-major B stored k x n is column-major n x k (= op(B)^T): no
  // transpose, ld n. Stored n x k (transB) is column-major k x n: transpose,
  // ld k. Likewise for A with (m, k).
  g.first = reinterpret_cast<const float *>(b);
  g.ldFirst = transB ? k : n;
  g.strideFirst = strideB;
  g.transSecond = transA != 0;
  g.second = reinterpret_cast<const float *>(a);
  g.ldSecond = transA ? m : k;
  g.strideSecond = strideA;
  g.out = reinterpret_cast<float *>(c);
  g.ldOut = n;
  g.strideOut = strideC;
  g.batch = batch;
  return g;
}

/// Plain loops computing `g` (the CPU reference; float accumulation per
/// output element in order of the inner index).
inline void referenceGemm(const ColumnMajorGemm &g) {
  for (int64_t bt = 0; bt < g.batch; ++bt) {
    const float *x = g.first + bt * g.strideFirst;
    const float *y = g.second + bt * g.strideSecond;
    float *z = g.out + bt * g.strideOut;
    for (int64_t j = 0; j < g.cols; ++j)
      for (int64_t i = 0; i < g.rows; ++i) {
        float sum = 0.0f;
        for (int64_t p = 0; p < g.inner; ++p) {
          float xv = g.transFirst ? x[p + i * g.ldFirst] : x[i + p * g.ldFirst];
          float yv =
              g.transSecond ? y[j + p * g.ldSecond] : y[p + j * g.ldSecond];
          sum += xv * yv;
        }
        float &out = z[i + j * g.ldOut];
        out = g.accumulate ? out + sum : sum;
      }
  }
}

/// Whether ddpc_gemm_bias_act_f32 may fuse (DDPC_GEMM_EPILOGUE unset or not
/// "0"). With DDPC_GEMM_EPILOGUE=0 it returns 0 and compiled code runs the
/// separate GEMM and bias/activation kernel instead (ddpc-gemm-epilogues).
inline bool gemmEpiloguesEnabled() {
  static const bool enabled = [] {
    const char *v = std::getenv("DDPC_GEMM_EPILOGUE");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return enabled;
}

/// The epilogue of ddpc_gemm_bias_act_f32 on the CPU: d[i, j] (row-major
/// m x n) = act(d[i, j] + bias[j]), act 0: identity, 1: ReLU that keeps
/// NaN (as the compiled Relu does).
inline void referenceBiasActivation(float *d, const float *bias, int64_t m,
                                    int64_t n, int32_t act) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float s = d[i * n + j] + bias[j];
      if (act == 1 && !(s > 0.0f) && !std::isnan(s))
        s = 0.0f;
      d[i * n + j] = s;
    }
}

} // namespace runtime
} // namespace ddpc

#endif // DDPC_RUNTIME_GEMM_H

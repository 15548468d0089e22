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
// And, for ungrouped 2-d convolutions (ddpc-conv-to-library-call),
//   int32_t ddpc_conv2d_f32(int32_t kind, int64_t n, int64_t c, int64_t h,
//                           int64_t w, int64_t k, int64_t r, int64_t s,
//                           int64_t p, int64_t q, int64_t strideH,
//                           int64_t strideW, int64_t dilationH,
//                           int64_t dilationW, int64_t groups, int64_t X,
//                           int64_t W, int64_t Y, int32_t accumulate);
// on dense NCHW float32 tensors X [n, c, h, w] (already padded), W [k,
// c/groups, r, s] and Y [n, k, p, q], p = (h - dilationH*(r-1) - 1)/strideH
// + 1 (q likewise), cross-correlation without padding, output channel o
// reading the input channels of its group (o / (k/groups)):
//   kind 0 (forward):         Y (+)= conv(X, W)
//   kind 1 (backward data):   X (+)= dconv/dX^T applied to Y (Y is dY)
//   kind 2 (backward filter): W (+)= dconv/dW^T applied to Y (Y is dY)
// overwriting (accumulate = 0) or adding to (1) the written tensor. It
// returns 1, or 0 without writing anything when the library (cuDNN on the
// GPU) is unavailable or declines, and the caller then runs its im2col +
// GEMM lowering. referenceConv2d is the CPU definition.
//
// And, for a forward convolution followed by a per-channel bias (+ ReLU)
// (ddpc-conv-epilogues),
//   int32_t ddpc_conv2d_bias_act_f32(int64_t n, int64_t c, int64_t h,
//                                    int64_t w, int64_t k, int64_t r,
//                                    int64_t s, int64_t p, int64_t q,
//                                    int64_t strideH, int64_t strideW,
//                                    int64_t dilationH, int64_t dilationW,
//                                    int64_t groups, int64_t X, int64_t W,
//                                    int64_t bias, int64_t D, int32_t act);
// computing D [n, k, p, q] = act(conv(X, W) + bias[k]) (shapes as above,
// bias float32 [k], act 0: none, 1: ReLU that keeps NaN) in one library
// call (cuDNN's cudnnConvolutionBiasActivationForward), returning 1; or
// returning 0 without touching D, and the caller then runs
// ddpc_conv2d_f32 and the bias/activation kernel itself.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_RUNTIME_GEMM_H
#define DDPC_RUNTIME_GEMM_H

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

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
/// Read on every call (cheap next to a GEMM), so programs loaded into one
/// process (the Python API) follow the current environment.
inline bool gemmEpiloguesEnabled() {
  const char *v = std::getenv("DDPC_GEMM_EPILOGUE");
  return !(v && std::strcmp(v, "0") == 0);
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

/// Shapes of one ddpc_conv2d_f32 call (see the file comment).
struct Conv2dShape {
  int64_t n, c, h, w, k, r, s, p, q, strideH, strideW, dilationH, dilationW,
      groups;
};

/// ddpc_conv2d_f32 on the CPU, by its definition: for every (n, k, p, q,
/// c, r, s), c one of the c/groups input channels of k's group, the product
/// x[n, g*c/groups + c, strideH*p + dilationH*r, strideW*q + dilationW*s] *
/// w[k, c, r, s] contributes to y (kind 0), its x-gradient term w * y to x
/// (kind 1) or its w-gradient term x * y to w (kind 2).
/// Each written element is the float sum of its terms, in loop order,
/// added to the old value when `accumulate`.
inline void referenceConv2d(int32_t kind, const Conv2dShape &d, float *x,
                            float *w, float *y, bool accumulate) {
  auto xi = [&](int64_t n, int64_t c, int64_t h, int64_t ww) {
    return ((n * d.c + c) * d.h + h) * d.w + ww;
  };
  int64_t cg = d.c / d.groups, kg = d.k / d.groups; // Per group.
  auto wi = [&](int64_t k, int64_t c, int64_t r, int64_t s) {
    return ((k * cg + c) * d.r + r) * d.s + s;
  };
  auto yi = [&](int64_t n, int64_t k, int64_t p, int64_t q) {
    return ((n * d.k + k) * d.p + p) * d.q + q;
  };
  float *out = kind == 0 ? y : kind == 1 ? x : w;
  int64_t outSize = kind == 0   ? d.n * d.k * d.p * d.q
                    : kind == 1 ? d.n * d.c * d.h * d.w
                                : d.k * cg * d.r * d.s;
  std::vector<float> sum(static_cast<size_t>(outSize), 0.0f);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t k = 0; k < d.k; ++k)
      for (int64_t p = 0; p < d.p; ++p)
        for (int64_t q = 0; q < d.q; ++q)
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t r = 0; r < d.r; ++r)
              for (int64_t s = 0; s < d.s; ++s) {
                int64_t ix =
                    xi(n, (k / kg) * cg + c, d.strideH * p + d.dilationH * r,
                       d.strideW * q + d.dilationW * s);
                int64_t iw = wi(k, c, r, s), iy = yi(n, k, p, q);
                if (kind == 0)
                  sum[iy] += x[ix] * w[iw];
                else if (kind == 1)
                  sum[ix] += w[iw] * y[iy];
                else
                  sum[iw] += x[ix] * y[iy];
              }
  for (int64_t i = 0; i < outSize; ++i)
    out[i] = accumulate ? out[i] + sum[i] : sum[i];
}

/// The epilogue of ddpc_conv2d_bias_act_f32 on the CPU: y[i, j, pq]
/// (row-major n x k x pq) = act(y[i, j, pq] + bias[j]), act as in
/// referenceBiasActivation.
inline void referenceChannelBiasActivation(float *y, const float *bias,
                                           int64_t n, int64_t k, int64_t pq,
                                           int32_t act) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j)
      referenceBiasActivation(y + (i * k + j) * pq, bias + j, pq, 1, act);
}

/// Whether ddpc_conv2d_f32 may use the library (DDPC_CUDNN unset or not
/// "0"); with DDPC_CUDNN=0 it returns 0 and the im2col + GEMM lowering runs.
/// Read on every call, like gemmEpiloguesEnabled().
inline bool libraryConvEnabled() {
  const char *v = std::getenv("DDPC_CUDNN");
  return !(v && std::strcmp(v, "0") == 0);
}

/// Whether ddpc_conv2d_bias_act_f32 may fuse: the library is enabled and
/// DDPC_CONV_EPILOGUE is unset or not "0". Otherwise it returns 0 and
/// compiled code runs ddpc_conv2d_f32 and the bias/activation kernel.
inline bool convEpiloguesEnabled() {
  const char *v = std::getenv("DDPC_CONV_EPILOGUE");
  return libraryConvEnabled() && !(v && std::strcmp(v, "0") == 0);
}

} // namespace runtime
} // namespace ddpc

/// Threads of this process's CPU GEMM library (CpuBlas.cpp, OpenBLAS): `n`
/// >= 1, or 0 for the default (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS when
/// set, else the cores this process may use, shared among the node's ranks
/// when the launcher did not bind them). Weak: programs that do not link
/// CpuBlas (CUDA, no GEMM) have neither, and callers test for null.
extern "C" __attribute__((weak)) void ddpc_set_cpu_threads(int32_t n);
/// The threads the CPU GEMM library uses now (>= 1).
extern "C" __attribute__((weak)) int32_t ddpc_cpu_threads();

#endif // DDPC_RUNTIME_GEMM_H

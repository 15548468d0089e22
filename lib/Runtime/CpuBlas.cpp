//===- CpuBlas.cpp - ddpc_gemm_* on the CPU through OpenBLAS --------------===//
//
// The CPU implementation of the GEMM and convolution ABI of Gemm.h, for
// `--target cpu` (ddpc-gemm-to-library-call, ddpc-conv-to-library-call)
// and `--target cuda-emulate`. ddpc_conv2d_f32 is im2col per image and
// group + GEMM, any group count (depthwise included). Each matrix of a
// strided batch is one cblas_sgemm on the column-major call that
// toColumnMajor() derives, the same mapping the CUDA runtime hands to
// cuBLAS, so the emulated target still checks it. OpenBLAS's summation
// order is its own (blocked, FMA); results match the plain-loop reference
// to float rounding, not bit for bit.
//
// Threads (ddpc_set_cpu_threads, the programs' --threads N): N given, or
// else OpenBLAS's own reading of OPENBLAS_NUM_THREADS / OMP_NUM_THREADS
// when either is set, or else the cores this process may run on
// (sched_getaffinity), split evenly among the node's ranks when the
// launcher did not bind them, so that ranks do not oversubscribe the node.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/Gemm.h"

#include <cblas.h>

#include <sched.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace {

/// The node's ranks as the launcher reports them (Open MPI, Slurm, MPICH),
/// 1 outside a launcher.
long localWorldSize() {
  for (const char *var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                          "SLURM_NTASKS_PER_NODE"}) {
    if (const char *v = std::getenv(var)) {
      long n = std::strtol(v, nullptr, 10);
      if (n > 0)
        return n;
    }
  }
  return 1;
}

int defaultThreads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  long usable = sched_getaffinity(0, sizeof(set), &set) == 0
                    ? CPU_COUNT(&set)
                    : sysconf(_SC_NPROCESSORS_ONLN);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (usable < 1)
    usable = 1;
  // Not bound (the whole node is usable): share it with the other ranks.
  if (usable >= online)
    usable = usable / localWorldSize();
  return static_cast<int>(usable < 1 ? 1 : usable);
}

std::once_flag threadsOnce;

void configureThreadsOnce() {
  std::call_once(threadsOnce, [] {
    if (!std::getenv("OPENBLAS_NUM_THREADS") && !std::getenv("OMP_NUM_THREADS"))
      openblas_set_num_threads(defaultThreads());
  });
}

bool fitsBlasInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

/// `g` through cblas_sgemm, one call per batch entry; the plain loops when
/// a size exceeds BLAS's 32-bit integers.
void blasGemm(const ddpc::runtime::ColumnMajorGemm &g) {
  if (g.rows == 0 || g.cols == 0 || g.batch == 0)
    return;
  if (!fitsBlasInt(g.rows) || !fitsBlasInt(g.cols) || !fitsBlasInt(g.inner) ||
      !fitsBlasInt(g.ldFirst) || !fitsBlasInt(g.ldSecond) ||
      !fitsBlasInt(g.ldOut)) {
    ddpc::runtime::referenceGemm(g);
    return;
  }
  configureThreadsOnce();
  // BLAS requires ld >= max(1, rows of the stored matrix).
  auto ld = [](int64_t v) { return static_cast<int>(v < 1 ? 1 : v); };
  for (int64_t bt = 0; bt < g.batch; ++bt)
    cblas_sgemm(CblasColMajor, g.transFirst ? CblasTrans : CblasNoTrans,
                g.transSecond ? CblasTrans : CblasNoTrans,
                static_cast<int>(g.rows), static_cast<int>(g.cols),
                static_cast<int>(g.inner), 1.0f, g.first + bt * g.strideFirst,
                ld(g.ldFirst), g.second + bt * g.strideSecond, ld(g.ldSecond),
                g.accumulate ? 1.0f : 0.0f, g.out + bt * g.strideOut,
                ld(g.ldOut));
}

/// Row-major C (m x n, ld n) = A (m x k or, with transA, k x m) * B (k x n
/// or, with transB, n x k) + beta * C on OpenBLAS.
void rowMajorGemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                  const float *a, const float *b, float beta, float *c) {
  if (m == 0 || n == 0)
    return;
  configureThreadsOnce();
  auto ld = [](int64_t v) { return static_cast<int>(v < 1 ? 1 : v); };
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a,
              ld(transA ? m : k), b, ld(transB ? k : n), beta, c, ld(n));
}

/// The windows of one image's group x (cg x h x w, padded) as the rows of
/// col ((cg*r*s) x (p*q)): col[(c,r,s), (p,q)] = x[c, strideH*p +
/// dilationH*r, strideW*q + dilationW*s]; with `scatter`, the reverse
/// (col2im): x[...] += col[...].
void im2col(const ddpc::runtime::Conv2dShape &d, int64_t cg, float *x,
            float *col, bool scatter) {
  int64_t pq = d.p * d.q;
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t r = 0; r < d.r; ++r)
      for (int64_t s = 0; s < d.s; ++s) {
        float *row = col + ((c * d.r + r) * d.s + s) * pq;
        float *plane =
            x + c * d.h * d.w + d.dilationH * r * d.w + d.dilationW * s;
        for (int64_t p = 0; p < d.p; ++p) {
          float *src = plane + d.strideH * p * d.w, *dst = row + p * d.q;
          if (scatter) {
            for (int64_t q = 0; q < d.q; ++q)
              src[q * d.strideW] += dst[q];
          } else if (d.strideW == 1) {
            std::memcpy(dst, src, static_cast<size_t>(d.q) * sizeof(float));
          } else {
            for (int64_t q = 0; q < d.q; ++q)
              dst[q] = src[q * d.strideW];
          }
        }
      }
}

/// ddpc_conv2d_f32 as im2col (per image and group) + OpenBLAS GEMM:
///   forward          y_g (kg x pq) (+)= w_g (kg x K) * col (K x pq)
///   backward data    dcol = w_g^T * dy_g, then col2im into dx_g
///   backward filter  dw_g (kg x K) (+)= sum over images dy_g * col^T
/// with K = cg*r*s. A 1x1 window of stride 1 uses x itself as col. False
/// (nothing written) when a size exceeds BLAS's 32-bit integers.
bool blasConv2d(int32_t kind, const ddpc::runtime::Conv2dShape &d, float *x,
                float *w, float *y, bool accumulate) {
  int64_t cg = d.c / d.groups, kg = d.k / d.groups, kk = cg * d.r * d.s,
          pq = d.p * d.q;
  if (!fitsBlasInt(kk * pq) || !fitsBlasInt(kg * kk) || !fitsBlasInt(kg * pq))
    return false;
  bool direct = d.r == 1 && d.s == 1 && d.strideH == 1 && d.strideW == 1 &&
                d.p == d.h && d.q == d.w;
  static thread_local std::vector<float> scratch;
  if (!direct && scratch.size() < static_cast<size_t>(kk * pq))
    scratch.resize(static_cast<size_t>(kk * pq));
  float *col = scratch.data();
  // Overwriting: zero the written tensor, then every GEMM accumulates.
  if (kind == 1 && !accumulate)
    std::memset(x, 0, static_cast<size_t>(d.n * d.c * d.h * d.w) * 4);
  if (kind == 2 && !accumulate)
    std::memset(w, 0, static_cast<size_t>(d.k * kk) * 4);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t g = 0; g < d.groups; ++g) {
      float *xg = x + (n * d.c + g * cg) * d.h * d.w;
      float *wg = w + g * kg * kk;
      float *yg = y + (n * d.k + g * kg) * pq;
      if (direct)
        col = xg;
      if (kind == 0) {
        if (!direct)
          im2col(d, cg, xg, col, /*scatter=*/false);
        rowMajorGemm(false, false, kg, pq, kk, wg, col, accumulate ? 1 : 0, yg);
      } else if (kind == 1) {
        // dx_g already holds what to add to (zeroed above when overwriting).
        rowMajorGemm(true, false, kk, pq, kg, wg, yg, direct ? 1 : 0, col);
        if (!direct)
          im2col(d, cg, xg, col, /*scatter=*/true);
      } else {
        if (!direct)
          im2col(d, cg, xg, col, /*scatter=*/false);
        rowMajorGemm(false, true, kg, kk, pq, yg, col, 1, wg);
      }
    }
  return true;
}

} // namespace

extern "C" {

void ddpc_set_cpu_threads(int32_t n) {
  if (n < 1) {
    configureThreadsOnce();
    return;
  }
  std::call_once(threadsOnce, [] {});
  openblas_set_num_threads(n);
}

int32_t ddpc_cpu_threads() {
  configureThreadsOnce();
  return openblas_get_num_threads();
}

void ddpc_gemm_f32(int64_t batch, int64_t m, int64_t n, int64_t k,
                   int32_t transA, int32_t transB, int64_t a, int64_t b,
                   int64_t c, int64_t strideA, int64_t strideB, int64_t strideC,
                   int32_t accumulate) {
  blasGemm(ddpc::runtime::toColumnMajor(batch, m, n, k, transA, transB, a, b, c,
                                        strideA, strideB, strideC, accumulate));
}

int32_t ddpc_gemm_bias_act_f32(int64_t m, int64_t n, int64_t k, int32_t transA,
                               int32_t transB, int64_t a, int64_t b, int64_t d,
                               int64_t bias, int32_t act) {
  if (!ddpc::runtime::gemmEpiloguesEnabled())
    return 0;
  blasGemm(ddpc::runtime::toColumnMajor(1, m, n, k, transA, transB, a, b, d, 0,
                                        0, 0, /*accumulate=*/0));
  ddpc::runtime::referenceBiasActivation(reinterpret_cast<float *>(d),
                                         reinterpret_cast<const float *>(bias),
                                         m, n, act);
  return 1;
}

int32_t ddpc_conv2d_f32(int32_t kind, int64_t n, int64_t c, int64_t h,
                        int64_t w, int64_t k, int64_t r, int64_t s, int64_t p,
                        int64_t q, int64_t strideH, int64_t strideW,
                        int64_t dilationH, int64_t dilationW, int64_t groups,
                        int64_t x, int64_t filter, int64_t y,
                        int32_t accumulate) {
  if (!ddpc::runtime::libraryConvEnabled())
    return 0;
  return blasConv2d(kind,
                    {n, c, h, w, k, r, s, p, q, strideH, strideW, dilationH,
                     dilationW, groups},
                    reinterpret_cast<float *>(x),
                    reinterpret_cast<float *>(filter),
                    reinterpret_cast<float *>(y), accumulate != 0)
             ? 1
             : 0;
}

} // extern "C"

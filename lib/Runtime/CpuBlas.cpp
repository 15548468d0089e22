//===- CpuBlas.cpp - ddpc_gemm_* on the CPU through OpenBLAS --------------===//
//
// The CPU implementation of the GEMM ABI of Gemm.h, for `--target cpu`
// (ddpc-gemm-to-library-call and the im2col + GEMM convolutions of
// ddpc-conv-to-library-call) and `--target cuda-emulate`. Each matrix of a
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
#include <mutex>

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

} // extern "C"

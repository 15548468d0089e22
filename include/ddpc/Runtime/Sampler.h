//===- Sampler.h - Deterministic distributed sampler ------------*- C++ -*-===//
//
// DistributedSampler semantics, identical on every rank and every platform:
//
// * Epoch e uses the permutation `samplerPermutation(N, seed + e)` of [0, N)
//   (the identity with --no-shuffle). It is a Fisher–Yates shuffle driven by
//   std::mt19937_64 (whose output sequence the C++ standard fixes), with
//   bounded integers drawn by rejection, not by std::shuffle or
//   std::uniform_int_distribution (implementation-defined):
//
//     for i = N-1 down to 1:
//       bound = i + 1
//       draw x from the engine until x >= (2^64 - bound) mod bound
//       j = x mod bound;  swap(perm[i], perm[j])
//
// * Global batch G = B * world; an optimizer step consumes K micro-batches.
//   Micro-batch k of step s of an epoch covers perm[(s*K + k)*G, +G), and
//   rank r takes the slice [r*B, (r+1)*B) of it (contiguous, the default),
//   or with strided assignment its rows r, r + world, r + 2*world, ... (as
//   torch's DistributedSampler deals samples: without shuffling, rank r
//   sees samples r, r + world, ...). The global batch is the same set.
// * Steps per epoch = floor(N / (G*K)); the trailing partial global batch is
//   dropped, so every rank runs the same number of steps and the samples seen
//   depend only on G*K, not on how it is split into ranks and micro-batches.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_RUNTIME_SAMPLER_H
#define DDPC_RUNTIME_SAMPLER_H

#include <cstdint>
#include <vector>

namespace ddpc {
namespace runtime {

/// Uniform integer in [0, bound) from `next`, a callable returning uniform
/// 64-bit words (rejection sampling as documented above). `bound` >= 1.
template <typename Engine> uint64_t uniformBelow(Engine &next, uint64_t bound) {
  uint64_t threshold = (0 - bound) % bound; // (2^64 - bound) mod bound
  for (;;) {
    uint64_t x = next();
    if (x >= threshold)
      return x % bound;
  }
}

/// The permutation of [0, n) for `seed` (see the file comment).
std::vector<int64_t> samplerPermutation(int64_t n, uint64_t seed);

/// The sample order of epoch `epoch`: samplerPermutation(n, seed + epoch)
/// when `shuffle`, else the identity.
std::vector<int64_t> epochOrder(int64_t n, uint64_t seed, int64_t epoch,
                                bool shuffle);

/// Optimizer steps per epoch: floor(n / (batch * world * accum)).
int64_t stepsPerEpoch(int64_t n, int64_t batch, int64_t world, int64_t accum);

/// Index into the epoch order of the first sample of rank `rank`'s slice of
/// micro-batch `micro` of step `step`.
int64_t sliceBegin(int64_t step, int64_t micro, int64_t rank, int64_t batch,
                   int64_t world, int64_t accum);
/// Index into the epoch order of row `row` (< batch) of rank `rank`'s
/// micro-batch `micro` of step `step`: contiguous or strided assignment
/// (see the file comment).
int64_t samplePosition(int64_t step, int64_t micro, int64_t rank, int64_t row,
                       int64_t batch, int64_t world, int64_t accum,
                       bool strided);

} // namespace runtime
} // namespace ddpc

#endif // DDPC_RUNTIME_SAMPLER_H

//===- Sampler.cpp - Deterministic distributed sampler --------------------===//

#include "ddpc/Runtime/Sampler.h"

#include <random>
#include <utility>

namespace ddpc {
namespace runtime {

std::vector<int64_t> samplerPermutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> perm(n > 0 ? static_cast<size_t>(n) : 0);
  for (int64_t i = 0; i < n; ++i)
    perm[i] = i;
  std::mt19937_64 engine(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    uint64_t j = uniformBelow(engine, static_cast<uint64_t>(i) + 1);
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

std::vector<int64_t> epochOrder(int64_t n, uint64_t seed, int64_t epoch,
                                bool shuffle) {
  if (shuffle)
    return samplerPermutation(n, seed + static_cast<uint64_t>(epoch));
  std::vector<int64_t> order(n > 0 ? static_cast<size_t>(n) : 0);
  for (int64_t i = 0; i < n; ++i)
    order[i] = i;
  return order;
}

int64_t stepsPerEpoch(int64_t n, int64_t batch, int64_t world, int64_t accum) {
  int64_t perStep = batch * world * accum;
  return perStep > 0 ? n / perStep : 0;
}

int64_t sliceBegin(int64_t step, int64_t micro, int64_t rank, int64_t batch,
                   int64_t world, int64_t accum) {
  return (step * accum + micro) * batch * world + rank * batch;
}

int64_t samplePosition(int64_t step, int64_t micro, int64_t rank, int64_t row,
                       int64_t batch, int64_t world, int64_t accum,
                       bool strided) {
  int64_t micro0 = (step * accum + micro) * batch * world;
  return strided ? micro0 + row * world + rank : micro0 + rank * batch + row;
}

} // namespace runtime
} // namespace ddpc

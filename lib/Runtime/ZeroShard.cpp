//===- ZeroShard.cpp - ZeRO stage 1 optimizer-state sharding --------------===//
//
// Part of the training runtime. See ZeroShard.h.
//
//===----------------------------------------------------------------------===//

#include "ZeroShard.h"

#include "ddpc/Runtime/Collectives.h"
#include "ddpc/Runtime/Memory.h"
#include "ddpc/Support/ZeroLayout.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace ddpc {
namespace runtime {

namespace {

float *allocateFloats(int64_t n) {
  void *p = allocateBuffer(static_cast<size_t>(n) * sizeof(float));
  if (!p)
    fatalError("out of memory allocating " +
               std::to_string(n * static_cast<int64_t>(sizeof(float))) +
               " bytes for the ZeRO stage 1 optimizer state");
  return static_cast<float *>(p);
}

} // namespace

ZeroStage1::ZeroStage1(std::vector<int64_t> numelsIn, int slots, int64_t chunk,
                       int world, int rank)
    : numels(std::move(numelsIn)), slots(slots), chunk(chunk), world(world),
      rank(rank) {
  ZeroLayout l = zeroLayout(numels, chunk, world);
  total = l.total;
  slice = l.slice;
  groupChunks = l.groupChunks;
  int64_t offset = 0;
  for (int64_t n : numels) {
    offsets.push_back(offset);
    offset += n;
  }
  for (int s = 0; s < slots; ++s) {
    state.push_back(allocateFloats(slice));
    newState.push_back(allocateFloats(chunk));
  }
  paramChunk = allocateFloats(chunk);
  gradChunk = allocateFloats(chunk);
  send = allocateFloats(groupChunks * chunk);
  recv = allocateFloats(world * groupChunks * chunk);
}

ZeroStage1::~ZeroStage1() {
  for (float *p : state)
    freeBuffer(p);
  for (float *p : newState)
    freeBuffer(p);
  for (float *p : {paramChunk, gradChunk, send, recv})
    freeBuffer(p);
  if (paramSlice)
    freeBuffer(paramSlice);
}

int64_t ZeroStage1::allocatedBytes(const std::vector<int64_t> &numels,
                                   int slots, int64_t chunk, int world,
                                   int64_t alignment) {
  return zeroStage1Bytes(numels, slots, chunk, world, alignment);
}

void ZeroStage1::packFlat(const std::vector<const float *> &tensors,
                          int64_t begin, int64_t n, float *dst) const {
  int64_t end = begin + n;
  // The first parameter that ends after `begin`.
  size_t i =
      std::upper_bound(offsets.begin(), offsets.end(), begin) - offsets.begin();
  i = i ? i - 1 : 0;
  int64_t at = begin;
  for (; i < numels.size() && at < end; ++i) {
    int64_t lo = std::max(at, offsets[i]);
    int64_t hi = std::min(end, offsets[i] + numels[i]);
    if (hi <= lo)
      continue;
    std::memcpy(dst + (lo - begin), tensors[i] + (lo - offsets[i]),
                static_cast<size_t>(hi - lo) * sizeof(float));
    at = hi;
  }
  // Past the last parameter: padding.
  if (at < end)
    std::memset(dst + (at - begin), 0,
                static_cast<size_t>(end - at) * sizeof(float));
}

void ZeroStage1::unpackFlat(const float *src, int64_t begin, int64_t n,
                            const std::vector<float *> &tensors) const {
  int64_t end = std::min(begin + n, total);
  size_t i =
      std::upper_bound(offsets.begin(), offsets.end(), begin) - offsets.begin();
  i = i ? i - 1 : 0;
  for (; i < numels.size() && offsets[i] < end; ++i) {
    int64_t lo = std::max(begin, offsets[i]);
    int64_t hi = std::min(end, offsets[i] + numels[i]);
    if (hi > lo)
      std::memcpy(tensors[i] + (lo - offsets[i]), src + (lo - begin),
                  static_cast<size_t>(hi - lo) * sizeof(float));
  }
}

void ZeroStage1::step(const std::vector<float *> &params,
                      const std::vector<float *> &grads,
                      const std::vector<float *> &newParams, void *lr,
                      void *stepArg, void *gradScale,
                      void (*applyShard)(void **), const float *gradSlice) {
  std::vector<const float *> p(params.begin(), params.end());
  std::vector<const float *> g(grads.begin(), grads.end());
  // ddpc_apply_shard's arguments (TrainABI.h).
  std::vector<void *> args(2 * slots + 6);
  int64_t chunks = slice / chunk;
  for (int64_t g0 = 0; g0 < chunks; g0 += groupChunks) {
    int64_t gn = std::min(groupChunks, chunks - g0);
    for (int64_t j = g0; j < g0 + gn; ++j) {
      int64_t begin = rank * slice + j * chunk;
      if (paramSlice)
        std::memcpy(paramChunk, paramSlice + j * chunk,
                    static_cast<size_t>(chunk) * sizeof(float));
      else
        packFlat(p, begin, chunk, paramChunk);
      if (!gradSlice)
        packFlat(g, begin, chunk, gradChunk);
      size_t a = 0;
      args[a++] = paramChunk;
      for (int s = 0; s < slots; ++s)
        args[a++] = state[s] + j * chunk;
      // The step reads its gradient argument only (TrainABI.h).
      args[a++] =
          gradSlice ? const_cast<float *>(gradSlice) + j * chunk : gradChunk;
      args[a++] = lr;
      args[a++] = stepArg;
      args[a++] = gradScale;
      args[a++] = send + (j - g0) * chunk;
      for (int s = 0; s < slots; ++s)
        args[a++] = newState[s];
      applyShard(args.data());
      for (int s = 0; s < slots; ++s)
        std::memcpy(state[s] + j * chunk, newState[s],
                    static_cast<size_t>(chunk) * sizeof(float));
    }
    int64_t n = gn * chunk;
    if (paramSlice) { // stage 3: the slice is the parameters' only copy
      std::memcpy(paramSlice + g0 * chunk, send,
                  static_cast<size_t>(n) * sizeof(float));
      continue;
    }
    allgatherBytes(send, recv, n * static_cast<int64_t>(sizeof(float)),
                   "all-gather of the parameters (ZeRO stage 1)");
    for (int q = 0; q < world; ++q)
      unpackFlat(recv + q * n, q * slice + g0 * chunk, n, newParams);
  }
}

void ZeroStage1::gatherState(std::vector<std::vector<float>> &out) {
  out.clear();
  if (rank == 0)
    for (int64_t n : numels)
      for (int s = 0; s < slots; ++s)
        out.emplace_back(static_cast<size_t>(n), 0.0f);
  int64_t chunks = slice / chunk;
  for (int s = 0; s < slots; ++s) {
    std::vector<float *> dst;
    if (rank == 0)
      for (size_t i = 0; i < numels.size(); ++i)
        dst.push_back(out[i * slots + s].data());
    for (int64_t g0 = 0; g0 < chunks; g0 += groupChunks) {
      int64_t n = std::min(groupChunks, chunks - g0) * chunk;
      allgatherBytes(state[s] + g0 * chunk, recv,
                     n * static_cast<int64_t>(sizeof(float)),
                     "all-gather of the optimizer state (ZeRO stage 1)");
      if (rank == 0)
        for (int q = 0; q < world; ++q)
          unpackFlat(recv + q * n, q * slice + g0 * chunk, n, dst);
    }
  }
}

void ZeroStage1::scatterFlat(const std::vector<const float *> &src,
                             float *dst) {
  // Rank 0 broadcasts the flat vector piece by piece (the gather buffer's
  // size); every rank keeps what falls in its slice.
  int64_t piece = world * groupChunks * chunk, padded = world * slice;
  for (int64_t begin = 0; begin < padded; begin += piece) {
    int64_t n = std::min(piece, padded - begin);
    if (rank == 0)
      packFlat(src, begin, n, recv);
    broadcastBytes(recv, n * static_cast<int64_t>(sizeof(float)),
                   "broadcast of the sharded state (ZeRO)");
    int64_t lo = std::max(begin, rank * slice);
    int64_t hi = std::min(begin + n, (rank + 1) * slice);
    if (hi > lo)
      std::memcpy(dst + (lo - rank * slice), recv + (lo - begin),
                  static_cast<size_t>(hi - lo) * sizeof(float));
  }
}

void ZeroStage1::scatterState(const std::vector<std::vector<float>> &full) {
  for (int s = 0; s < slots; ++s) {
    std::vector<const float *> src;
    if (rank == 0)
      for (size_t i = 0; i < numels.size(); ++i)
        src.push_back(full[i * slots + s].data());
    scatterFlat(src, state[s]);
  }
}

void ZeroStage1::enableParameterSlice() {
  if (paramSlice)
    return;
  void *p = allocateBuffer(static_cast<size_t>(slice) * sizeof(float));
  if (!p)
    fatalError("out of memory allocating " +
               std::to_string(slice * static_cast<int64_t>(sizeof(float))) +
               " bytes for the ZeRO stage 3 parameter slice");
  paramSlice = static_cast<float *>(p);
  std::memset(paramSlice, 0, static_cast<size_t>(slice) * sizeof(float));
}

void ZeroStage1::setParameters(const std::vector<const float *> &full) {
  packFlat(full, rank * slice, slice, paramSlice);
}

void ZeroStage1::scatterParameters(
    const std::vector<std::vector<float>> &full) {
  std::vector<const float *> src;
  if (rank == 0)
    for (const std::vector<float> &t : full)
      src.push_back(t.data());
  scatterFlat(src, paramSlice);
}

void ZeroStage1::gatherParameter(int64_t index, float *dst) {
  if (!paramSlice || index < 0 || index >= int64_t(numels.size()))
    fatalError("internal error: all-gather of parameter " +
               std::to_string(index) + " of " + std::to_string(numels.size()) +
               " without a ZeRO stage 3 parameter slice");
  int64_t off = offsets[index], n = numels[index];
  auto part = [&](int q) { return zeroSliceOverlap(off, n, slice, q); };
  auto start = [&](int q) { return std::max(off, q * slice); };
  int64_t most = 0;
  for (int q = 0; q < world; ++q)
    most = std::max(most, part(q));
  // Rounds of at most the send buffer per rank; rank q's part of round k
  // lands at its place in the parameter.
  const int64_t room = groupChunks * chunk;
  const int64_t mine = part(rank);
  const float *from = paramSlice + (start(rank) - rank * slice);
  for (int64_t k = 0; k < most; k += room) {
    int64_t m = std::min(room, most - k);
    int64_t have = std::clamp<int64_t>(mine - k, 0, m);
    if (have)
      std::memcpy(send, from + k, static_cast<size_t>(have) * sizeof(float));
    if (have < m)
      std::memset(send + have, 0,
                  static_cast<size_t>(m - have) * sizeof(float));
    allgatherBytes(send, recv, m * static_cast<int64_t>(sizeof(float)),
                   "all-gather of a parameter (ZeRO stage 3)");
    for (int q = 0; q < world; ++q) {
      int64_t c = std::clamp<int64_t>(part(q) - k, 0, m);
      if (c)
        std::memcpy(dst + (start(q) - off) + k, recv + q * m,
                    static_cast<size_t>(c) * sizeof(float));
    }
  }
}

void ZeroStage1::gatherParameters(std::vector<std::vector<float>> &out) {
  out.assign(numels.size(), {});
  for (size_t i = 0; i < numels.size(); ++i) {
    out[i].assign(static_cast<size_t>(numels[i]), 0.0f);
    gatherParameter(static_cast<int64_t>(i), out[i].data());
  }
}

ZeroGradients::ZeroGradients(std::vector<int64_t> numelsIn,
                             std::vector<std::vector<int32_t>> bucketsIn,
                             int64_t chunk, int world, int rank)
    : numels(std::move(numelsIn)), members(std::move(bucketsIn)), world(world),
      rank(rank) {
  sliceLen = zeroLayout(numels, chunk, world).slice;
  int64_t offset = 0;
  for (int64_t n : numels)
    offsets.push_back(offset), offset += n;
  ZeroBucketSizes z = zeroBucketSizes(numels, members, chunk, world);
  gradSlice = allocateFloats(sliceLen);
  for (int64_t s = 0; s < z.slots; ++s) {
    send.push_back(allocateFloats(z.maxBucket));
    recv.push_back(allocateFloats(z.maxPart));
  }
}

ZeroGradients::~ZeroGradients() {
  freeBuffer(gradSlice);
  for (float *p : send)
    freeBuffer(p);
  for (float *p : recv)
    freeBuffer(p);
}

int64_t
ZeroGradients::allocatedBytes(const std::vector<int64_t> &numels,
                              const std::vector<std::vector<int32_t>> &buckets,
                              int64_t chunk, int world, int64_t alignment) {
  return zeroStage2GradientBytes(numels, buckets, chunk, world, alignment);
}

void ZeroGradients::zeroSlice() {
  std::memset(gradSlice, 0, static_cast<size_t>(sliceLen) * sizeof(float));
}

void ZeroGradients::pack(int64_t bucket,
                         const std::vector<std::pair<float *, int64_t>> &grads,
                         float *dst, std::vector<int64_t> &counts) const {
  if (bucket < 0 || bucket >= buckets())
    fatalError("internal error: gradient bucket " + std::to_string(bucket) +
               " of " + std::to_string(buckets()) + " (ZeRO stage 2)");
  const std::vector<int32_t> &m = members[bucket];
  bool match = m.size() == grads.size();
  for (size_t k = 0; match && k < m.size(); ++k)
    match = grads[k].second == numels[m[k]];
  if (!match)
    fatalError("internal error: gradient bucket " + std::to_string(bucket) +
               " does not hold the gradients the program's bucket table "
               "lists (ZeRO stage 2)");
  counts.assign(static_cast<size_t>(world), 0);
  float *out = dst;
  for (int q = 0; q < world; ++q)
    for (size_t k = 0; k < m.size(); ++k) {
      int64_t off = offsets[m[k]], n = numels[m[k]];
      int64_t len = zeroSliceOverlap(off, n, sliceLen, q);
      if (!len)
        continue;
      int64_t lo = std::max(off, q * sliceLen);
      std::memcpy(out, grads[k].first + (lo - off),
                  static_cast<size_t>(len) * sizeof(float));
      out += len;
      counts[q] += len;
    }
}

void ZeroGradients::accumulate(int64_t bucket, const float *src) {
  for (int32_t p : members[bucket]) {
    int64_t off = offsets[p], n = numels[p];
    int64_t len = zeroSliceOverlap(off, n, sliceLen, rank);
    if (!len)
      continue;
    float *dst = gradSlice + (std::max(off, rank * sliceLen) - rank * sliceLen);
    for (int64_t i = 0; i < len; ++i)
      dst[i] += src[i];
    src += len;
  }
}

double ZeroGradients::sumOfSquares() const {
  double sum = 0;
  for (int64_t i = 0; i < sliceLen; ++i)
    sum += static_cast<double>(gradSlice[i]) * gradSlice[i];
  return sum;
}

namespace {
ZeroStage1 *gParamShard = nullptr;
} // namespace

void setParameterShard(ZeroStage1 *shard) { gParamShard = shard; }

} // namespace runtime
} // namespace ddpc

extern "C" void ddpc_rt_param_gather_f32(float *data, int64_t index) {
  using namespace ddpc::runtime;
  if (!gParamShard)
    fatalError("internal error: the program gathers parameters (ZeRO stage "
               "3) but the runtime keeps no parameter slice");
  gParamShard->gatherParameter(index, data);
}

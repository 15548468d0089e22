//===- ZeroLayout.h - ZeRO stage 1 slice layout and bytes -------*- C++ -*-===//
//
// Part of ddpc. The layout of ZeRO stage 1's sharded optimizer state
// (Rajbhandari et al., SC'20, sec. 5.1, P_os) as the training runtime
// allocates it (lib/Runtime/ZeroShard.h) and as the compiler's memory plan
// counts it for a given world size (Analysis/MemoryPlan.h), so that the two
// agree. Plain C++ (the runtime has no LLVM).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_SUPPORT_ZEROLAYOUT_H
#define DDPC_SUPPORT_ZEROLAYOUT_H

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ddpc {

/// The most bytes one parameter all-gather receives (its buffer's size).
constexpr int64_t kZeroGatherBytes = int64_t(1) << 20;

/// The parameters concatenated into `total` float32 elements, padded to
/// world * `slice` (slice: the smallest multiple of the chunk with world *
/// slice >= total, at least one chunk); the all-gather moves `groupChunks`
/// chunks per rank at a time (at most kZeroGatherBytes in all).
struct ZeroLayout {
  int64_t total = 0, slice = 0, groupChunks = 1;
};

/// The layout for parameters of `numels` float32 elements, chunks of
/// `chunk` elements, on `world` ranks (>= 1).
inline ZeroLayout zeroLayout(const std::vector<int64_t> &numels, int64_t chunk,
                             int64_t world) {
  ZeroLayout l;
  for (int64_t n : numels)
    l.total += n;
  int64_t perRank = (l.total + world - 1) / world;
  l.slice = std::max<int64_t>(1, (perRank + chunk - 1) / chunk) * chunk;
  l.groupChunks = std::clamp<int64_t>(
      kZeroGatherBytes / (int64_t(sizeof(float)) * world * chunk), 1,
      l.slice / chunk);
  return l;
}

/// Bytes one rank allocates at stage 1: `slots` state slices and chunk
/// buffers, the parameter and gradient chunks, the gather's send and
/// receive buffers; each buffer rounded up to `alignment` bytes.
inline int64_t zeroStage1Bytes(const std::vector<int64_t> &numels,
                               int64_t slots, int64_t chunk, int64_t world,
                               int64_t alignment) {
  ZeroLayout l = zeroLayout(numels, chunk, world);
  auto floats = [&](int64_t n) {
    int64_t bytes = std::max<int64_t>(n * int64_t(sizeof(float)), 1);
    return (bytes + alignment - 1) / alignment * alignment;
  };
  return slots * (floats(l.slice) + floats(chunk)) + 2 * floats(chunk) +
         floats(l.groupChunks * chunk) + floats(world * l.groupChunks * chunk);
}

/// Elements of parameter range [offset, offset + numel) of the flat vector
/// that fall in rank q's slice [q * slice, (q + 1) * slice).
inline int64_t zeroSliceOverlap(int64_t offset, int64_t numel, int64_t slice,
                                int64_t q) {
  int64_t lo = std::max(offset, q * slice);
  int64_t hi = std::min(offset + numel, (q + 1) * slice);
  return std::max<int64_t>(0, hi - lo);
}

/// ZeRO stage 2's gradient buckets (Rajbhandari et al., SC'20, sec. 5.2,
/// P_os+g): bucket b holds the gradients of parameters buckets[b] (indices
/// into `numels`). Its reduce-scatter sends the bucket packed rank by rank
/// (for rank q, each member's overlap with slice q, in member order) and
/// rank q receives the sum of its part, which it adds into its gradient
/// slice. At most kZeroBucketsInFlight buckets are in flight; each one
/// in flight has a send buffer of the largest bucket and a receive buffer
/// of the largest part any rank receives.
constexpr int64_t kZeroBucketsInFlight = 2;

struct ZeroBucketSizes {
  int64_t maxBucket = 0, maxPart = 0, slots = 0;
};

inline ZeroBucketSizes
zeroBucketSizes(const std::vector<int64_t> &numels,
                const std::vector<std::vector<int32_t>> &buckets, int64_t chunk,
                int64_t world) {
  ZeroLayout l = zeroLayout(numels, chunk, world);
  std::vector<int64_t> offsets;
  int64_t offset = 0;
  for (int64_t n : numels)
    offsets.push_back(offset), offset += n;
  ZeroBucketSizes z;
  for (const std::vector<int32_t> &members : buckets) {
    int64_t elems = 0;
    for (int32_t m : members)
      elems += numels[m];
    z.maxBucket = std::max(z.maxBucket, elems);
    for (int64_t q = 0; q < world; ++q) {
      int64_t part = 0;
      for (int32_t m : members)
        part += zeroSliceOverlap(offsets[m], numels[m], l.slice, q);
      z.maxPart = std::max(z.maxPart, part);
    }
  }
  z.slots = std::min<int64_t>(kZeroBucketsInFlight,
                              static_cast<int64_t>(buckets.size()));
  return z;
}

/// Bytes one rank allocates at stage 2 for the gradients: its gradient
/// slice (slice floats) and the buffers of the buckets in flight; each
/// buffer rounded up to `alignment` bytes. (The optimizer state is
/// zeroStage1Bytes, as at stage 1.)
inline int64_t
zeroStage2GradientBytes(const std::vector<int64_t> &numels,
                        const std::vector<std::vector<int32_t>> &buckets,
                        int64_t chunk, int64_t world, int64_t alignment) {
  ZeroLayout l = zeroLayout(numels, chunk, world);
  ZeroBucketSizes z = zeroBucketSizes(numels, buckets, chunk, world);
  auto floats = [&](int64_t n) {
    int64_t bytes = std::max<int64_t>(n * int64_t(sizeof(float)), 1);
    return (bytes + alignment - 1) / alignment * alignment;
  };
  return floats(l.slice) + z.slots * (floats(z.maxBucket) + floats(z.maxPart));
}

/// Bytes one rank allocates at ZeRO stage 3 (sec. 5.3, P_os+g+p) for the
/// parameters: its slice of the flat parameter vector (slice floats,
/// rounded up to `alignment`). The gathers reuse stage 1's buffers; the
/// whole parameters the step gathers are its temporaries.
inline int64_t zeroStage3ParameterBytes(const std::vector<int64_t> &numels,
                                        int64_t chunk, int64_t world,
                                        int64_t alignment) {
  ZeroLayout l = zeroLayout(numels, chunk, world);
  int64_t bytes = std::max<int64_t>(l.slice * int64_t(sizeof(float)), 1);
  return (bytes + alignment - 1) / alignment * alignment;
}

} // namespace ddpc

#endif // DDPC_SUPPORT_ZEROLAYOUT_H

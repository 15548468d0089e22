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

} // namespace ddpc

#endif // DDPC_SUPPORT_ZEROLAYOUT_H

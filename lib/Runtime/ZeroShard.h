//===- ZeroShard.h - ZeRO stage 1 optimizer-state sharding ------*- C++ -*-===//
//
// Part of the training runtime (TrainMain.cpp). ZeRO stage 1 (Rajbhandari
// et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models", SC'20, sec. 5.1, P_os): the parameters, concatenated in TrainABI
// order into one flat float32 vector of `total` elements and padded with
// zeros to N * S elements (N the world size, S the slice: the smallest
// multiple of the chunk C of ddpc_apply_shard with N * S >= total), are
// split into N contiguous slices; rank r keeps the optimizer state of
// slice r only (slots x S floats instead of slots x total x 2 halves).
// Each step every rank runs ddpc_apply_shard on its slice, chunk by chunk,
// on the full (allreduced) gradients, then the new parameters are
// all-gathered (MPI_Iallgather, in groups of chunks of at most 1 MiB per
// gather). The optimizer update is elementwise, so the result is the
// stage-0 update of every element.
//
// Checkpoints hold the whole state: gatherState assembles it on rank 0,
// scatterState hands each rank its slice of a checkpoint's. Host memory
// only (the CPU and cuda-emulate targets).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_LIB_RUNTIME_ZEROSHARD_H
#define DDPC_LIB_RUNTIME_ZEROSHARD_H

#include <cstdint>
#include <vector>

namespace ddpc {
namespace runtime {

class ZeroStage1 {
public:
  /// The layout for parameters of `numels` elements, `slots` state slots
  /// per parameter, chunks of `chunk` floats, on rank `rank` of `world`.
  /// Allocates the state slices (zero) and the chunk and gather buffers
  /// with allocateBuffer (Memory.h), so that they are counted.
  ZeroStage1(std::vector<int64_t> numels, int slots, int64_t chunk, int world,
             int rank);
  ~ZeroStage1();
  ZeroStage1(const ZeroStage1 &) = delete;
  ZeroStage1 &operator=(const ZeroStage1 &) = delete;

  /// Floats of one rank's slice (S, a multiple of the chunk).
  int64_t sliceElements() const { return slice; }

  /// The bytes a rank allocates for the layout (state slices, chunk and
  /// gather buffers, each rounded to `alignment`), as the constructor does.
  static int64_t allocatedBytes(const std::vector<int64_t> &numels, int slots,
                                int64_t chunk, int world, int64_t alignment);

  /// One optimizer step: ddpc_apply_shard (`applyShard`, TrainABI.h) on
  /// this rank's slice of `params` and `grads` (P full tensors each; the
  /// gradients already summed over ranks), with the scalars `lr`, `step`
  /// and `gradScale` (host-shared), then the all-gather of the new
  /// parameters into `newParams` (P tensors, distinct from `params`).
  /// Collective: every rank calls it.
  /// At ZeRO stage 2 `gradSlice` is this rank's slice of the summed
  /// gradients (ZeroGradients::slice) and `grads` is not read.
  void step(const std::vector<float *> &params,
            const std::vector<float *> &grads,
            const std::vector<float *> &newParams, void *lr, void *step,
            void *gradScale, void (*applyShard)(void **),
            const float *gradSlice = nullptr);

  /// ZeRO stage 3 (sec. 5.3, P_os+g+p): from now on this rank also keeps
  /// its slice of the flat parameter vector (sliceElements floats, counted
  /// like the state) and step() updates it in place of whole parameters:
  /// no all-gather after the step, the step's parameters are gathered where
  /// it reads them (gatherParameter).
  void enableParameterSlice();
  bool hasParameterSlice() const { return paramSlice != nullptr; }
  /// This rank's slice from whole parameters `full` (TrainABI order) that
  /// every rank holds (the compiled initial values). Local.
  void setParameters(const std::vector<const float *> &full);
  /// This rank's slice from rank 0's whole parameters `full` (a
  /// checkpoint's; only rank 0 reads it). Collective.
  void scatterParameters(const std::vector<std::vector<float>> &full);
  /// Parameter `index` whole into `dst` (numels[index] floats), from every
  /// rank's slice, in all-gathers of at most the gather buffer. Collective.
  void gatherParameter(int64_t index, float *dst);
  /// Every parameter whole, on every rank (--save, checkpoints): `out`
  /// gets numels[i] floats per parameter, outside the counted memory.
  void gatherParameters(std::vector<std::vector<float>> &out);

  /// The whole state, in TrainABI order (parameter i, slot s at
  /// [i * slots + s], numels[i] floats), into `out` on rank 0; `out` is
  /// left empty elsewhere. Collective.
  void gatherState(std::vector<std::vector<float>> &out);

  /// This rank's slice of the whole state `full` (TrainABI order as in
  /// gatherState), which only rank 0 reads. Collective.
  void scatterState(const std::vector<std::vector<float>> &full);

private:
  /// Copies between the tensors `tensors` and the flat range [begin, begin
  /// + n) of the concatenation (padding reads as zero, writes go nowhere).
  void packFlat(const std::vector<const float *> &tensors, int64_t begin,
                int64_t n, float *dst) const;
  void unpackFlat(const float *src, int64_t begin, int64_t n,
                  const std::vector<float *> &tensors) const;
  /// Rank 0's whole tensors `src` (flat layout) into this rank's `slice`
  /// floats at `dst`, broadcast piece by piece. Collective.
  void scatterFlat(const std::vector<const float *> &src, float *dst);

  std::vector<int64_t> numels, offsets;
  int slots;
  int64_t chunk, total = 0, slice = 0, groupChunks = 1;
  int world, rank;
  /// slots x slice floats of state; chunk buffers (parameters, gradients,
  /// new state per slot); the gather's send and receive buffers.
  std::vector<float *> state, newState;
  float *paramChunk = nullptr, *gradChunk = nullptr;
  float *send = nullptr, *recv = nullptr;
  /// ZeRO stage 3: this rank's slice of the parameters.
  float *paramSlice = nullptr;
};

/// ZeRO stage 2 (sec. 5.2, P_os+g): rank r keeps the summed gradients of
/// its slice only (the slice layout of ZeroStage1). The step hands its
/// gradients over bucket by bucket (TrainABI.h ddpc_rt_bucket_*; the
/// bucket members are the glue's ddpc_zero_bucket_* tables); the runtime
/// packs each bucket rank by rank into a send buffer, reduce-scatters it
/// (MPI_Ireduce_scatter: rank q receives the sum of the members' overlap
/// with slice q) and adds what it receives into the slice. At most
/// kZeroBucketsInFlight buckets are in flight, each in its own pair of
/// buffers (Support/ZeroLayout.h counts them). Collectives.cpp schedules
/// the collectives; this class holds the layout and the buffers.
class ZeroGradients {
public:
  /// Parameters of `numels` elements, buckets of parameter indices in
  /// bucket order, chunks of `chunk` floats, rank `rank` of `world`.
  /// Allocates the slice (zero) and the bucket buffers (allocateBuffer).
  ZeroGradients(std::vector<int64_t> numels,
                std::vector<std::vector<int32_t>> buckets, int64_t chunk,
                int world, int rank);
  ~ZeroGradients();
  ZeroGradients(const ZeroGradients &) = delete;
  ZeroGradients &operator=(const ZeroGradients &) = delete;

  /// Bytes the constructor allocates (Support/ZeroLayout.h).
  static int64_t allocatedBytes(const std::vector<int64_t> &numels,
                                const std::vector<std::vector<int32_t>> &b,
                                int64_t chunk, int world, int64_t alignment);

  /// This rank's slice of the summed gradients (sliceElements floats; the
  /// padding past the last parameter stays zero).
  float *slice() { return gradSlice; }
  int64_t sliceElements() const { return sliceLen; }
  int64_t buckets() const { return static_cast<int64_t>(members.size()); }
  /// Buffer pairs: bucket b uses pair b % slots().
  int64_t slots() const { return static_cast<int64_t>(send.size()); }
  float *sendBuffer(int64_t slot) { return send[slot]; }
  float *recvBuffer(int64_t slot) { return recv[slot]; }

  /// Zeroes the slice (the start of an optimizer step).
  void zeroSlice();
  /// Packs bucket `bucket`'s gradients (`grads`: pointer and element count
  /// per member, in the step's order) rank by rank into `dst`, and sets
  /// `counts` to the elements of each rank's part. Ends the job when the
  /// gradients are not the bucket's members.
  void pack(int64_t bucket,
            const std::vector<std::pair<float *, int64_t>> &grads, float *dst,
            std::vector<int64_t> &counts) const;
  /// Adds this rank's part of bucket `bucket` (`src`, as the reduce-scatter
  /// delivers it) into the slice.
  void accumulate(int64_t bucket, const float *src);
  /// The sum of squares of the slice (float64).
  double sumOfSquares() const;

private:
  std::vector<int64_t> numels, offsets;
  std::vector<std::vector<int32_t>> members;
  int64_t sliceLen = 0;
  int world, rank;
  float *gradSlice = nullptr;
  std::vector<float *> send, recv;
};

/// The bucket runtime of ZeRO stage 2 (Collectives.cpp; the CUDA runtime
/// refuses): from now on every ddpc_train_micro call reduce-scatters its
/// buckets into `grads` (nullptr: back to allreduce buckets).
void setGradientShard(ZeroGradients *grads);

/// ZeRO stage 3: ddpc_rt_param_gather_f32 gathers from `shard`'s parameter
/// slices (nullptr: the call ends the job).
void setParameterShard(ZeroStage1 *shard);

} // namespace runtime
} // namespace ddpc

#endif // DDPC_LIB_RUNTIME_ZEROSHARD_H

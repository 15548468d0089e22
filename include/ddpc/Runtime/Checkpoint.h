//===- Checkpoint.h - Training checkpoints ----------------------*- C++ -*-===//
//
// One file, written atomically (TrainFileIO.h). All integers and floats are
// little-endian; a string is a u32 byte count followed by the bytes; no
// padding.
//
//   char[8]  magic "DDPCCKPT"
//   u32      format version (3; versions 1, without the optimizer steps,
//            and 2, without the sample assignment and buffer sync, are
//            still read)
//   str      model name (ddpc_model_name)
//   str      optimizer description (ddpc_optimizer_desc)
//   i32      world size      i64  batch size B      i32  accumulation K
//   u64      shuffle seed    u8   shuffle (0 = --no-shuffle)
//   i64      epoch (0-based) i64  steps done in that epoch
//   i64      global optimizer steps done (the sampler's count)
//   i64      optimizer steps applied (the steps done minus those skipped
//            for a non-finite loss or gradient; AdamW's step count)
//   f64      epoch loss sum  i64  epoch correct     i64  epoch samples
//   i64      epoch steps          (running totals of the current epoch)
//   u8       sample assignment (0 contiguous, 1 strided)
//   u8       buffer sync (0 average, 1 broadcast)
//   3 x section (params, buffers, optimizer state), each:
//     u32 count, then per tensor: str name, u32 rank, i64 dims[rank],
//     f32 values[product(dims)]
//     (optimizer state tensors are named "<param>/slot<s>", ordered
//      p0s0, p0s1, p1s0, ... as in TrainABI.h)
//   u64      FNV-1a 64 of every byte above
//
// The position (epoch, steps done in epoch) is the whole sampler state: the
// sample order is a pure function of seed and epoch (Sampler.h).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_RUNTIME_CHECKPOINT_H
#define DDPC_RUNTIME_CHECKPOINT_H

#include <cstdint>
#include <string>
#include <vector>

namespace ddpc {
namespace runtime {

constexpr uint32_t kCheckpointVersion = 3;

/// A named float32 tensor. When writing, `data` points at the values (and
/// `values` is unused); when reading, `values` holds them and `data` is null.
struct CheckpointTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float *data = nullptr;
  std::vector<float> values;

  int64_t numel() const;
  const float *begin() const { return data ? data : values.data(); }
};

/// Everything a run needs to continue exactly where it stopped.
struct Checkpoint {
  std::string modelName;
  std::string optimizerDesc;
  int32_t worldSize = 1;
  int64_t batchSize = 0;
  int32_t accumSteps = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  int64_t epoch = 0;
  int64_t stepInEpoch = 0;
  int64_t globalStep = 0;
  int64_t optimizerSteps = 0;
  double epochLossSum = 0;
  int64_t epochCorrect = 0;
  int64_t epochSamples = 0;
  int64_t epochSteps = 0;
  bool strided = false;          // --sample-assignment strided
  bool broadcastBuffers = false; // --buffer-sync broadcast
  std::vector<CheckpointTensor> params, buffers, optState;
};

/// Writes `ckpt` to `path` atomically. False and `err` on failure.
bool writeCheckpoint(const std::string &path, const Checkpoint &ckpt,
                     std::string &err);

/// Reads and verifies (magic, version, checksum, sizes) `path`. False and
/// `err` (naming the file) on failure. Never throws.
bool readCheckpoint(const std::string &path, Checkpoint &ckpt,
                    std::string &err);

} // namespace runtime
} // namespace ddpc

#endif // DDPC_RUNTIME_CHECKPOINT_H

//===- TrainRuntimeTest.cpp - Sampler, checkpoint and ONNX writer tests ---===//

#include "ddpc/Runtime/Checkpoint.h"
#include "ddpc/Runtime/OnnxWriter.h"
#include "ddpc/Runtime/Sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <unistd.h>

using namespace ddpc::runtime;

namespace {

std::string tempPath(const char *stem) {
  return ::testing::TempDir() + stem + std::to_string(::getpid());
}

// Tests that every epoch order is a permutation, reproducible, and differs
// between epochs.
TEST(Sampler, PermutationIsDeterministic) {
  std::vector<int64_t> a = epochOrder(1000, 7, 0, true);
  std::vector<int64_t> b = epochOrder(1000, 7, 0, true);
  std::vector<int64_t> c = epochOrder(1000, 7, 1, true);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(c, samplerPermutation(1000, 8));
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i)
    ASSERT_EQ(sorted[i], i);
  std::vector<int64_t> id = epochOrder(5, 7, 3, false);
  EXPECT_EQ(id, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(samplerPermutation(0, 1).empty());
  EXPECT_EQ(samplerPermutation(1, 1), std::vector<int64_t>{0});
}

// Tests that draws below the rejection threshold are skipped.
TEST(Sampler, UniformBelowRejects) {
  // bound 3: threshold = 2^64 mod 3 = 1, so 0 is rejected.
  std::vector<uint64_t> words = {0, 0, 5};
  size_t next = 0;
  auto engine = [&] { return words[next++]; };
  EXPECT_EQ(uniformBelow(engine, 3), 2u);
  EXPECT_EQ(next, 3u);
}

// Tests the slice arithmetic of DistributedSampler semantics.
TEST(Sampler, Slices) {
  EXPECT_EQ(stepsPerEpoch(100, 4, 2, 3), 4);
  EXPECT_EQ(stepsPerEpoch(23, 4, 2, 3), 0);
  // step 1, micro 2, rank 1, B=4, world=2, K=3: (1*3+2)*8 + 4.
  EXPECT_EQ(sliceBegin(1, 2, 1, 4, 2, 3), 44);
}

// Strided assignment deals samples as torch's DistributedSampler does:
// 16 samples, 2 ranks, no shuffle: rank 1 sees 1, 3, 5, ..., 15, so its
// second batch of 4 is 9, 11, 13, 15. Either assignment covers the same
// global batch.
TEST(Sampler, StridedAssignment) {
  const int64_t expected[] = {9, 11, 13, 15};
  for (int64_t j = 0; j < 4; ++j)
    EXPECT_EQ(samplePosition(1, 0, 1, j, 4, 2, 1, true), expected[j]);
  for (int64_t j = 0; j < 4; ++j)
    EXPECT_EQ(samplePosition(1, 2, 1, j, 4, 2, 3, false),
              sliceBegin(1, 2, 1, 4, 2, 3) + j);
  std::vector<int64_t> contiguous, strided;
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t j = 0; j < 5; ++j) {
      contiguous.push_back(samplePosition(2, 1, r, j, 5, 3, 2, false));
      strided.push_back(samplePosition(2, 1, r, j, 5, 3, 2, true));
    }
  std::sort(contiguous.begin(), contiguous.end());
  std::sort(strided.begin(), strided.end());
  EXPECT_EQ(contiguous, strided);
}

// Tests the varint encoding against hand-computed bytes.
TEST(OnnxWriter, Varints) {
  std::vector<uint8_t> out;
  proto::appendVarint(out, 1);
  proto::appendVarint(out, 300);
  proto::appendKey(out, 7, 2);
  EXPECT_EQ(out, (std::vector<uint8_t>{0x01, 0xac, 0x02, 0x3a}));
  EXPECT_EQ(proto::varintSize(127), 1u);
  EXPECT_EQ(proto::varintSize(128), 2u);
  float w[6] = {};
  uint64_t total = 0;
  std::vector<uint8_t> h = encodeTensorHeader({"W", {2, 3}, w}, total);
  // dims packed (0a 02 02 03), data_type (10 01), name (42 01 'W'),
  // raw_data key and length 24 (4a 18).
  EXPECT_EQ(h, (std::vector<uint8_t>{0x0a, 0x02, 0x02, 0x03, 0x10, 0x01, 0x42,
                                     0x01, 'W', 0x4a, 0x18}));
  EXPECT_EQ(total, h.size() + 24);
}

// Tests that a checkpoint reads back exactly and that damage is detected.
TEST(Checkpoint, RoundTripAndCorruption) {
  std::string path = tempPath("ckpt");
  float w[6] = {1, 2, 3, 4, 5, 6.5f};
  float m[6] = {-1, 0, 1, 2, 3, 4};
  Checkpoint c;
  c.modelName = "m";
  c.optimizerDesc = "sgd";
  c.worldSize = 2;
  c.batchSize = 4;
  c.accumSteps = 3;
  c.seed = 99;
  c.shuffle = false;
  c.epoch = 5;
  c.stepInEpoch = 6;
  c.globalStep = 77;
  c.epochLossSum = 1.25;
  c.strided = true;
  c.params.push_back({"W", {2, 3}, w, {}});
  c.optState.push_back({"W/slot0", {2, 3}, m, {}});
  std::string err;
  ASSERT_TRUE(writeCheckpoint(path, c, err)) << err;

  Checkpoint r;
  ASSERT_TRUE(readCheckpoint(path, r, err)) << err;
  EXPECT_EQ(r.modelName, "m");
  EXPECT_EQ(r.optimizerDesc, "sgd");
  EXPECT_EQ(r.worldSize, 2);
  EXPECT_EQ(r.accumSteps, 3);
  EXPECT_EQ(r.seed, 99u);
  EXPECT_FALSE(r.shuffle);
  EXPECT_EQ(r.globalStep, 77);
  EXPECT_EQ(r.epochLossSum, 1.25);
  EXPECT_TRUE(r.strided);
  EXPECT_FALSE(r.broadcastBuffers);
  ASSERT_EQ(r.params.size(), 1u);
  EXPECT_TRUE(r.buffers.empty());
  EXPECT_EQ(r.params[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r.params[0].values, std::vector<float>(w, w + 6));
  EXPECT_EQ(r.optState[0].values, std::vector<float>(m, m + 6));

  // Flip one byte: the checksum catches it.
  std::vector<char> bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() / 2] ^= 1;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  Checkpoint bad;
  EXPECT_FALSE(readCheckpoint(path, bad, err));
  EXPECT_NE(err.find("checksum"), std::string::npos) << err;
  std::remove(path.c_str());
  EXPECT_FALSE(readCheckpoint(path, bad, err));
  EXPECT_NE(err.find(path), std::string::npos) << err;
}

} // namespace

//===- OnnxWriter.cpp - Write trained weights into an ONNX model ----------===//

#include "ddpc/Runtime/OnnxWriter.h"
#include "ddpc/Runtime/TrainFileIO.h"

#include <cstring>

namespace ddpc {
namespace runtime {

namespace proto {

void appendVarint(std::vector<uint8_t> &out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<uint8_t>(value | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<uint8_t>(value));
}

void appendKey(std::vector<uint8_t> &out, uint32_t field, uint32_t wireType) {
  appendVarint(out, (static_cast<uint64_t>(field) << 3) | wireType);
}

size_t varintSize(uint64_t value) {
  size_t n = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++n;
  }
  return n;
}

} // namespace proto

namespace {
constexpr uint32_t kVarint = 0;
constexpr uint32_t kBytes = 2;
constexpr uint32_t kModelGraph = 7;
constexpr uint32_t kGraphInitializer = 5;
constexpr uint32_t kTensorDims = 1;
constexpr uint32_t kTensorDataType = 2;
constexpr uint32_t kTensorName = 8;
constexpr uint32_t kTensorRawData = 9;
constexpr uint64_t kOnnxFloat = 1;

uint64_t numel(const std::vector<int64_t> &dims) {
  uint64_t n = 1;
  for (int64_t d : dims)
    n *= static_cast<uint64_t>(d);
  return n;
}
} // namespace

std::vector<uint8_t> encodeTensorHeader(const OnnxInitializer &init,
                                        uint64_t &totalSize) {
  std::vector<uint8_t> out;
  if (!init.dims.empty()) {
    std::vector<uint8_t> packed;
    for (int64_t d : init.dims)
      proto::appendVarint(packed, static_cast<uint64_t>(d));
    proto::appendKey(out, kTensorDims, kBytes);
    proto::appendVarint(out, packed.size());
    out.insert(out.end(), packed.begin(), packed.end());
  }
  proto::appendKey(out, kTensorDataType, kVarint);
  proto::appendVarint(out, kOnnxFloat);
  proto::appendKey(out, kTensorName, kBytes);
  proto::appendVarint(out, init.name.size());
  out.insert(out.end(), init.name.begin(), init.name.end());
  uint64_t rawBytes = numel(init.dims) * sizeof(float);
  proto::appendKey(out, kTensorRawData, kBytes);
  proto::appendVarint(out, rawBytes);
  totalSize = out.size() + rawBytes;
  return out;
}

bool writeTrainedOnnx(const std::string &path, const unsigned char *modelBytes,
                      size_t modelSize,
                      const std::vector<OnnxInitializer> &initializers,
                      std::string &err) {
  static_assert(sizeof(float) == 4, "float32 expected");
  // Sizes first: every length prefix precedes its payload, and the raw data
  // is streamed from the caller's buffers without a copy.
  std::vector<std::vector<uint8_t>> headers;
  std::vector<uint64_t> tensorSizes;
  uint64_t graphSize = 0;
  for (const OnnxInitializer &init : initializers) {
    uint64_t size = 0;
    headers.push_back(encodeTensorHeader(init, size));
    tensorSizes.push_back(size);
    graphSize += proto::varintSize((kGraphInitializer << 3) | kBytes) +
                 proto::varintSize(size) + size;
  }

  AtomicFileWriter out(path);
  if (!out.open(err))
    return false;
  out.write(modelBytes, modelSize);
  std::vector<uint8_t> prefix;
  proto::appendKey(prefix, kModelGraph, kBytes);
  proto::appendVarint(prefix, graphSize);
  out.write(prefix.data(), prefix.size());
  for (size_t i = 0; i < initializers.size(); ++i) {
    prefix.clear();
    proto::appendKey(prefix, kGraphInitializer, kBytes);
    proto::appendVarint(prefix, tensorSizes[i]);
    out.write(prefix.data(), prefix.size());
    out.write(headers[i].data(), headers[i].size());
    // The host is little-endian (x86-64/AArch64), as raw_data requires.
    out.write(initializers[i].data,
              numel(initializers[i].dims) * sizeof(float));
  }
  return out.commit(err);
}

} // namespace runtime
} // namespace ddpc

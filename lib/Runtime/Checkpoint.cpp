//===- Checkpoint.cpp - Training checkpoints ------------------------------===//

#include "ddpc/Runtime/Checkpoint.h"
#include "ddpc/Runtime/TrainFileIO.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ddpc {
namespace runtime {

namespace {

constexpr char kMagic[8] = {'D', 'D', 'P', 'C', 'C', 'K', 'P', 'T'};

template <typename T> void put(AtomicFileWriter &out, T value) {
  out.write(&value, sizeof(T));
}

void putString(AtomicFileWriter &out, const std::string &s) {
  put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out.write(s.data(), s.size());
}

void putSection(AtomicFileWriter &out,
                const std::vector<CheckpointTensor> &tensors) {
  put<uint32_t>(out, static_cast<uint32_t>(tensors.size()));
  for (const CheckpointTensor &t : tensors) {
    putString(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape)
      put<int64_t>(out, d);
    out.write(t.begin(), static_cast<size_t>(t.numel()) * sizeof(float));
  }
}

/// Bounds-checked cursor over the file image.
class Reader {
public:
  Reader(const std::vector<uint8_t> &bytes, size_t end)
      : bytes(bytes), end(end) {}

  template <typename T> bool get(T &value) {
    if (end - pos < sizeof(T))
      return false;
    std::memcpy(&value, bytes.data() + pos, sizeof(T));
    pos += sizeof(T);
    return true;
  }
  bool getString(std::string &s) {
    uint32_t len = 0;
    if (!get(len) || end - pos < len)
      return false;
    s.assign(reinterpret_cast<const char *>(bytes.data() + pos), len);
    pos += len;
    return true;
  }
  bool getSection(std::vector<CheckpointTensor> &tensors) {
    uint32_t count = 0;
    if (!get(count))
      return false;
    for (uint32_t i = 0; i < count; ++i) {
      CheckpointTensor t;
      uint32_t rank = 0;
      if (!getString(t.name) || !get(rank) || rank > 64)
        return false;
      uint64_t n = 1;
      for (uint32_t d = 0; d < rank; ++d) {
        int64_t dim = 0;
        if (!get(dim) || dim < 0 || (dim > 0 && n > (end - pos) / dim))
          return false;
        n *= static_cast<uint64_t>(dim);
        t.shape.push_back(dim);
      }
      if ((end - pos) / sizeof(float) < n)
        return false;
      t.values.resize(n);
      std::memcpy(t.values.data(), bytes.data() + pos, n * sizeof(float));
      pos += n * sizeof(float);
      tensors.push_back(std::move(t));
    }
    return true;
  }
  bool atEnd() const { return pos == end; }

private:
  const std::vector<uint8_t> &bytes;
  size_t end;
  size_t pos = 0;
};

} // namespace

int64_t CheckpointTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

bool writeCheckpoint(const std::string &path, const Checkpoint &c,
                     std::string &err) {
  AtomicFileWriter out(path);
  if (!out.open(err))
    return false;
  out.write(kMagic, sizeof(kMagic));
  put<uint32_t>(out, kCheckpointVersion);
  putString(out, c.modelName);
  putString(out, c.optimizerDesc);
  put<int32_t>(out, c.worldSize);
  put<int64_t>(out, c.batchSize);
  put<int32_t>(out, c.accumSteps);
  put<uint64_t>(out, c.seed);
  put<uint8_t>(out, c.shuffle ? 1 : 0);
  put<int64_t>(out, c.epoch);
  put<int64_t>(out, c.stepInEpoch);
  put<int64_t>(out, c.globalStep);
  put<int64_t>(out, c.optimizerSteps);
  put<double>(out, c.epochLossSum);
  put<int64_t>(out, c.epochCorrect);
  put<int64_t>(out, c.epochSamples);
  put<int64_t>(out, c.epochSteps);
  put<uint8_t>(out, c.strided ? 1 : 0);
  put<uint8_t>(out, c.broadcastBuffers ? 1 : 0);
  putSection(out, c.params);
  putSection(out, c.buffers);
  putSection(out, c.optState);
  put<uint64_t>(out, out.hash());
  return out.commit(err);
}

bool readCheckpoint(const std::string &path, Checkpoint &c, std::string &err) {
  std::FILE *f = std::fopen(path.c_str(), "rb");
  if (!f) {
    err = "cannot open checkpoint '" + path + "': " + std::strerror(errno);
    return false;
  }
  std::vector<uint8_t> bytes;
  unsigned char chunk[1 << 16];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof(chunk), f)) > 0)
    bytes.insert(bytes.end(), chunk, chunk + got);
  bool readError = std::ferror(f);
  std::fclose(f);
  if (readError) {
    err = "cannot read checkpoint '" + path + "'";
    return false;
  }
  auto corrupt = [&](const char *why) {
    err = "'" + path + "' is not a valid ddpc checkpoint (" + why + ")";
    return false;
  };
  if (bytes.size() < sizeof(kMagic) + 4 + 8 ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    return corrupt("bad magic");
  size_t body = bytes.size() - sizeof(uint64_t);
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + body, sizeof(stored));
  Reader r(bytes, body);
  char magic[8];
  uint32_t version = 0;
  r.get(magic);
  r.get(version);
  if (version < 1 || version > kCheckpointVersion)
    return corrupt(("format version " + std::to_string(version) +
                    ", this runtime reads versions 1 to " +
                    std::to_string(kCheckpointVersion))
                       .c_str());
  if (fnv1a64(bytes.data(), body) != stored)
    return corrupt("checksum mismatch: truncated or damaged");
  uint8_t shuffle = 0, strided = 0, broadcastBuffers = 0;
  bool ok = r.getString(c.modelName) && r.getString(c.optimizerDesc) &&
            r.get(c.worldSize) && r.get(c.batchSize) && r.get(c.accumSteps) &&
            r.get(c.seed) && r.get(shuffle) && r.get(c.epoch) &&
            r.get(c.stepInEpoch) && r.get(c.globalStep) &&
            (version < 2 || r.get(c.optimizerSteps)) && r.get(c.epochLossSum) &&
            r.get(c.epochCorrect) && r.get(c.epochSamples) &&
            r.get(c.epochSteps) &&
            (version < 3 || (r.get(strided) && r.get(broadcastBuffers))) &&
            r.getSection(c.params) && r.getSection(c.buffers) &&
            r.getSection(c.optState) && r.atEnd();
  if (!ok)
    return corrupt("truncated or malformed record");
  c.shuffle = shuffle != 0;
  c.strided = strided != 0;
  c.broadcastBuffers = broadcastBuffers != 0;
  if (version < 2)
    c.optimizerSteps = c.globalStep; // Version 1 skipped no step.
  return true;
}

} // namespace runtime
} // namespace ddpc

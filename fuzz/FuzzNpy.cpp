//===- FuzzNpy.cpp - libFuzzer target: the programs' .npy reader ----------===//
//
// Part of ddpc. Every byte string must parse into an array that matches its
// header, or give one clean error, never a crash or an allocation beyond
// the input's size. A parsed array is written back and re-read: the round
// trip must give the same array. See fuzz/README.md.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/Npy.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>

using namespace ddpc::runtime;

namespace {

/// A file the reader reads: the same bytes through readNpy (which reads a
/// file piecewise) must give what parseNpy gives from memory.
const std::string &scratchPath() {
  static const std::string path =
      "/tmp/ddpc-fuzz-npy-" + std::to_string(::getpid()) + ".npy";
  return path;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  NpyArray array, fromFile;
  std::string err, fileErr;
  bool parsed = parseNpy(data, size, "fuzz.npy", array, err);
  if (std::FILE *f = std::fopen(scratchPath().c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
    bool read = readNpy(scratchPath(), fromFile, fileErr);
    if (read != parsed || (read && (fromFile.dtype != array.dtype ||
                                    fromFile.shape != array.shape ||
                                    fromFile.data != array.data)))
      __builtin_trap();
    if (!read && fileErr.empty())
      __builtin_trap();
  }
  if (!parsed) {
    if (err.empty())
      __builtin_trap();
    return 0;
  }
  size_t item = dtypeItemSize(array.dtype);
  if (item == 0 ||
      array.data.size() != static_cast<size_t>(numElements(array.shape)) * item)
    __builtin_trap();
  std::vector<uint8_t> bytes;
  if (!serializeNpy(array, bytes, err))
    __builtin_trap();
  NpyArray again;
  if (!parseNpy(bytes.data(), bytes.size(), "again.npy", again, err) ||
      again.dtype != array.dtype || again.shape != array.shape ||
      again.data != array.data)
    __builtin_trap();
  return 0;
}

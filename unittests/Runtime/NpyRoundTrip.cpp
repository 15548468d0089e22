//===- NpyRoundTrip.cpp - Test helper: read a .npy file and write it back -===//
//
// Usage: ddpc-npy-roundtrip IN.npy OUT.npy. Used by
// test/backend/test_runtime_cli.py to check readNpy/writeNpy against numpy.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/Npy.h"

#include <cstdio>

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s IN.npy OUT.npy\n", argv[0]);
    return 2;
  }
  ddpc::runtime::NpyArray array;
  std::string err;
  if (!ddpc::runtime::readNpy(argv[1], array, err) ||
      !ddpc::runtime::writeNpy(argv[2], array, err)) {
    std::fprintf(stderr, "error: %s\n", err.c_str());
    return 1;
  }
  std::printf("%s%s\n", ddpc::runtime::dtypeName(array.dtype).c_str(),
              ddpc::runtime::formatShape(array.shape).c_str());
  return 0;
}

//===- MemRefCopy.cpp - Strided copy called by lowered memref.copy --------===//
//
// Part of ddpc. MLIR's MemRefToLLVM lowering turns a `memref.copy` between
// non-contiguous memrefs into a call to `memrefCopy(elemSize, src, dst)`
// with unranked descriptors. Upstream ships it in libmlir_c_runner_utils;
// emitted programs get this self-contained version so they depend on no
// MLIR library at run time.
//
// Descriptor layout (MLIR "Default memref lowering"): {allocated ptr,
// aligned ptr, offset, sizes[rank], strides[rank]}, all 64-bit; strides and
// offset count elements.
//
//===----------------------------------------------------------------------===//

#include <cstdint>
#include <cstring>
#include <vector>

namespace {
struct UnrankedDescriptor {
  int64_t rank;
  void *descriptor;
};
struct DescriptorView {
  char *aligned;
  int64_t offset;
  const int64_t *sizes;
  const int64_t *strides;
};
DescriptorView view(const UnrankedDescriptor *d) {
  auto *p = static_cast<char **>(d->descriptor);
  auto *ints = reinterpret_cast<int64_t *>(p + 2);
  return {p[1], ints[0], ints + 1, ints + 1 + d->rank};
}
} // namespace

extern "C" void memrefCopy(int64_t elemSize, UnrankedDescriptor *src,
                           UnrankedDescriptor *dst) {
  int64_t rank = src->rank;
  DescriptorView s = view(src), d = view(dst);
  char *sp = s.aligned + s.offset * elemSize;
  char *dp = d.aligned + d.offset * elemSize;
  if (rank == 0) {
    std::memcpy(dp, sp, elemSize);
    return;
  }
  for (int64_t i = 0; i < rank; ++i)
    if (s.sizes[i] == 0)
      return;
  std::vector<int64_t> idx(rank, 0);
  int64_t inner = s.sizes[rank - 1];
  bool contiguousInner = s.strides[rank - 1] == 1 && d.strides[rank - 1] == 1;
  while (true) {
    int64_t so = 0, doff = 0;
    for (int64_t i = 0; i < rank - 1; ++i) {
      so += idx[i] * s.strides[i];
      doff += idx[i] * d.strides[i];
    }
    if (contiguousInner) {
      std::memcpy(dp + doff * elemSize, sp + so * elemSize, inner * elemSize);
    } else {
      for (int64_t j = 0; j < inner; ++j)
        std::memcpy(dp + (doff + j * d.strides[rank - 1]) * elemSize,
                    sp + (so + j * s.strides[rank - 1]) * elemSize, elemSize);
    }
    int64_t i = rank - 2;
    for (; i >= 0; --i) {
      if (++idx[i] < s.sizes[i])
        break;
      idx[i] = 0;
    }
    if (i < 0)
      return;
  }
}

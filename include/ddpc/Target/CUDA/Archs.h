//===- Archs.h - GPU architectures the CUDA target accepts ------*- C++ -*-===//
//
// Part of ddpc. The values of --cuda-arch that both tools on the CUDA path
// take: LLVM 22's NVPTX backend (which writes the PTX) and the CUDA 13
// toolkit's ptxas (which assembles it; `ptxas --help`, --gpu-name). Each
// comes with the oldest PTX ISA version LLVM accepts for it (its NVPTX
// subtarget refuses older ones with a fatal error): 8.0 (CUDA 12.0) up to
// sm_90a, 8.6 (CUDA 12.8) for sm_100/100a, 8.7 for sm_120/120a, 8.8 for the
// family-specific "f" variants, sm_103 and sm_121, 9.0 (CUDA 13.0) for
// sm_88 and sm_110. CUDA 13 renamed sm_101 to sm_110 and dropped sm_70/72.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_TARGET_CUDA_ARCHS_H
#define DDPC_TARGET_CUDA_ARCHS_H

#include "llvm/ADT/StringRef.h"

namespace ddpc {

/// One --cuda-arch value and the LLVM feature selecting its PTX version.
struct CUDAArch {
  const char *name;
  const char *ptxFeature;
};

inline constexpr CUDAArch kCUDAArchs[] = {
    {"sm_75", "+ptx80"},   {"sm_80", "+ptx80"},   {"sm_86", "+ptx80"},
    {"sm_87", "+ptx80"},   {"sm_88", "+ptx90"},   {"sm_89", "+ptx80"},
    {"sm_90", "+ptx80"},   {"sm_90a", "+ptx80"},  {"sm_100", "+ptx86"},
    {"sm_100a", "+ptx86"}, {"sm_100f", "+ptx88"}, {"sm_103", "+ptx88"},
    {"sm_103a", "+ptx88"}, {"sm_103f", "+ptx88"}, {"sm_110", "+ptx90"},
    {"sm_110a", "+ptx90"}, {"sm_110f", "+ptx90"}, {"sm_120", "+ptx87"},
    {"sm_120a", "+ptx87"}, {"sm_120f", "+ptx88"}, {"sm_121", "+ptx88"},
    {"sm_121a", "+ptx88"}, {"sm_121f", "+ptx88"},
};

/// The entry of kCUDAArchs named `name`, or null.
inline const CUDAArch *findCUDAArch(llvm::StringRef name) {
  for (const CUDAArch &a : kCUDAArchs)
    if (name == a.name)
      return &a;
  return nullptr;
}

} // namespace ddpc

#endif // DDPC_TARGET_CUDA_ARCHS_H

//===- GpuEmulation.cpp - CUDA runtime calls for the cuda-emulate target --===//
//
// `ddpc compile --target cuda-emulate` runs the CUDA target's kernel-level
// IR (buildGPULoopPipeline) serially on the CPU, to test that lowering
// without a GPU. The IR then calls these runtime functions (and the GEMMs
// and convolutions of CpuBlas.cpp): convolutions with a bias/ReLU epilogue
// by their definition (what the CUDA runtime hands to cuDNN), a no-op host
// synchronization (CPU code is synchronous) and a separate copy of the packed
// constants (ddpc-device-constants). Part of the CPU runtime archives; linked
// only when referenced.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/ConstantCopies.h"
#include "ddpc/Runtime/Gemm.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {

int32_t ddpc_conv2d_bias_act_f32(int64_t n, int64_t c, int64_t h, int64_t w,
                                 int64_t k, int64_t r, int64_t s, int64_t p,
                                 int64_t q, int64_t strideH, int64_t strideW,
                                 int64_t dilationH, int64_t dilationW,
                                 int64_t groups, int64_t x, int64_t filter,
                                 int64_t bias, int64_t d, int32_t act) {
  if (!ddpc::runtime::convEpiloguesEnabled())
    return 0;
  ddpc::runtime::referenceConv2d(0,
                                 {n, c, h, w, k, r, s, p, q, strideH, strideW,
                                  dilationH, dilationW, groups},
                                 reinterpret_cast<float *>(x),
                                 reinterpret_cast<float *>(filter),
                                 reinterpret_cast<float *>(d),
                                 /*accumulate=*/false);
  ddpc::runtime::referenceChannelBiasActivation(
      reinterpret_cast<float *>(d), reinterpret_cast<const float *>(bias), n, k,
      p * q, act);
  return 1;
}

void ddpc_gpu_host_sync() {}

/// ddpc-device-constants: a separate copy of the packed constants, made once
/// per process, as the CUDA runtime's device copy is; so a wrong offset in
/// the compiled views reads wrong values here too. Never freed.
void *ddpc_device_constants(const void *host, int64_t bytes) {
  return ddpc::runtime::onceCopiedConstants(
      host, bytes, [](const void *src, int64_t n) -> void * {
        size_t rounded = (static_cast<size_t>(n) + 255) / 256 * 256;
        void *copy = std::aligned_alloc(256, std::max<size_t>(rounded, 256));
        if (!copy) {
          std::fprintf(stderr,
                       "error: out of memory copying %lld bytes of "
                       "constants\n",
                       static_cast<long long>(n));
          std::exit(1);
        }
        std::memcpy(copy, src, static_cast<size_t>(n));
        return copy;
      });
}

} // extern "C"

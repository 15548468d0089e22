//===- GPUAssembleFatBinaries.cpp - ddpc-gpu-assemble-fatbin --------------===//
//
// Part of ddpc. The fatbin assembly of FatBinary.h as a pass, so that the
// "nvvm" stage replays in ddpc-opt.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Target/CUDA/FatBinary.h"
#include "ddpc/Target/CUDA/Transforms/Passes.h"

namespace ddpc {

#define GEN_PASS_DEF_GPUASSEMBLEFATBINARIESPASS
#include "ddpc/Target/CUDA/Transforms/Passes.h.inc"

namespace {

struct GPUAssembleFatBinariesPass
    : impl::GPUAssembleFatBinariesPassBase<GPUAssembleFatBinariesPass> {
  using Base::Base;
  GPUAssembleFatBinariesPass(const GPUAssembleFatBinariesPassOptions &options,
                             std::string *ptx)
      : Base(options), ptx(ptx) {}

  void runOnOperation() override {
    std::string error;
    std::string root = findCUDAToolkit(cudaPath, error);
    if (root.empty() ||
        !assembleFatBinaries(getOperation(), root, ptx, error)) {
      getOperation().emitError(error);
      return signalPassFailure();
    }
  }

  std::string *ptx = nullptr;
};

} // namespace

std::unique_ptr<mlir::Pass> createGPUAssembleFatBinariesPass(
    const GPUAssembleFatBinariesPassOptions &options, std::string *ptx) {
  return std::make_unique<GPUAssembleFatBinariesPass>(options, ptx);
}

} // namespace ddpc

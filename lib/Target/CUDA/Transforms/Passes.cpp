//===- Passes.cpp - registration of the Target/CUDA/Transforms passes -----===//
//
// Part of ddpc. Each pass of include/ddpc/Target/CUDA/Transforms/Passes.td is
// defined in its own file in this folder.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Target/CUDA/Transforms/Passes.h"

namespace ddpc {

namespace {
#define GEN_PASS_REGISTRATION
#include "ddpc/Target/CUDA/Transforms/Passes.h.inc"
} // namespace

void registerCUDATransformsPasses() {
  registerDDPCTargetCUDATransformsPasses();
}

} // namespace ddpc

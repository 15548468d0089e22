//===- Passes.cpp - registration of the Codegen/GPU passes ----------------===//
//
// Part of ddpc. Each pass of include/ddpc/Codegen/GPU/Passes.td is defined in
// its own file in this folder.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/GPU/Passes.h"

namespace ddpc {

namespace {
#define GEN_PASS_REGISTRATION
#include "ddpc/Codegen/GPU/Passes.h.inc"
} // namespace

void registerCodegenGPUPasses() { registerDDPCCodegenGPUPasses(); }

} // namespace ddpc

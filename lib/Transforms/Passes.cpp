//===- Passes.cpp - registration of the Transforms passes -----------------===//
//
// Part of ddpc. Each pass of include/ddpc/Transforms/Passes.td is defined in
// its own file in this folder.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Transforms/Passes.h"

namespace ddpc {

namespace {
#define GEN_PASS_REGISTRATION
#include "ddpc/Transforms/Passes.h.inc"
} // namespace

void registerTransformsPasses() { registerDDPCTransformsPasses(); }

} // namespace ddpc

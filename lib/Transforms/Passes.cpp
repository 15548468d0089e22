//===- Passes.cpp - registration of ddpc's passes -------------------------===//
//
// Part of ddpc. Each pass of Passes.td is defined in its own file.
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

//===- Passes.cpp - registration of the Codegen passes --------------------===//
//
// Part of ddpc. Each pass of include/ddpc/Codegen/Passes.td is defined in
// its own file in this folder.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/Passes.h"

namespace ddpc {

namespace {
#define GEN_PASS_REGISTRATION
#include "ddpc/Codegen/Passes.h.inc"
} // namespace

void registerCodegenPasses() { registerDDPCCodegenPasses(); }

} // namespace ddpc

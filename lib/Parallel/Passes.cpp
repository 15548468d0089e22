//===- Passes.cpp - registration of the Parallel passes -------------------===//
//
// Part of ddpc. Each pass of include/ddpc/Parallel/Passes.td is defined in
// its own file in this folder.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Parallel/Passes.h"

namespace ddpc {

namespace {
#define GEN_PASS_REGISTRATION
#include "ddpc/Parallel/Passes.h.inc"
} // namespace

void registerParallelPasses() { registerDDPCParallelPasses(); }

} // namespace ddpc

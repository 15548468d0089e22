//===- Passes.h - Data-parallel passes (lib/Parallel) -----------*- C++ -*-===//
//
// Part of ddpc. Declared in Passes.td next to this header (summary,
// description, options: `ddpc-opt --help` prints them);
// registerParallelPasses() registers them (include/ddpc/InitAllPasses.h
// registers every area).
//
//   ddpc-bucket-gradient-allreduce  gradient allreduce in buckets that
//                                   start during backward (both targets)
//   ddpc-lower-collectives          shard collectives -> runtime calls
//                                   (tensor IR, before bufferization)
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_PARALLEL_PASSES_H
#define DDPC_PARALLEL_PASSES_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace ddpc {

/// create<Name>() and create<Name>(const <Name>Options &) for every pass of
/// Passes.td, and the options structs.
#define GEN_PASS_DECL
#include "ddpc/Parallel/Passes.h.inc"

/// Registers the passes of Passes.td with the global pass registry.
void registerParallelPasses();

} // namespace ddpc

#endif // DDPC_PARALLEL_PASSES_H

//===- Passes.h - The GPU loop-pipeline passes ------------------*- C++ -*-===//
//
// Part of ddpc. Declared in Passes.td next to this header (summary,
// description, options: `ddpc-opt --help` prints them);
// registerCodegenGPUPasses() registers them (include/ddpc/InitAllPasses.h
// registers every area).
//
//   ddpc-scatter-to-atomic      reduction generics with non-injective
//                               outputs -> parallel loops with atomic adds
//   ddpc-split-reductions       short reductions -> more threads + atomics
//   ddpc-parallel-loops-outermost  parallel loops before reduction loops
//   ddpc-serial-loops-to-device    host loops over device memory -> one
//                                  device thread
//   ddpc-memref-copy-to-linalg  memref.copy -> linalg.copy (device copies)
//   ddpc-collapse-parallel-loops  n-d scf.parallel -> 1-d (one thread/elem)
//   ddpc-merge-parallel-loops   independent 1-d loops -> one (horizontal)
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_CODEGEN_GPU_PASSES_H
#define DDPC_CODEGEN_GPU_PASSES_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace ddpc {

/// create<Name>() and create<Name>(const <Name>Options &) for every pass of
/// Passes.td, and the options structs.
#define GEN_PASS_DECL
#include "ddpc/Codegen/GPU/Passes.h.inc"

/// Registers the passes of Passes.td with the global pass registry.
void registerCodegenGPUPasses();

} // namespace ddpc

#endif // DDPC_CODEGEN_GPU_PASSES_H

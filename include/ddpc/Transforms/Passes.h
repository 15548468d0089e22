//===- Passes.h - Tensor-level graph passes (lib/Transforms) ----*- C++ -*-===//
//
// Part of ddpc. Declared in Passes.td next to this header (summary,
// description, options: `ddpc-opt --help` prints them);
// registerTransformsPasses() registers them (include/ddpc/InitAllPasses.h
// registers every area).
//
//   ddpc-fuse-ops               operator fusion into kernel-sized groups
//   ddpc-read-only-arguments    entry-point tensor arguments are read-only
//   ddpc-clone-shared-fills     one linalg.fill per destination use
//   ddpc-distinct-result-buffers  one allocation per returned buffer (last
//                                 pass of bufferization, memref level)
//   ddpc-free-at-last-use       deallocs right after each buffer's last use
//   ddpc-rematerialize          backward recomputes chosen activations
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_TRANSFORMS_PASSES_H
#define DDPC_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace ddpc {

/// create<Name>() and create<Name>(const <Name>Options &) for every pass of
/// Passes.td, and the options structs.
#define GEN_PASS_DECL
#include "ddpc/Transforms/Passes.h.inc"

/// Registers the passes of Passes.td with the global pass registry.
void registerTransformsPasses();

} // namespace ddpc

#endif // DDPC_TRANSFORMS_PASSES_H

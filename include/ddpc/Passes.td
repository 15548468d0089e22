//===- Passes.td - every ddpc pass, for the pass reference -*- tablegen -*-===//
//
// Part of ddpc. Includes each area's Passes.td so that one
// `mlir-tblgen -gen-pass-doc` run writes docs/passes.md (`ninja
// ddpc-pass-doc`; test/Transforms/pass-doc.test checks it is current). Code
// is generated per area, from the files themselves.
//
//===----------------------------------------------------------------------===//

include "ddpc/Transforms/Passes.td"
include "ddpc/Training/Passes.td"
include "ddpc/Parallel/Passes.td"
include "ddpc/Codegen/Passes.td"
include "ddpc/Codegen/GPU/Passes.td"
include "ddpc/Target/CUDA/Transforms/Passes.td"

//===- Passes.h - Target-neutral codegen passes (lib/Codegen) ---*- C++ -*-===//
//
// Part of ddpc. Declared in Passes.td next to this header (summary,
// description, options: `ddpc-opt --help` prints them);
// registerCodegenPasses() registers them (include/ddpc/InitAllPasses.h
// registers every area).
//
//   ddpc-plan-arena             temporaries at compile-time arena offsets
//   ddpc-gemm-to-library-call   contraction generics -> ddpc_gemm_f32 calls
//   ddpc-conv-to-library-call   convolutions and their gradients ->
//                               ddpc_conv2d_f32 calls (cuDNN), im2col +
//                               GEMM as the fallback
//   ddpc-gemm-epilogues         GEMM + bias (+ ReLU) kernel -> one call
//                               (cuBLASLt), with the two as fallback
//   ddpc-conv-epilogues         convolution + bias (+ ReLU) kernel -> one
//                               fused call (cuDNN), with the two as fallback
//   ddpc-collapse-loop-dims     adjacent loop dims of contiguous kernels
//                               -> one dim (long, vectorizable loops)
//   ddpc-outline-loop-nests     each top-level loop nest -> its own function
//                               (LLVM's compile time grows superlinearly)
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_CODEGEN_PASSES_H
#define DDPC_CODEGEN_PASSES_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace ddpc {

/// create<Name>() and create<Name>(const <Name>Options &) for every pass of
/// Passes.td, and the options structs.
#define GEN_PASS_DECL
#include "ddpc/Codegen/Passes.h.inc"

/// Registers the passes of Passes.td with the global pass registry.
void registerCodegenPasses();

} // namespace ddpc

#endif // DDPC_CODEGEN_PASSES_H

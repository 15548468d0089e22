//===- AtomicLoops.h - additive generics as atomic loops --------*- C++ -*-===//
//
// Part of ddpc (private to lib/Codegen/GPU). The rewrite that
// ddpc-scatter-to-atomic and ddpc-split-reductions share.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_LIB_CODEGEN_GPU_ATOMICLOOPS_H
#define DDPC_LIB_CODEGEN_GPU_ATOMICLOOPS_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"

namespace ddpc {

/// The value v added to the accumulator when one output of `op`, the
/// additive one, yields `acc + v` (either operand order) with `acc` (its
/// init) used nowhere else; null otherwise. Every other output must be a
/// plain write: its init unused and its indexing map a permutation of the
/// loops, so each iteration writes its own element (ddpc-fuse-ops' multi-
/// result kernels: an elementwise producer's result next to the reduction
/// that reads it). `outputIndex`, when given, receives the additive
/// output's position among the outputs.
mlir::Value additiveContribution(mlir::linalg::GenericOp op,
                                 unsigned *outputIndex = nullptr);

/// Rewrites an additive float generic `out[map(ivs)] += v(ivs)` over static
/// loops (additiveContribution) as an scf.parallel over its first
/// `numOuter` loops whose body sums v over the remaining loops (scf.for
/// nest, in their order) and adds that partial sum to the output with one
/// `memref.atomic_rmw addf`; the other outputs are stored at every
/// iteration. With numOuter = all loops, every iteration adds its own term.
mlir::LogicalResult rewriteAsAtomicLoops(mlir::linalg::GenericOp op,
                                         unsigned numOuter);

} // namespace ddpc

#endif // DDPC_LIB_CODEGEN_GPU_ATOMICLOOPS_H

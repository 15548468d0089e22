//===- AtomicLoops.h - additive generics as atomic loops --------*- C++ -*-===//
//
// Part of ddpc (private to lib/Transforms). The rewrite that
// ddpc-scatter-to-atomic and ddpc-split-reductions share.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_LIB_TRANSFORMS_ATOMICLOOPS_H
#define DDPC_LIB_TRANSFORMS_ATOMICLOOPS_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"

namespace ddpc {

/// The value added to the accumulator when the body of `op` (one output) is
/// `yield acc + v` (either operand order) and `acc` has no other use; null
/// otherwise.
mlir::Value additiveContribution(mlir::linalg::GenericOp op);

/// Rewrites an additive float generic `out[map(ivs)] += v(ivs)` over static
/// loops as an scf.parallel over its first `numOuter` loops whose body sums
/// v over the remaining loops (scf.for nest, in their order) and adds that
/// partial sum to the output with one `memref.atomic_rmw addf`. With
/// numOuter = all loops, every iteration adds its own term.
mlir::LogicalResult rewriteAsAtomicLoops(mlir::linalg::GenericOp op,
                                         unsigned numOuter);

} // namespace ddpc

#endif // DDPC_LIB_TRANSFORMS_ATOMICLOOPS_H

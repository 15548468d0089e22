//===- Autodiff.h - Reverse-mode AD on linalg-on-tensors IR -----*- C++ -*-===//
//
// Part of ddpc. Reverse-mode automatic differentiation (vector-Jacobian
// products) of a straight-line function body built from upstream ops:
//
//  - linalg.generic: one generic VJP rule for any body of scalar arith/math
//    ops. For input k with indexing map M_k, the cotangent is a new generic
//    over the same iteration space that recomputes the body, runs scalar
//    reverse-mode AD on it, and accumulates into an output indexed by M_k.
//    When M_k is not a projected permutation (strided windows of Conv and
//    pooling: `o * s + k * d`), every loop of the cotangent generic is a
//    reduction loop, i.e. a scatter-add, which the loop lowering executes
//    sequentially. A reduction body `max(acc, x)` sends the cotangent to the
//    first element (in iteration order) equal to the result, as PyTorch's
//    max_pool and max(dim) do; to every tie where no order is known.
//  - tensor.pad / extract_slice / insert_slice / collapse_shape /
//    expand_shape: the adjoint data movement.
//  - linalg.fill, tensor.empty, arith.constant: no cotangent.
//
// The rules follow the standard VJP definitions (e.g. Griewank & Walther,
// "Evaluating Derivatives", 2nd ed., ch. 3); no tape is needed because the
// forward values stay live in the same function.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_TRAINING_AUTODIFF_H
#define DDPC_TRAINING_AUTODIFF_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"

#include <string>

namespace ddpc {

/// Appends the backward computation to the block that defines the forward
/// ops, at the builder's insertion point (which must be after every forward
/// op). `seeds` pairs forward values with their cotangents (same type).
/// Returns the cotangent of each value in `wrt` (a zero tensor when it does
/// not influence the seeds). On an op without a VJP rule returns failure and
/// sets `error` to one line naming the op.
mlir::FailureOr<llvm::SmallVector<mlir::Value>>
buildVJP(mlir::OpBuilder &builder, mlir::Location loc,
         llvm::ArrayRef<std::pair<mlir::Value, mlir::Value>> seeds,
         llvm::ArrayRef<mlir::Value> wrt, std::string &error);

} // namespace ddpc

#endif // DDPC_TRAINING_AUTODIFF_H

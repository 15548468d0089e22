//===- Collectives.h - builders of collective communication -----*- C++ -*-===//
//
// Part of ddpc (lib/Parallel). Builders of the collectives in tensor-level
// IR: the importer's SyncBatchNorm statistics and the VJP of an all-reduce
// use them (the gradients' allreduce is placed after bufferization, by
// ddpc-bucket-gradient-allreduce).
//
// Collectives are upstream `shard` ops over one 1-D device grid of all
// ranks, `shard.grid @ddpc_world(shape = ?)` (its size, the world size, is
// known at run time): tensor-level passes and autodiff see a collective
// with known semantics, and reduce-scatter and all-gather (ZeRO) use the
// same ops. ddpc-lower-collectives turns them into runtime calls before
// bufferization; docs/decisions.md says why shard and not an op of our own.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_PARALLEL_COLLECTIVES_H
#define DDPC_PARALLEL_COLLECTIVES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Operation.h"

namespace ddpc {

/// Sum of the float32 tensor `input` (any static shape) over all ranks:
/// `shard.all_reduce %input on @ddpc_world grid_axes = [0] reduction =
/// sum`, of the same type, declaring the world grid in the enclosing module
/// on first use. Its VJP is the same all-reduce of the cotangent.
mlir::Value buildAllReduceSum(mlir::OpBuilder &b, mlir::Location loc,
                              mlir::Value input);

/// Whether `op` is an all-reduce that buildAllReduceSum built (a sum of a
/// ranked tensor over the world grid), the form autodiff and
/// ddpc-lower-collectives accept.
bool isWorldAllReduceSum(mlir::Operation *op);

} // namespace ddpc

#endif // DDPC_PARALLEL_COLLECTIVES_H

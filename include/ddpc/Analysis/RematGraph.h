//===- RematGraph.h - the forward pass as the remat solver sees it -*- C++
//-*-===//
//
// Part of ddpc. Where the forward pass of @train_micro ends, which of its
// values depend on the step's random state, and the RematSolver graph of
// it, shared by --remat auto's choice (Driver) and ddpc-rematerialize, so
// that the choice models what the pass can do.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_ANALYSIS_REMATGRAPH_H
#define DDPC_ANALYSIS_REMATGRAPH_H

#include "ddpc/Analysis/RematSolver.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"

namespace ddpc {

/// The first op of `body` after the forward pass: the first linalg op (not
/// a fill) of no ONNX node, where the loss starts; null when there is none.
mlir::Operation *forwardBoundary(mlir::Block &body);

/// The values of `f`'s body that depend on its argument named "rng"
/// (through operands or values a region uses).
llvm::DenseSet<mlir::Value> randomValues(mlir::func::FuncOp f);

/// Whether ddpc-rematerialize can rebuild `op` for nothing: empty tensors,
/// fills, reshapes.
bool isFreeToRecompute(mlir::Operation *op);

/// The forward pass of `micro` (tensor IR after fusion) as RematSolver's
/// graph: one node per set of forward ops that share an ONNX node name
/// (naming any recomputes all of them), named by its names '+'-joined;
/// bytes are its tensor results read outside it (staticBytes), inputs are
/// the nodes it reads directly or through free ops. Empty without a
/// forward boundary.
RematGraph buildRematGraph(mlir::func::FuncOp micro);

} // namespace ddpc

#endif // DDPC_ANALYSIS_REMATGRAPH_H

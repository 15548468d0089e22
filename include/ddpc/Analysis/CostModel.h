//===- CostModel.h - sizes and costs of IR values ---------------*- C++ -*-===//
//
// Part of ddpc. The one place that says how many bytes a tensor or buffer
// takes, for the arena plan (ddpc-plan-arena), the gradient buckets
// (ddpc-bucket-gradient-allreduce) and the plan report, so that the memory
// and communication planners to come share one model.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_ANALYSIS_COSTMODEL_H
#define DDPC_ANALYSIS_COSTMODEL_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"

#include <cstdint>
#include <string>

namespace ddpc {

/// Bytes of one element of `elem` (an integer or float type of a whole
/// number of bytes; i1 counts as one byte); 0 for anything else.
int64_t elementBytes(mlir::Type elem);

/// Bytes of a statically shaped tensor or memref (elements x element
/// bytes); 0 when the shape is dynamic or the element type has no size.
int64_t staticBytes(mlir::ShapedType type);

/// Floating-point (and integer) operations of `op` at run time: for a
/// linalg op, the iterations of its loops (static ranges) times the scalar
/// ops of its body (at least 1); 0 for anything else or a dynamic range.
/// An estimate for comparing recompute costs (ddpc-rematerialize's
/// choice), not a count of machine instructions.
int64_t estimatedFlops(mlir::Operation *op);

/// The ONNX node names in `loc` ("MatMul_0+Relu_1"), '+'-joined; empty for
/// code without a node (the training step's loss, backward, optimizer).
std::string nodeNamesOf(mlir::Location loc);

} // namespace ddpc

#endif // DDPC_ANALYSIS_COSTMODEL_H

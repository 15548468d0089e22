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

#include <cstdint>

namespace ddpc {

/// Bytes of one element of `elem` (an integer or float type of a whole
/// number of bytes; i1 counts as one byte); 0 for anything else.
int64_t elementBytes(mlir::Type elem);

/// Bytes of a statically shaped tensor or memref (elements x element
/// bytes); 0 when the shape is dynamic or the element type has no size.
int64_t staticBytes(mlir::ShapedType type);

} // namespace ddpc

#endif // DDPC_ANALYSIS_COSTMODEL_H

//===- CostModel.cpp - sizes and costs of IR values -----------------------===//
//
// Part of ddpc. See CostModel.h.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Analysis/CostModel.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"

#include <algorithm>

using namespace mlir;

namespace ddpc {

int64_t elementBytes(Type elem) {
  if (!elem.isIntOrFloat())
    return 0;
  unsigned bits = elem.getIntOrFloatBitWidth();
  if (bits == 1)
    return 1;
  return bits % 8 == 0 ? bits / 8 : 0;
}

int64_t staticBytes(ShapedType type) {
  if (!type.hasStaticShape())
    return 0;
  return type.getNumElements() * elementBytes(type.getElementType());
}

int64_t estimatedFlops(Operation *op) {
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  if (!linalgOp)
    return 0;
  int64_t iterations = 1;
  for (int64_t range : linalgOp.getStaticLoopRanges()) {
    if (ShapedType::isDynamic(range))
      return 0;
    iterations *= range;
  }
  int64_t scalarOps = 0;
  if (op->getNumRegions() == 1 && !op->getRegion(0).empty())
    scalarOps =
        static_cast<int64_t>(op->getRegion(0).front().getOperations().size()) -
        1;
  return iterations * std::max<int64_t>(scalarOps, 1);
}

std::string nodeNamesOf(Location loc) {
  std::string out;
  loc->walk([&](Location l) {
    if (auto name = dyn_cast<NameLoc>(l))
      out += (out.empty() ? "" : "+") + name.getName().str();
    return WalkResult::advance();
  });
  return out;
}

} // namespace ddpc

//===- CostModel.cpp - sizes and costs of IR values -----------------------===//
//
// Part of ddpc. See CostModel.h.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Analysis/CostModel.h"

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

} // namespace ddpc

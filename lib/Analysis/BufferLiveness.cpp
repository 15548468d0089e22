//===- BufferLiveness.cpp - live ranges of a block's allocations ----------===//
//
// Part of ddpc. See BufferLiveness.h.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Analysis/BufferLiveness.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

using namespace mlir;

namespace ddpc {

BufferLiveness::BufferLiveness(Block &body) : body(body) {
  int64_t index = 0;
  for (Operation &op : body)
    positions[&op] = index++;
}

int64_t BufferLiveness::position(Operation *op) const {
  while (op && op->getBlock() != &body)
    op = op->getParentOp();
  if (!op)
    return -1;
  auto it = positions.find(op);
  return it == positions.end() ? -1 : it->second;
}

std::optional<BufferLiveRange>
BufferLiveness::liveRange(memref::AllocOp alloc) {
  memref::DeallocOp dealloc;
  for (Operation *user : alloc->getUsers()) {
    if (auto d = dyn_cast<memref::DeallocOp>(user)) {
      if (dealloc || d->getBlock() != &body)
        return std::nullopt;
      dealloc = d;
    } else if (isa<func::ReturnOp>(user)) {
      return std::nullopt; // Escapes.
    }
  }
  if (!dealloc || alloc->getBlock() != &body)
    return std::nullopt;
  BufferLiveRange range{alloc, dealloc, position(alloc), position(dealloc)};
  // Every use (through any alias) must lie inside the live range; the
  // deallocation pipeline guarantees it, this keeps the planners safe.
  SmallVector<Value> worklist = {alloc.getResult()};
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    for (Operation *user : v.getUsers()) {
      int64_t at = position(user);
      if (at < range.start || at > range.end)
        return std::nullopt;
      if (isa<ViewLikeOpInterface>(user))
        for (Value r : user->getResults())
          worklist.push_back(r);
    }
  }
  return range;
}

} // namespace ddpc

//===- PlanArena.cpp - static memory planning into one arena --------------===//
//
// Part of ddpc. See Passes.h (createPlanArenaPass).
//
// Offsets are assigned greedily, largest buffer first, at the lowest
// 256-byte aligned offset that does not overlap a buffer already placed
// whose live range intersects (the classic first-fit-decreasing heuristic
// for offline dynamic storage allocation; see e.g. Pisarchyk & Lee,
// "Efficient Memory Management for Deep Neural Net Inference", 2020).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/Passes.h"
#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"

#include "ddpc/Analysis/BufferLiveness.h"
#include "ddpc/Analysis/CostModel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

#include <algorithm>

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_PLANARENAPASS
#include "ddpc/Codegen/Passes.h.inc"
namespace {

constexpr int64_t kArenaAlignment = 256;

struct Buffer {
  memref::AllocOp alloc;
  memref::DeallocOp dealloc;
  int64_t bytes;      // rounded up to kArenaAlignment
  int64_t start, end; // live range: top-level op positions, inclusive
  int64_t offset = -1;
};

/// Size in bytes of a statically shaped, identity-layout memref of
/// byte-sized elements in the default memory space (at least 1); 0 when not
/// plannable.
int64_t plannableBytes(MemRefType type) {
  Type elem = type.getElementType();
  if (!type.hasStaticShape() || !type.getLayout().isIdentity() ||
      type.getMemorySpace() || !elem.isIntOrFloat() ||
      elem.getIntOrFloatBitWidth() % 8 != 0)
    return 0;
  return std::max<int64_t>(staticBytes(type), 1);
}

struct PlanArenaPass : impl::PlanArenaPassBase<PlanArenaPass> {

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal() || !func.getBody().hasOneBlock())
      return;
    Block &body = func.getBody().front();
    BufferLiveness liveness(body);
    SmallVector<Buffer> buffers;
    for (auto alloc : body.getOps<memref::AllocOp>()) {
      int64_t bytes = plannableBytes(alloc.getType());
      if (!bytes || !alloc.getDynamicSizes().empty() ||
          !alloc.getSymbolOperands().empty() ||
          alloc.getAlignment().value_or(1) > kArenaAlignment)
        continue;
      std::optional<BufferLiveRange> range = liveness.liveRange(alloc);
      if (!range)
        continue;
      int64_t rounded =
          (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
      buffers.push_back(
          {alloc, range->dealloc, rounded, range->start, range->end});
    }
    if (buffers.size() < 2)
      return;

    // First fit, decreasing size.
    SmallVector<Buffer *> order;
    for (Buffer &b : buffers)
      order.push_back(&b);
    llvm::stable_sort(order,
                      [](Buffer *a, Buffer *b) { return a->bytes > b->bytes; });
    SmallVector<Buffer *> placed;
    int64_t total = 0;
    for (Buffer *b : order) {
      SmallVector<Buffer *> live;
      for (Buffer *p : placed)
        if (p->start <= b->end && b->start <= p->end)
          live.push_back(p);
      llvm::sort(live,
                 [](Buffer *x, Buffer *y) { return x->offset < y->offset; });
      int64_t offset = 0;
      for (Buffer *p : live) {
        if (offset + b->bytes <= p->offset)
          break;
        offset = std::max(offset, p->offset + p->bytes);
      }
      b->offset = offset;
      total = std::max(total, offset + b->bytes);
      placed.push_back(b);
    }

    OpBuilder builder(&getContext());
    builder.setInsertionPointToStart(&body);
    Location loc = func.getLoc();
    auto arenaType = MemRefType::get({total}, builder.getI8Type());
    Value arena = memref::AllocOp::create(
        builder, loc, arenaType, builder.getI64IntegerAttr(kArenaAlignment));
    for (Buffer &b : buffers) {
      builder.setInsertionPoint(b.alloc);
      Value offset =
          arith::ConstantIndexOp::create(builder, b.alloc.getLoc(), b.offset);
      Value view =
          memref::ViewOp::create(builder, b.alloc.getLoc(), b.alloc.getType(),
                                 arena, offset, ValueRange{});
      b.alloc.getResult().replaceAllUsesWith(view);
      b.dealloc->erase();
      b.alloc->erase();
    }
    builder.setInsertionPoint(body.getTerminator());
    memref::DeallocOp::create(builder, loc, arena);
    func->setAttr(attrs::kArenaBytes, builder.getI64IntegerAttr(total));
    func->setAttr(attrs::kArenaBuffers,
                  builder.getI64IntegerAttr(buffers.size()));
  }
};

} // namespace

} // namespace ddpc

//===- DistinctResultBuffers.cpp - one buffer per returned result ---------===//
//
// Part of ddpc. See Passes.td (ddpc-distinct-result-buffers).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_DISTINCTRESULTBUFFERSPASS
#include "ddpc/Transforms/Passes.h.inc"

namespace {

struct DistinctResultBuffersPass
    : impl::DistinctResultBuffersPassBase<DistinctResultBuffersPass> {

  void runOnOperation() override {
    getOperation().walk([](func::ReturnOp ret) {
      OpBuilder b(ret);
      for (OpOperand &operand : ret->getOpOperands()) {
        Value v = operand.get();
        auto type = dyn_cast<MemRefType>(v.getType());
        if (!type || !type.hasStaticShape())
          continue;
        bool earlier = llvm::any_of(
            ret->getOperands().take_front(operand.getOperandNumber()),
            [&](Value o) { return o == v; });
        if (!earlier)
          continue;
        // A copy of its own (identity layout, as the function type wants).
        auto copyType =
            MemRefType::get(type.getShape(), type.getElementType(),
                            MemRefLayoutAttrInterface{}, type.getMemorySpace());
        if (copyType != type)
          continue;
        Value copy = memref::AllocOp::create(b, ret.getLoc(), copyType,
                                             b.getI64IntegerAttr(64));
        memref::CopyOp::create(b, ret.getLoc(), v, copy);
        operand.set(copy);
      }
    });
  }
};

} // namespace

} // namespace ddpc

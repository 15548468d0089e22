//===- ReadOnlyArguments.cpp - entry-point arguments are never written ----===//
//
// Part of ddpc. See Passes.td (ddpc-read-only-arguments).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Transforms/Passes.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_READONLYARGUMENTSPASS
#include "ddpc/Transforms/Passes.h.inc"

namespace {

struct ReadOnlyArgumentsPass
    : impl::ReadOnlyArgumentsPassBase<ReadOnlyArgumentsPass> {
  void runOnOperation() override {
    Builder b(&getContext());
    for (auto fn : getOperation().getOps<func::FuncOp>()) {
      if (fn.isExternal() || !fn.isPublic())
        continue;
      for (unsigned i = 0; i < fn.getNumArguments(); ++i)
        if (isa<TensorType>(fn.getArgument(i).getType()))
          fn.setArgAttr(i,
                        bufferization::BufferizationDialect::kWritableAttrName,
                        b.getBoolAttr(false));
    }
  }
};

} // namespace

} // namespace ddpc

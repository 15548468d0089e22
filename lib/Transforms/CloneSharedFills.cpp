//===- CloneSharedFills.cpp - one linalg.fill per destination use ---------===//
//
// Part of ddpc. See Passes.h (createCloneSharedFillsPass).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_CLONESHAREDFILLSPASS
#include "ddpc/Transforms/Passes.h.inc"
namespace {

struct CloneSharedFillsPass
    : impl::CloneSharedFillsPassBase<CloneSharedFillsPass> {

  void runOnOperation() override {
    SmallVector<linalg::FillOp> fills;
    getOperation().walk([&](linalg::FillOp fill) {
      if (fill.hasPureTensorSemantics() && !fill->getResult(0).hasOneUse())
        fills.push_back(fill);
    });
    for (linalg::FillOp fill : fills) {
      // Destination uses: operands that an op writes into (DPS inits).
      SmallVector<OpOperand *> dests;
      for (OpOperand &use : fill->getResult(0).getUses()) {
        auto dps = dyn_cast<DestinationStyleOpInterface>(use.getOwner());
        if (dps && dps.isDpsInit(&use))
          dests.push_back(&use);
      }
      // The original keeps its other uses (or the first destination).
      bool keepFirst = dests.size() == fill->getResult(0).getNumUses();
      for (OpOperand *use : llvm::drop_begin(dests, keepFirst ? 1 : 0)) {
        OpBuilder b(use->getOwner());
        IRMapping mapping;
        // A fresh tensor.empty too, or the clones would share one buffer.
        Value init = fill.getDpsInitOperand(0)->get();
        if (auto empty = init.getDefiningOp<tensor::EmptyOp>())
          mapping.map(init, b.clone(*empty)->getResult(0));
        use->set(b.clone(*fill, mapping)->getResult(0));
      }
    }
  }
};

} // namespace

} // namespace ddpc

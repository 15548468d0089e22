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
    // Program order of every op: the destinations are taken in that order,
    // not in use-list order, which printing and parsing do not keep (the
    // pass must give the same IR when ddpc-opt replays it from a dump).
    llvm::DenseMap<Operation *, unsigned> order;
    getOperation().walk([&](Operation *op) {
      order.try_emplace(op, order.size());
      if (auto fill = dyn_cast<linalg::FillOp>(op))
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
      // Latest first: the last destination keeps the original when only
      // destinations use it, and every earlier one gets a clone.
      llvm::sort(dests, [&](OpOperand *a, OpOperand *b) {
        unsigned x = order.lookup(a->getOwner()),
                 y = order.lookup(b->getOwner());
        return x != y ? x > y : a->getOperandNumber() > b->getOperandNumber();
      });
      // The original keeps its other uses (or the last destination).
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

//===- ScatterToAtomic.cpp - scatter reductions to atomic adds ------------===//
//
// Part of ddpc. See Passes.td (ddpc-scatter-to-atomic).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Transforms/Passes.h"

#include "AtomicLoops.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_SCATTERTOATOMICPASS
#include "ddpc/Transforms/Passes.h.inc"

namespace {

struct ScatterToAtomicPass
    : impl::ScatterToAtomicPassBase<ScatterToAtomicPass> {

  void runOnOperation() override {
    SmallVector<linalg::GenericOp> candidates;
    getOperation().walk([&](linalg::GenericOp op) {
      if (!op.hasPureBufferSemantics() || op.getNumDpsInits() != 1)
        return;
      AffineMap outMap = op.getIndexingMapsArray().back();
      if (outMap.isProjectedPermutation() && op.getNumParallelLoops() > 0)
        return; // Upstream maps its parallel loops to threads.
      candidates.push_back(op);
    });
    for (linalg::GenericOp op : candidates)
      (void)rewriteAsAtomicLoops(op, op.getNumLoops());
  }
};

} // namespace

} // namespace ddpc

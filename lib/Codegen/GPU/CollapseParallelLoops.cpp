//===- CollapseParallelLoops.cpp - n-d scf.parallel to 1-d ----------------===//
//
// Part of ddpc. See Passes.td (ddpc-collapse-parallel-loops).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/GPU/Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_COLLAPSEPARALLELLOOPSPASS
#include "ddpc/Codegen/GPU/Passes.h.inc"

namespace {

struct CollapseParallelLoopsPass
    : impl::CollapseParallelLoopsPassBase<CollapseParallelLoopsPass> {
  void runOnOperation() override {
    SmallVector<scf::ParallelOp> loops;
    getOperation().walk([&](scf::ParallelOp op) {
      if (!op->getParentOfType<scf::ParallelOp>() && op.getNumLoops() > 1)
        loops.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (scf::ParallelOp op : loops) {
      std::vector<unsigned> all;
      for (unsigned i = 0; i < op.getNumLoops(); ++i)
        all.push_back(i);
      rewriter.setInsertionPoint(op);
      collapseParallelLoops(rewriter, op, {all});
    }
  }
};

} // namespace

} // namespace ddpc

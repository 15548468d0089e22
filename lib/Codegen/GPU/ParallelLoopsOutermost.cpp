//===- ParallelLoopsOutermost.cpp - parallel loops before reductions ------===//
//
// Part of ddpc. See Passes.td (ddpc-parallel-loops-outermost).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/GPU/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_PARALLELLOOPSOUTERMOSTPASS
#include "ddpc/Codegen/GPU/Passes.h.inc"

namespace {

struct ParallelLoopsOutermostPass
    : impl::ParallelLoopsOutermostPassBase<ParallelLoopsOutermostPass> {
  void runOnOperation() override {
    SmallVector<linalg::LinalgOp> ops;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (!op.hasPureBufferSemantics())
        return;
      auto iters = op.getIteratorTypesArray();
      // A reduction loop before a parallel one: loop conversion would put
      // the parallel loop (the kernel) inside a host loop.
      bool seenReduction = false, needed = false;
      for (utils::IteratorType t : iters) {
        if (t == utils::IteratorType::reduction)
          seenReduction = true;
        else if (seenReduction)
          needed = true;
      }
      if (needed)
        ops.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (linalg::LinalgOp op : ops) {
      rewriter.setInsertionPoint(op);
      auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
      if (!generic) {
        FailureOr<linalg::GenericOp> g =
            linalg::generalizeNamedOp(rewriter, op);
        if (failed(g))
          continue;
        generic = *g;
      }
      SmallVector<unsigned> order;
      auto iters = generic.getIteratorTypesArray();
      for (unsigned i = 0; i < iters.size(); ++i)
        if (iters[i] == utils::IteratorType::parallel)
          order.push_back(i);
      for (unsigned i = 0; i < iters.size(); ++i)
        if (iters[i] != utils::IteratorType::parallel)
          order.push_back(i);
      (void)linalg::interchangeGenericOp(rewriter, generic, order);
    }
  }
};

} // namespace

} // namespace ddpc

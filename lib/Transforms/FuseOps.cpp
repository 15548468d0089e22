//===- FuseOps.cpp - operator fusion into kernel groups -------------------===//
//
// Part of ddpc. See Passes.h (createFuseOpsPass) for the policy. The fusion
// itself (merging two linalg.generic bodies and composing indexing maps) is
// upstream's linalg::fuseElementwiseOps; this file decides what to fuse and
// labels the resulting groups.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_FUSEOPSPASS
#include "ddpc/Transforms/Passes.h.inc"
namespace {

bool allParallel(linalg::GenericOp op) {
  return op.getNumReductionLoops() == 0;
}

unsigned bodySize(linalg::GenericOp op) {
  // Operations in the body, without the terminator.
  return op.getRegion().front().getOperations().size() - 1;
}

/// Collects the ONNX node names (NameLocs) inside `loc`, in order.
void collectNames(Location loc, llvm::SetVector<StringRef> &names) {
  loc->walk([&](Location l) {
    if (auto n = dyn_cast<NameLoc>(l))
      names.insert(n.getName().getValue());
    return WalkResult::advance();
  });
}

struct FuseOpsPass : impl::FuseOpsPassBase<FuseOpsPass> {

  using FuseOpsPassBase::FuseOpsPassBase;

  /// Whether the producer of `operand` may be fused into its owner, looking
  /// at that one use only.
  static bool fusableUse(OpOperand &operand) {
    auto consumer = dyn_cast<linalg::GenericOp>(operand.getOwner());
    auto producer = operand.get().getDefiningOp<linalg::GenericOp>();
    if (!consumer || !producer || !allParallel(producer))
      return false;
    if (!consumer.isDpsInput(&operand))
      return false;
    // One read per producer element: no duplicated work.
    if (!consumer.getMatchingIndexingMap(&operand).isPermutation())
      return false;
    return linalg::areElementwiseOpsFusable(&operand);
  }

  /// Whether to fuse the producer of `operand` into its owner. A producer
  /// with several users is recomputed in them only when it is cheap and
  /// every use of every result can take it, so that it disappears. When
  /// one user cannot (a contraction, a graph output, a reshape), the result
  /// is written anyway; recomputing it elsewhere would then read the same
  /// bytes (its inputs instead of it) and keep its inputs alive longer, up
  /// to the backward pass (Relu's VJP reads the Relu result so that the
  /// pre-activation can die early; see Autodiff.cpp).
  bool shouldFuse(OpOperand &operand) const {
    if (!fusableUse(operand))
      return false;
    Operation *producer = operand.get().getDefiningOp();
    bool oneUse = producer->hasOneUse();
    if (oneUse)
      return true;
    if (bodySize(cast<linalg::GenericOp>(producer)) > maxRecomputeOps)
      return false;
    for (Value r : producer->getResults())
      for (OpOperand &use : r.getUses())
        if (!fusableUse(use))
          return false;
    return true;
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    // Generics built by autodiff carry every input of the forward op, used
    // or not; drop the unused ones first, so that fusion sees the real
    // dataflow and contractions keep exactly two inputs (GEMM calls).
    {
      RewritePatternSet patterns(func.getContext());
      linalg::populateEraseUnusedOperandsAndResultsPatterns(patterns);
      (void)applyPatternsGreedily(func, std::move(patterns));
    }
    IRRewriter rewriter(func.getContext());
    bool changed = true;
    while (changed) {
      changed = false;
      SmallVector<linalg::GenericOp> consumers;
      func.walk([&](linalg::GenericOp op) { consumers.push_back(op); });
      for (linalg::GenericOp consumer : consumers) {
        for (OpOperand &operand : consumer->getOpOperands()) {
          if (!shouldFuse(operand))
            continue;
          Operation *producer = operand.get().getDefiningOp();
          Location fusedLoc =
              rewriter.getFusedLoc({producer->getLoc(), consumer->getLoc()});
          rewriter.setInsertionPoint(consumer);
          FailureOr<linalg::ElementwiseOpFusionResult> fused =
              linalg::fuseElementwiseOps(rewriter, &operand);
          if (failed(fused))
            continue;
          fused->fusedOp->setLoc(fusedLoc);
          // Only the consumer's results move to the fused op; other users
          // of the producer keep the producer (it is recomputed there).
          for (auto [orig, repl] : fused->replacements)
            if (orig.getDefiningOp() == consumer.getOperation())
              rewriter.replaceAllUsesWith(orig, repl);
          rewriter.eraseOp(consumer);
          if (producer->use_empty())
            rewriter.eraseOp(producer);
          changed = true;
          break; // `consumer` is gone; its operands with it.
        }
        if (changed)
          break;
      }
    }
    // A fused op also yields the producer's results while the producer
    // has other users; drop those results once nothing reads them.
    {
      RewritePatternSet patterns(func.getContext());
      linalg::populateEraseUnusedOperandsAndResultsPatterns(patterns);
      (void)applyPatternsGreedily(func, std::move(patterns));
    }
    // Label the groups.
    int64_t id = 0;
    Builder b(func.getContext());
    func.walk([&](linalg::LinalgOp op) {
      llvm::SetVector<StringRef> names;
      collectNames(op->getLoc(), names);
      SmallVector<Attribute> nameAttrs;
      for (StringRef n : names)
        nameAttrs.push_back(b.getStringAttr(n));
      op->setAttr("ddpc.fusion_group", b.getI64IntegerAttr(id++));
      op->setAttr("ddpc.fused_nodes", b.getArrayAttr(nameAttrs));
    });
  }
};

} // namespace

} // namespace ddpc

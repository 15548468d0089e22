//===- FuseOps.cpp - operator fusion into kernel groups -------------------===//
//
// Part of ddpc. See Passes.h (createFuseOpsPass) for the policy. The fusion
// itself (merging two linalg.generic bodies and composing indexing maps) is
// upstream's linalg::fuseElementwiseOps; this file decides what to fuse and
// labels the resulting groups.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"
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

  /// How the producer of an operand is fused into its owner.
  enum class Fusion {
    None,
    /// The producer's body is copied into the consumer; the producer stays
    /// for its other users (each of which can take it too).
    Recompute,
    /// The fused op also yields the producer's results, and the producer's
    /// other users (all after the consumer) read those: one kernel writes
    /// both, and the producer is erased.
    MultiResult,
  };

  /// How to fuse the producer of `operand` into its owner.
  ///  - One use: fuse.
  ///  - Every use of every result can take the producer, and its body is
  ///    cheap: recompute it in each, so that it is never written.
  ///  - Every other use is after the consumer in its block (a graph output,
  ///    a contraction or reshape further on, another elementwise op): one
  ///    multi-result kernel computes the producer and the consumer (the
  ///    optimizer's m, v and parameter updates; sibling results of a layer's
  ///    backward). Nothing is computed twice.
  ///  - Otherwise (a user before the consumer cannot take it) the result is
  ///    written anyway, and recomputing it in the consumer would read the
  ///    same bytes (its inputs instead of it) and keep those inputs alive
  ///    longer, up to the backward pass: Relu's VJP reads the Relu result so
  ///    that the pre-activation can die early (Autodiff.cpp), and the next
  ///    layer's GEMM reads it before the backward pass.
  Fusion howToFuse(OpOperand &operand) const {
    if (!fusableUse(operand))
      return Fusion::None;
    Operation *producer = operand.get().getDefiningOp();
    Operation *consumer = operand.getOwner();
    if (producer->hasOneUse())
      return Fusion::Recompute;
    bool allFusable = true,
         allAfter = producer->getBlock() == consumer->getBlock();
    for (Value r : producer->getResults())
      for (OpOperand &use : r.getUses()) {
        Operation *user = use.getOwner();
        allFusable &= fusableUse(use);
        allAfter &=
            user == consumer || (user->getBlock() == consumer->getBlock() &&
                                 consumer->isBeforeInBlock(user));
      }
    if (allFusable &&
        bodySize(cast<linalg::GenericOp>(producer)) <= maxRecomputeOps)
      return Fusion::Recompute;
    // fuseElementwiseOps fuses through `operand` only: another operand of
    // the consumer that reads the producer stays an input of the fused op,
    // and redirecting it to the fused op's own result would make the op
    // read itself.
    bool onlyThrough =
        llvm::all_of(consumer->getOpOperands(), [&](OpOperand &o) {
          return &o == &operand || o.get().getDefiningOp() != producer;
        });
    return allAfter && onlyThrough ? Fusion::MultiResult : Fusion::None;
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
          Fusion how = howToFuse(operand);
          if (how == Fusion::None)
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
          // The consumer's results move to the fused op. The producer's
          // other users keep the producer (Recompute) or read the fused
          // op's copy of its results (MultiResult).
          for (auto [orig, repl] : fused->replacements)
            if (orig.getDefiningOp() == consumer.getOperation() ||
                how == Fusion::MultiResult)
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
    // Each remaining linalg op is a group, and so is each scatter-add loop
    // nest of a gradient (Autodiff.cpp: the table of a Gather).
    func.walk([&](Operation *op) {
      if (!isa<linalg::LinalgOp>(op) && !op->hasAttr(attrs::kScatterAdd))
        return;
      llvm::SetVector<StringRef> names;
      collectNames(op->getLoc(), names);
      SmallVector<Attribute> nameAttrs;
      for (StringRef n : names)
        nameAttrs.push_back(b.getStringAttr(n));
      op->setAttr(attrs::kFusionGroup, b.getI64IntegerAttr(id++));
      op->setAttr(attrs::kFusedNodes, b.getArrayAttr(nameAttrs));
    });
  }
};

} // namespace

} // namespace ddpc

//===- CollapseLoopDims.cpp - adjacent loop dims of kernels as one --------===//
//
// Part of ddpc. See Passes.td (ddpc-collapse-loop-dims).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_COLLAPSELOOPDIMSPASS
#include "ddpc/Codegen/Passes.h.inc"
namespace {

bool isContiguousStatic(Type t) {
  auto m = dyn_cast<MemRefType>(t);
  return m && m.hasStaticShape() && m.getLayout().isIdentity();
}

/// The loop dims of `op` in runs that may merge: adjacent dims of one
/// iterator type that every indexing map keeps contiguous.
SmallVector<ReassociationIndices> mergeableRuns(linalg::GenericOp op) {
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  SmallVector<utils::IteratorType> iters = op.getIteratorTypesArray();
  SmallVector<ReassociationIndices> runs;
  for (int64_t d = 0, e = iters.size(); d < e; ++d) {
    if (!runs.empty() && iters[runs.back().front()] == iters[d]) {
      ReassociationIndices longer = runs.back();
      longer.push_back(d);
      if (linalg::areDimSequencesPreserved(maps, {longer})) {
        runs.back() = std::move(longer);
        continue;
      }
    }
    runs.push_back({d});
  }
  return runs;
}

struct CollapseLoopDimsPass
    : impl::CollapseLoopDimsPassBase<CollapseLoopDimsPass> {
  void runOnOperation() override {
    SmallVector<linalg::GenericOp> ops;
    getOperation().walk([&](linalg::GenericOp op) {
      // Constant indices (a broadcast size-1 dim) are not dim sequences.
      if (op.hasPureBufferSemantics() &&
          llvm::all_of(op->getOperandTypes(), isContiguousStatic) &&
          llvm::all_of(op.getIndexingMapsArray(),
                       [](AffineMap m) { return m.isProjectedPermutation(); }))
        ops.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (linalg::GenericOp op : ops) {
      SmallVector<ReassociationIndices> runs = mergeableRuns(op);
      if (runs.size() == static_cast<size_t>(op.getNumLoops()))
        continue;
      SmallVector<ReassociationIndices> merged;
      for (ReassociationIndices &run : runs)
        if (run.size() > 1)
          merged.push_back(run);
      rewriter.setInsertionPoint(op);
      DictionaryAttr labels = op->getDiscardableAttrDictionary();
      FailureOr<linalg::CollapseResult> result =
          linalg::collapseOpIterationDims(op, merged, rewriter);
      if (failed(result))
        continue;
      result->collapsedOp->setDiscardableAttrs(labels);
      rewriter.eraseOp(op);
    }
  }
};

} // namespace
} // namespace ddpc

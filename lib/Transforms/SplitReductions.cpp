//===- SplitReductions.cpp - short-parallel reductions to atomics ---------===//
//
// Part of ddpc. See Passes.td (ddpc-split-reductions).
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

#define GEN_PASS_DEF_SPLITREDUCTIONSPASS
#include "ddpc/Transforms/Passes.h.inc"

namespace {

struct SplitReductionsPass
    : impl::SplitReductionsPassBase<SplitReductionsPass> {
  using SplitReductionsPassBase::SplitReductionsPassBase;

  void runOnOperation() override {
    SmallVector<std::pair<linalg::GenericOp, unsigned>> candidates;
    getOperation().walk([&](linalg::GenericOp op) {
      unsigned r = 0;
      if (!op.hasPureBufferSemantics() || !additiveContribution(op, &r))
        return;
      SmallVector<int64_t> ranges = op.getStaticLoopRanges();
      if (llvm::any_of(ranges, ShapedType::isDynamic))
        return;
      // Parallel loops first (ddpc-parallel-loops-outermost ran before).
      auto iters = op.getIteratorTypesArray();
      unsigned numParallel = 0;
      while (numParallel < iters.size() &&
             iters[numParallel] == utils::IteratorType::parallel)
        ++numParallel;
      AffineMap outMap = op.getIndexingMapsArray()[op.getNumDpsInputs() + r];
      if (numParallel == iters.size() || !outMap.isProjectedPermutation() ||
          llvm::any_of(outMap.getResults(), [&](AffineExpr e) {
            return cast<AffineDimExpr>(e).getPosition() >= numParallel;
          }))
        return;
      int64_t threads = 1, length = 1;
      for (unsigned i = 0; i < ranges.size(); ++i)
        (i < numParallel ? threads : length) *= ranges[i];
      if (threads >= targetThreads || length < minReduction)
        return;
      // Move reduction loops to the parallel side, outermost first, while
      // the thread count stays within the target. Overshooting it costs
      // more than it gains: every thread ends with an atomic add, and those
      // to one output serialize (a BatchNorm over 32x16x16 with all its
      // loops moved gave 8192 atomic adds per channel, ~0.7 ms on an H200;
      // keeping the 16-long innermost loop serial gives 512). A loop is
      // moved past the target only while each thread would otherwise keep
      // at least minReduction serial terms (a 64x64 weight gradient: 4096
      // threads of 25088 terms are worse than 524288 of 196).
      unsigned numOuter = numParallel;
      int64_t serial = length;
      while (numOuter < ranges.size() &&
             (threads * ranges[numOuter] <= targetThreads ||
              serial >= minReduction)) {
        threads *= ranges[numOuter];
        serial /= ranges[numOuter++];
      }
      if (numOuter == numParallel)
        return;
      candidates.push_back({op, numOuter});
    });
    for (auto [op, numOuter] : candidates)
      (void)rewriteAsAtomicLoops(op, numOuter);
  }
};

} // namespace

} // namespace ddpc

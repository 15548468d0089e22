//===- SplitReductions.cpp - short-parallel reductions to atomics ---------===//
//
// Part of ddpc. See Passes.td (ddpc-split-reductions).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/GPU/Passes.h"

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
#include "ddpc/Codegen/GPU/Passes.h.inc"

namespace {

/// Most atomic adds per output a loop moved whole may cause; past it, the
/// loop is strip-mined instead (below).
constexpr int64_t kMaxAtomicsPerOutput = 4096;

/// Whether loop `dim` can be strip-mined by stripMine: every operand that
/// reads it has it as one whole dimension (d_dim itself among its map's
/// results, once), so that dimension can be expanded in two.
bool canStripMine(linalg::GenericOp op, unsigned dim) {
  for (AffineMap m : op.getIndexingMapsArray()) {
    int whole = 0, other = 0;
    for (AffineExpr e : m.getResults()) {
      if (auto d = dyn_cast<AffineDimExpr>(e))
        whole += d.getPosition() == dim;
      else
        other += e.isFunctionOfDim(dim);
    }
    if (other || whole > 1)
      return false;
  }
  return true;
}

/// Splits loop `dim` of `op` into an outer loop of `outer` iterations and
/// an inner one of extent / outer (loop dim = o * inner + i), both of its
/// iterator type, in a generic that replaces `op`: each operand's dimension
/// indexed by the loop is expanded in two (memref.expand_shape) and read
/// with (o, i). The body is unchanged (callers check it reads no
/// linalg.index, and canStripMine).
linalg::GenericOp stripMine(linalg::GenericOp op, unsigned dim, int64_t outer) {
  int64_t inner = op.getStaticLoopRanges()[dim] / outer;
  unsigned n = op.getNumLoops();
  OpBuilder b(op);
  MLIRContext *ctx = b.getContext();
  auto shifted = [&](unsigned j) {
    return b.getAffineDimExpr(j < dim ? j : j + 1);
  };
  SmallVector<Value> operands;
  SmallVector<AffineMap> maps;
  for (OpOperand &operand : op->getOpOperands()) {
    AffineMap m = op.getMatchingIndexingMap(&operand);
    Value v = operand.get();
    SmallVector<AffineExpr> exprs;
    SmallVector<ReassociationIndices> groups;
    SmallVector<int64_t> shape;
    auto type = cast<MemRefType>(v.getType());
    bool expands = false;
    for (auto [pos, e] : llvm::enumerate(m.getResults())) {
      ReassociationIndices group{static_cast<int64_t>(exprs.size())};
      auto d = dyn_cast<AffineDimExpr>(e);
      if (d && d.getPosition() == dim) {
        exprs.push_back(b.getAffineDimExpr(dim));
        exprs.push_back(b.getAffineDimExpr(dim + 1));
        group.push_back(static_cast<int64_t>(exprs.size()) - 1);
        shape.append({outer, inner});
        expands = true;
      } else {
        exprs.push_back(e.replaceDims(llvm::to_vector(
            llvm::map_range(llvm::seq<unsigned>(0, n), shifted))));
        shape.push_back(type.getDimSize(pos));
      }
      groups.push_back(group);
    }
    maps.push_back(AffineMap::get(n + 1, 0, exprs, ctx));
    if (expands)
      v = memref::ExpandShapeOp::create(b, op.getLoc(), shape, v, groups);
    operands.push_back(v);
  }
  SmallVector<utils::IteratorType> iters = op.getIteratorTypesArray();
  iters.insert(iters.begin() + dim + 1, iters[dim]);
  unsigned numInputs = op.getNumDpsInputs();
  auto split = linalg::GenericOp::create(
      b, op.getLoc(), TypeRange{}, ArrayRef(operands).take_front(numInputs),
      ArrayRef(operands).drop_front(numInputs), maps, iters);
  split.getRegion().takeBody(op.getRegion());
  op.erase();
  return split;
}

/// The largest divisor of `extent` in [2, limit], or 1.
int64_t largestDivisor(int64_t extent, int64_t limit) {
  for (int64_t d = std::min(extent - 1, limit); d >= 2; --d)
    if (extent % d == 0)
      return d;
  return 1;
}

struct SplitReductionsPass
    : impl::SplitReductionsPassBase<SplitReductionsPass> {
  using SplitReductionsPassBase::SplitReductionsPassBase;

  void runOnOperation() override {
    // (op, loops to move, outer extent of the next loop's strip-mining or 1)
    SmallVector<std::tuple<linalg::GenericOp, unsigned, int64_t>> candidates;
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
      // Such a loop is strip-mined instead when moving it whole would give
      // an output more than kMaxAtomicsPerOutput atomic adds (a sum of
      // 1,000,000 terms into one float: 1,000,000 of them): its outer part
      // joins the threads, up to that many per output (and the target),
      // its inner part stays serial. Only for a reduction without other
      // outputs and without linalg.index (their maps and indices would
      // need the split too).
      int64_t outputs = threads;
      unsigned numOuter = numParallel;
      int64_t serial = length, outer = 1;
      bool splittable =
          op.getNumDpsInits() == 1 && numParallel < ranges.size() &&
          !op.getBody()
               ->walk([](linalg::IndexOp) { return WalkResult::interrupt(); })
               .wasInterrupted();
      while (numOuter < ranges.size() &&
             (threads * ranges[numOuter] <= targetThreads ||
              serial >= minReduction)) {
        int64_t extent = ranges[numOuter];
        if (threads * extent > targetThreads && splittable &&
            threads * extent / outputs > kMaxAtomicsPerOutput &&
            canStripMine(op, numOuter)) {
          outer = largestDivisor(
              extent, std::min(targetThreads / threads,
                               kMaxAtomicsPerOutput * outputs / threads));
          if (outer > 1)
            break;
        }
        threads *= extent;
        serial /= extent;
        ++numOuter;
      }
      if (numOuter == numParallel && outer == 1)
        return;
      candidates.push_back({op, numOuter, outer});
    });
    for (auto [op, numOuter, outer] : candidates) {
      if (outer > 1)
        op = stripMine(op, numOuter++, outer);
      (void)rewriteAsAtomicLoops(op, numOuter);
    }
  }
};

} // namespace

} // namespace ddpc

//===- GemmToLibraryCall.cpp - contraction generics to cuBLAS calls -------===//
//
// Part of ddpc. See Passes.td (ddpc-gemm-to-library-call).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/Passes.h"

#include "ddpc/Codegen/LibraryCalls.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_GEMMTOLIBRARYCALLPASS
#include "ddpc/Codegen/Passes.h.inc"

namespace {

struct GemmToLibraryCallPass
    : impl::GemmToLibraryCallPassBase<GemmToLibraryCallPass> {

  void runOnOperation() override {
    SmallVector<linalg::LinalgOp> candidates;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (op.hasPureBufferSemantics() && op.getNumDpsInputs() == 2 &&
          op.getNumDpsInits() == 1 && linalg::isaContractionOpInterface(op))
        candidates.push_back(op);
    });
    for (linalg::LinalgOp op : candidates)
      (void)rewrite(op);
  }

  LogicalResult rewrite(linalg::LinalgOp op) {
    Value a = op.getDpsInputOperand(0)->get();
    Value bm = op.getDpsInputOperand(1)->get();
    Value c = op.getDpsInitOperand(0)->get();
    if (!denseF32(a) || !denseF32(bm) || !denseF32(c))
      return failure();
    FailureOr<linalg::ContractionDimensions> dims =
        linalg::inferContractionDims(op);
    if (failed(dims) || dims->m.size() != 1 || dims->n.size() != 1 ||
        dims->k.size() != 1 || dims->batch.size() > 1 ||
        op.getNumLoops() != 3 + dims->batch.size())
      return failure();
    SmallVector<unsigned> batch(dims->batch.begin(), dims->batch.end());
    unsigned m = dims->m[0], n = dims->n[0], k = dims->k[0];
    auto with = [&](unsigned x, unsigned y) {
      SmallVector<unsigned> r = batch;
      r.push_back(x);
      r.push_back(y);
      return r;
    };
    SmallVector<AffineMap> maps = op.getIndexingMapsArray();
    // inferContractionDims names m/n relative to the first input; the
    // output's dim order decides which is the row dimension here.
    if (!resultsAre(maps[2], with(m, n))) {
      if (!resultsAre(maps[2], with(n, m)))
        return failure();
      std::swap(m, n);
    }
    // The multiplication commutes: either input may be the [m, k] operand
    // (VJPs of MatMul produce both orders).
    auto classify = [&](AffineMap aMap, AffineMap bMap, int &transA,
                        int &transB) {
      if (resultsAre(aMap, with(m, k)))
        transA = 0;
      else if (resultsAre(aMap, with(k, m)))
        transA = 1;
      else
        return false;
      if (resultsAre(bMap, with(k, n)))
        transB = 0;
      else if (resultsAre(bMap, with(n, k)))
        transB = 1;
      else
        return false;
      return true;
    };
    int transA, transB;
    if (!classify(maps[0], maps[1], transA, transB)) {
      if (!classify(maps[1], maps[0], transA, transB))
        return failure();
      std::swap(a, bm);
    }

    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    int64_t batchSize = batch.empty() ? 1 : ranges[batch[0]];
    int64_t M = ranges[m], N = ranges[n], K = ranges[k];
    // The contraction writes every element of c (dense, batch-major).
    bool zeroed = eraseZeroFillOf(op, c);
    emitGemmCall(op, batchSize, M, N, K, transA, transB, a, bm, c, M * K, K * N,
                 M * N, /*accumulate=*/!zeroed);
    op->erase();
    return success();
  }
};

} // namespace

} // namespace ddpc

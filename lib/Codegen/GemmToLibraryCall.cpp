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
  using impl::GemmToLibraryCallPassBase<
      GemmToLibraryCallPass>::GemmToLibraryCallPassBase;

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

  /// The dims `map`'s results name, in order; none when a result is not a
  /// plain dim.
  static std::optional<SmallVector<unsigned>> resultDims(AffineMap map) {
    SmallVector<unsigned> r;
    for (AffineExpr e : map.getResults()) {
      auto de = dyn_cast<AffineDimExpr>(e);
      if (!de)
        return std::nullopt;
      r.push_back(de.getPosition());
    }
    return r;
  }

  /// Whether `dims` is `first` then `second` (each a run of loop dims).
  static bool isConcat(ArrayRef<unsigned> dims, ArrayRef<unsigned> first,
                       ArrayRef<unsigned> second) {
    return dims.size() == first.size() + second.size() &&
           dims.take_front(first.size()) == first &&
           dims.drop_front(first.size()) == second;
  }

  /// Splits `dims` (an operand's result dims) into its leading batch dims
  /// (all of `batch`, in order, or none: the operand is shared by the
  /// batch) and the rest; false when it holds only some of them.
  static bool splitBatch(ArrayRef<unsigned> dims, ArrayRef<unsigned> batch,
                         bool &batched, ArrayRef<unsigned> &rest) {
    batched = !batch.empty() && dims.size() >= batch.size() &&
              dims.take_front(batch.size()) == batch;
    rest = batched ? dims.drop_front(batch.size()) : dims;
    return llvm::none_of(
        rest, [&](unsigned d) { return llvm::is_contained(batch, d); });
  }

  /// A contraction whose dims form runs: C[batch.., M.., N..] (+)=
  /// A[batch.., M.. | K..] * B[batch.., K.. | N..], each run of m, n, k or
  /// batch dims contiguous and in one order in every operand that has it
  /// (e.g. MatMul of [2,3,4,5] x [2,3,5,6], whose batch is 2*3, and the
  /// VJP of a broadcast MatMul, whose K is batch * rows). An operand
  /// without the batch dims is shared by the batch (stride 0).
  LogicalResult rewrite(linalg::LinalgOp op) {
    Value a = op.getDpsInputOperand(0)->get();
    Value bm = op.getDpsInputOperand(1)->get();
    Value c = op.getDpsInitOperand(0)->get();
    if (!denseF32(a) || !denseF32(bm) || !denseF32(c))
      return failure();
    FailureOr<linalg::ContractionDimensions> dims =
        linalg::inferContractionDims(op);
    if (failed(dims) || dims->k.empty() ||
        op.getNumLoops() != dims->batch.size() + dims->m.size() +
                                dims->n.size() + dims->k.size())
      return failure();
    SmallVector<AffineMap> maps = op.getIndexingMapsArray();
    auto aDims = resultDims(maps[0]), bDims = resultDims(maps[1]),
         cDims = resultDims(maps[2]);
    if (!aDims || !bDims || !cDims)
      return failure();
    // The output fixes the batch run and the order within the m and n runs.
    SmallVector<unsigned> batch(dims->batch.begin(), dims->batch.end());
    if (ArrayRef<unsigned>(*cDims).take_front(batch.size()) !=
        ArrayRef<unsigned>(batch))
      return failure();
    ArrayRef<unsigned> cRest =
        ArrayRef<unsigned>(*cDims).drop_front(batch.size());
    auto isM = [&](unsigned d) { return llvm::is_contained(dims->m, d); };
    auto isK = [&](unsigned d) { return llvm::is_contained(dims->k, d); };
    // inferContractionDims names m/n relative to the first input; here the
    // m run is the one the output's rows come from.
    size_t rows = 0;
    while (rows < cRest.size() && isM(cRest[rows]) == isM(cRest.front()))
      ++rows;
    ArrayRef<unsigned> mRun = cRest.take_front(rows),
                       nRun = cRest.drop_front(rows);
    if (mRun.empty() || nRun.empty())
      return failure();
    bool batchedA, batchedB;
    ArrayRef<unsigned> aRest, bRest;
    if (!splitBatch(*aDims, batch, batchedA, aRest) ||
        !splitBatch(*bDims, batch, batchedB, bRest))
      return failure();
    // The multiplication commutes: either input may hold the m run (VJPs
    // of MatMul produce both orders).
    auto holds = [](ArrayRef<unsigned> dims, ArrayRef<unsigned> run) {
      return llvm::all_of(
          run, [&](unsigned d) { return llvm::is_contained(dims, d); });
    };
    if (!holds(aRest, mRun)) {
      std::swap(a, bm);
      std::swap(aRest, bRest);
      std::swap(batchedA, batchedB);
    }
    if (!holds(aRest, mRun) || !holds(bRest, nRun))
      return failure();
    // The k run in A's order; B must list it in the same order.
    SmallVector<unsigned> kRun;
    for (unsigned d : aRest)
      if (isK(d))
        kRun.push_back(d);
    if (kRun.size() != dims->k.size())
      return failure();
    int transA, transB;
    if (isConcat(aRest, mRun, kRun))
      transA = 0;
    else if (isConcat(aRest, kRun, mRun))
      transA = 1;
    else
      return failure();
    if (isConcat(bRest, kRun, nRun))
      transB = 0;
    else if (isConcat(bRest, nRun, kRun))
      transB = 1;
    else
      return failure();

    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    auto size = [&](ArrayRef<unsigned> run) {
      int64_t n = 1;
      for (unsigned d : run)
        n *= ranges[d];
      return n;
    };
    int64_t batchSize = size(batch), M = size(mRun), N = size(nRun),
            K = size(kRun);
    // Batch strides (of no effect with batch 1): a shared operand's is 0.
    int64_t strideA = batchedA || batch.empty() ? M * K : 0,
            strideB = batchedB || batch.empty() ? K * N : 0;
    // A shared B under row-major, untransposed A: the batch is more rows
    // of one GEMM (C and A are batch-major and dense).
    if (batchSize > 1 && !batchedB && batchedA && transA == 0) {
      M *= batchSize;
      batchSize = 1;
      strideA = M * K;
    }
    // The contraction writes every element of c (dense, batch-major).
    bool zeroed = eraseZeroFillOf(op, c);
    emitGemmCall(op, batchSize, M, N, K, transA, transB, a, bm, c, strideA,
                 strideB, M * N, /*accumulate=*/!zeroed, library);
    op->erase();
    return success();
  }
};

} // namespace

} // namespace ddpc

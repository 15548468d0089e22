//===- ConvToLibraryCall.cpp - convolutions to cuDNN or im2col + GEMM -----===//
//
// Part of ddpc. See Passes.td (ddpc-conv-to-library-call).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/Passes.h"

#include "ddpc/Codegen/LibraryCalls.h"
#include "ddpc/Codegen/RuntimeCalls.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Pass/Pass.h"

#include <optional>
#include <utility>

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_CONVTOLIBRARYCALLPASS
#include "ddpc/Codegen/Passes.h.inc"

namespace {

/// Coefficients (a, b) when `e` is `a * d<i> + b * d<j>` (a, b >= 1), by
/// evaluating it at unit points; failure otherwise.
std::optional<std::pair<int64_t, int64_t>>
linearIn(AffineExpr e, unsigned numDims, unsigned i, unsigned j) {
  auto at = [&](int64_t vi, int64_t vj) -> std::optional<int64_t> {
    SmallVector<AffineExpr> dims;
    for (unsigned d = 0; d < numDims; ++d)
      dims.push_back(getAffineConstantExpr(d == i   ? vi
                                           : d == j ? vj
                                                    : 0,
                                           e.getContext()));
    auto c = dyn_cast<AffineConstantExpr>(
        simplifyAffineExpr(e.replaceDims(dims), 0, 0));
    if (!c)
      return std::nullopt;
    return c.getValue();
  };
  auto zero = at(0, 0), a = at(1, 0), b = at(0, 1), ab = at(1, 1),
       big = at(7, 5);
  if (!zero || !a || !b || !ab || !big || *zero != 0 || *a < 1 || *b < 1 ||
      *ab != *a + *b || *big != 7 * *a + 5 * *b)
    return std::nullopt;
  // The other dims must not appear.
  for (unsigned d = 0; d < numDims; ++d)
    if (d != i && d != j && e.isFunctionOfDim(d))
      return std::nullopt;
  return std::make_pair(*a, *b);
}

/// Whether the body of `op` is `yield acc + in0 * in1` (either order).
bool isMulAdd(linalg::GenericOp op) {
  Block &body = op.getRegion().front();
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  auto add = yield.getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!add || body.getOperations().size() != 3)
    return false;
  Value acc = body.getArgument(2);
  Value other = add.getLhs() == acc   ? add.getRhs()
                : add.getRhs() == acc ? add.getLhs()
                                      : Value();
  auto mul = other ? other.getDefiningOp<arith::MulFOp>() : nullptr;
  if (!mul)
    return false;
  Value x = body.getArgument(0), w = body.getArgument(1);
  return (mul.getLhs() == x && mul.getRhs() == w) ||
         (mul.getLhs() == w && mul.getRhs() == x);
}

struct ConvToLibraryCallPass
    : impl::ConvToLibraryCallPassBase<ConvToLibraryCallPass> {
  using impl::ConvToLibraryCallPassBase<
      ConvToLibraryCallPass>::ConvToLibraryCallPassBase;

  void runOnOperation() override {
    SmallVector<linalg::GenericOp> convs;
    getOperation().walk([&](linalg::GenericOp op) {
      if (op.hasPureBufferSemantics() && op.getNumDpsInputs() == 2 &&
          op.getNumDpsInits() == 1 && op.getNumLoops() == 8)
        convs.push_back(op);
    });
    for (linalg::GenericOp op : convs)
      (void)rewrite(op);
  }

  /// The operands, loop ranges and window strides/dilations of a
  /// convolution generic in the importer's loop space (n, g, oc, oh, ow,
  /// ic, kh, kw): operand `windowed` (x of the forward and weight gradient,
  /// dx of the input gradient) is indexed [n, g, ic, sh*oh + dh*kh,
  /// sw*ow + dw*kw] and static float32; the other two operands, in operand
  /// order, are dense float32 with the given dims; loops are parallel as
  /// given. Sizes: G groups of C input and OC output channels each, K =
  /// C*KH*KW (window elements), P = OH*OW (output positions).
  struct ConvMatch {
    Value windowed;
    SmallVector<Value, 2> others;
    std::pair<int64_t, int64_t> hw, ww;
    int64_t N, G, OC, OH, OW, C, KH, KW, K, P;
  };
  static std::optional<ConvMatch>
  matchConv(linalg::GenericOp op, ArrayRef<bool> parallel, unsigned windowed,
            ArrayRef<unsigned> firstDims, ArrayRef<unsigned> secondDims) {
    auto iters = op.getIteratorTypesArray();
    for (unsigned i = 0; i < 8; ++i)
      if ((iters[i] == utils::IteratorType::parallel) != parallel[i])
        return std::nullopt;
    SmallVector<AffineMap> maps = op.getIndexingMapsArray();
    AffineMap xm = maps[windowed];
    auto dim = [&](AffineExpr e, unsigned d) {
      auto de = dyn_cast<AffineDimExpr>(e);
      return de && de.getPosition() == d;
    };
    if (xm.getNumResults() != 5 || !dim(xm.getResult(0), 0) ||
        !dim(xm.getResult(1), 1) || !dim(xm.getResult(2), 5))
      return std::nullopt;
    ConvMatch m;
    m.windowed = op->getOperand(windowed);
    for (unsigned i = 0; i < 3; ++i) {
      if (i == windowed)
        continue;
      ArrayRef<unsigned> dims = m.others.empty() ? firstDims : secondDims;
      if (!resultsAre(maps[i], dims) || !denseF32(op->getOperand(i)))
        return std::nullopt;
      m.others.push_back(op->getOperand(i));
    }
    auto hw = linearIn(xm.getResult(3), 8, 3, 6);
    auto ww = linearIn(xm.getResult(4), 8, 4, 7);
    SmallVector<int64_t> r = op.getStaticLoopRanges();
    auto xt = dyn_cast<MemRefType>(m.windowed.getType());
    if (!hw || !ww || !xt || !xt.hasStaticShape() ||
        !xt.getElementType().isF32())
      return std::nullopt;
    m.hw = *hw;
    m.ww = *ww;
    m.N = r[0], m.G = r[1], m.OC = r[2], m.OH = r[3], m.OW = r[4];
    m.C = r[5], m.KH = r[6], m.KW = r[7];
    m.K = m.C * m.KH * m.KW, m.P = m.OH * m.OW;
    return m;
  }

  static Value allocF32(OpBuilder &b, Location loc, ArrayRef<int64_t> shape) {
    return memref::AllocOp::create(b, loc,
                                   MemRefType::get(shape, b.getF32Type()),
                                   b.getI64IntegerAttr(64));
  }

  /// A copy kernel gathering the convolution windows of `x` (N x 1 x C x
  /// H x W, padded) into a new buffer: with `batchOuter`,
  ///   col[n, (ic,kh,kw), (oh,ow)]   (N x K x P, forward), else
  ///   col[(ic,kh,kw), n, (oh,ow)]   (K x N x P, weight gradient),
  /// holding x[n, 0, ic, sh*oh + dh*kh, sw*ow + dw*kw].
  static Value emitIm2Col(OpBuilder &b, Location loc, Operation *labels,
                          Value x, const ConvMatch &m, bool batchOuter) {
    MLIRContext *ctx = b.getContext();
    int64_t N = m.N, OH = m.OH, OW = m.OW, C = m.C, KH = m.KH, KW = m.KW,
            K = m.K, P = m.P;
    std::pair<int64_t, int64_t> hw = m.hw, ww = m.ww;
    Value col = allocF32(b, loc,
                         batchOuter ? SmallVector<int64_t>{N, K, P}
                                    : SmallVector<int64_t>{K, N, P});
    Value col6 =
        batchOuter
            ? memref::ExpandShapeOp::create(
                  b, loc, SmallVector<int64_t>{N, C, KH, KW, OH, OW}, col,
                  SmallVector<ReassociationIndices>{{0}, {1, 2, 3}, {4, 5}})
            : memref::ExpandShapeOp::create(
                  b, loc, SmallVector<int64_t>{C, KH, KW, N, OH, OW}, col,
                  SmallVector<ReassociationIndices>{{0, 1, 2}, {3}, {4, 5}});
    // Loops in the order of col6's dims.
    unsigned pn = batchOuter ? 0 : 3, pic = batchOuter ? 1 : 0,
             pkh = batchOuter ? 2 : 1, pkw = batchOuter ? 3 : 2;
    AffineExpr n = getAffineDimExpr(pn, ctx), ic = getAffineDimExpr(pic, ctx),
               kh = getAffineDimExpr(pkh, ctx), kw = getAffineDimExpr(pkw, ctx),
               oh = getAffineDimExpr(4, ctx), ow = getAffineDimExpr(5, ctx);
    AffineMap gather = AffineMap::get(6, 0,
                                      {n, getAffineConstantExpr(0, ctx), ic,
                                       oh * hw.first + kh * hw.second,
                                       ow * ww.first + kw * ww.second},
                                      ctx);
    auto im2col = linalg::GenericOp::create(
        b, loc, ValueRange{x}, ValueRange{col6},
        ArrayRef<AffineMap>{gather, b.getMultiDimIdentityMap(6)},
        SmallVector<utils::IteratorType>(6, utils::IteratorType::parallel),
        [](OpBuilder &nb, Location l, ValueRange args) {
          linalg::YieldOp::create(nb, l, args[0]);
        });
    copyLabels(labels, im2col);
    return col;
  }

  /// Convolution kinds of ddpc_conv2d_f32 (Gemm.h).
  enum ConvKind { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

  /// When the convolution can go to the library (cuDNN on the GPU: dense
  /// operands, and the output size cuDNN derives from the padded input),
  /// emits before `op`
  ///   %done = ddpc_conv2d_f32(kind, N, G*C, H, W, G*OC, KH, KW, OH, OW, sh,
  ///                           sw, dh, dw, G, x, w, y, accumulate) : i32
  ///   scf.if (%done == 0) {} {ddpc.library_fallback}
  /// and moves `op` into the scf.if, so its GEMM lowering becomes the
  /// fallback. x [N, G*C, H, W] is the padded input (kForward,
  /// kBackwardFilter) or its gradient (kBackwardData), w [G*OC, C, KH, KW]
  /// the weights or their gradient, y [N, G*OC, OH, OW] the output or its
  /// gradient. Returns false (nothing emitted) otherwise.
  bool emitLibraryConv(linalg::GenericOp op, ConvKind kind, const ConvMatch &m,
                       Value x, Value w, Value y, bool accumulate) {
    if (convLibrary.empty())
      return false;
    auto xt = cast<MemRefType>(x.getType());
    int64_t h = xt.getDimSize(3), wd = xt.getDimSize(4);
    auto outSize = [](int64_t in, int64_t k, std::pair<int64_t, int64_t> sd) {
      return (in - sd.second * (k - 1) - 1) / sd.first + 1;
    };
    if (!denseF32(x) || !denseF32(w) || !denseF32(y) ||
        outSize(h, m.KH, m.hw) != m.OH || outSize(wd, m.KW, m.ww) != m.OW)
      return false;
    OpBuilder b(op);
    Location loc = op.getLoc();
    RuntimeArgs arg{b, loc};
    auto i64 = [&](int64_t v) { return arg.integer(v, 64); };
    auto i32 = [&](int64_t v) { return arg.integer(v, 32); };
    auto ptr = [&](Value mem) { return arg.pointer(mem); };
    SmallVector<Value> args = {
        i32(kind),        i64(m.N),         i64(m.G * m.C),  i64(h),
        i64(wd),          i64(m.G * m.OC),  i64(m.KH),       i64(m.KW),
        i64(m.OH),        i64(m.OW),        i64(m.hw.first), i64(m.ww.first),
        i64(m.hw.second), i64(m.ww.second), i64(m.G),        ptr(x),
        ptr(w),           ptr(y),           i32(accumulate)};
    scf::IfOp fallback =
        emitLibraryCallWithFallback(b, loc, op, kConvFn, args, convLibrary);
    op->moveBefore(fallback.thenBlock()->getTerminator());
    return true;
  }

  LogicalResult rewrite(linalg::GenericOp op) {
    if (!isMulAdd(op))
      return failure();
    if (succeeded(rewriteForward(op)) || succeeded(rewriteWeightGradient(op)))
      return success();
    return rewriteInputGradient(op);
  }

  /// A grouped convolution (G > 1) of `kind` goes to the library only; the
  /// fallback is the original generic (a generated kernel), which
  /// accumulates, so a zero fill of the written tensor moves into it.
  LogicalResult rewriteGrouped(linalg::GenericOp op, ConvKind kind,
                               const ConvMatch &m, Value x, Value w, Value y,
                               Value written) {
    Operation *fill = findZeroFillOf(op, written);
    if (!emitLibraryConv(op, kind, m, x, w, y, /*accumulate=*/!fill))
      return failure();
    if (fill)
      fill->moveBefore(op);
    return success();
  }

  /// Matches the importer's input gradient of a convolution (all loops
  /// reduce): dx[n,g,ic,sh*oh+dh*kh,sw*ow+dw*kw] += w[g,oc,ic,kh,kw] *
  /// dy[n,g,oc,oh,ow] (inputs in either order). With one group it becomes one
  /// batched GEMM that overwrites a temporary (beta = 0),
  ///   dcol[n] (K x P) = w^T (K x OC) * dy[n] (OC x P), w shared,
  /// and col2im, dx[n,0,ic,sh*oh+dh*kh,sw*ow+dw*kw] += dcol[n,(ic,kh,kw),
  /// (oh,ow)]: a scatter generic that ddpc-scatter-to-atomic turns into one
  /// atomic add per dcol element (KH*KW adds per dx element at most) instead
  /// of OC adds per term.
  LogicalResult rewriteInputGradient(linalg::GenericOp op) {
    SmallVector<bool> reduce(8, false);
    SmallVector<unsigned> wDims{1, 2, 5, 6, 7}, dyDims{0, 1, 2, 3, 4};
    Value w, dy;
    auto m = matchConv(op, reduce, /*windowed=*/2, wDims, dyDims);
    if (m) {
      w = m->others[0];
      dy = m->others[1];
    } else if ((m = matchConv(op, reduce, 2, dyDims, wDims))) {
      dy = m->others[0];
      w = m->others[1];
    } else {
      return failure();
    }
    Value dx = m->windowed;
    if (m->G != 1)
      return rewriteGrouped(op, kBackwardData, *m, dx, w, dy, dx);
    int64_t N = m->N, OC = m->OC, OH = m->OH, OW = m->OW, C = m->C, KH = m->KH,
            KW = m->KW, K = m->K, P = m->P;
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    // cuDNN may overwrite dx (beta = 0); the fallback's col2im accumulates,
    // so it zeroes dx itself then.
    Operation *fill = findZeroFillOf(op, dx);
    if (emitLibraryConv(op, kBackwardData, *m, dx, w, dy,
                        /*accumulate=*/!fill) &&
        fill)
      fill->moveBefore(op);
    OpBuilder b(op);
    Value dcol = allocF32(b, loc, {N, K, P});
    Value wMat = memref::CollapseShapeOp::create(
        b, loc, w, SmallVector<ReassociationIndices>{{0, 1}, {2, 3, 4}});
    Value dyMat = memref::CollapseShapeOp::create(
        b, loc, dy, SmallVector<ReassociationIndices>{{0}, {1, 2}, {3, 4}});
    emitGemmCall(op, N, K, P, OC, /*transA=*/1, /*transB=*/0, wMat, dyMat, dcol,
                 0, OC * P, K * P, /*accumulate=*/false, gemmLibrary);
    // col2im over loops (n, ic, kh, kw, oh, ow).
    b.setInsertionPoint(op);
    Value dcol6 = memref::ExpandShapeOp::create(
        b, loc, SmallVector<int64_t>{N, C, KH, KW, OH, OW}, dcol,
        SmallVector<ReassociationIndices>{{0}, {1, 2, 3}, {4, 5}});
    AffineExpr n = getAffineDimExpr(0, ctx), ic = getAffineDimExpr(1, ctx),
               kh = getAffineDimExpr(2, ctx), kw = getAffineDimExpr(3, ctx),
               oh = getAffineDimExpr(4, ctx), ow = getAffineDimExpr(5, ctx);
    AffineMap scatter = AffineMap::get(6, 0,
                                       {n, getAffineConstantExpr(0, ctx), ic,
                                        oh * m->hw.first + kh * m->hw.second,
                                        ow * m->ww.first + kw * m->ww.second},
                                       ctx);
    auto col2im = linalg::GenericOp::create(
        b, loc, ValueRange{dcol6}, ValueRange{dx},
        ArrayRef<AffineMap>{b.getMultiDimIdentityMap(6), scatter},
        SmallVector<utils::IteratorType>(6, utils::IteratorType::reduction),
        [](OpBuilder &nb, Location l, ValueRange args) {
          linalg::YieldOp::create(
              nb, l,
              arith::AddFOp::create(nb, l, args[1], args[0]).getResult());
        });
    copyLabels(op, col2im);
    memref::DeallocOp::create(b, loc, dcol);
    op->erase();
    return success();
  }

  /// Matches the importer's weight gradient of a convolution (same loops
  /// as the forward; n, oh, ow reduce):  dw[g,oc,ic,kh,kw] +=
  /// x[n,g,ic,sh*oh+dh*kh,sw*ow+dw*kw] * dy[n,g,oc,oh,ow]. With one group,
  /// colT[(ic,kh,kw), n, (oh,ow)] and dyT[oc, n, (oh,ow)] (a transpose
  /// kernel) it is one GEMM over the N*P positions:
  ///   dw (OC x K) += dyT (OC x N*P) * colT^T (N*P x K).
  LogicalResult rewriteWeightGradient(linalg::GenericOp op) {
    auto m = matchConv(op, {false, true, true, false, false, true, true, true},
                       /*windowed=*/0, {0, 1, 2, 3, 4}, {1, 2, 5, 6, 7});
    if (!m)
      return failure();
    Value x = m->windowed, dy = m->others[0], dw = m->others[1];
    if (m->G != 1)
      return rewriteGrouped(op, kBackwardFilter, *m, x, dw, dy, dw);
    int64_t N = m->N, OC = m->OC, OH = m->OH, OW = m->OW, K = m->K, P = m->P;
    bool zeroed = eraseZeroFillOf(op, dw);
    emitLibraryConv(op, kBackwardFilter, *m, x, dw, dy,
                    /*accumulate=*/!zeroed);
    OpBuilder b(op);
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    Value colT = emitIm2Col(b, loc, op, x, *m, /*batchOuter=*/false);
    // dyT[oc, n, oh, ow] = dy[n, 0, oc, oh, ow].
    Value dyT = allocF32(b, loc, {OC, N, P});
    Value dyT4 = memref::ExpandShapeOp::create(
        b, loc, SmallVector<int64_t>{OC, N, OH, OW}, dyT,
        SmallVector<ReassociationIndices>{{0}, {1}, {2, 3}});
    AffineMap readDy =
        AffineMap::get(4, 0,
                       {getAffineDimExpr(1, ctx), getAffineConstantExpr(0, ctx),
                        getAffineDimExpr(0, ctx), getAffineDimExpr(2, ctx),
                        getAffineDimExpr(3, ctx)},
                       ctx);
    auto transpose = linalg::GenericOp::create(
        b, loc, ValueRange{dy}, ValueRange{dyT4},
        ArrayRef<AffineMap>{readDy, b.getMultiDimIdentityMap(4)},
        SmallVector<utils::IteratorType>(4, utils::IteratorType::parallel),
        [](OpBuilder &nb, Location l, ValueRange args) {
          linalg::YieldOp::create(nb, l, args[0]);
        });
    copyLabels(op, transpose);
    Value dwMat = memref::CollapseShapeOp::create(
        b, loc, dw, SmallVector<ReassociationIndices>{{0, 1}, {2, 3, 4}});
    emitGemmCall(op, 1, OC, K, N * P, 0, 1, dyT, colT, dwMat, OC * N * P,
                 K * N * P, OC * K, /*accumulate=*/!zeroed, gemmLibrary);
    b.setInsertionPoint(op);
    memref::DeallocOp::create(b, loc, colT);
    memref::DeallocOp::create(b, loc, dyT);
    op->erase();
    return success();
  }

  /// Matches the importer's forward convolution (loops n, g, oc, oh, ow |
  /// ic, kh, kw):  y[n,g,oc,oh,ow] += x[n,g,ic,sh*oh+dh*kh,sw*ow+dw*kw] *
  /// w[g,oc,ic,kh,kw]; with one group, im2col + one batched GEMM.
  LogicalResult rewriteForward(linalg::GenericOp op) {
    auto m = matchConv(op, {true, true, true, true, true, false, false, false},
                       /*windowed=*/0, {1, 2, 5, 6, 7}, {0, 1, 2, 3, 4});
    if (!m)
      return failure();
    Value x = m->windowed, w = m->others[0], y = m->others[1];
    if (m->G != 1)
      return rewriteGrouped(op, kForward, *m, x, w, y, y);
    int64_t N = m->N, OC = m->OC, K = m->K, P = m->P;
    bool zeroed = eraseZeroFillOf(op, y);
    emitLibraryConv(op, kForward, *m, x, w, y, /*accumulate=*/!zeroed);
    OpBuilder b(op);
    Location loc = op.getLoc();
    Value col = emitIm2Col(b, loc, op, x, *m, /*batchOuter=*/true);
    // y[n] (OC x P) += w (OC x K) * col[n] (K x P), w shared by the batch.
    Value wMat = memref::CollapseShapeOp::create(
        b, loc, w, SmallVector<ReassociationIndices>{{0, 1}, {2, 3, 4}});
    Value yMat = memref::CollapseShapeOp::create(
        b, loc, y, SmallVector<ReassociationIndices>{{0}, {1, 2}, {3, 4}});
    emitGemmCall(op, N, OC, P, K, 0, 0, wMat, col, yMat, 0, K * P, OC * P,
                 /*accumulate=*/!zeroed, gemmLibrary);
    b.setInsertionPoint(op);
    memref::DeallocOp::create(b, loc, col);
    op->erase();
    return success();
  }
};

} // namespace

} // namespace ddpc

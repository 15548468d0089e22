//===- MatMul.cpp - Import of ONNX MatMul and Gemm ------------------------===//
//
// Part of ddpc. MatMul follows numpy.matmul (1-D promotion, broadcast batch
// dimensions); Gemm computes alpha * op(A) op(B) + beta * C. Both become a
// contraction linalg.generic (parallel batch/m/n dims, one reduction dim).
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"

using namespace mlir;

namespace ddpc::onnx_import {
namespace {

Value mulAdd(OpBuilder &b, Location l, Value x, Value y, Value acc) {
  if (isa<FloatType>(acc.getType()))
    return arith::AddFOp::create(b, l, acc, arith::MulFOp::create(b, l, x, y));
  return arith::AddIOp::create(b, l, acc, arith::MulIOp::create(b, l, x, y));
}

/// C[batch..., m, n] = sum_k A[batch..., m, k] * B[batch..., k, n] where A
/// and B are broadcast over the batch dims. `transA`/`transB` read A as
/// [k, m] / B as [n, k] (2-D only).
Value buildContraction(OpBuilder &b, Location loc, Value a, Value bm,
                       bool transA, bool transB, Type elem,
                       SmallVectorImpl<int64_t> &outShape) {
  MLIRContext *ctx = b.getContext();
  auto at = cast<RankedTensorType>(a.getType());
  auto bt = cast<RankedTensorType>(bm.getType());
  int64_t ar = at.getRank(), br = bt.getRank();
  ArrayRef<int64_t> as = at.getShape(), bs = bt.getShape();
  SmallVector<int64_t> batchA(as.begin(), as.end() - 2),
      batchB(bs.begin(), bs.end() - 2);
  auto batch = broadcastShapes({batchA, batchB});
  int64_t nb = batch->size();
  int64_t m = transA ? as[ar - 1] : as[ar - 2];
  int64_t n = transB ? bs[br - 2] : bs[br - 1];
  outShape.assign(batch->begin(), batch->end());
  outShape.push_back(m);
  outShape.push_back(n);
  // Dims: [batch..., m, n, k].
  unsigned numDims = nb + 3;
  AffineExpr dm = getAffineDimExpr(nb, ctx), dn = getAffineDimExpr(nb + 1, ctx),
             dk = getAffineDimExpr(nb + 2, ctx);
  auto batchExprs = [&](ArrayRef<int64_t> s) {
    SmallVector<AffineExpr> e;
    int64_t off = nb - (int64_t)s.size();
    for (size_t i = 0; i < s.size(); ++i)
      e.push_back(s[i] == 1 && (*batch)[off + i] != 1
                      ? getAffineConstantExpr(0, ctx)
                      : getAffineDimExpr(off + i, ctx));
    return e;
  };
  SmallVector<AffineExpr> ae = batchExprs(batchA), be = batchExprs(batchB);
  if (transA) {
    ae.push_back(dk);
    ae.push_back(dm);
  } else {
    ae.push_back(dm);
    ae.push_back(dk);
  }
  if (transB) {
    be.push_back(dn);
    be.push_back(dk);
  } else {
    be.push_back(dk);
    be.push_back(dn);
  }
  return buildGeneric(b, loc, ValueRange{a, bm},
                      {AffineMap::get(numDims, 0, ae, ctx),
                       AffineMap::get(numDims, 0, be, ctx)},
                      outShape, elem, 1, scalarAttr(elem, 0.0),
                      [](OpBuilder &nb, Location l, ValueRange args) {
                        return mulAdd(nb, l, args[0], args[1], args[2]);
                      });
}

LogicalResult importMatMul(NodeContext &ctx) {
  TValue a = ctx.input(0), b = ctx.input(1);
  if (a.dtype != b.dtype)
    return ctx.invalid("A and B have different dtypes");
  if (a.dtype == kBool)
    return ctx.unsupported("bool MatMul");
  if (a.rank() == 0 || b.rank() == 0)
    return ctx.invalid("MatMul inputs must have rank >= 1");
  OpBuilder &builder = ctx.builder();
  Location loc = ctx.loc();
  // numpy: a 1-D A is [1, k]; a 1-D B is [k, 1]; the added dim is removed.
  bool aVec = a.rank() == 1, bVec = b.rank() == 1;
  Value av = a.value, bv = b.value;
  if (aVec)
    av = buildReshape(builder, loc, av, {1, a.shape()[0]});
  if (bVec)
    bv = buildReshape(builder, loc, bv, {b.shape()[0], 1});
  auto as = cast<RankedTensorType>(av.getType()).getShape();
  auto bs = cast<RankedTensorType>(bv.getType()).getShape();
  if (as.back() != bs[bs.size() - 2])
    return ctx.invalid("inner dimensions differ (" + Twine(as.back()) + " vs " +
                       Twine(bs[bs.size() - 2]) + ")");
  if (failed(broadcastShapes({as.drop_back(2), bs.drop_back(2)})))
    return ctx.invalid("batch dimensions cannot be broadcast");
  SmallVector<int64_t> outShape;
  Value r = buildContraction(builder, loc, av, bv, false, false,
                             a.elementType(), outShape);
  if (aVec || bVec) {
    SmallVector<int64_t> s(outShape.begin(), outShape.end() - 2);
    if (!aVec)
      s.push_back(outShape[outShape.size() - 2]);
    if (!bVec)
      s.push_back(outShape.back());
    r = buildReshape(builder, loc, r, s);
  }
  ctx.setOutput(0, {r, a.dtype});
  return success();
}

LogicalResult importGemm(NodeContext &ctx) {
  if (failed(
          ctx.checkAttrs({"alpha", "beta", "transA", "transB", "broadcast"})))
    return failure();
  TValue a = ctx.input(0), b = ctx.input(1);
  if (a.rank() != 2 || b.rank() != 2)
    return ctx.invalid("Gemm inputs must be 2-D");
  if (a.dtype != b.dtype)
    return ctx.invalid("A and B have different dtypes");
  bool transA = ctx.attrFlag("transA", false),
       transB = ctx.attrFlag("transB", false);
  int64_t k1 = transA ? a.shape()[0] : a.shape()[1];
  int64_t k2 = transB ? b.shape()[1] : b.shape()[0];
  if (k1 != k2)
    return ctx.invalid("inner dimensions differ");
  OpBuilder &builder = ctx.builder();
  Location loc = ctx.loc();
  SmallVector<int64_t> outShape;
  Value r = buildContraction(builder, loc, a.value, b.value, transA, transB,
                             a.elementType(), outShape);
  double alpha = ctx.attrFloat("alpha", 1.0f),
         beta = ctx.attrFloat("beta", 1.0f);
  bool hasC = ctx.hasInput(2) && beta != 0.0;
  SmallVector<Value> ins{r};
  if (hasC) {
    TValue c = ctx.input(2);
    if (!broadcastsTo(c.shape(), outShape))
      return ctx.invalid("C of shape " + shapeString(c.shape()) +
                         " cannot be broadcast to the result's " +
                         shapeString(outShape));
    ins.push_back(c.value);
  }
  if (alpha != 1.0 || hasC) {
    Type elem = a.elementType();
    bool isF = isa<FloatType>(elem);
    r = buildElementwise(
        builder, loc, ins, outShape, elem,
        [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
          Value v = args[0];
          if (alpha != 1.0) {
            Value al = scalarConst(nb, l, elem, alpha);
            v = isF ? arith::MulFOp::create(nb, l, v, al).getResult()
                    : arith::MulIOp::create(nb, l, v, al).getResult();
          }
          if (hasC) {
            Value c = args[1];
            if (beta != 1.0) {
              Value be = scalarConst(nb, l, elem, beta);
              c = isF ? arith::MulFOp::create(nb, l, c, be).getResult()
                      : arith::MulIOp::create(nb, l, c, be).getResult();
            }
            v = isF ? arith::AddFOp::create(nb, l, v, c).getResult()
                    : arith::AddIOp::create(nb, l, v, c).getResult();
          }
          return v;
        });
  }
  ctx.setOutput(0, {r, a.dtype});
  return success();
}

} // namespace

void registerMatMulOps(OpRegistry &r) {
  r.add("MatMul", importMatMul);
  r.add("Gemm", importGemm);
}

} // namespace ddpc::onnx_import

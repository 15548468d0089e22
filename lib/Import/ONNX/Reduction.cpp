//===- Reduction.cpp - Import of ONNX Reduce* ops -------------------------===//
//
// Part of ddpc. ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
// ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp. Axes
// come from the attribute (before opset 13 for ReduceSum, 18 for the others)
// or the optional second input; `noop_with_empty_axes` is honoured.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;

namespace ddpc::onnx_import {
namespace {

enum class Kind {
  Sum,
  Mean,
  Max,
  Min,
  Prod,
  SumSquare,
  L1,
  L2,
  LogSum,
  LogSumExp
};

Value add(OpBuilder &b, Location l, Value x, Value y) {
  return isa<FloatType>(x.getType())
             ? arith::AddFOp::create(b, l, x, y).getResult()
             : arith::AddIOp::create(b, l, x, y).getResult();
}
Value mul(OpBuilder &b, Location l, Value x, Value y) {
  return isa<FloatType>(x.getType())
             ? arith::MulFOp::create(b, l, x, y).getResult()
             : arith::MulIOp::create(b, l, x, y).getResult();
}

LogicalResult importReduce(NodeContext &ctx, Kind kind) {
  TValue x = ctx.input(0);
  int64_t rank = x.rank();
  int64_t axesInputOpset = kind == Kind::Sum ? 13 : 18;
  SmallVector<int64_t> axes;
  bool axesGiven = false;
  if (ctx.opset >= axesInputOpset) {
    if (ctx.hasInput(1)) {
      auto a = ctx.constIntsInput(1);
      if (failed(a))
        return failure();
      axes = *a;
      axesGiven = true;
    }
  } else if (ctx.hasAttr("axes")) {
    axes = ctx.attrInts("axes");
    axesGiven = true;
  }
  bool keepDims = ctx.attrFlag("keepdims", true);
  (void)axesGiven;
  // noop_with_empty_axes=1 with no axes (attribute absent, input omitted or
  // empty) reduces nothing, but the element function of the op still
  // applies (ONNX reference: np.sum(np.square(x), axis=())): X for Sum,
  // Mean, Max, Min, Prod and LogSumExp, X^2, |X|, sqrt(X^2) and log(X) for
  // SumSquare, L1, L2 and LogSum.
  bool noop = axes.empty() && ctx.attrFlag("noop_with_empty_axes", false);
  if (axes.empty() && !noop)
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  for (auto &a : axes) {
    auto n = normalizeAxis(a, rank);
    if (failed(n))
      return ctx.invalid("axis " + Twine(a) + " out of range");
    a = *n;
  }
  llvm::sort(axes);
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  Type elem = x.elementType();
  bool isF = isa<FloatType>(elem);
  bool isU = isUnsignedDType(x.dtype) || x.dtype == kBool;
  if (x.dtype == kBool && kind != Kind::Max && kind != Kind::Min)
    return ctx.unsupported("bool input");
  if (!isF && (kind == Kind::Mean || kind == Kind::L2 || kind == Kind::LogSum ||
               kind == Kind::LogSumExp))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  if (noop) {
    if (kind != Kind::SumSquare && kind != Kind::L1 && kind != Kind::L2 &&
        kind != Kind::LogSum) {
      ctx.setOutput(0, x);
      return success();
    }
    Value r = buildElementwise(
        ctx.builder(), ctx.loc(), x.value, x.shape(), elem,
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          switch (kind) {
          case Kind::L1:
            if (isU)
              return a[0];
            return isF ? math::AbsFOp::create(nb, l, a[0]).getResult()
                       : math::AbsIOp::create(nb, l, a[0]).getResult();
          case Kind::LogSum:
            return math::LogOp::create(nb, l, a[0]);
          case Kind::L2:
            return math::SqrtOp::create(nb, l, mul(nb, l, a[0], a[0]));
          default:
            return mul(nb, l, a[0], a[0]);
          }
        });
    ctx.setOutput(0, {r, x.dtype});
    return success();
  }
  int64_t count = 1;
  for (int64_t a : axes)
    count *= x.shape()[a];
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  Value input = x.value;
  SmallVector<int64_t> outShape;
  for (int64_t d = 0; d < rank; ++d)
    if (!llvm::is_contained(axes, d))
      outShape.push_back(x.shape()[d]);
    else if (keepDims)
      outShape.push_back(1);

  // LogSumExp subtracts the max for stability: log(sum(exp(x - m))) + m.
  Value maxV;
  if (kind == Kind::LogSumExp) {
    maxV = buildReduction(b, loc, input, axes, /*keepDims=*/true,
                          lowestAttr(elem, false),
                          [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                            return arith::MaximumFOp::create(nb, l, a[0], a[1]);
                          });
    SmallVector<int64_t> keptShape;
    for (int64_t d = 0; d < rank; ++d)
      keptShape.push_back(llvm::is_contained(axes, d) ? 1 : x.shape()[d]);
    // Replace -inf maxima (all -inf input) by 0 to avoid NaN.
    maxV = buildElementwise(
        b, loc, maxV, keptShape, elem,
        [](OpBuilder &nb, Location l, ValueRange a) -> Value {
          Value ninf = arith::ConstantOp::create(
              nb, l, lowestAttr(a[0].getType(), false));
          Value isInf = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ,
                                              a[0], ninf);
          return arith::SelectOp::create(
              nb, l, isInf, scalarConst(nb, l, a[0].getType(), 0.0), a[0]);
        });
    input =
        buildElementwise(b, loc, ValueRange{input, maxV}, x.shape(), elem,
                         [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                           return math::ExpOp::create(
                               nb, l, arith::SubFOp::create(nb, l, a[0], a[1]));
                         });
  } else if (kind == Kind::SumSquare || kind == Kind::L2 || kind == Kind::L1) {
    input = buildElementwise(
        b, loc, input, x.shape(), elem,
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          if (kind != Kind::L1)
            return mul(nb, l, a[0], a[0]);
          if (isU)
            return a[0];
          return isF ? math::AbsFOp::create(nb, l, a[0]).getResult()
                     : math::AbsIOp::create(nb, l, a[0]).getResult();
        });
  }

  TypedAttr init;
  std::function<Value(OpBuilder &, Location, ValueRange)> combine;
  switch (kind) {
  case Kind::Max:
    init = lowestAttr(elem, isU);
    combine = [isF, isU](OpBuilder &nb, Location l, ValueRange a) -> Value {
      if (isF)
        return arith::MaximumFOp::create(nb, l, a[0], a[1]);
      return isU ? arith::MaxUIOp::create(nb, l, a[0], a[1]).getResult()
                 : arith::MaxSIOp::create(nb, l, a[0], a[1]).getResult();
    };
    break;
  case Kind::Min:
    init = highestAttr(elem, isU);
    combine = [isF, isU](OpBuilder &nb, Location l, ValueRange a) -> Value {
      if (isF)
        return arith::MinimumFOp::create(nb, l, a[0], a[1]);
      return isU ? arith::MinUIOp::create(nb, l, a[0], a[1]).getResult()
                 : arith::MinSIOp::create(nb, l, a[0], a[1]).getResult();
    };
    break;
  case Kind::Prod:
    init = scalarAttr(elem, 1.0);
    combine = [](OpBuilder &nb, Location l, ValueRange a) -> Value {
      return mul(nb, l, a[0], a[1]);
    };
    break;
  default:
    init = scalarAttr(elem, 0.0);
    combine = [](OpBuilder &nb, Location l, ValueRange a) -> Value {
      return add(nb, l, a[0], a[1]);
    };
    break;
  }
  Value r = buildReduction(b, loc, input, axes, keepDims, init, combine);
  if (kind == Kind::Mean || kind == Kind::L2 || kind == Kind::LogSum ||
      kind == Kind::LogSumExp) {
    SmallVector<Value> ins{r};
    if (maxV)
      ins.push_back(buildReshape(b, loc, maxV, outShape));
    r = buildElementwise(b, loc, ins, outShape, elem,
                         [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                           Value v = a[0];
                           switch (kind) {
                           case Kind::Mean:
                             return arith::DivFOp::create(
                                 nb, l, v, scalarConst(nb, l, elem, count));
                           case Kind::L2:
                             return math::SqrtOp::create(nb, l, v);
                           case Kind::LogSum:
                             return math::LogOp::create(nb, l, v);
                           default:
                             return arith::AddFOp::create(
                                 nb, l, math::LogOp::create(nb, l, v), a[1]);
                           }
                         });
  }
  ctx.setOutput(0, {r, x.dtype});
  return success();
}

/// ArgMax / ArgMin over one axis (keepdims, select_last_index): the first
/// (or last) index of the extreme value, int64. A NaN counts as the
/// extreme, as in numpy.
/// `forcedAxis` >= 0 (Hardmax): that axis, keepdims, first index.
LogicalResult importArgExtreme(NodeContext &ctx, bool isMax,
                               int64_t forcedAxis = -1) {
  bool forced = forcedAxis >= 0;
  if (!forced &&
      failed(ctx.checkAttrs({"axis", "keepdims", "select_last_index"})))
    return failure();
  TValue x = ctx.input(0);
  int64_t rank = x.rank();
  auto axisOr = forced ? FailureOr<int64_t>(forcedAxis)
                       : normalizeAxis(ctx.attrInt("axis", 0), rank);
  if (failed(axisOr))
    return ctx.invalid("axis " + Twine(ctx.attrInt("axis", 0)) +
                       " out of range for rank " + Twine(rank));
  int64_t axis = *axisOr;
  if (x.shape()[axis] == 0)
    return ctx.invalid("axis " + Twine(axis) + " is empty");
  if (x.dtype == kBool)
    return ctx.unsupported("bool input");
  bool keepDims = forced || ctx.attrFlag("keepdims", true);
  bool last = !forced && ctx.attrFlag("select_last_index", false);
  Type elem = x.elementType();
  bool isF = isa<FloatType>(elem);
  bool isU = isUnsignedDType(x.dtype);
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  Value extreme = buildReduction(
      b, loc, x.value, {axis}, /*keepDims=*/true,
      isMax ? lowestAttr(elem, isU) : highestAttr(elem, isU),
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        if (isF)
          return isMax
                     ? arith::MaximumFOp::create(nb, l, a[0], a[1]).getResult()
                     : arith::MinimumFOp::create(nb, l, a[0], a[1]).getResult();
        if (isU)
          return isMax ? arith::MaxUIOp::create(nb, l, a[0], a[1]).getResult()
                       : arith::MinUIOp::create(nb, l, a[0], a[1]).getResult();
        return isMax ? arith::MaxSIOp::create(nb, l, a[0], a[1]).getResult()
                     : arith::MinSIOp::create(nb, l, a[0], a[1]).getResult();
      });
  // Iteration space: the kept axes, then `axis` (reduction).
  MLIRContext *mctx = &ctx.importer.context;
  SmallVector<AffineExpr> xExprs(rank), mExprs(rank);
  SmallVector<int64_t> kept;
  unsigned k = 0;
  for (int64_t d = 0; d < rank; ++d) {
    if (d == axis) {
      xExprs[d] = getAffineDimExpr(rank - 1, mctx);
      mExprs[d] = getAffineConstantExpr(0, mctx);
    } else {
      xExprs[d] = mExprs[d] = getAffineDimExpr(k++, mctx);
      kept.push_back(x.shape()[d]);
    }
  }
  Type i64 = b.getI64Type();
  TypedAttr init =
      last ? IntegerAttr::get(i64, -1) : IntegerAttr::get(i64, x.shape()[axis]);
  Value r = buildGeneric(
      b, loc, ValueRange{x.value, extreme},
      {AffineMap::get(rank, 0, xExprs, mctx),
       AffineMap::get(rank, 0, mExprs, mctx)},
      kept, i64, 1, init, [&](OpBuilder &nb, Location l, ValueRange a) {
        Value hit = isF ? arith::CmpFOp::create(
                              nb, l, arith::CmpFPredicate::UEQ, a[0], a[1])
                              .getResult()
                        : arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                                a[0], a[1])
                              .getResult();
        if (isF) {
          // UEQ is also true where only one side is NaN: keep x == m, or
          // both NaN.
          Value xNaN = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::UNO,
                                             a[0], a[0]);
          Value mNaN = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::UNO,
                                             a[1], a[1]);
          hit = arith::AndIOp::create(
              nb, l, hit,
              arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, xNaN,
                                    mNaN));
        }
        Value i = arith::IndexCastOp::create(
            nb, l, i64, linalg::IndexOp::create(nb, l, rank - 1));
        Value best = last ? arith::MaxSIOp::create(nb, l, a[2], i).getResult()
                          : arith::MinSIOp::create(nb, l, a[2], i).getResult();
        return arith::SelectOp::create(nb, l, hit, best, a[2]).getResult();
      });
  if (keepDims) {
    SmallVector<int64_t> shape(x.shape());
    shape[axis] = 1;
    r = buildReshape(b, loc, r, shape);
  }
  ctx.setOutput(0, {r, kInt64});
  return success();
}

/// CumSum and CumProd (opset 26): the running sum (product) along `axis`
/// (input 1, a constant), inclusive or `exclusive`, forward or `reverse`:
/// out[i] = sum (product) of x[j] over j <= i (j < i, j >= i, j > i), as a
/// reduction over a second copy of the axis; terms outside the range are
/// the identity (0, 1).
LogicalResult importCumulative(NodeContext &ctx, bool product) {
  if (failed(ctx.checkAttrs({"exclusive", "reverse"})))
    return failure();
  TValue x = ctx.input(0);
  auto axisV = ctx.constIntsInput(1);
  if (failed(axisV))
    return failure();
  if (axisV->size() != 1)
    return ctx.invalid("axis must be one integer");
  int64_t rank = x.rank();
  auto axisOr = normalizeAxis((*axisV)[0], rank);
  if (failed(axisOr))
    return ctx.invalid("axis " + Twine((*axisV)[0]) + " out of range");
  int64_t axis = *axisOr;
  if (x.dtype == kBool)
    return ctx.unsupported("bool input");
  bool exclusive = ctx.attrFlag("exclusive", false);
  bool reverse = ctx.attrFlag("reverse", false);
  MLIRContext *mctx = &ctx.importer.context;
  SmallVector<AffineExpr> xExprs;
  for (int64_t d = 0; d < rank; ++d)
    xExprs.push_back(getAffineDimExpr(d == axis ? rank : d, mctx));
  Type elem = x.elementType();
  Value r = buildGeneric(
      ctx.builder(), ctx.loc(), x.value,
      {AffineMap::get(rank + 1, 0, xExprs, mctx)}, x.shape(), elem, 1,
      scalarAttr(elem, product ? 1.0 : 0.0),
      [&](OpBuilder &b, Location l, ValueRange a) {
        Value i = linalg::IndexOp::create(b, l, axis);
        Value j = linalg::IndexOp::create(b, l, rank);
        arith::CmpIPredicate p = reverse
                                     ? (exclusive ? arith::CmpIPredicate::sgt
                                                  : arith::CmpIPredicate::sge)
                                     : (exclusive ? arith::CmpIPredicate::slt
                                                  : arith::CmpIPredicate::sle);
        Value in = arith::CmpIOp::create(b, l, p, j, i);
        Value term = arith::SelectOp::create(
            b, l, in, a[0], scalarConst(b, l, elem, product ? 1.0 : 0.0));
        return product ? mul(b, l, a[1], term) : add(b, l, a[1], term);
      });
  ctx.setOutput(0, {r, x.dtype});
  return success();
}

/// TopK (opset 10+: K is input 1; opset 1: attribute k): the K largest
/// (or smallest) elements along `axis` and their int64 indices, ties in
/// index order (ONNX). By rank: element i's rank counts the elements
/// before it in the order; output slot r sums the one element of rank r
/// (O(n^2) along the axis; every value's VJP flows through a select).
LogicalResult importTopK(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"axis", "k", "largest", "sorted"})))
    return failure();
  TValue x = ctx.input(0);
  if (x.dtype == kBool)
    return ctx.unsupported("bool input");
  int64_t k;
  if (ctx.opset < 10) {
    k = ctx.attrInt("k", -1);
  } else {
    auto kv = ctx.constIntsInput(1);
    if (failed(kv))
      return failure();
    if (kv->size() != 1)
      return ctx.invalid("K must be one integer");
    k = (*kv)[0];
  }
  int64_t rank = x.rank();
  auto axisOr = normalizeAxis(ctx.attrInt("axis", -1), rank);
  if (failed(axisOr))
    return ctx.invalid("axis out of range");
  int64_t axis = *axisOr, n = x.shape()[axis];
  if (k < 0 || k > n)
    return ctx.invalid("K = " + Twine(k) + " is outside [0, " + Twine(n) +
                       "] (axis " + Twine(axis) + ")");
  bool largest = ctx.attrFlag("largest", true);
  Type elem = x.elementType();
  bool isF = isa<FloatType>(elem), isU = isUnsignedDType(x.dtype);
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  MLIRContext *mctx = &ctx.importer.context;
  // The order: NaN above every number (onnxruntime's TopK: first when
  // largest, never picked before a number when smallest), NaNs equal.
  auto isNaN = [](OpBuilder &nb, Location l, Value u) -> Value {
    return arith::CmpFOp::create(nb, l, arith::CmpFPredicate::UNO, u, u);
  };
  auto before = [&](OpBuilder &nb, Location l, Value u, Value v) -> Value {
    // u comes before v in the order.
    if (isF) {
      Value cmp = arith::CmpFOp::create(nb, l,
                                        largest ? arith::CmpFPredicate::OGT
                                                : arith::CmpFPredicate::OLT,
                                        u, v);
      Value nanU = isNaN(nb, l, u), nanV = isNaN(nb, l, v);
      Value t = arith::ConstantIntOp::create(nb, l, nb.getI1Type(), 1);
      Value nanFirst =
          largest ? arith::AndIOp::create(nb, l, nanU,
                                          arith::XOrIOp::create(nb, l, nanV, t))
                  : arith::AndIOp::create(
                        nb, l, nanV, arith::XOrIOp::create(nb, l, nanU, t));
      return arith::OrIOp::create(nb, l, cmp, nanFirst);
    }
    return arith::CmpIOp::create(
        nb, l,
        largest ? (isU ? arith::CmpIPredicate::ugt : arith::CmpIPredicate::sgt)
                : (isU ? arith::CmpIPredicate::ult : arith::CmpIPredicate::slt),
        u, v);
  };
  auto equal = [&](OpBuilder &nb, Location l, Value u, Value v) -> Value {
    if (isF)
      return arith::OrIOp::create(
          nb, l, arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, u, v),
          arith::AndIOp::create(nb, l, isNaN(nb, l, u), isNaN(nb, l, v)));
    return arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, u, v);
  };
  Type i64 = b.getI64Type();
  // rank[.., i, ..] = #{j : x_j before x_i, or x_j == x_i and j < i}; loops:
  // x's dims, then j (reduction).
  SmallVector<AffineExpr> iExprs, jExprs;
  for (int64_t d = 0; d < rank; ++d) {
    iExprs.push_back(getAffineDimExpr(d, mctx));
    jExprs.push_back(getAffineDimExpr(d == axis ? rank : d, mctx));
  }
  Value ranks = buildGeneric(
      b, loc, ValueRange{x.value, x.value},
      {AffineMap::get(rank + 1, 0, iExprs, mctx),
       AffineMap::get(rank + 1, 0, jExprs, mctx)},
      x.shape(), i64, 1, IntegerAttr::get(i64, 0),
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value i = linalg::IndexOp::create(nb, l, axis);
        Value j = linalg::IndexOp::create(nb, l, rank);
        Value earlier =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt, j, i);
        Value counts = arith::OrIOp::create(
            nb, l, before(nb, l, a[1], a[0]),
            arith::AndIOp::create(nb, l, equal(nb, l, a[1], a[0]), earlier));
        return arith::AddIOp::create(
            nb, l, a[2], arith::ExtUIOp::create(nb, l, i64, counts));
      });
  // out[.., r, ..] over loops (out dims, i): the element whose rank is r.
  SmallVector<int64_t> outShape(x.shape());
  outShape[axis] = k;
  if (k == 0) {
    ctx.setOutput(0,
                  {tensor::EmptyOp::create(b, loc, outShape, elem), x.dtype});
    ctx.setOutput(1, {tensor::EmptyOp::create(b, loc, outShape, i64), kInt64});
    return success();
  }
  SmallVector<AffineMap> inMaps(2, AffineMap::get(rank + 1, 0, jExprs, mctx));
  auto pick = [&](bool indices) {
    return buildGeneric(
        b, loc, ValueRange{x.value, ranks}, inMaps, outShape,
        indices ? i64 : elem, 1,
        indices ? TypedAttr(IntegerAttr::get(i64, 0)) : scalarAttr(elem, 0.0),
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          Value r = arith::IndexCastOp::create(
              nb, l, i64, linalg::IndexOp::create(nb, l, axis));
          Value hit =
              arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, a[1], r);
          if (indices) {
            Value i = arith::IndexCastOp::create(
                nb, l, i64, linalg::IndexOp::create(nb, l, rank));
            return arith::SelectOp::create(nb, l, hit, i, a[2]);
          }
          // A sum with one nonzero term (a sum's VJP is known; a select
          // on the accumulator has none).
          return add(nb, l, a[2],
                     arith::SelectOp::create(nb, l, hit, a[0],
                                             scalarConst(nb, l, elem, 0.0)));
        });
  };
  if (ctx.hasOutput(0))
    ctx.setOutput(0, {pick(false), x.dtype});
  if (ctx.hasOutput(1))
    ctx.setOutput(1, {pick(true), kInt64});
  return success();
}

/// Hardmax (opset 13+): 1 at the first maximum along `axis`, else 0.
LogicalResult importHardmax(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"axis"})))
    return failure();
  if (ctx.opset < 13)
    return ctx.unsupported("opset < 13 (the input coerced to 2-D)");
  TValue x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  int64_t rank = x.rank();
  auto axisOr = normalizeAxis(ctx.attrInt("axis", -1), rank);
  if (failed(axisOr))
    return ctx.invalid("axis out of range");
  int64_t axis = *axisOr;
  if (failed(importArgExtreme(ctx, true, axis)))
    return failure();
  TValue idx = ctx.importer.values[ctx.node.output(0)];
  Type elem = x.elementType();
  Value r = buildElementwise(
      ctx.builder(), ctx.loc(), idx.value, x.shape(), elem,
      [&](OpBuilder &b, Location l, ValueRange a) -> Value {
        Value i = arith::IndexCastOp::create(
            b, l, b.getI64Type(), linalg::IndexOp::create(b, l, axis));
        Value hit =
            arith::CmpIOp::create(b, l, arith::CmpIPredicate::eq, a[0], i);
        return arith::SelectOp::create(b, l, hit, scalarConst(b, l, elem, 1.0),
                                       scalarConst(b, l, elem, 0.0));
      });
  ctx.setOutput(0, {r, x.dtype});
  return success();
}

} // namespace

void registerReductionOps(OpRegistry &r) {
  auto reg = [&](StringRef name, Kind k) {
    r.add(name, [k](NodeContext &ctx) { return importReduce(ctx, k); });
  };
  reg("ReduceSum", Kind::Sum);
  reg("ReduceMean", Kind::Mean);
  reg("ReduceMax", Kind::Max);
  reg("ReduceMin", Kind::Min);
  reg("ReduceProd", Kind::Prod);
  reg("ReduceSumSquare", Kind::SumSquare);
  reg("ReduceL1", Kind::L1);
  reg("ReduceL2", Kind::L2);
  reg("ReduceLogSum", Kind::LogSum);
  reg("ReduceLogSumExp", Kind::LogSumExp);
  r.add("ArgMax", [](NodeContext &ctx) { return importArgExtreme(ctx, true); });
  r.add("ArgMin",
        [](NodeContext &ctx) { return importArgExtreme(ctx, false); });
  r.add("CumSum", [](NodeContext &c) { return importCumulative(c, false); });
  r.add("CumProd", [](NodeContext &c) { return importCumulative(c, true); });
  r.add("TopK", importTopK);
  r.add("Hardmax", importHardmax);
}

} // namespace ddpc::onnx_import

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
  bool keepDims = ctx.attrInt("keepdims", 1) != 0;
  (void)axesGiven;
  // noop_with_empty_axes=1 with no axes (attribute absent, input omitted or
  // empty) reduces nothing, but the element function of the op still
  // applies (ONNX reference: np.sum(np.square(x), axis=())): X for Sum,
  // Mean, Max, Min, Prod and LogSumExp, X^2, |X|, sqrt(X^2) and log(X) for
  // SumSquare, L1, L2 and LogSum.
  bool noop = axes.empty() && ctx.attrInt("noop_with_empty_axes", 0) != 0;
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
}

} // namespace ddpc::onnx_import

//===- Elementwise.cpp - Import of ONNX elementwise ops -------------------===//
//
// Part of ddpc. Unary, binary (numpy broadcasting) and variadic elementwise
// ops, comparisons, logic, Where, Clip and Cast. Each becomes one
// all-parallel linalg.generic. Integer ops on import-time constants (shape
// arithmetic) are folded on the host.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <cmath>

using namespace mlir;

namespace ddpc::onnx_import {
namespace {

/// Scalar semantics: builds the result from the input scalars. `dtype` is
/// the ONNX dtype of the (first) input.
using ScalarFn = std::function<Value(OpBuilder &, Location, ValueRange,
                                     int32_t dtype, NodeContext &)>;

bool isF(Value v) { return isa<FloatType>(v.getType()); }

/// Host-side evaluation of an integer binary op for constant shape tensors.
/// `a op b` on the host, as the compiled op computes it: wrapping add, sub
/// and mul, signed or unsigned max/min and division. None for a division
/// the run-time check refuses (by zero, INT_MIN / -1), which then stays in
/// the program.
std::optional<APInt> foldIntBinary(StringRef op, const APInt &a, const APInt &b,
                                   bool isUnsigned) {
  if (op == "Add")
    return a + b;
  if (op == "Sub")
    return a - b;
  if (op == "Mul")
    return a * b;
  if (op == "Div") {
    if (b.isZero() || (!isUnsigned && a.isMinSignedValue() && b.isAllOnes()))
      return std::nullopt;
    return isUnsigned ? a.udiv(b) : a.sdiv(b);
  }
  bool less = isUnsigned ? a.ult(b) : a.slt(b);
  if (op == "Max")
    return less ? b : a;
  if (op == "Min")
    return less ? a : b;
  return std::nullopt;
}

/// i1: the integer division a / b traps (b == 0, or INT_MIN / -1 signed).
Value integerDivisionTraps(OpBuilder &b, Location l, Value x, Value y,
                           bool isUnsigned) {
  Type t = y.getType();
  auto eq = [&](Value v, Value w) {
    return arith::CmpIOp::create(b, l, arith::CmpIPredicate::eq, v, w);
  };
  Value bad = eq(y, scalarConst(b, l, t, 0));
  if (!isUnsigned) {
    unsigned w = t.getIntOrFloatBitWidth();
    Value minV = arith::ConstantOp::create(
        b, l, IntegerAttr::get(t, APInt::getSignedMinValue(w)));
    Value minusOne = arith::ConstantOp::create(
        b, l, IntegerAttr::get(t, APInt::getAllOnes(w)));
    bad = arith::OrIOp::create(
        b, l, bad, arith::AndIOp::create(b, l, eq(x, minV), eq(y, minusOne)));
  }
  return bad;
}

/// Integer Div and Mod: a run-time check that no element divides by zero,
/// and for Div that none is INT_MIN / -1 (it overflows; onnxruntime refuses
/// it too). Mod's INT_MIN % -1 is 0, which the safe divisor computes.
void checkIntegerDivision(NodeContext &ctx, const TValue &x, const TValue &y,
                          StringRef opName) {
  bool zeroOnly = opName == "Mod";
  auto shape = broadcastShapes({x.shape(), y.shape()});
  if (failed(shape))
    return; // importElementwise reports it.
  bool isUnsigned = isUnsignedDType(x.dtype);
  Value bad = buildElementwise(
      ctx.builder(), ctx.loc(), ValueRange{x.value, y.value}, *shape,
      ctx.builder().getI1Type(),
      [&](OpBuilder &b, Location l, ValueRange a) -> Value {
        if (zeroOnly)
          return arith::CmpIOp::create(b, l, arith::CmpIPredicate::eq, a[1],
                                       scalarConst(b, l, a[1].getType(), 0));
        return integerDivisionTraps(b, l, a[0], a[1], isUnsigned);
      });
  std::string node = ctx.node.name();
  if (auto name = dyn_cast<NameLoc>(ctx.loc()))
    node = name.getName().str();
  buildCountCheck(ctx.builder(), ctx.loc(), bad,
                  printableText(((zeroOnly ? "integer division by zero in "
                                           : "integer division by zero (or "
                                             "INT_MIN / -1) in ") +
                                 opName + " node '" + node + "'")
                                    .str()));
}

/// Host evaluation of one integer or bool element of an elementwise op, as
/// the compiled op computes it (wrapping arithmetic, the dtype's
/// signedness). None when the op is not foldable here or the element
/// traps (division by zero), which then stays in the program.
std::optional<APInt> foldIntElement(StringRef op, ArrayRef<APInt> a,
                                    bool isUnsigned, int64_t fmod) {
  if (a.size() == 2)
    if (auto r = foldIntBinary(op, a[0], a[1], isUnsigned))
      return r;
  auto flag = [](bool v) { return APInt(1, v ? 1 : 0); };
  if (a.size() == 2) {
    const APInt &x = a[0], &y = a[1];
    if (op == "Equal")
      return flag(x == y);
    if (op == "Less")
      return flag(isUnsigned ? x.ult(y) : x.slt(y));
    if (op == "LessOrEqual")
      return flag(isUnsigned ? x.ule(y) : x.sle(y));
    if (op == "Greater")
      return flag(isUnsigned ? x.ugt(y) : x.sgt(y));
    if (op == "GreaterOrEqual")
      return flag(isUnsigned ? x.uge(y) : x.sge(y));
    if (op == "And")
      return x & y;
    if (op == "Or")
      return x | y;
    if (op == "Xor")
      return x ^ y;
    if (op == "Mod") {
      if (y.isZero())
        return std::nullopt;
      if (!isUnsigned && y.isAllOnes())
        return APInt(x.getBitWidth(), 0); // also INT_MIN % -1
      if (isUnsigned)
        return x.urem(y);
      APInt r = x.srem(y);
      if (fmod == 0 && !r.isZero() && r.isNegative() != y.isNegative())
        r += y;
      return r;
    }
  }
  if (a.size() == 1) {
    if (op == "Not")
      return ~a[0];
    if (op == "Neg")
      return -a[0];
    if (op == "Abs")
      return isUnsigned ? a[0] : a[0].abs();
    if (op == "Identity")
      return a[0];
  }
  if (a.size() == 3 && op == "Where")
    return a[0].getBoolValue() ? a[1] : a[2];
  return std::nullopt;
}

/// Folds an elementwise op whose inputs are all integer or bool host
/// constants (shape computations: exporters compute Reshape and Expand
/// targets with Shape, Mod, Equal, Where, ...), with numpy broadcasting.
/// Float constants stay computed in the program.
LogicalResult tryFoldIntElementwise(NodeContext &ctx) {
  StringRef op = ctx.node.op_type();
  SmallVector<DenseElementsAttr> cs;
  SmallVector<ArrayRef<int64_t>> shapes;
  int32_t dtype = kUndefined;
  for (int i = 0; i < ctx.numInputs(); ++i) {
    auto c = ctx.constInput(i);
    if (!c || !isa<IntegerType>(c->getElementType()))
      return failure();
    cs.push_back(*c);
    shapes.push_back(cast<RankedTensorType>(c->getType()).getShape());
    // Where's condition is bool; its values decide the dtype.
    if (op != "Where" || i > 0)
      dtype = ctx.importer.constants[ctx.node.input(i)].second;
  }
  if (cs.empty())
    return failure();
  auto outShape = broadcastShapes(shapes);
  if (failed(outShape) || numElements(*outShape) > 4096)
    return failure();
  bool isCompare = llvm::is_contained(
      {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"}, op);
  bool isLogic = llvm::is_contained({"And", "Or", "Xor", "Not"}, op);
  // Arithmetic on bool is not an ONNX op (and Add on i1 would wrap).
  if (dtype == kBool && !isLogic && !isCompare && op != "Where" &&
      op != "Identity")
    return failure();
  bool isUnsigned = isUnsignedDType(dtype) || dtype == kBool;
  int64_t fmod = ctx.attrInt("fmod", 0);
  SmallVector<SmallVector<APInt>> vals;
  for (auto &c : cs)
    vals.push_back(SmallVector<APInt>(c.getValues<APInt>()));
  int64_t rank = outShape->size(), n = numElements(*outShape);
  SmallVector<APInt> out;
  SmallVector<int64_t> idx(rank, 0);
  for (int64_t e = 0; e < n; ++e) {
    SmallVector<APInt> args;
    for (size_t k = 0; k < cs.size(); ++k) {
      // The broadcast element of input k: trailing dims aligned, size-1
      // dims read index 0.
      ArrayRef<int64_t> sh = shapes[k];
      int64_t off = 0, lead = rank - sh.size();
      for (size_t d = 0; d < sh.size(); ++d)
        off = off * sh[d] + (sh[d] == 1 ? 0 : idx[lead + d]);
      args.push_back(vals[k][off]);
    }
    auto r = foldIntElement(op, args, isUnsigned, fmod);
    if (!r)
      return failure();
    out.push_back(*r);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++idx[d] < (*outShape)[d])
        break;
      idx[d] = 0;
    }
  }
  Type elem = isCompare ? IntegerType::get(&ctx.importer.context, 1)
                        : cs[op == "Where" ? 1 : 0].getElementType();
  auto t = RankedTensorType::get(*outShape, elem);
  return ctx.setConstOutput(0, DenseElementsAttr::get(t, out),
                            isCompare ? kBool : dtype);
}

/// Imports an n-ary elementwise op with numpy broadcasting. `resultDType`
/// of kUndefined means "same as input 0".
LogicalResult importElementwise(NodeContext &ctx, ArrayRef<TValue> inputs,
                                const ScalarFn &fn, int32_t resultDType) {
  SmallVector<ArrayRef<int64_t>> shapes;
  SmallVector<Value> vals;
  for (const TValue &t : inputs) {
    shapes.push_back(t.shape());
    vals.push_back(t.value);
  }
  auto outShape = broadcastShapes(shapes);
  if (failed(outShape))
    return ctx.invalid("input shapes cannot be broadcast together");
  int32_t dtype = inputs[0].dtype;
  int32_t outDType = resultDType == kUndefined ? dtype : resultDType;
  Type outElem = ctx.importer.elementType(outDType);
  Value r = buildElementwise(ctx.builder(), ctx.loc(), vals, *outShape, outElem,
                             [&](OpBuilder &b, Location loc, ValueRange args) {
                               return fn(b, loc, args.drop_back(), dtype, ctx);
                             });
  ctx.setOutput(0, TValue{r, outDType});
  return success();
}

/// Registers an op whose inputs all share one dtype.
void addSameType(OpRegistry &r, StringRef name, ScalarFn fn,
                 bool floatOnly = false, int32_t resultDType = kUndefined,
                 bool variadic = false) {
  r.add(
      name,
      [fn, floatOnly, resultDType, variadic,
       opName = name.str()](NodeContext &ctx) -> LogicalResult {
        if (succeeded(tryFoldIntElementwise(ctx)))
          return success();
        SmallVector<TValue> ins;
        for (int i = 0; i < ctx.numInputs(); ++i) {
          if (!ctx.hasInput(i))
            return ctx.unsupported("missing input #" + Twine(i));
          ins.push_back(ctx.input(i));
        }
        if (ins.empty())
          return ctx.invalid("no inputs");
        for (auto &t : ins)
          if (t.dtype != ins[0].dtype)
            return ctx.invalid(Twine("inputs have different dtypes (") +
                               dtypeName(ins[0].dtype) + " and " +
                               dtypeName(t.dtype) + ")");
        if (floatOnly && !isFloatDType(ins[0].dtype))
          return ctx.unsupported(Twine("dtype ") + dtypeName(ins[0].dtype));
        bool logical = opName == "Not" || opName == "And" || opName == "Or" ||
                       opName == "Xor";
        if (logical && ins[0].dtype != kBool)
          return ctx.invalid(Twine("takes bool inputs, got ") +
                             dtypeName(ins[0].dtype));
        if (ins[0].dtype == kBool && resultDType == kUndefined && !logical &&
            opName != "Identity")
          return ctx.unsupported("bool inputs");
        if (variadic && ins.size() == 1) {
          ctx.setOutput(0, ins[0]);
          return success();
        }
        if (opName == "Div" && !isFloatDType(ins[0].dtype) &&
            ctx.importer.options.runtimeChecks)
          checkIntegerDivision(ctx, ins[0], ins[1], "Div");
        if (variadic && ins.size() > 2) {
          // Fold pairwise: ((a op b) op c) ...
          TValue acc = ins[0];
          for (size_t i = 1; i < ins.size(); ++i) {
            if (failed(importElementwise(ctx, {acc, ins[i]}, fn, resultDType)))
              return failure();
            acc = ctx.importer.values[ctx.node.output(0)];
          }
          return success();
        }
        return importElementwise(ctx, ins, fn, resultDType);
      });
}

Value cmpF(OpBuilder &b, Location l, arith::CmpFPredicate p, Value x, Value y) {
  return arith::CmpFOp::create(b, l, p, x, y);
}
Value cmpI(OpBuilder &b, Location l, arith::CmpIPredicate p, Value x, Value y) {
  return arith::CmpIOp::create(b, l, p, x, y);
}

Value sigmoid(OpBuilder &b, Location l, Value x) {
  Type t = x.getType();
  Value one = scalarConst(b, l, t, 1.0);
  Value e = math::ExpOp::create(b, l, arith::NegFOp::create(b, l, x));
  return arith::DivFOp::create(b, l, one, arith::AddFOp::create(b, l, one, e));
}

Value relu(OpBuilder &b, Location l, Value x, int32_t dtype) {
  Value zero = scalarConst(b, l, x.getType(), 0.0);
  if (isF(x))
    return arith::SelectOp::create(
        b, l, cmpF(b, l, arith::CmpFPredicate::OGT, x, zero), x,
        arith::SelectOp::create(
            b, l, cmpF(b, l, arith::CmpFPredicate::UNO, x, x), x, zero));
  return arith::MaxSIOp::create(b, l, x, zero);
}

Value maxOf(OpBuilder &b, Location l, Value x, Value y, int32_t dtype) {
  if (isF(x))
    return arith::MaximumFOp::create(b, l, x, y); // NaN-propagating
  if (isUnsignedDType(dtype))
    return arith::MaxUIOp::create(b, l, x, y);
  return arith::MaxSIOp::create(b, l, x, y);
}
Value minOf(OpBuilder &b, Location l, Value x, Value y, int32_t dtype) {
  if (isF(x))
    return arith::MinimumFOp::create(b, l, x, y);
  if (isUnsignedDType(dtype))
    return arith::MinUIOp::create(b, l, x, y);
  return arith::MinSIOp::create(b, l, x, y);
}

/// log(1 + exp(x)) overflows for x >= 89 (float32); the equal
/// x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)) does not, and keeps the
/// small values of x <= -17 that 1 + exp(x) rounds away. Both branches
/// are smooth, so the VJP is exp(x) / (1 + exp(x)) everywhere, 0.5 at 0
/// (a form with max(x, 0) and |x| would depend on their subgradients).
Value softplusOf(OpBuilder &b, Location l, Value x) {
  Value zero = scalarConst(b, l, x.getType(), 0.0);
  Value positive = arith::AddFOp::create(
      b, l, x,
      math::Log1pOp::create(
          b, l, math::ExpOp::create(b, l, arith::NegFOp::create(b, l, x))));
  Value negative = math::Log1pOp::create(b, l, math::ExpOp::create(b, l, x));
  return arith::SelectOp::create(
      b, l, cmpF(b, l, arith::CmpFPredicate::OGT, x, zero), positive, negative);
}

/// x > 0 ? x : alpha (exp(x scale) - 1) (Selu's and Celu's negative side).
Value expLinear(OpBuilder &b, Location l, Value x, double alpha, double scale) {
  Type t = x.getType();
  Value e = math::ExpOp::create(
      b, l, arith::MulFOp::create(b, l, x, scalarConst(b, l, t, scale)));
  Value neg = arith::MulFOp::create(
      b, l, scalarConst(b, l, t, alpha),
      arith::SubFOp::create(b, l, e, scalarConst(b, l, t, 1.0)));
  return arith::SelectOp::create(
      b, l, cmpF(b, l, arith::CmpFPredicate::OGT, x, scalarConst(b, l, t, 0.0)),
      x, neg);
}

/// Erf for float types without libm dependence on precision: math.erf on
/// f32/f64; f16 goes through f32.
Value erfOf(OpBuilder &b, Location l, Value x) {
  Type t = x.getType();
  if (t.isF16()) {
    Value w = arith::ExtFOp::create(b, l, b.getF32Type(), x);
    return arith::TruncFOp::create(b, l, t, math::ErfOp::create(b, l, w));
  }
  return math::ErfOp::create(b, l, x);
}

LogicalResult importClip(NodeContext &ctx) {
  TValue x = ctx.input(0);
  Type elem = x.elementType();
  bool isU = isUnsignedDType(x.dtype);
  SmallVector<TValue> ins{x};
  bool hasMin = false, hasMax = false;
  TypedAttr minA, maxA;
  if (ctx.opset < 11) {
    if (!isFloatDType(x.dtype))
      return ctx.unsupported("non-float Clip before opset 11");
    minA = scalarAttr(elem, ctx.attrFloat("min", -3.402823466e+38f));
    maxA = scalarAttr(elem, ctx.attrFloat("max", 3.402823466e+38f));
    hasMin = hasMax = true;
  }
  int minIdx = -1, maxIdx = -1;
  if (ctx.opset >= 11) {
    // ONNX Clip-11+: min and max are scalars (onnxruntime also takes [1]);
    // broadcasting a larger bound would change the output's shape.
    for (unsigned i = 1; i <= 2; ++i)
      if (ctx.hasInput(i) && ctx.input(i).type().getNumElements() != 1)
        return ctx.invalid(std::string(i == 1 ? "min" : "max") +
                           " must be a scalar (one element)");
    if (ctx.hasInput(1)) {
      minIdx = ins.size();
      ins.push_back(ctx.input(1));
    }
    if (ctx.hasInput(2)) {
      maxIdx = ins.size();
      ins.push_back(ctx.input(2));
    }
    // A missing bound is the type's lowest/largest finite value (ONNX
    // Clip-11+), so a float Clip maps -inf/+inf to them (as onnxruntime).
    if (auto f = dyn_cast<FloatType>(elem)) {
      const llvm::fltSemantics &sem = f.getFloatSemantics();
      if (minIdx < 0) {
        minA =
            FloatAttr::get(elem, APFloat::getLargest(sem, /*Negative=*/true));
        hasMin = true;
      }
      if (maxIdx < 0) {
        maxA = FloatAttr::get(elem, APFloat::getLargest(sem));
        hasMax = true;
      }
    }
  }
  ScalarFn fn = [=](OpBuilder &b, Location l, ValueRange a, int32_t dtype,
                    NodeContext &) -> Value {
    Value v = a[0];
    Value lo = minIdx >= 0 ? a[minIdx]
               : hasMin    ? arith::ConstantOp::create(b, l, minA).getResult()
                           : Value();
    Value hi = maxIdx >= 0 ? a[maxIdx]
               : hasMax    ? arith::ConstantOp::create(b, l, maxA).getResult()
                           : Value();
    // ONNX Clip: min(max(x, lo), hi); NaN in x stays NaN.
    if (lo)
      v = isF(v) ? arith::MaxNumFOp::create(b, l, v, lo).getResult()
                 : maxOf(b, l, v, lo, dtype);
    if (hi)
      v = isF(v) ? arith::MinNumFOp::create(b, l, v, hi).getResult()
                 : minOf(b, l, v, hi, dtype);
    if (isF(a[0]))
      v = arith::SelectOp::create(
          b, l, cmpF(b, l, arith::CmpFPredicate::UNO, a[0], a[0]), a[0], v);
    return v;
  };
  (void)isU;
  return importElementwise(ctx, ins, fn, kUndefined);
}

LogicalResult importWhere(NodeContext &ctx) {
  if (succeeded(tryFoldIntElementwise(ctx)))
    return success();
  TValue c = ctx.input(0), x = ctx.input(1), y = ctx.input(2);
  if (x.dtype != y.dtype)
    return ctx.invalid("X and Y have different dtypes");
  ScalarFn fn = [](OpBuilder &b, Location l, ValueRange a, int32_t,
                   NodeContext &) -> Value {
    return arith::SelectOp::create(b, l, a[0], a[1], a[2]);
  };
  return importElementwise(ctx, {c, x, y}, fn, x.dtype);
}

/// Cast (`to` attribute) and CastLike (the dtype of input 1).
LogicalResult importCast(NodeContext &ctx) {
  bool like = ctx.node.op_type() == "CastLike";
  if (failed(ctx.checkAttrs(
          like ? std::initializer_list<StringRef>{"saturate"}
               : std::initializer_list<StringRef>{"to", "saturate"})))
    return failure();
  int64_t to = like ? ctx.input(1).dtype : ctx.attrInt("to", 0);
  Type toType = ctx.importer.elementType(to);
  if (!toType)
    return ctx.unsupported(Twine("cast to dtype ") + dtypeName(to));
  // Fold casts of constants (shape computations, Constant nodes).
  if (auto c = ctx.constInput(0)) {
    int32_t from = ctx.importer.constants[ctx.node.input(0)].second;
    auto t = cast<RankedTensorType>(c->getType());
    auto outT = RankedTensorType::get(t.getShape(), toType);
    if (from == to)
      return ctx.setConstOutput(0, *c, to);
    if (isa<IntegerType>(t.getElementType()) && isa<IntegerType>(toType) &&
        t.getNumElements() <= 4096) {
      // As castScalar: nonzero -> true; bool and unsigned zero-extend.
      bool zext = from == kBool || isUnsignedDType(from);
      unsigned w = toType.getIntOrFloatBitWidth();
      SmallVector<APInt> vals;
      for (const APInt &v : c->getValues<APInt>())
        vals.push_back(to == kBool ? APInt(1, v.isZero() ? 0 : 1)
                       : zext      ? v.zextOrTrunc(w)
                                   : v.sextOrTrunc(w));
      return ctx.setConstOutput(0, DenseElementsAttr::get(outT, vals), to);
    }
  }
  TValue x = ctx.input(0);
  if (!ctx.importer.elementType(x.dtype))
    return ctx.unsupported(Twine("cast from dtype ") + dtypeName(x.dtype));
  ScalarFn fn = [to, toType](OpBuilder &b, Location l, ValueRange a,
                             int32_t from, NodeContext &) -> Value {
    return castScalar(b, l, a[0], from, to, toType);
  };
  return importElementwise(ctx, {x}, fn, static_cast<int32_t>(to));
}

LogicalResult importPow(NodeContext &ctx) {
  TValue x = ctx.input(0), y = ctx.input(1);
  int32_t yd = y.dtype;
  if (!isFloatDType(x.dtype)) {
    if (x.dtype == kBool || yd == kBool)
      return ctx.unsupported("bool Pow");
    // Integer base: computed in float64 (exact for the integer range that
    // does not overflow) and truncated back, as numpy's integer power does.
    ScalarFn ifn = [yd](OpBuilder &b, Location l, ValueRange a, int32_t xd,
                        NodeContext &) -> Value {
      Type f64 = b.getF64Type();
      Value bf = castScalar(b, l, a[0], xd, kDouble, f64);
      Value ef = castScalar(b, l, a[1], yd, kDouble, f64);
      Value r = math::PowFOp::create(b, l, bf, ef);
      return castScalar(b, l, r, kDouble, xd, a[0].getType());
    };
    return importElementwise(ctx, {x, y}, ifn, kUndefined);
  }
  ScalarFn fn = [yd](OpBuilder &b, Location l, ValueRange a, int32_t xd,
                     NodeContext &) -> Value {
    Value e = castScalar(b, l, a[1], yd, xd, a[0].getType());
    return math::PowFOp::create(b, l, a[0], e);
  };
  return importElementwise(ctx, {x, y}, fn, kUndefined);
}

LogicalResult importGelu(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"approximate"})))
    return failure();
  std::string approx = ctx.attrString("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return ctx.unsupported("approximate='" + approx + "'");
  TValue x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  bool useTanh = approx == "tanh";
  ScalarFn fn = [useTanh](OpBuilder &b, Location l, ValueRange a, int32_t,
                          NodeContext &) -> Value {
    Value v = a[0];
    Type t = v.getType();
    Value half = scalarConst(b, l, t, 0.5), one = scalarConst(b, l, t, 1.0);
    Value inner;
    if (useTanh) {
      // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      Value x3 =
          arith::MulFOp::create(b, l, v, arith::MulFOp::create(b, l, v, v));
      Value s = arith::AddFOp::create(
          b, l, v,
          arith::MulFOp::create(b, l, scalarConst(b, l, t, 0.044715), x3));
      inner = math::TanhOp::create(
          b, l,
          arith::MulFOp::create(b, l, scalarConst(b, l, t, 0.7978845608028654),
                                s));
    } else {
      // 0.5 x (1 + erf(x / sqrt(2)))
      inner = erfOf(b, l,
                    arith::MulFOp::create(
                        b, l, v, scalarConst(b, l, t, 0.7071067811865476)));
    }
    return arith::MulFOp::create(b, l, arith::MulFOp::create(b, l, half, v),
                                 arith::AddFOp::create(b, l, one, inner));
  };
  return importElementwise(ctx, {x}, fn, kUndefined);
}

/// Mod: integer remainder with the divisor's sign (fmod=0, Python's %) or
/// the dividend's (fmod=1, C's %); float fmod (fmod=1 is required for
/// floats, as in the spec). Half types compute in float32. An integer
/// divisor of 0 (or INT_MIN % -1) is counted by a run-time check, as Div's.
LogicalResult importMod(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"fmod"})))
    return failure();
  int64_t fmod = ctx.attrInt("fmod", 0);
  if (fmod != 0 && fmod != 1)
    return ctx.invalid("fmod must be 0 or 1, got " + Twine(fmod));
  if (succeeded(tryFoldIntElementwise(ctx)))
    return success();
  TValue x = ctx.input(0), y = ctx.input(1);
  if (x.dtype != y.dtype)
    return ctx.invalid(Twine("inputs have different dtypes (") +
                       dtypeName(x.dtype) + " and " + dtypeName(y.dtype) + ")");
  if (x.dtype == kBool)
    return ctx.unsupported("bool Mod");
  if (isFloatDType(x.dtype) && fmod == 0)
    return ctx.invalid("fmod=0 is not defined for float inputs (set fmod=1)");
  if (!isFloatDType(x.dtype) && ctx.importer.options.runtimeChecks)
    checkIntegerDivision(ctx, x, y, "Mod");
  ScalarFn fn = [fmod](OpBuilder &b, Location l, ValueRange a, int32_t d,
                       NodeContext &) -> Value {
    Value u = a[0], v = a[1];
    Type t = u.getType();
    if (auto ft = dyn_cast<FloatType>(t)) {
      if (ft.getWidth() >= 32)
        return arith::RemFOp::create(b, l, u, v);
      Type f32 = b.getF32Type();
      Value r = arith::RemFOp::create(b, l, arith::ExtFOp::create(b, l, f32, u),
                                      arith::ExtFOp::create(b, l, f32, v));
      return arith::TruncFOp::create(b, l, t, r);
    }
    bool isU = isUnsignedDType(d);
    Value safe =
        arith::SelectOp::create(b, l, integerDivisionTraps(b, l, u, v, isU),
                                scalarConst(b, l, t, 1), v);
    if (isU)
      return arith::RemUIOp::create(b, l, u, safe);
    Value r = arith::RemSIOp::create(b, l, u, safe);
    if (fmod == 1)
      return r;
    // r has the dividend's sign; move it to the divisor's.
    Value zero = scalarConst(b, l, t, 0);
    Value nonzero = cmpI(b, l, arith::CmpIPredicate::ne, r, zero);
    Value differ = arith::XOrIOp::create(
        b, l, cmpI(b, l, arith::CmpIPredicate::slt, r, zero),
        cmpI(b, l, arith::CmpIPredicate::slt, safe, zero));
    return arith::SelectOp::create(b, l,
                                   arith::AndIOp::create(b, l, nonzero, differ),
                                   arith::AddIOp::create(b, l, r, safe), r);
  };
  return importElementwise(ctx, {x, y}, fn, kUndefined);
}

/// `fn` in float32 for float16/bfloat16 (libm and libdevice have no half
/// versions of the transcendental functions), else in the input's type.
template <typename MathOp> Value mathOf(OpBuilder &b, Location l, Value x) {
  Type t = x.getType();
  if (cast<FloatType>(t).getWidth() >= 32)
    return MathOp::create(b, l, x);
  Value w = arith::ExtFOp::create(b, l, b.getF32Type(), x);
  return arith::TruncFOp::create(b, l, t, MathOp::create(b, l, w));
}

/// PRelu: x < 0 ? slope x : x, the slope broadcast to X (unidirectional;
/// before opset 7, a 1-D slope of X's channel count applies per channel,
/// axis 1, as Caffe's PReLU).
LogicalResult importPRelu(NodeContext &ctx) {
  TValue x = ctx.input(0), slope = ctx.input(1);
  if (x.dtype != slope.dtype)
    return ctx.invalid("X and slope have different dtypes");
  if (ctx.opset < 7 && slope.rank() == 1 && x.rank() >= 2 &&
      slope.shape()[0] == x.shape()[1] && slope.shape()[0] != 1) {
    SmallVector<int64_t> perChannel(x.rank() - 1, 1);
    perChannel[0] = slope.shape()[0];
    slope.value =
        buildReshape(ctx.builder(), ctx.loc(), slope.value, perChannel);
  }
  if (!broadcastsTo(slope.shape(), x.shape()))
    return ctx.invalid("slope does not broadcast to X");
  ScalarFn fn = [](OpBuilder &b, Location l, ValueRange a, int32_t d,
                   NodeContext &) -> Value {
    Value zero = scalarConst(b, l, a[0].getType(), 0);
    Value neg = isF(a[0]) ? cmpF(b, l, arith::CmpFPredicate::OLT, a[0], zero)
                          : cmpI(b, l, arith::CmpIPredicate::slt, a[0], zero);
    Value scaled = isF(a[0])
                       ? arith::MulFOp::create(b, l, a[1], a[0]).getResult()
                       : arith::MulIOp::create(b, l, a[1], a[0]).getResult();
    return arith::SelectOp::create(b, l, neg, scaled, a[0]);
  };
  return importElementwise(ctx, {x, slope}, fn, kUndefined);
}

/// IsInf (detect_negative, detect_positive) and IsNaN: float -> bool.
LogicalResult importIsInfNaN(NodeContext &ctx) {
  bool isNaN = ctx.node.op_type() == "IsNaN";
  if (failed(isNaN ? ctx.checkAttrs({})
                   : ctx.checkAttrs({"detect_negative", "detect_positive"})))
    return failure();
  TValue x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  bool neg = ctx.attrFlag("detect_negative", true);
  bool pos = ctx.attrFlag("detect_positive", true);
  ScalarFn fn = [=](OpBuilder &b, Location l, ValueRange a, int32_t,
                    NodeContext &) -> Value {
    Value v = a[0];
    if (isNaN)
      return cmpF(b, l, arith::CmpFPredicate::UNO, v, v);
    Type t = v.getType();
    const llvm::fltSemantics &sem = cast<FloatType>(t).getFloatSemantics();
    auto inf = [&](bool negative) -> Value {
      return arith::ConstantOp::create(
          b, l, FloatAttr::get(t, APFloat::getInf(sem, negative)));
    };
    Value r = scalarConst(b, l, b.getI1Type(), 0);
    if (pos)
      r = arith::OrIOp::create(
          b, l, r, cmpF(b, l, arith::CmpFPredicate::OEQ, v, inf(false)));
    if (neg)
      r = arith::OrIOp::create(
          b, l, r, cmpF(b, l, arith::CmpFPredicate::OEQ, v, inf(true)));
    return r;
  };
  return importElementwise(ctx, {x}, fn, kBool);
}

/// BitShift (direction LEFT/RIGHT) on unsigned integers; a shift by the
/// width or more gives 0, as numpy's and onnxruntime's.
LogicalResult importBitShift(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"direction"})))
    return failure();
  std::string dir = ctx.attrString("direction", "");
  if (dir != "LEFT" && dir != "RIGHT")
    return ctx.invalid("direction must be LEFT or RIGHT, got '" + dir + "'");
  TValue x = ctx.input(0), y = ctx.input(1);
  if (x.dtype != y.dtype || !isUnsignedDType(x.dtype))
    return ctx.invalid("takes two inputs of one unsigned integer dtype");
  bool left = dir == "LEFT";
  ScalarFn fn = [left](OpBuilder &b, Location l, ValueRange a, int32_t,
                       NodeContext &) -> Value {
    Type t = a[0].getType();
    Value big = cmpI(b, l, arith::CmpIPredicate::uge, a[1],
                     scalarConst(b, l, t, t.getIntOrFloatBitWidth()));
    Value r = left ? arith::ShLIOp::create(b, l, a[0], a[1]).getResult()
                   : arith::ShRUIOp::create(b, l, a[0], a[1]).getResult();
    return arith::SelectOp::create(b, l, big, scalarConst(b, l, t, 0), r);
  };
  return importElementwise(ctx, {x, y}, fn, kUndefined);
}

} // namespace

void registerElementwiseOps(OpRegistry &r) {
  using B = OpBuilder;
  using L = Location;
  using V = ValueRange;
  // Arithmetic.
  addSameType(r, "Add", [](B &b, L l, V a, int32_t, NodeContext &) -> Value {
    return isF(a[0]) ? arith::AddFOp::create(b, l, a[0], a[1]).getResult()
                     : arith::AddIOp::create(b, l, a[0], a[1]).getResult();
  });
  addSameType(r, "Sub", [](B &b, L l, V a, int32_t, NodeContext &) -> Value {
    return isF(a[0]) ? arith::SubFOp::create(b, l, a[0], a[1]).getResult()
                     : arith::SubIOp::create(b, l, a[0], a[1]).getResult();
  });
  addSameType(r, "Mul", [](B &b, L l, V a, int32_t, NodeContext &) -> Value {
    return isF(a[0]) ? arith::MulFOp::create(b, l, a[0], a[1]).getResult()
                     : arith::MulIOp::create(b, l, a[0], a[1]).getResult();
  });
  addSameType(r, "Div", [](B &b, L l, V a, int32_t d, NodeContext &) -> Value {
    if (isF(a[0]))
      return arith::DivFOp::create(b, l, a[0], a[1]);
    // A divisor the run-time check refuses (integerDivisionTraps) is
    // replaced by 1, so the division never traps before the report.
    Value divisor = arith::SelectOp::create(
        b, l, integerDivisionTraps(b, l, a[0], a[1], isUnsignedDType(d)),
        scalarConst(b, l, a[1].getType(), 1), a[1]);
    if (isUnsignedDType(d))
      return arith::DivUIOp::create(b, l, a[0], divisor);
    return arith::DivSIOp::create(b, l, a[0], divisor);
  });
  auto sumFn = [](B &b, L l, V a, int32_t, NodeContext &) -> Value {
    return isF(a[0]) ? arith::AddFOp::create(b, l, a[0], a[1]).getResult()
                     : arith::AddIOp::create(b, l, a[0], a[1]).getResult();
  };
  addSameType(r, "Sum", sumFn, false, kUndefined, /*variadic=*/true);
  addSameType(
      r, "Max",
      [](B &b, L l, V a, int32_t d, NodeContext &) -> Value {
        return maxOf(b, l, a[0], a[1], d);
      },
      false, kUndefined, true);
  addSameType(
      r, "Min",
      [](B &b, L l, V a, int32_t d, NodeContext &) -> Value {
        return minOf(b, l, a[0], a[1], d);
      },
      false, kUndefined, true);
  r.add("Mean", [](NodeContext &ctx) -> LogicalResult {
    SmallVector<TValue> ins;
    for (int i = 0; i < ctx.numInputs(); ++i)
      ins.push_back(ctx.input(i));
    if (!isFloatDType(ins[0].dtype))
      return ctx.unsupported("non-float Mean");
    TValue acc = ins[0];
    for (size_t i = 1; i < ins.size(); ++i) {
      ScalarFn add = [](B &b, L l, V a, int32_t, NodeContext &) -> Value {
        return arith::AddFOp::create(b, l, a[0], a[1]);
      };
      if (failed(importElementwise(ctx, {acc, ins[i]}, add, kUndefined)))
        return failure();
      acc = ctx.importer.values[ctx.node.output(0)];
    }
    double n = ins.size();
    ScalarFn div = [n](B &b, L l, V a, int32_t, NodeContext &) -> Value {
      return arith::DivFOp::create(b, l, a[0],
                                   scalarConst(b, l, a[0].getType(), n));
    };
    return importElementwise(ctx, {acc}, div, kUndefined);
  });

  // Unary float math.
  auto unaryF = [&](StringRef name, Value (*fn)(B &, L, Value)) {
    addSameType(
        r, name,
        [fn](B &b, L l, V a, int32_t, NodeContext &) -> Value {
          return fn(b, l, a[0]);
        },
        /*floatOnly=*/true);
  };
  unaryF("Sqrt", [](B &b, L l, Value x) -> Value {
    return math::SqrtOp::create(b, l, x);
  });
  unaryF("Exp", [](B &b, L l, Value x) -> Value {
    return math::ExpOp::create(b, l, x);
  });
  unaryF("Log", [](B &b, L l, Value x) -> Value {
    return math::LogOp::create(b, l, x);
  });
  unaryF("Tanh", [](B &b, L l, Value x) -> Value {
    return math::TanhOp::create(b, l, x);
  });
  unaryF("Erf", erfOf);
  unaryF("Sigmoid", sigmoid);
  unaryF("Reciprocal", [](B &b, L l, Value x) -> Value {
    return arith::DivFOp::create(b, l, scalarConst(b, l, x.getType(), 1.0), x);
  });
  unaryF("Floor", [](B &b, L l, Value x) -> Value {
    return math::FloorOp::create(b, l, x);
  });
  unaryF("Ceil", [](B &b, L l, Value x) -> Value {
    return math::CeilOp::create(b, l, x);
  });
  unaryF("Softplus", softplusOf);
  addSameType(r, "Neg", [](B &b, L l, V a, int32_t, NodeContext &) -> Value {
    if (isF(a[0]))
      return arith::NegFOp::create(b, l, a[0]);
    return arith::SubIOp::create(b, l, scalarConst(b, l, a[0].getType(), 0),
                                 a[0]);
  });
  addSameType(r, "Abs", [](B &b, L l, V a, int32_t d, NodeContext &) -> Value {
    if (isF(a[0]))
      return math::AbsFOp::create(b, l, a[0]);
    if (isUnsignedDType(d))
      return a[0];
    return math::AbsIOp::create(b, l, a[0]);
  });
  addSameType(r, "Relu", [](B &b, L l, V a, int32_t d, NodeContext &) -> Value {
    return relu(b, l, a[0], d);
  });
  addSameType(
      r, "LeakyRelu",
      [](B &b, L l, V a, int32_t, NodeContext &ctx) -> Value {
        Value x = a[0];
        Value alpha =
            scalarConst(b, l, x.getType(), ctx.attrFloat("alpha", 0.01f));
        Value zero = scalarConst(b, l, x.getType(), 0.0);
        // x > 0 ? x : alpha x. The same values as x < 0 ? alpha x : x, but
        // the VJP then takes the alpha branch at 0 and NaN, as PyTorch's
        // leaky_relu_backward does.
        return arith::SelectOp::create(
            b, l, cmpF(b, l, arith::CmpFPredicate::OGT, x, zero), x,
            arith::MulFOp::create(b, l, alpha, x));
      },
      true);
  addSameType(
      r, "Elu",
      [](B &b, L l, V a, int32_t, NodeContext &ctx) -> Value {
        Value x = a[0];
        Type t = x.getType();
        Value alpha = scalarConst(b, l, t, ctx.attrFloat("alpha", 1.0f));
        Value zero = scalarConst(b, l, t, 0.0), one = scalarConst(b, l, t, 1.0);
        Value neg = arith::MulFOp::create(
            b, l, alpha,
            arith::SubFOp::create(b, l, math::ExpOp::create(b, l, x), one));
        return arith::SelectOp::create(
            b, l, cmpF(b, l, arith::CmpFPredicate::OLT, x, zero), neg, x);
      },
      true);
  addSameType(
      r, "HardSigmoid",
      [](B &b, L l, V a, int32_t, NodeContext &ctx) -> Value {
        Value x = a[0];
        Type t = x.getType();
        Value v = arith::AddFOp::create(
            b, l,
            arith::MulFOp::create(
                b, l, scalarConst(b, l, t, ctx.attrFloat("alpha", 0.2f)), x),
            scalarConst(b, l, t, ctx.attrFloat("beta", 0.5f)));
        // NaN-propagating, as onnxruntime and PyTorch (maxnumf would map
        // NaN to 0).
        v = arith::MaximumFOp::create(b, l, v, scalarConst(b, l, t, 0.0));
        return arith::MinimumFOp::create(b, l, v, scalarConst(b, l, t, 1.0));
      },
      true);
  addSameType(r, "Sign", [](B &b, L l, V a, int32_t d, NodeContext &) -> Value {
    Value x = a[0];
    Type t = x.getType();
    Value zero = scalarConst(b, l, t, 0), one = scalarConst(b, l, t, 1),
          mone = scalarConst(b, l, t, -1);
    if (isF(x)) {
      Value pos = cmpF(b, l, arith::CmpFPredicate::OGT, x, zero);
      Value neg = cmpF(b, l, arith::CmpFPredicate::OLT, x, zero);
      // NaN stays NaN, as in numpy and onnxruntime.
      Value nan = cmpF(b, l, arith::CmpFPredicate::UNO, x, x);
      return arith::SelectOp::create(
          b, l, nan, x,
          arith::SelectOp::create(
              b, l, pos, one, arith::SelectOp::create(b, l, neg, mone, zero)));
    }
    Value pos = cmpI(b, l,
                     isUnsignedDType(d) ? arith::CmpIPredicate::ugt
                                        : arith::CmpIPredicate::sgt,
                     x, zero);
    if (isUnsignedDType(d))
      return arith::SelectOp::create(b, l, pos, one, zero);
    Value neg = cmpI(b, l, arith::CmpIPredicate::slt, x, zero);
    return arith::SelectOp::create(
        b, l, pos, one, arith::SelectOp::create(b, l, neg, mone, zero));
  });
  // Trigonometric and hyperbolic functions.
  unaryF("Sin", mathOf<math::SinOp>);
  unaryF("Cos", mathOf<math::CosOp>);
  unaryF("Tan", mathOf<math::TanOp>);
  unaryF("Asin", mathOf<math::AsinOp>);
  unaryF("Acos", mathOf<math::AcosOp>);
  unaryF("Atan", mathOf<math::AtanOp>);
  unaryF("Sinh", mathOf<math::SinhOp>);
  unaryF("Cosh", mathOf<math::CoshOp>);
  unaryF("Asinh", mathOf<math::AsinhOp>);
  unaryF("Acosh", mathOf<math::AcoshOp>);
  unaryF("Atanh", mathOf<math::AtanhOp>);
  // Round half to even (numpy.round, onnxruntime).
  unaryF("Round", [](B &b, L l, Value x) -> Value {
    return math::RoundEvenOp::create(b, l, x);
  });
  unaryF("Softsign", [](B &b, L l, Value x) -> Value {
    Value one = scalarConst(b, l, x.getType(), 1.0);
    return arith::DivFOp::create(
        b, l, x,
        arith::AddFOp::create(b, l, one, math::AbsFOp::create(b, l, x)));
  });
  // x tanh(softplus(x)), softplus as in Softplus above.
  unaryF("Mish", [](B &b, L l, Value x) -> Value {
    return arith::MulFOp::create(
        b, l, x, mathOf<math::TanhOp>(b, l, softplusOf(b, l, x)));
  });
  addSameType(
      r, "Selu",
      [](B &b, L l, V a, int32_t, NodeContext &ctx) -> Value {
        Type t = a[0].getType();
        Value v =
            expLinear(b, l, a[0],
                      ctx.attrFloat("alpha", 1.67326319217681884765625f), 1.0);
        return arith::MulFOp::create(
            b, l,
            scalarConst(b, l, t,
                        ctx.attrFloat("gamma", 1.05070102214813232421875f)),
            v);
      },
      true);
  addSameType(
      r, "Celu",
      [](B &b, L l, V a, int32_t, NodeContext &ctx) -> Value {
        // max(0, x) + min(0, alpha (exp(x / alpha) - 1)).
        double alpha = ctx.attrFloat("alpha", 1.0f);
        if (alpha == 0) {
          (void)ctx.invalid("alpha must not be 0 (Celu divides by it)");
          alpha = 1.0;
        }
        return expLinear(b, l, a[0], alpha, 1.0 / alpha);
      },
      true);
  addSameType(
      r, "ThresholdedRelu",
      [](B &b, L l, V a, int32_t, NodeContext &ctx) -> Value {
        Value x = a[0];
        Type t = x.getType();
        Value alpha = scalarConst(b, l, t, ctx.attrFloat("alpha", 1.0f));
        return arith::SelectOp::create(
            b, l, cmpF(b, l, arith::CmpFPredicate::OGT, x, alpha), x,
            scalarConst(b, l, t, 0.0));
      },
      true);
  addSameType(
      r, "HardSwish",
      [](B &b, L l, V a, int32_t, NodeContext &) -> Value {
        // x max(0, min(1, x / 6 + 1 / 2)).
        Value x = a[0];
        Type t = x.getType();
        Value v = arith::AddFOp::create(
            b, l, arith::MulFOp::create(b, l, scalarConst(b, l, t, 1.0 / 6), x),
            scalarConst(b, l, t, 0.5));
        v = arith::MaximumFOp::create(b, l, v, scalarConst(b, l, t, 0.0));
        v = arith::MinimumFOp::create(b, l, v, scalarConst(b, l, t, 1.0));
        return arith::MulFOp::create(b, l, x, v);
      },
      true);
  addSameType(
      r, "Shrink", [](B &b, L l, V a, int32_t d, NodeContext &ctx) -> Value {
        // x < -lambd ? x + bias : x > lambd ? x - bias : 0.
        Value x = a[0];
        Type t = x.getType();
        double lambd = ctx.attrFloat("lambd", 0.5f),
               bias = ctx.attrFloat("bias", 0.0f);
        Value zero = scalarConst(b, l, t, 0.0);
        Value lo = scalarConst(b, l, t, -lambd),
              hi = scalarConst(b, l, t, lambd);
        Value bv = scalarConst(b, l, t, bias);
        bool f = isF(x);
        auto lt = [&](Value u, Value w) {
          return f ? cmpF(b, l, arith::CmpFPredicate::OLT, u, w)
                   : cmpI(b, l,
                          isUnsignedDType(d) ? arith::CmpIPredicate::ult
                                             : arith::CmpIPredicate::slt,
                          u, w);
        };
        Value plus = f ? arith::AddFOp::create(b, l, x, bv).getResult()
                       : arith::AddIOp::create(b, l, x, bv).getResult();
        Value minus = f ? arith::SubFOp::create(b, l, x, bv).getResult()
                        : arith::SubIOp::create(b, l, x, bv).getResult();
        if (isUnsignedDType(d))
          return arith::SelectOp::create(b, l, lt(hi, x), minus, zero);
        return arith::SelectOp::create(
            b, l, lt(x, lo), plus,
            arith::SelectOp::create(b, l, lt(hi, x), minus, zero));
      });
  r.add("CastLike", importCast);
  r.add("Mod", importMod);
  r.add("PRelu", importPRelu);
  r.add("IsInf", importIsInfNaN);
  r.add("IsNaN", importIsInfNaN);
  r.add("BitShift", importBitShift);
  r.add("Clip", importClip);
  r.add("Where", importWhere);
  r.add("Cast", importCast);
  r.add("Pow", importPow);
  r.add("Gelu", importGelu);

  // Comparisons -> bool.
  auto cmp = [&](StringRef name, arith::CmpFPredicate fp,
                 arith::CmpIPredicate sp, arith::CmpIPredicate up) {
    addSameType(
        r, name,
        [=](B &b, L l, V a, int32_t d, NodeContext &) -> Value {
          if (isF(a[0]))
            return cmpF(b, l, fp, a[0], a[1]);
          return cmpI(b, l, (isUnsignedDType(d) || d == kBool) ? up : sp, a[0],
                      a[1]);
        },
        false, kBool);
  };
  cmp("Equal", arith::CmpFPredicate::OEQ, arith::CmpIPredicate::eq,
      arith::CmpIPredicate::eq);
  cmp("Less", arith::CmpFPredicate::OLT, arith::CmpIPredicate::slt,
      arith::CmpIPredicate::ult);
  cmp("Greater", arith::CmpFPredicate::OGT, arith::CmpIPredicate::sgt,
      arith::CmpIPredicate::ugt);
  cmp("LessOrEqual", arith::CmpFPredicate::OLE, arith::CmpIPredicate::sle,
      arith::CmpIPredicate::ule);
  cmp("GreaterOrEqual", arith::CmpFPredicate::OGE, arith::CmpIPredicate::sge,
      arith::CmpIPredicate::uge);

  // Logic on bool.
  auto logic = [&](StringRef name, Value (*fn)(B &, L, V)) {
    addSameType(r, name,
                [fn](B &b, L l, V a, int32_t d, NodeContext &ctx) -> Value {
                  return fn(b, l, a);
                });
  };
  logic("Not", [](B &b, L l, V a) -> Value {
    return arith::XOrIOp::create(b, l, a[0],
                                 scalarConst(b, l, a[0].getType(), 1));
  });
  logic("And", [](B &b, L l, V a) -> Value {
    return arith::AndIOp::create(b, l, a[0], a[1]);
  });
  logic("Or", [](B &b, L l, V a) -> Value {
    return arith::OrIOp::create(b, l, a[0], a[1]);
  });
  logic("Xor", [](B &b, L l, V a) -> Value {
    return arith::XOrIOp::create(b, l, a[0], a[1]);
  });

  // Bitwise ops on integers (any width, signed or not).
  auto bitwise = [&](StringRef name, Value (*fn)(B &, L, V)) {
    r.add(name, [fn, opName = name.str()](NodeContext &ctx) -> LogicalResult {
      SmallVector<TValue> ins;
      for (int i = 0; i < ctx.numInputs(); ++i)
        ins.push_back(ctx.input(i));
      for (const TValue &t : ins)
        if (t.dtype != ins[0].dtype || isFloatDType(t.dtype) ||
            t.dtype == kBool)
          return ctx.invalid("takes integer inputs of one dtype");
      ScalarFn sfn = [fn](B &b, L l, V a, int32_t, NodeContext &) -> Value {
        return fn(b, l, a);
      };
      return importElementwise(ctx, ins, sfn, kUndefined);
    });
  };
  bitwise("BitwiseNot", [](B &b, L l, V a) -> Value {
    return arith::XOrIOp::create(
        b, l, a[0],
        arith::ConstantOp::create(
            b, l,
            IntegerAttr::get(
                a[0].getType(),
                APInt::getAllOnes(a[0].getType().getIntOrFloatBitWidth()))));
  });
  bitwise("BitwiseAnd", [](B &b, L l, V a) -> Value {
    return arith::AndIOp::create(b, l, a[0], a[1]);
  });
  bitwise("BitwiseOr", [](B &b, L l, V a) -> Value {
    return arith::OrIOp::create(b, l, a[0], a[1]);
  });
  bitwise("BitwiseXor", [](B &b, L l, V a) -> Value {
    return arith::XOrIOp::create(b, l, a[0], a[1]);
  });
}

} // namespace ddpc::onnx_import

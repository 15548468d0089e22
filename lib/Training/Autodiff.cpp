//===- Autodiff.cpp - Reverse-mode AD on linalg-on-tensors IR -------------===//
//
// Part of ddpc. See Autodiff.h for the rules.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Training/Autodiff.h"
#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"

#include <limits>

#include "ddpc/Import/ONNX/TensorBuilders.h"
#include "ddpc/Parallel/Collectives.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <cmath>

using namespace mlir;

namespace ddpc {
namespace {

bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

Value zerosLike(OpBuilder &b, Location loc, ArrayRef<int64_t> shape,
                Type elem) {
  Value e = tensor::EmptyOp::create(b, loc, shape, elem);
  Value z = arith::ConstantOp::create(b, loc, scalarAttr(elem, 0.0));
  return linalg::FillOp::create(b, loc, z, e).getResult(0);
}

Value addTensors(OpBuilder &b, Location loc, Value x, Value y) {
  auto t = cast<RankedTensorType>(x.getType());
  return buildElementwise(b, loc, ValueRange{x, y}, t.getShape(),
                          t.getElementType(),
                          [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                            return arith::AddFOp::create(nb, l, a[0], a[1]);
                          });
}

/// Scalar reverse-mode AD over a cloned generic body.
class ScalarAD {
public:
  ScalarAD(OpBuilder &b, Location loc, Value accumulatorValue)
      : b(b), loc(loc), acc(accumulatorValue) {}

  /// For max/min reductions: `isFirst` is true (i1) at the one iteration
  /// that receives the cotangent (see firstExtremumIndex).
  Value isFirst;

  void add(Value v, Value g) {
    if (!isa<FloatType>(v.getType()))
      return;
    auto it = adj.find(v);
    if (it == adj.end())
      adj[v] = g;
    else
      it->second = arith::AddFOp::create(b, loc, it->second, g);
  }
  Value get(Value v) {
    auto it = adj.find(v);
    return it == adj.end() ? Value() : it->second;
  }

  /// Propagates the adjoint of `op`'s result to its operands.
  LogicalResult visit(Operation *op, std::string &error) {
    if (op->getNumResults() != 1)
      return success();
    Value y = op->getResult(0);
    Value g = get(y);
    if (!g || !isa<FloatType>(y.getType()))
      return success();
    Type t = y.getType();
    auto c = [&](double v) { return scalarConst(b, loc, t, v); };
    auto mul = [&](Value x, Value z) -> Value {
      return arith::MulFOp::create(b, loc, x, z);
    };
    auto div = [&](Value x, Value z) -> Value {
      return arith::DivFOp::create(b, loc, x, z);
    };
    auto sel = [&](Value cond, Value x, Value z) -> Value {
      return arith::SelectOp::create(b, loc, cond, x, z);
    };
    Value zero = c(0.0);
    // Every rule is linear in g, so a zero cotangent contributes zero. The
    // local derivative of exp, log, division, sqrt and pow may still be
    // infinite (exp overflowing, 1/x at 0): on a branch that a select does
    // not take (Elu's exp(x) at x >= 89), or where the result saturates
    // (1/(1 + exp(-x)) at x <= -89), and 0 * inf would make the gradient
    // NaN. `scaled` gives the cotangent's product with such a factor, 0
    // when g is 0 (the "double where" fix).
    Value gIsZero;
    auto scaled = [&](Value product) -> Value {
      if (!gIsZero)
        gIsZero =
            arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, g, zero);
      return sel(gIsZero, zero, product);
    };
    if (isa<arith::AddFOp>(op)) {
      add(op->getOperand(0), g);
      add(op->getOperand(1), g);
    } else if (isa<arith::SubFOp>(op)) {
      add(op->getOperand(0), g);
      add(op->getOperand(1), arith::NegFOp::create(b, loc, g));
    } else if (isa<arith::MulFOp>(op)) {
      // Unguarded: contractions' VJPs must keep the plain multiply-add
      // body that ddpc-conv-to-library-call and the GEMM matcher recognize.
      add(op->getOperand(0), mul(g, op->getOperand(1)));
      add(op->getOperand(1), mul(g, op->getOperand(0)));
    } else if (isa<arith::DivFOp>(op)) {
      Value x = op->getOperand(0), z = op->getOperand(1);
      add(x, scaled(div(g, z)));
      add(z, scaled(arith::NegFOp::create(b, loc, div(mul(g, y), z))));
    } else if (isa<arith::NegFOp>(op)) {
      add(op->getOperand(0), arith::NegFOp::create(b, loc, g));
    } else if (isa<arith::MaximumFOp, arith::MaxNumFOp, arith::MinimumFOp,
                   arith::MinNumFOp>(op)) {
      Value x = op->getOperand(0), z = op->getOperand(1);
      bool isMax = isa<arith::MaximumFOp, arith::MaxNumFOp>(op);
      if (x == acc || z == acc) {
        // Reduction max/min: the cotangent goes to one element equal to the
        // final result (bound to the accumulator argument): the first in
        // iteration order when `isFirst` is known (PyTorch's max_pool and
        // max(dim) semantics), else every tie.
        Value other = x == acc ? z : x;
        Value eq = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                                         other, acc);
        if (isFirst)
          eq = arith::AndIOp::create(b, loc, eq, isFirst);
        add(other, sel(eq, g, zero));
      } else {
        Value firstWins = arith::CmpFOp::create(
            b, loc,
            isMax ? arith::CmpFPredicate::OGE : arith::CmpFPredicate::OLE, x,
            z);
        add(x, sel(firstWins, g, zero));
        add(z, sel(firstWins, zero, g));
      }
    } else if (auto s = dyn_cast<arith::SelectOp>(op)) {
      add(s.getTrueValue(), sel(s.getCondition(), g, zero));
      add(s.getFalseValue(), sel(s.getCondition(), zero, g));
    } else if (isa<math::ExpOp>(op)) {
      add(op->getOperand(0), scaled(mul(g, y)));
    } else if (isa<math::LogOp>(op)) {
      add(op->getOperand(0), scaled(div(g, op->getOperand(0))));
    } else if (isa<math::Log1pOp>(op)) {
      Value x = op->getOperand(0);
      add(x, scaled(div(g, arith::AddFOp::create(b, loc, c(1.0), x))));
    } else if (isa<math::SqrtOp>(op)) {
      add(op->getOperand(0), scaled(div(mul(g, c(0.5)), y)));
    } else if (isa<math::RsqrtOp>(op)) {
      add(op->getOperand(0), scaled(mul(g, mul(c(-0.5), mul(y, mul(y, y))))));
    } else if (isa<math::TanhOp>(op)) {
      add(op->getOperand(0),
          mul(g, arith::SubFOp::create(b, loc, c(1.0), mul(y, y))));
    } else if (isa<math::ErfOp>(op)) {
      Value x = op->getOperand(0);
      Value e =
          math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, mul(x, x)));
      add(x, mul(g, mul(c(1.1283791670955126), e)));
    } else if (isa<math::SinOp>(op)) {
      Value x = op->getOperand(0);
      add(x, mul(g, math::CosOp::create(b, loc, x)));
    } else if (isa<math::CosOp>(op)) {
      Value x = op->getOperand(0);
      add(x, arith::NegFOp::create(b, loc,
                                   mul(g, math::SinOp::create(b, loc, x))));
    } else if (isa<math::TanOp>(op)) {
      add(op->getOperand(0),
          mul(g, arith::AddFOp::create(b, loc, c(1.0), mul(y, y))));
    } else if (isa<math::SinhOp>(op)) {
      add(op->getOperand(0),
          mul(g, math::CoshOp::create(b, loc, op->getOperand(0))));
    } else if (isa<math::CoshOp>(op)) {
      add(op->getOperand(0),
          mul(g, math::SinhOp::create(b, loc, op->getOperand(0))));
    } else if (isa<math::AsinOp, math::AcosOp>(op)) {
      // ±1 / sqrt(1 - x^2); infinite at |x| = 1.
      Value x = op->getOperand(0);
      Value d =
          div(g, math::SqrtOp::create(
                     b, loc, arith::SubFOp::create(b, loc, c(1.0), mul(x, x))));
      add(x, scaled(isa<math::AcosOp>(op)
                        ? arith::NegFOp::create(b, loc, d).getResult()
                        : d));
    } else if (isa<math::AtanOp>(op)) {
      Value x = op->getOperand(0);
      add(x, div(g, arith::AddFOp::create(b, loc, c(1.0), mul(x, x))));
    } else if (isa<math::AsinhOp>(op)) {
      Value x = op->getOperand(0);
      add(x, div(g, math::SqrtOp::create(
                        b, loc,
                        arith::AddFOp::create(b, loc, mul(x, x), c(1.0)))));
    } else if (isa<math::AcoshOp>(op)) {
      Value x = op->getOperand(0);
      add(x,
          scaled(div(g, math::SqrtOp::create(b, loc,
                                             arith::SubFOp::create(
                                                 b, loc, mul(x, x), c(1.0))))));
    } else if (isa<math::AtanhOp>(op)) {
      Value x = op->getOperand(0);
      add(x, scaled(div(g, arith::SubFOp::create(b, loc, c(1.0), mul(x, x)))));
    } else if (isa<arith::RemFOp>(op)) {
      // fmod(x, z) = x - trunc(x / z) z.
      Value x = op->getOperand(0), z = op->getOperand(1);
      add(x, g);
      add(z, arith::NegFOp::create(
                 b, loc, mul(g, math::TruncOp::create(b, loc, div(x, z)))));
    } else if (isa<math::PowFOp>(op)) {
      // d/dx = p x^(p-1), but 0 where p == 0 (x^0 is constant, also at
      // x = 0, where p x^-1 would be 0 * inf); d/dp = y log x, but 0 where
      // x == 0 and p >= 0 (0^p is constant for p > 0, where 0 * log 0
      // would be NaN). PyTorch's pow_backward uses the same masks.
      Value x = op->getOperand(0), p = op->getOperand(1);
      Value pm1 = arith::SubFOp::create(b, loc, p, c(1.0));
      Value pIsZero =
          arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, p, zero);
      add(x, sel(pIsZero, zero,
                 scaled(mul(g, mul(p, math::PowFOp::create(b, loc, x, pm1))))));
      Value xIsZero =
          arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, x, zero);
      Value pNonNegative =
          arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGE, p, zero);
      Value constantInP = arith::AndIOp::create(b, loc, xIsZero, pNonNegative);
      add(p, sel(constantInP, zero,
                 scaled(mul(g, mul(y, math::LogOp::create(b, loc, x))))));
    } else if (isa<math::AbsFOp>(op)) {
      // g * sign(x), with sign 0 at 0 and NaN (PyTorch's abs backward), so
      // an L1 penalty leaves a weight that is exactly 0 alone.
      Value x = op->getOperand(0);
      Value pos =
          arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, x, zero);
      Value neg =
          arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, x, zero);
      add(x, sel(pos, g, sel(neg, arith::NegFOp::create(b, loc, g), zero)));
    } else if (isa<arith::ExtFOp, arith::TruncFOp>(op)) {
      Value x = op->getOperand(0);
      Type xt = x.getType();
      Value gx = cast<FloatType>(xt).getWidth() < cast<FloatType>(t).getWidth()
                     ? arith::TruncFOp::create(b, loc, xt, g).getResult()
                     : arith::ExtFOp::create(b, loc, xt, g).getResult();
      add(x, gx);
    } else if (isa<math::FloorOp, math::CeilOp, math::RoundEvenOp,
                   math::RoundOp, math::TruncOp, arith::SIToFPOp,
                   arith::UIToFPOp, arith::ConstantOp>(op)) {
      // Zero derivative (or no float operand).
    } else if (isa<tensor::ExtractOp>(op)) {
      // A read of a tensor captured from above (Gather's table): a leaf.
      // Its adjoint stays on the result; capturedTensorVJP scatters it into
      // the tensor's cotangent when that tensor is active.
    } else {
      error = "no VJP rule for scalar op '" +
              op->getName().getStringRef().str() + "' in a linalg.generic body";
      return failure();
    }
    return success();
  }

private:
  OpBuilder &b;
  Location loc;
  Value acc;
  DenseMap<Value, Value> adj;
};

/// True when every result of `map` is a distinct dim or the constant 0.
bool isProjectedWithConstants(AffineMap map) {
  llvm::SmallDenseSet<unsigned> seen;
  for (AffineExpr e : map.getResults()) {
    if (auto d = dyn_cast<AffineDimExpr>(e)) {
      if (!seen.insert(d.getPosition()).second)
        return false;
      continue;
    }
    if (auto cst = dyn_cast<AffineConstantExpr>(e))
      if (cst.getValue() == 0)
        continue;
    return false;
  }
  return true;
}

/// Row-major linear index of the current iteration over the reduction
/// loops of a generic with static loop `ranges` (i64), built from
/// linalg.index ops in the body being created.
Value reductionLinearIndex(OpBuilder &b, Location loc,
                           ArrayRef<utils::IteratorType> iters,
                           ArrayRef<int64_t> ranges) {
  Value lin = arith::ConstantIntOp::create(b, loc, 0, 64);
  for (unsigned d = 0; d < iters.size(); ++d) {
    if (iters[d] != utils::IteratorType::reduction)
      continue;
    Value idx = linalg::IndexOp::create(b, loc, d);
    Value i64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), idx);
    Value extent = arith::ConstantIntOp::create(b, loc, ranges[d], 64);
    lin = arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, lin, extent), i64);
  }
  return lin;
}

/// For a generic whose body yields max/min(v, acc) (MaxPool, ReduceMax,
/// ...): an i64 tensor shaped like its result holding, per output element,
/// the reduction-loop linear index (row-major over the reduction loops, so
/// the window's row-major order for pooling) of the first iteration whose
/// `v` equals the result. The VJP gives the cotangent to that element only,
/// as PyTorch's max_pool/max(dim) backward does for ties. Null when the
/// body is not of that form or shapes are dynamic.
Value firstExtremumIndex(OpBuilder &b, Location loc, linalg::GenericOp op) {
  Block &body = op.getRegion().front();
  BlockArgument accArg = body.getArguments().back();
  Operation *red = body.getTerminator()->getOperand(0).getDefiningOp();
  if (!red ||
      !isa<arith::MaximumFOp, arith::MaxNumFOp, arith::MinimumFOp,
           arith::MinNumFOp>(red) ||
      (red->getOperand(0) != accArg && red->getOperand(1) != accArg) ||
      op.getNumReductionLoops() == 0)
    return {};
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (llvm::any_of(ranges, ShapedType::isDynamic))
    return {};
  Value other =
      red->getOperand(0) == accArg ? red->getOperand(1) : red->getOperand(0);
  auto resType = cast<RankedTensorType>(op.getResult(0).getType());
  Value e = tensor::EmptyOp::create(b, loc, resType.getShape(), b.getI64Type());
  Value sentinel = arith::ConstantIntOp::create(
      b, loc, std::numeric_limits<int64_t>::max(), 64);
  Value init = linalg::FillOp::create(b, loc, sentinel, e).getResult(0);
  SmallVector<Value> ins = llvm::to_vector(op.getDpsInputs());
  SmallVector<AffineMap> maps;
  for (OpOperand *o : op.getDpsInputOperands())
    maps.push_back(op.getMatchingIndexingMap(o));
  AffineMap outMap = op.getIndexingMapsArray().back();
  ins.push_back(op.getResult(0));
  maps.push_back(outMap);
  maps.push_back(outMap);
  SmallVector<utils::IteratorType> iters = op.getIteratorTypesArray();
  auto first = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()}, ins, ValueRange{init}, maps, iters,
      [&](OpBuilder &nb, Location l, ValueRange args) {
        IRMapping mapping;
        for (unsigned i = 0; i < op.getNumDpsInputs(); ++i)
          mapping.map(body.getArgument(i), args[i]);
        Value result = args[op.getNumDpsInputs()];
        mapping.map(accArg, result);
        for (Operation &bodyOp : body.without_terminator())
          if (&bodyOp != red)
            nb.clone(bodyOp, mapping);
        Value v = mapping.lookupOrDefault(other);
        Value eq =
            arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, v, result);
        Value lin = reductionLinearIndex(nb, l, iters, ranges);
        Value cand = arith::SelectOp::create(nb, l, eq, lin, sentinel);
        linalg::YieldOp::create(
            nb, l,
            arith::MinSIOp::create(nb, l, cand, args.back()).getResult());
      });
  return first.getResult(0);
}

/// How the body of a single-result generic uses its accumulator.
enum class Combiner {
  None,     ///< Not at all (elementwise, or writes without reading).
  Add,      ///< yield acc + v: sums (ReduceSum, contractions, ...).
  Extremum, ///< yield max/min(acc, v) (MaxPool, ReduceMax, ...).
  Mul,      ///< yield acc * v (ReduceProd).
  Other,    ///< Anything else: no VJP rule.
};

/// The combiner of `op` and, through `combineOp`, the op that combines.
Combiner combinerOf(linalg::GenericOp op, Operation **combineOp = nullptr) {
  Block &body = op.getRegion().front();
  BlockArgument acc = body.getArguments().back();
  if (acc.use_empty())
    return Combiner::None;
  Operation *comb = body.getTerminator()->getOperand(0).getDefiningOp();
  if (combineOp)
    *combineOp = comb;
  if (!comb || !acc.hasOneUse() || *acc.getUsers().begin() != comb ||
      comb->getNumOperands() != 2)
    return Combiner::Other;
  if (isa<arith::AddFOp>(comb))
    return Combiner::Add;
  if (isa<arith::MaximumFOp, arith::MaxNumFOp, arith::MinimumFOp,
          arith::MinNumFOp>(comb))
    return Combiner::Extremum;
  if (isa<arith::MulFOp>(comb))
    return Combiner::Mul;
  return Combiner::Other;
}

/// For a generic that yields `acc * v` (ReduceProd): per output element,
/// the number of iterations with v == 0 and the product of the init and
/// the nonzero v (two tensors shaped like the result). The derivative of
/// the product by one term is the product of the others: p / v when no
/// term is 0, p at the only zero term, and 0 otherwise (PyTorch's
/// prod_backward handles zeros the same way), never 0 * inf.
std::pair<Value, Value> productFactors(OpBuilder &b, Location loc,
                                       linalg::GenericOp op, Operation *mul) {
  Block &body = op.getRegion().front();
  BlockArgument accArg = body.getArguments().back();
  Value v =
      mul->getOperand(0) == accArg ? mul->getOperand(1) : mul->getOperand(0);
  auto resType = cast<RankedTensorType>(op.getResult(0).getType());
  Type elem = resType.getElementType();
  Value zeros = zerosLike(b, loc, resType.getShape(), elem);
  Value inits = op.getDpsInits()[0];
  SmallVector<Value> ins = llvm::to_vector(op.getDpsInputs());
  SmallVector<AffineMap> maps;
  for (OpOperand *o : op.getDpsInputOperands())
    maps.push_back(op.getMatchingIndexingMap(o));
  AffineMap outMap = op.getIndexingMapsArray().back();
  maps.push_back(outMap);
  maps.push_back(outMap);
  auto aux = linalg::GenericOp::create(
      b, loc, TypeRange{resType, resType}, ins, ValueRange{zeros, inits}, maps,
      op.getIteratorTypesArray(),
      [&](OpBuilder &nb, Location l, ValueRange args) {
        IRMapping mapping;
        for (unsigned i = 0; i < op.getNumDpsInputs(); ++i)
          mapping.map(body.getArgument(i), args[i]);
        for (Operation &bodyOp : body.without_terminator())
          if (&bodyOp != mul)
            nb.clone(bodyOp, mapping);
        Value x = mapping.lookupOrDefault(v);
        Value zero = scalarConst(nb, l, elem, 0.0);
        Value isZero =
            arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, x, zero);
        Value count = arith::AddFOp::create(
            nb, l, args[args.size() - 2],
            arith::SelectOp::create(nb, l, isZero,
                                    scalarConst(nb, l, elem, 1.0), zero));
        Value prod = arith::SelectOp::create(
            nb, l, isZero, args.back(),
            arith::MulFOp::create(nb, l, args.back(), x));
        linalg::YieldOp::create(nb, l, ValueRange{count, prod});
      });
  return {aux.getResult(0), aux.getResult(1)};
}

/// True when `op` is ONNX Relu as the importer builds it: one input read
/// with the result's indexing map, all loops parallel, and the body
/// `select(x > 0, x, select(isnan(x), x, 0))`. Its derivative, the mask
/// `x > 0` (and NaN passing through), is the same when evaluated at the
/// result y = relu(x): y > 0 iff x > 0, and y is NaN iff x is. So the VJP
/// may read y instead of x, as PyTorch's threshold_backward does: y is
/// kept for the next layer's VJP anyway, x (often a GEMM or convolution
/// plus bias) then need not outlive the forward pass, and a library call
/// may compute it in an epilogue (ddpc-gemm-epilogues,
/// ddpc-conv-epilogues).
bool isImportedRelu(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 1 || op.getNumDpsInits() != 1 ||
      op.getNumReductionLoops() != 0 ||
      op.getMatchingIndexingMap(op.getDpsInputOperand(0)) !=
          op.getIndexingMapsArray().back() ||
      op.getDpsInputs()[0].getType() != op.getResult(0).getType())
    return false;
  Block &body = op.getRegion().front();
  Value x = body.getArgument(0);
  auto isZero = [](Value v) { return matchPattern(v, m_AnyZeroFloat()); };
  auto cmpOf = [&](Value v, arith::CmpFPredicate p, bool withZero) {
    auto c = v.getDefiningOp<arith::CmpFOp>();
    return c && c.getPredicate() == p && c.getLhs() == x &&
           (withZero ? isZero(c.getRhs()) : c.getRhs() == x);
  };
  auto outer =
      body.getTerminator()->getOperand(0).getDefiningOp<arith::SelectOp>();
  if (!outer || !cmpOf(outer.getCondition(), arith::CmpFPredicate::OGT, true) ||
      outer.getTrueValue() != x)
    return false;
  auto inner = outer.getFalseValue().getDefiningOp<arith::SelectOp>();
  return inner &&
         cmpOf(inner.getCondition(), arith::CmpFPredicate::UNO, false) &&
         inner.getTrueValue() == x && isZero(inner.getFalseValue());
}

/// Elementwise ops whose derivative is a function of their result y, as
/// their own backward is in PyTorch (sigmoid_backward, tanh_backward):
/// the VJP reads y instead of the input, which is exact in the tails where
/// differentiating the forward formula loses everything (Sigmoid's
/// 1/(1 + exp(-x)) at x = -50 multiplies numbers near the float32
/// underflow), and lets the input die with the forward pass.
enum class ResultDerivative { None, Sigmoid, Tanh };

/// Which ResultDerivative `op` has: one input read with the identity map
/// (as the result), and the body the importer builds for ONNX Sigmoid
/// (`1 / (1 + exp(-x))`) or Tanh (`tanh(x)`).
ResultDerivative resultDerivative(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 1 || op.getNumDpsInits() != 1 ||
      op.getNumReductionLoops() != 0 ||
      !op.getMatchingIndexingMap(op.getDpsInputOperand(0)).isIdentity() ||
      !op.getIndexingMapsArray().back().isIdentity() ||
      op.getDpsInputs()[0].getType() != op.getResult(0).getType())
    return ResultDerivative::None;
  Block &body = op.getRegion().front();
  Value x = body.getArgument(0);
  Value y = body.getTerminator()->getOperand(0);
  if (auto t = y.getDefiningOp<math::TanhOp>(); t && t.getOperand() == x)
    return ResultDerivative::Tanh;
  // 1 / (1 + exp(-x)), the add's operands in either order.
  auto isOne = [](Value v) { return matchPattern(v, m_OneFloat()); };
  auto div = y.getDefiningOp<arith::DivFOp>();
  auto add = div ? div.getRhs().getDefiningOp<arith::AddFOp>() : nullptr;
  if (!div || !isOne(div.getLhs()) || !add ||
      !(isOne(add.getLhs()) || isOne(add.getRhs())))
    return ResultDerivative::None;
  Value e = isOne(add.getLhs()) ? add.getRhs() : add.getLhs();
  auto exp = e.getDefiningOp<math::ExpOp>();
  auto neg = exp ? exp.getOperand().getDefiningOp<arith::NegFOp>() : nullptr;
  return neg && neg.getOperand() == x ? ResultDerivative::Sigmoid
                                      : ResultDerivative::None;
}

/// Cotangent of input `k` of a single-result generic.
FailureOr<Value> genericVJP(OpBuilder &b, Location loc, linalg::GenericOp op,
                            unsigned k, Value dOut, std::string &error) {
  MLIRContext *ctx = b.getContext();
  OpOperand *inOperand = op.getDpsInputOperand(k);
  Value input = inOperand->get();
  auto inType = cast<RankedTensorType>(input.getType());
  if (ResultDerivative rd = resultDerivative(op); rd != ResultDerivative::None)
    return buildElementwise(
        b, loc, ValueRange{op.getResult(0), dOut}, inType.getShape(),
        inType.getElementType(),
        [rd](OpBuilder &nb, Location l, ValueRange a) -> Value {
          Value y = a[0], g = a[1];
          Value yy = arith::MulFOp::create(nb, l, y, y);
          // Sigmoid: y - y^2 = y (1 - y); Tanh: 1 - y^2.
          Value d = rd == ResultDerivative::Sigmoid
                        ? arith::SubFOp::create(nb, l, y, yy).getResult()
                        : arith::SubFOp::create(
                              nb, l, scalarConst(nb, l, y.getType(), 1.0), yy)
                              .getResult();
          return arith::MulFOp::create(nb, l, g, d);
        });
  AffineMap inMap = op.getMatchingIndexingMap(inOperand);
  AffineMap outMap = op.getIndexingMapsArray().back();
  unsigned numLoops = op.getNumLoops();
  Block &body = op.getRegion().front();
  BlockArgument accArg = body.getArguments().back();
  bool usesAcc = !accArg.use_empty();

  // Output map of the cotangent: the input map without constant results
  // (broadcast dims of size 1, re-inserted by a reshape afterwards).
  SmallVector<AffineExpr> gradExprs;
  SmallVector<int64_t> gradShape;
  for (auto [i, e] : llvm::enumerate(inMap.getResults())) {
    if (auto cst = dyn_cast<AffineConstantExpr>(e)) {
      if (inType.getDimSize(i) != 1) {
        error = "no VJP rule for a linalg.generic reading a fixed index of "
                "a non-broadcast dimension";
        return failure();
      }
      continue;
    }
    gradExprs.push_back(e);
    gradShape.push_back(inType.getDimSize(i));
  }
  AffineMap gradMap = AffineMap::get(numLoops, 0, gradExprs, ctx);
  bool projected = isProjectedWithConstants(inMap);
  SmallVector<utils::IteratorType> iters(numLoops,
                                         utils::IteratorType::reduction);
  if (projected)
    for (AffineExpr e : gradExprs)
      iters[cast<AffineDimExpr>(e).getPosition()] =
          utils::IteratorType::parallel;

  SmallVector<Value> ins = llvm::to_vector(op.getDpsInputs());
  if (isImportedRelu(op))
    ins[0] = op.getResult(0);
  SmallVector<AffineMap> maps;
  for (OpOperand *o : op.getDpsInputOperands())
    maps.push_back(op.getMatchingIndexingMap(o));
  unsigned resultIdx = ins.size();
  if (usesAcc) {
    ins.push_back(op.getResult(0));
    maps.push_back(outMap);
  }
  unsigned dOutIdx = ins.size();
  ins.push_back(dOut);
  maps.push_back(outMap);
  Operation *combine = nullptr;
  Combiner combiner = combinerOf(op, &combine);
  if (combiner == Combiner::Other) {
    error = "no VJP rule for a reduction that combines its accumulator "
            "with '" +
            (combine ? combine->getName().getStringRef().str()
                     : std::string("its block argument")) +
            "'";
    return failure();
  }
  Value firstIdx =
      combiner == Combiner::Extremum ? firstExtremumIndex(b, loc, op) : Value();
  unsigned firstIdxPos = ins.size();
  if (firstIdx) {
    ins.push_back(firstIdx);
    maps.push_back(outMap);
  }
  unsigned factorsPos = ins.size();
  if (combiner == Combiner::Mul) {
    auto [zeroCount, product] = productFactors(b, loc, op, combine);
    ins.push_back(zeroCount);
    ins.push_back(product);
    maps.push_back(outMap);
    maps.push_back(outMap);
  }
  maps.push_back(gradMap);
  Type elem = inType.getElementType();
  // Without reduction loops every output element is written exactly once:
  // no accumulator (an init that is read would make elementwise fusion
  // re-accumulate it across the loops of a consumer).
  bool accumulate = llvm::is_contained(iters, utils::IteratorType::reduction);
  Value init =
      accumulate ? zerosLike(b, loc, gradShape, elem)
                 : tensor::EmptyOp::create(b, loc, gradShape, elem).getResult();
  std::string bodyError;
  auto grad = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()}, ins, ValueRange{init}, maps, iters,
      [&](OpBuilder &nb, Location l, ValueRange args) {
        IRMapping mapping;
        for (unsigned i = 0; i < op.getNumDpsInputs(); ++i)
          mapping.map(body.getArgument(i), args[i]);
        Value accValue = usesAcc ? args[resultIdx] : Value();
        if (usesAcc)
          mapping.map(accArg, accValue);
        SmallVector<Operation *> cloned;
        for (Operation &bodyOp : body.without_terminator())
          cloned.push_back(nb.clone(bodyOp, mapping));
        Value yielded =
            mapping.lookupOrDefault(body.getTerminator()->getOperand(0));
        ScalarAD ad(nb, l, accValue);
        if (firstIdx) {
          Value lin = reductionLinearIndex(nb, l, op.getIteratorTypesArray(),
                                           op.getStaticLoopRanges());
          ad.isFirst = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                             lin, args[firstIdxPos]);
        }
        if (combiner == Combiner::Mul) {
          // d result / d v = product of the other terms (productFactors).
          Value v = mapping.lookupOrDefault(combine->getOperand(0) == accArg
                                                ? combine->getOperand(1)
                                                : combine->getOperand(0));
          Value zeros = args[factorsPos], prod = args[factorsPos + 1];
          auto c = [&](double x) { return scalarConst(nb, l, elem, x); };
          auto eq = [&](Value x, double y) {
            return arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, x,
                                         c(y));
          };
          Value others = arith::SelectOp::create(
              nb, l, eq(v, 0.0),
              arith::SelectOp::create(nb, l, eq(zeros, 1.0), prod, c(0.0)),
              arith::SelectOp::create(nb, l, eq(zeros, 0.0),
                                      arith::DivFOp::create(nb, l, prod, v),
                                      c(0.0)));
          ad.add(v, arith::MulFOp::create(nb, l, args[dOutIdx], others));
        } else {
          ad.add(yielded, args[dOutIdx]);
        }
        for (Operation *c : llvm::reverse(cloned))
          if (failed(ad.visit(c, bodyError)))
            break;
        Value a = ad.get(args[k]);
        Value accIn = args.back();
        Value r;
        if (accumulate)
          r = a ? arith::AddFOp::create(nb, l, accIn, a).getResult() : accIn;
        else
          r = a ? a : scalarConst(nb, l, elem, 0.0);
        linalg::YieldOp::create(nb, l, r);
      });
  if (!bodyError.empty()) {
    error = bodyError;
    return failure();
  }
  Value r = grad.getResult(0);
  if (gradShape.size() != (size_t)inType.getRank())
    r = buildReshape(b, loc, r, inType.getShape());
  return r;
}

/// Cotangent of a tensor `src` that the body of the single-result generic
/// `op` reads with `tensor.extract` at computed coordinates (Gather: the
/// table, at the index that an indices input holds). Such a read has no
/// indexing map, so the cotangent is a scatter-add: zeros shaped like
/// `src`, then, for every iteration of `op`'s loops, in order, the adjoint
/// of each extract's result (scalar reverse-mode AD of the recomputed body,
/// seeded with dOut at the iteration's output element) added at that
/// extract's coordinates. Repeated coordinates accumulate, as
/// index_add / embedding_dense_backward do in PyTorch. Built as a nest of
/// scf.for loops on tensors (tensor.extract + tensor.insert, which one-shot
/// bufferization performs in place); the outermost loop is marked
/// `ddpc.scatter_add` (ddpc-scatter-to-atomic gives it one GPU thread per
/// iteration with atomic adds). Fails when the body uses `src` otherwise.
FailureOr<Value> capturedTensorVJP(OpBuilder &b, Location loc,
                                   linalg::GenericOp op, Value src, Value dOut,
                                   std::string &error) {
  Block &body = op.getRegion().front();
  for (Operation *user : src.getUsers()) {
    if (!op->isProperAncestor(user))
      continue;
    auto ex = dyn_cast<tensor::ExtractOp>(user);
    if (!ex || ex->getBlock() != &body) {
      error = "no VJP rule for a linalg.generic that uses a tensor captured "
              "from above other than by tensor.extract in its body ('" +
              user->getName().getStringRef().str() + "')";
      return failure();
    }
  }
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (llvm::any_of(ranges, ShapedType::isDynamic)) {
    error = "no VJP rule for a gather with dynamic loop bounds";
    return failure();
  }
  auto srcType = cast<RankedTensorType>(src.getType());
  Type elem = srcType.getElementType();
  BlockArgument accArg = body.getArguments().back();
  bool usesAcc = !accArg.use_empty();
  Combiner combiner = combinerOf(op);
  if (combiner == Combiner::Other || combiner == Combiner::Mul) {
    error = "no VJP rule for a product or other non-additive reduction over "
            "a gathered tensor";
    return failure();
  }
  Value firstIdx =
      combiner == Combiner::Extremum ? firstExtremumIndex(b, loc, op) : Value();
  AffineMap outMap = op.getIndexingMapsArray().back();
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value init = zerosLike(b, loc, srcType.getShape(), elem);
  // Bounds outside the nest, so that it stays perfect (ScatterToAtomic).
  SmallVector<Value> ubs;
  for (int64_t n : ranges)
    ubs.push_back(arith::ConstantIndexOp::create(b, loc, n));
  SmallVector<Value> ivs;

  // Element `map(ivs)` of `t` (a scalar for a 0-d tensor).
  auto read = [&](OpBuilder &nb, Location l, Value t, AffineMap map) {
    SmallVector<Value> coords;
    for (unsigned r = 0; r < map.getNumResults(); ++r)
      coords.push_back(
          affine::AffineApplyOp::create(nb, l, map.getSubMap({r}), ivs));
    return tensor::ExtractOp::create(nb, l, t, coords).getResult();
  };

  // The innermost body: recompute, differentiate, scatter into `acc`.
  auto innermost = [&](OpBuilder &nb, Location l, Value acc) -> Value {
    IRMapping mapping;
    for (OpOperand *in : op.getDpsInputOperands())
      mapping.map(body.getArgument(in->getOperandNumber()),
                  read(nb, l, in->get(), op.getMatchingIndexingMap(in)));
    Value accValue;
    if (usesAcc) {
      accValue = read(nb, l, op.getResult(0), outMap);
      mapping.map(accArg, accValue);
    }
    SmallVector<Operation *> cloned;
    SmallVector<tensor::ExtractOp> reads;
    for (Operation &bodyOp : body.without_terminator()) {
      if (auto index = dyn_cast<linalg::IndexOp>(bodyOp)) {
        mapping.map(index.getResult(), ivs[index.getDim()]);
        continue;
      }
      Operation *c = nb.clone(bodyOp, mapping);
      cloned.push_back(c);
      if (auto ex = dyn_cast<tensor::ExtractOp>(c); ex && ex.getTensor() == src)
        reads.push_back(ex);
    }
    ScalarAD ad(nb, l, accValue);
    if (firstIdx) {
      Value lin = reductionLinearIndex(nb, l, op.getIteratorTypesArray(),
                                       op.getStaticLoopRanges());
      ad.isFirst = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, lin,
                                         read(nb, l, firstIdx, outMap));
    }
    ad.add(mapping.lookupOrDefault(body.getTerminator()->getOperand(0)),
           read(nb, l, dOut, outMap));
    std::string bodyError;
    for (Operation *c : llvm::reverse(cloned))
      if (failed(ad.visit(c, bodyError))) {
        error = bodyError;
        return Value();
      }
    for (tensor::ExtractOp ex : reads) {
      Value adj = ad.get(ex.getResult());
      if (!adj)
        continue;
      SmallVector<Value> coords(ex.getIndices());
      Value old = tensor::ExtractOp::create(nb, l, acc, coords);
      Value sum = arith::AddFOp::create(nb, l, old, adj);
      acc = tensor::InsertOp::create(nb, l, sum, acc, coords);
    }
    return acc;
  };

  // scf.for nest over op's loops, in their order, carrying the cotangent.
  bool failedBody = false;
  std::function<Value(OpBuilder &, unsigned, Value)> nest =
      [&](OpBuilder &nb, unsigned d, Value acc) -> Value {
    if (d == ranges.size()) {
      Value r = innermost(nb, loc, acc);
      failedBody |= !r;
      return r ? r : acc;
    }
    auto loop = scf::ForOp::create(
        nb, loc, zero, ubs[d], one, ValueRange{acc},
        [&](OpBuilder &lb, Location l, Value iv, ValueRange iter) {
          ivs.push_back(iv);
          Value r = nest(lb, d + 1, iter[0]);
          ivs.pop_back();
          scf::YieldOp::create(lb, l, r);
        });
    if (d == 0)
      loop->setAttr(attrs::kScatterAdd, b.getUnitAttr());
    return loop.getResult(0);
  };
  Value r = nest(b, 0, init);
  if (failedBody)
    return failure();
  return r;
}

} // namespace

FailureOr<SmallVector<Value>> buildVJP(OpBuilder &b, Location loc,
                                       ArrayRef<std::pair<Value, Value>> seeds,
                                       ArrayRef<Value> wrt,
                                       std::string &error) {
  Block *block = b.getInsertionBlock();
  // Forward ops: everything in the block before the insertion point.
  SmallVector<Operation *> forward;
  for (Operation &op : *block) {
    if (&op == &*b.getInsertionPoint())
      break;
    forward.push_back(&op);
  }
  // Values that depend on `wrt` (only they need cotangents).
  // An op reads a value through its operands or, inside its regions,
  // captured from above (Gather's table, read by tensor.extract in a
  // linalg.generic body): both make its results active.
  llvm::DenseSet<Value> active(wrt.begin(), wrt.end());
  auto capturedActive = [&](Operation *op) {
    SmallVector<Value> captured;
    if (op->getNumRegions() == 0)
      return captured;
    llvm::SetVector<Value> above;
    getUsedValuesDefinedAbove(op->getRegions(), above);
    for (Value v : above)
      if (active.contains(v))
        captured.push_back(v);
    return captured;
  };
  for (Operation *op : forward) {
    bool any = llvm::any_of(op->getOperands(),
                            [&](Value v) { return active.contains(v); }) ||
               !capturedActive(op).empty();
    if (any)
      for (Value r : op->getResults())
        if (isFloatTensor(r))
          active.insert(r);
  }
  DenseMap<Value, Value> grads;
  auto addGrad = [&](Value v, Value g) {
    auto it = grads.find(v);
    if (it == grads.end())
      grads[v] = g;
    else
      it->second = addTensors(b, loc, it->second, g);
  };
  for (auto [v, g] : seeds)
    addGrad(v, g);

  for (Operation *op : llvm::reverse(forward)) {
    if (op->getNumResults() == 0)
      continue;
    Value res = op->getResult(0);
    auto it = grads.find(res);
    if (it == grads.end() || !active.contains(res))
      continue;
    Value g = it->second;
    if (auto generic = dyn_cast<linalg::GenericOp>(op)) {
      if (generic.getNumDpsInits() != 1) {
        error = "no VJP rule for a multi-result linalg.generic";
        return failure();
      }
      for (unsigned k = 0; k < generic.getNumDpsInputs(); ++k) {
        Value in = generic.getDpsInputOperand(k)->get();
        if (!active.contains(in))
          continue;
        auto gk = genericVJP(b, loc, generic, k, g, error);
        if (failed(gk))
          return failure();
        addGrad(in, *gk);
      }
      for (Value src : capturedActive(generic)) {
        auto gs = capturedTensorVJP(b, loc, generic, src, g, error);
        if (failed(gs))
          return failure();
        addGrad(src, *gs);
      }
      // The init operand (fill/empty) carries no cotangent we need: inits
      // of reductions are constants.
      continue;
    }
    if (auto pad = dyn_cast<tensor::PadOp>(op)) {
      auto srcType = pad.getSourceType();
      SmallVector<OpFoldResult> offsets, sizes, strides;
      for (int64_t d = 0; d < srcType.getRank(); ++d) {
        offsets.push_back(b.getIndexAttr(pad.getStaticLow()[d]));
        sizes.push_back(b.getIndexAttr(srcType.getDimSize(d)));
        strides.push_back(b.getIndexAttr(1));
      }
      addGrad(pad.getSource(),
              tensor::ExtractSliceOp::create(b, loc, srcType, g, offsets, sizes,
                                             strides));
      continue;
    }
    if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op)) {
      auto srcType = slice.getSourceType();
      Value z = zerosLike(b, loc, srcType.getShape(), srcType.getElementType());
      addGrad(slice.getSource(),
              tensor::InsertSliceOp::create(
                  b, loc, g, z, slice.getMixedOffsets(), slice.getMixedSizes(),
                  slice.getMixedStrides()));
      continue;
    }
    if (auto ins = dyn_cast<tensor::InsertSliceOp>(op)) {
      auto srcType = ins.getSourceType();
      if (active.contains(ins.getSource()))
        addGrad(ins.getSource(),
                tensor::ExtractSliceOp::create(
                    b, loc, srcType, g, ins.getMixedOffsets(),
                    ins.getMixedSizes(), ins.getMixedStrides()));
      if (active.contains(ins.getDest())) {
        Value z =
            zerosLike(b, loc, srcType.getShape(), srcType.getElementType());
        addGrad(ins.getDest(), tensor::InsertSliceOp::create(
                                   b, loc, z, g, ins.getMixedOffsets(),
                                   ins.getMixedSizes(), ins.getMixedStrides()));
      }
      continue;
    }
    if (isa<tensor::CollapseShapeOp, tensor::ExpandShapeOp>(op)) {
      Value src = op->getOperand(0);
      addGrad(src,
              buildReshape(b, loc, g,
                           cast<RankedTensorType>(src.getType()).getShape()));
      continue;
    }
    if (isWorldAllReduceSum(op)) {
      // y = sum over ranks of x  =>  dx = sum over ranks of dy.
      addGrad(op->getOperand(0), buildAllReduceSum(b, loc, g));
      continue;
    }
    if (isa<linalg::FillOp, tensor::EmptyOp, arith::ConstantOp>(op) &&
        capturedActive(op).empty())
      continue;
    error = "no VJP rule for op '" + op->getName().getStringRef().str() +
            "' (on the path from the parameters to the loss)";
    return failure();
  }

  SmallVector<Value> out;
  for (Value w : wrt) {
    auto it = grads.find(w);
    if (it != grads.end()) {
      out.push_back(it->second);
      continue;
    }
    auto t = cast<RankedTensorType>(w.getType());
    out.push_back(zerosLike(b, loc, t.getShape(), t.getElementType()));
  }
  return out;
}

} // namespace ddpc

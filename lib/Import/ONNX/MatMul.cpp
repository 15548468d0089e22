//===- MatMul.cpp - Import of ONNX MatMul, Gemm and Einsum ----------------===//
//
// Part of ddpc. MatMul follows numpy.matmul (1-D promotion, broadcast batch
// dimensions); Gemm computes alpha * op(A) op(B) + beta * C. Both become a
// contraction linalg.generic (parallel batch/m/n dims, one reduction dim).
// Einsum (opset 12) becomes one linalg.generic over all its labels: the
// output's labels parallel, the others reductions, the body the product of
// the operands added to the accumulator.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"

#include "llvm/ADT/DenseSet.h"

#include <map>

using namespace mlir;

namespace ddpc::onnx_import {
namespace {

Value mulAdd(OpBuilder &b, Location l, Value x, Value y, Value acc) {
  if (isa<FloatType>(acc.getType()))
    return arith::AddFOp::create(b, l, acc, arith::MulFOp::create(b, l, x, y));
  return arith::AddIOp::create(b, l, acc, arith::MulIOp::create(b, l, x, y));
}

} // namespace

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

namespace {

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

/// Einsum's labels: the letters a-z, A-Z are 0..51; the ellipsis' dims
/// (right-aligned over the operands, numpy broadcasting) follow from 52.
constexpr int kEllipsisLabel = 52;

int letterLabel(char c) {
  if (c >= 'a' && c <= 'z')
    return c - 'a';
  if (c >= 'A' && c <= 'Z')
    return 26 + (c - 'A');
  return -1;
}

/// One term of an Einsum equation: its letter labels, and where the
/// ellipsis stands among them (-1: none).
struct EinsumTerm {
  SmallVector<int> letters;
  int ellipsisAt = -1;
};

/// Parses one term (spaces already removed); false for a character that is
/// not a letter or a second ellipsis.
bool parseEinsumTerm(StringRef text, EinsumTerm &term) {
  for (size_t i = 0; i < text.size();) {
    if (text.substr(i).starts_with("...")) {
      if (term.ellipsisAt >= 0)
        return false;
      term.ellipsisAt = term.letters.size();
      i += 3;
      continue;
    }
    int l = letterLabel(text[i]);
    if (l < 0)
      return false;
    term.letters.push_back(l);
    ++i;
  }
  return true;
}

/// The labels of each dimension of a term with `ellipsisDims` ellipsis
/// dimensions, of `totalEllipsis` in all (right-aligned).
SmallVector<int> termLabels(const EinsumTerm &term, int64_t ellipsisDims,
                            int64_t totalEllipsis) {
  SmallVector<int> labels;
  for (size_t i = 0; i <= term.letters.size(); ++i) {
    if ((int)i == term.ellipsisAt)
      for (int64_t e = 0; e < ellipsisDims; ++e)
        labels.push_back(kEllipsisLabel + totalEllipsis - ellipsisDims + e);
    if (i < term.letters.size())
      labels.push_back(term.letters[i]);
  }
  return labels;
}

/// Einsum-12: `equation` "term,term,...[->term]" over the inputs; without
/// "->", the output is the ellipsis dims then the labels that occur once,
/// in alphabetical order (numpy.einsum). A label repeated within one
/// operand reads its diagonal: the repeat becomes a reduction dimension
/// tied to the first by a constant identity factor, so that the VJP of the
/// one generic covers diagonals too.
LogicalResult importEinsum(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"equation"})))
    return failure();
  if (!ctx.attr("equation"))
    return ctx.invalid("missing attribute 'equation'");
  std::string eq;
  for (char c : ctx.attrString("equation", ""))
    if (c != ' ')
      eq += c;
  StringRef eqRef(eq);
  auto [lhs, rhs] = eqRef.split("->");
  bool explicitOut = eqRef.contains("->");
  SmallVector<StringRef> termTexts;
  lhs.split(termTexts, ',');
  int n = ctx.numInputs();
  if ((int)termTexts.size() != n)
    return ctx.invalid("equation '" + ctx.attrString("equation", "") +
                       "' has " + Twine(termTexts.size()) +
                       " operand term(s) for " + Twine(n) + " input(s)");
  SmallVector<TValue> ins;
  for (int i = 0; i < n; ++i)
    ins.push_back(ctx.input(i));
  for (const TValue &v : ins) {
    if (v.dtype != ins[0].dtype)
      return ctx.invalid("inputs have different dtypes");
    if (v.dtype == kBool)
      return ctx.unsupported("bool Einsum");
  }
  SmallVector<EinsumTerm> terms(n);
  int64_t totalEllipsis = 0;
  SmallVector<int64_t> ellipsisDims(n, 0);
  for (int i = 0; i < n; ++i) {
    if (!parseEinsumTerm(termTexts[i], terms[i]))
      return ctx.invalid("equation term '" + termTexts[i] +
                         "' is not letters with at most one '...'");
    int64_t letters = terms[i].letters.size();
    int64_t rank = ins[i].rank();
    if (terms[i].ellipsisAt < 0 ? letters != rank : letters > rank)
      return ctx.invalid("equation term '" + termTexts[i] + "' has " +
                         Twine(letters) + " label(s) for input " + Twine(i) +
                         " of rank " + Twine(rank));
    ellipsisDims[i] = rank - letters;
    totalEllipsis = std::max(totalEllipsis, ellipsisDims[i]);
  }
  // Each label's size: the operands' sizes agree, or are 1 (broadcast).
  std::map<int, int64_t> sizes;
  std::map<int, int> occurrences;
  SmallVector<SmallVector<int>> labels;
  for (int i = 0; i < n; ++i) {
    labels.push_back(termLabels(terms[i], ellipsisDims[i], totalEllipsis));
    for (auto [d, l] : llvm::enumerate(labels.back())) {
      int64_t size = ins[i].shape()[d];
      auto [it, inserted] = sizes.insert({l, size});
      if (!inserted && it->second != size) {
        if (it->second != 1 && size != 1)
          return ctx.invalid("label sizes differ: " + Twine(it->second) +
                             " and " + Twine(size) + " in input " + Twine(i));
        it->second = std::max(it->second, size);
      }
      ++occurrences[l];
    }
  }
  SmallVector<int> outLabels;
  if (explicitOut) {
    EinsumTerm out;
    if (!parseEinsumTerm(rhs, out))
      return ctx.invalid("output term '" + rhs +
                         "' is not letters with at most one '...'");
    outLabels = termLabels(out, totalEllipsis, totalEllipsis);
    llvm::SmallDenseSet<int> seen;
    for (int l : outLabels) {
      if (!sizes.count(l))
        return ctx.invalid("output term '" + rhs +
                           "' has a label that no input term has");
      if (!seen.insert(l).second)
        return ctx.invalid("output term '" + rhs + "' repeats a label");
    }
  } else {
    for (int64_t e = 0; e < totalEllipsis; ++e)
      outLabels.push_back(kEllipsisLabel + e);
    // Alphabetical as numpy orders them: 'A'-'Z' before 'a'-'z'.
    for (int l = 26; l < 52; ++l)
      if (occurrences.count(l) && occurrences.at(l) == 1)
        outLabels.push_back(l);
    for (int l = 0; l < 26; ++l)
      if (occurrences.count(l) && occurrences.at(l) == 1)
        outLabels.push_back(l);
  }
  // Loop dims: the output's labels, then the summed ones, then one per
  // repeat of a label within an operand (tied by an identity factor).
  std::map<int, unsigned> dimOf;
  SmallVector<int64_t> outShape;
  for (int l : outLabels) {
    dimOf[l] = dimOf.size();
    outShape.push_back(sizes[l]);
  }
  for (const auto &ls : labels)
    for (int l : ls)
      if (!dimOf.count(l))
        dimOf[l] = dimOf.size();
  unsigned numDims = dimOf.size();
  MLIRContext *mctx = ctx.builder().getContext();
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  Type elem = ins[0].elementType();
  SmallVector<Value> operands;
  SmallVector<AffineMap> maps;
  SmallVector<std::pair<unsigned, unsigned>> ties; // (first, repeat) dims
  for (int i = 0; i < n; ++i) {
    SmallVector<AffineExpr> exprs;
    llvm::SmallDenseSet<int> seen;
    for (auto [d, l] : llvm::enumerate(labels[i])) {
      unsigned dim = dimOf[l];
      if (!seen.insert(l).second) {
        dim = numDims++;
        ties.push_back({dimOf[l], dim});
      }
      exprs.push_back(ins[i].shape()[d] == 1 && sizes[l] != 1
                          ? getAffineConstantExpr(0, mctx)
                          : getAffineDimExpr(dim, mctx));
    }
    operands.push_back(ins[i].value);
    maps.push_back(AffineMap::get(0, 0, exprs, mctx)); // numDims set below
  }
  for (AffineMap &m : maps)
    m = AffineMap::get(numDims, 0, m.getResults(), mctx);
  SmallVector<int64_t> tieSizes;
  for (auto [first, repeat] : ties) {
    int64_t size = 0;
    for (auto [l, d] : dimOf)
      if (d == first)
        size = sizes[l];
    auto type = RankedTensorType::get({size, size}, elem);
    SmallVector<Attribute> values;
    for (int64_t r = 0; r < size; ++r)
      for (int64_t c = 0; c < size; ++c)
        values.push_back(scalarAttr(elem, r == c ? 1.0 : 0.0));
    operands.push_back(arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(type, values)));
    maps.push_back(AffineMap::get(
        numDims, 0,
        {getAffineDimExpr(first, mctx), getAffineDimExpr(repeat, mctx)}, mctx));
  }
  bool isF = isa<FloatType>(elem);
  Value r = buildGeneric(
      b, loc, operands, maps, outShape, elem, numDims - outShape.size(),
      scalarAttr(elem, 0.0), [&](OpBuilder &nb, Location l, ValueRange args) {
        Value prod = args[0];
        for (size_t k = 1; k + 1 < args.size(); ++k)
          prod = isF ? arith::MulFOp::create(nb, l, prod, args[k]).getResult()
                     : arith::MulIOp::create(nb, l, prod, args[k]).getResult();
        Value acc = args.back();
        return isF ? arith::AddFOp::create(nb, l, acc, prod).getResult()
                   : arith::AddIOp::create(nb, l, acc, prod).getResult();
      });
  ctx.setOutput(0, {r, ins[0].dtype});
  return success();
}

} // namespace

void registerMatMulOps(OpRegistry &r) {
  r.add("MatMul", importMatMul);
  r.add("Gemm", importGemm);
  r.add("Einsum", importEinsum);
}

} // namespace ddpc::onnx_import

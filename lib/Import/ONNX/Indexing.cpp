//===- Indexing.cpp - Import of ONNX scatter and one-hot ops --------------===//
//
// Part of ddpc. ScatterElements (and the older Scatter), ScatterND and
// OneHot, following the ONNX operator spec (Operators.md, "ScatterND",
// "ScatterElements", "OneHot").
//
// A scatter is built in gather form, so that reverse-mode AD needs no rule
// of its own: every output element reduces, over the update positions that
// could reach it, `match ? update : neutral` (a contraction-like generic
// whose match test compares the index with the output coordinate), and is
// combined with data. For reduction none the winner is the last matching
// update in row-major order of the updates (an integer max reduction of
// its position; the spec leaves the order of duplicates undefined, this is
// the order of a sequential loop), read by tensor.extract. The VJPs follow
// from the generic, select, extract and slice rules: add gives each update
// its element's cotangent; none the winner only; mul the product of the
// others; max/min the first extremal update (data on ties with it). The
// cost is |output| x (updates reaching one output slice): the full update
// count for ScatterND, the update extent along `axis` for ScatterElements.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

using namespace mlir;

namespace ddpc::onnx_import {
namespace {

enum class Reduction { None, Add, Mul, Max, Min };

/// The `reduction` attribute as the node's opset defines it: absent before
/// 16, none/add/mul from 16, also max/min from 18.
FailureOr<Reduction> readReduction(NodeContext &ctx, int32_t dtype) {
  std::string r = ctx.attrString("reduction", "none");
  Reduction red;
  if (r == "none")
    return Reduction::None;
  if (r == "add")
    red = Reduction::Add;
  else if (r == "mul")
    red = Reduction::Mul;
  else if (r == "max" && ctx.opset >= 18)
    red = Reduction::Max;
  else if (r == "min" && ctx.opset >= 18)
    red = Reduction::Min;
  else
    return ctx.invalid("reduction '" + r + "' is not defined at opset " +
                       Twine(ctx.opset));
  if (dtype == kBool)
    return ctx.unsupported("reduction '" + r + "' on bool data");
  return red;
}

/// The neutral element of `red` for elements of `elem`.
TypedAttr neutralAttr(Reduction red, Type elem, bool isUnsigned) {
  switch (red) {
  case Reduction::Mul:
    return scalarAttr(elem, 1.0);
  case Reduction::Max:
    return lowestAttr(elem, isUnsigned);
  case Reduction::Min:
    return highestAttr(elem, isUnsigned);
  default:
    return scalarAttr(elem, 0.0);
  }
}

/// `red`(a, v) for floats or (un)signed integers.
Value combine(OpBuilder &b, Location l, Reduction red, bool isUnsigned, Value a,
              Value v) {
  bool f = isa<FloatType>(a.getType());
  switch (red) {
  case Reduction::Mul:
    return f ? arith::MulFOp::create(b, l, a, v).getResult()
             : arith::MulIOp::create(b, l, a, v).getResult();
  case Reduction::Max:
    if (f)
      return arith::MaximumFOp::create(b, l, a, v);
    return isUnsigned ? arith::MaxUIOp::create(b, l, a, v).getResult()
                      : arith::MaxSIOp::create(b, l, a, v).getResult();
  case Reduction::Min:
    if (f)
      return arith::MinimumFOp::create(b, l, a, v);
    return isUnsigned ? arith::MinUIOp::create(b, l, a, v).getResult()
                      : arith::MinSIOp::create(b, l, a, v).getResult();
  default:
    return f ? arith::AddFOp::create(b, l, a, v).getResult()
             : arith::AddIOp::create(b, l, a, v).getResult();
  }
}

/// How one scatter matches update positions to output elements.
struct ScatterForm {
  /// The output (region) shape; the generic's parallel dims.
  SmallVector<int64_t> outShape;
  /// Extents of the update positions reduced per output element.
  SmallVector<int64_t> reduced;
  /// Inputs read with `maps` (over outShape + reduced dims): first the
  /// index inputs, then the updates.
  SmallVector<Value> ins;
  SmallVector<AffineMap> maps;
  unsigned numIndexInputs = 0;
  /// i1: the index inputs `idx` (scalars) select the current output
  /// element.
  std::function<Value(OpBuilder &, Location, ValueRange idx)> match;
  /// Coordinates of the winning update in `updates` given its linear
  /// position `pos` (index) over the reduced dims.
  std::function<SmallVector<Value>(OpBuilder &, Location, Value pos)>
      winnerCoords;
};

/// Row-major linear position (i64) over the reduced dims, which follow
/// the `numOut` output dims.
Value reducedPosition(OpBuilder &b, Location l, unsigned numOut,
                      ArrayRef<int64_t> reduced) {
  Value lin = arith::ConstantIntOp::create(b, l, 0, 64);
  for (unsigned d = 0; d < reduced.size(); ++d) {
    Value i = arith::IndexCastOp::create(
        b, l, b.getI64Type(), linalg::IndexOp::create(b, l, numOut + d));
    lin = arith::AddIOp::create(
        b, l,
        arith::MulIOp::create(
            b, l, lin, arith::ConstantIntOp::create(b, l, reduced[d], 64)),
        i);
  }
  return lin;
}

/// data scattered into (a region of) `data` as `form` says, combined by
/// `red`; `updates` is read by tensor.extract for reduction none.
Value buildScatter(NodeContext &ctx, Value dataR, Value updates,
                   ScatterForm &form, Reduction red, bool isUnsigned) {
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  Type elem = cast<RankedTensorType>(dataR.getType()).getElementType();
  unsigned numOut = form.outShape.size();
  unsigned numRed = form.reduced.size();
  SmallVector<int64_t> iterShape(form.outShape);
  iterShape.append(form.reduced);
  // buildGeneric iterates over outShape + reduction dims whose extents
  // come from the input maps; all inputs read the reduced dims.
  if (red == Reduction::None) {
    SmallVector<Value> idxIns(form.ins.begin(),
                              form.ins.begin() + form.numIndexInputs);
    SmallVector<AffineMap> idxMaps(form.maps.begin(),
                                   form.maps.begin() + form.numIndexInputs);
    Value winner =
        buildGeneric(b, loc, idxIns, idxMaps, form.outShape, b.getI64Type(),
                     numRed, b.getI64IntegerAttr(-1),
                     [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                       Value pos = reducedPosition(nb, l, numOut, form.reduced);
                       Value cand = arith::SelectOp::create(
                           nb, l, form.match(nb, l, a.drop_back()), pos,
                           arith::ConstantIntOp::create(nb, l, -1, 64));
                       return arith::MaxSIOp::create(nb, l, a.back(), cand);
                     });
    return buildElementwise(
        b, loc, ValueRange{dataR, winner}, form.outShape, elem,
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          Value zero = arith::ConstantIntOp::create(nb, l, 0, 64);
          Value has = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sge,
                                            a[1], zero);
          Value pos = arith::IndexCastOp::create(
              nb, l, nb.getIndexType(),
              arith::SelectOp::create(nb, l, has, a[1], zero));
          Value v = tensor::ExtractOp::create(nb, l, updates,
                                              form.winnerCoords(nb, l, pos));
          return arith::SelectOp::create(nb, l, has, v, a[0]);
        });
  }
  TypedAttr neutral = neutralAttr(red, elem, isUnsigned);
  Value reducedUpdates = buildGeneric(
      b, loc, form.ins, form.maps, form.outShape, elem, numRed, neutral,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value upd = a[form.numIndexInputs];
        Value v = arith::SelectOp::create(
            nb, l, form.match(nb, l, a.take_front(form.numIndexInputs)), upd,
            arith::ConstantOp::create(nb, l, neutral));
        return combine(nb, l, red, isUnsigned, a.back(), v);
      });
  return buildElementwise(
      b, loc, ValueRange{dataR, reducedUpdates}, form.outShape, elem,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        return combine(nb, l, red, isUnsigned, a[0], a[1]);
      });
}

/// ScatterElements (opsets 11, 13, 16, 18) and Scatter (9, 11): data [D...],
/// indices and updates [U...] of data's rank, U_d <= D_d off `axis`;
/// out = data with out[.., idx[u], ..] (idx at `axis`) combined with
/// updates[u]. Elements outside the updates' extents off `axis` keep data.
LogicalResult importScatterElements(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"axis", "reduction"})))
    return failure();
  TValue data = ctx.input(0), indices = ctx.input(1), updates = ctx.input(2);
  int64_t r = data.rank();
  if (indices.rank() != r || indices.shape() != updates.shape())
    return ctx.invalid("indices " + shapeString(indices.shape()) +
                       " and updates " + shapeString(updates.shape()) +
                       " must have one shape, of data's rank " + Twine(r));
  if (updates.dtype != data.dtype)
    return ctx.invalid("updates and data have different dtypes");
  auto axisOr = normalizeAxis(ctx.attrInt("axis", 0), r);
  if (failed(axisOr))
    return ctx.invalid("axis out of range");
  int64_t axis = *axisOr;
  for (int64_t d = 0; d < r; ++d)
    if (d != axis && indices.shape()[d] > data.shape()[d])
      return ctx.invalid("indices axis " + Twine(d) + " (size " +
                         Twine(indices.shape()[d]) + ") exceeds data's (" +
                         Twine(data.shape()[d]) + ")");
  auto red = readReduction(ctx, data.dtype);
  if (failed(red))
    return failure();
  if (numElements(indices.shape()) == 0) {
    ctx.setOutput(0, data);
    return success();
  }
  if (failed(checkIndices(ctx, 1, data.shape()[axis],
                          "axis " + std::to_string(axis) + " of '" +
                              ctx.node.input(0) + "'")))
    return failure();
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  MLIRContext *mctx = b.getContext();
  // The region the updates reach: their extents off `axis`, data's on it.
  ScatterForm form;
  form.outShape.assign(indices.shape().begin(), indices.shape().end());
  form.outShape[axis] = data.shape()[axis];
  form.reduced = {indices.shape()[axis]};
  SmallVector<AffineExpr> e;
  for (int64_t d = 0; d < r; ++d)
    e.push_back(getAffineDimExpr(d == axis ? r : d, mctx));
  AffineMap map = AffineMap::get(r + 1, 0, e, mctx);
  form.ins = {indices.value, updates.value};
  form.maps = {map, map};
  form.numIndexInputs = 1;
  int64_t dimSize = data.shape()[axis];
  form.match = [&](OpBuilder &nb, Location l, ValueRange idx) -> Value {
    return arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                 readableIndex(nb, l, idx[0], dimSize),
                                 linalg::IndexOp::create(nb, l, axis));
  };
  form.winnerCoords = [&](OpBuilder &nb, Location l, Value pos) {
    SmallVector<Value> coords;
    for (int64_t d = 0; d < r; ++d)
      coords.push_back(
          d == axis ? pos : linalg::IndexOp::create(nb, l, d).getResult());
    return coords;
  };
  bool whole = ArrayRef<int64_t>(form.outShape) == data.shape();
  SmallVector<OpFoldResult> zeros(r, b.getIndexAttr(0)),
      ones(r, b.getIndexAttr(1)),
      sizes = getAsIndexOpFoldResult(mctx, form.outShape);
  Value dataR = data.value;
  if (!whole)
    dataR = tensor::ExtractSliceOp::create(
        b, loc, RankedTensorType::get(form.outShape, data.elementType()),
        data.value, zeros, sizes, ones);
  Value out = buildScatter(ctx, dataR, updates.value, form, *red,
                           isUnsignedDType(data.dtype));
  if (!whole)
    out = tensor::InsertSliceOp::create(b, loc, out, data.value, zeros, sizes,
                                        ones);
  ctx.setOutput(0, {out, data.dtype});
  return success();
}

/// ScatterND (opsets 11, 13, 16, 18): data [D...], indices [Q..., m],
/// updates [Q..., D_m...]; out = data with out[idx[q], :] combined with
/// updates[q, :].
LogicalResult importScatterND(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"reduction"})))
    return failure();
  TValue data = ctx.input(0), indices = ctx.input(1), updates = ctx.input(2);
  int64_t r = data.rank(), q = indices.rank();
  if (r < 1 || q < 1)
    return ctx.invalid("data and indices must have rank >= 1");
  int64_t m = indices.shape()[q - 1];
  if (m < 1 || m > r)
    return ctx.invalid("indices' last dim " + Twine(m) + " must be in [1, " +
                       Twine(r) + "]");
  SmallVector<int64_t> qShape(indices.shape().drop_back());
  SmallVector<int64_t> updShape(qShape);
  updShape.append(data.shape().begin() + m, data.shape().end());
  if (updates.shape() != ArrayRef<int64_t>(updShape))
    return ctx.invalid("updates have shape " + shapeString(updates.shape()) +
                       ", expected " + shapeString(updShape));
  if (updates.dtype != data.dtype)
    return ctx.invalid("updates and data have different dtypes");
  auto red = readReduction(ctx, data.dtype);
  if (failed(red))
    return failure();
  if (numElements(qShape) == 0 || numElements(data.shape()) == 0) {
    ctx.setOutput(0, data);
    return success();
  }
  for (int64_t j = 0; j < m; ++j)
    if (failed(checkIndices(ctx, 1, data.shape()[j],
                            "axis " + std::to_string(j) + " of '" +
                                ctx.node.input(0) + "'",
                            j, m)))
      return failure();
  OpBuilder &b = ctx.builder();
  MLIRContext *mctx = b.getContext();
  // Dims: [0, r) data's, [r, r + q - 1) the update positions Q.
  unsigned numDims = r + q - 1;
  ScatterForm form;
  form.outShape.assign(data.shape().begin(), data.shape().end());
  form.reduced = qShape;
  for (int64_t j = 0; j < m; ++j) {
    SmallVector<AffineExpr> e;
    for (int64_t d = 0; d + 1 < q; ++d)
      e.push_back(getAffineDimExpr(r + d, mctx));
    e.push_back(getAffineConstantExpr(j, mctx));
    form.ins.push_back(indices.value);
    form.maps.push_back(AffineMap::get(numDims, 0, e, mctx));
  }
  SmallVector<AffineExpr> ue;
  for (int64_t d = 0; d + 1 < q; ++d)
    ue.push_back(getAffineDimExpr(r + d, mctx));
  for (int64_t d = m; d < r; ++d)
    ue.push_back(getAffineDimExpr(d, mctx));
  form.ins.push_back(updates.value);
  form.maps.push_back(AffineMap::get(numDims, 0, ue, mctx));
  form.numIndexInputs = m;
  auto dataShape = data.shape();
  form.match = [&](OpBuilder &nb, Location l, ValueRange idx) -> Value {
    Value all;
    for (int64_t j = 0; j < m; ++j) {
      Value eq =
          arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                readableIndex(nb, l, idx[j], dataShape[j]),
                                linalg::IndexOp::create(nb, l, j));
      all = all ? arith::AndIOp::create(nb, l, all, eq).getResult() : eq;
    }
    return all;
  };
  // Updates as [|Q|, D_m...], read at (winner, output coords past m).
  SmallVector<int64_t> flatShape{numElements(qShape)};
  flatShape.append(data.shape().begin() + m, data.shape().end());
  Value flatUpdates = buildReshape(b, ctx.loc(), updates.value, flatShape);
  form.winnerCoords = [&](OpBuilder &nb, Location l, Value pos) {
    SmallVector<Value> coords{pos};
    for (int64_t d = m; d < r; ++d)
      coords.push_back(linalg::IndexOp::create(nb, l, d));
    return coords;
  };
  Value out = buildScatter(ctx, data.value, flatUpdates, form, *red,
                           isUnsignedDType(data.dtype));
  ctx.setOutput(0, {out, data.dtype});
  return success();
}

/// OneHot (opsets 9, 11): indices [I...] (any numeric type, cast to
/// integers), depth an import-time constant, values [off, on]; the output
/// [I...] with a new axis of size depth at `axis` holds `on` where the
/// index equals the coordinate. Opset 11 counts negative indices from the
/// end (in [-depth, 0)); opset 9 and indices out of range give all `off`.
LogicalResult importOneHot(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"axis"})))
    return failure();
  TValue indices = ctx.input(0), values = ctx.input(2);
  auto depthAttr = ctx.constInput(1);
  if (!depthAttr) {
    const std::string &name = ctx.node.input(1);
    bool isGraphInput = ctx.importer.values.count(name) &&
                        isa<BlockArgument>(ctx.importer.values[name].value);
    return ctx.unsupported(
        "depth '" + name +
        "' must be a constant known at compile time (it sets the output's "
        "shape)" +
        (isGraphInput ? "; bind graph input '" + name + "' with --bind-input " +
                            name + "=FILE.npy"
                      : std::string()));
  }
  if (depthAttr->getNumElements() != 1)
    return ctx.invalid("depth must have one element");
  double depthValue =
      isa<FloatType>(depthAttr->getElementType())
          ? (*depthAttr->getValues<APFloat>().begin()).convertToDouble()
          : (double)(*depthAttr->getValues<APInt>().begin()).getSExtValue();
  if (!(depthValue >= 1 && depthValue <= (double)(1LL << 40)))
    return ctx.invalid("depth " + Twine(std::to_string(depthValue)) +
                       " must be positive");
  int64_t depth = (int64_t)depthValue;
  if (values.rank() != 1 || values.shape()[0] != 2)
    return ctx.invalid("values must have shape [2] (off, on), not " +
                       shapeString(values.shape()));
  int64_t r = indices.rank();
  auto axisOr = normalizeAxis(ctx.attrInt("axis", -1), r + 1);
  if (failed(axisOr))
    return ctx.invalid("axis out of range for output rank " + Twine(r + 1));
  int64_t axis = *axisOr;
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  MLIRContext *mctx = b.getContext();
  Type elem = values.elementType();
  // off and on as 0-d tensors, read as broadcast inputs (their VJPs are
  // then sums over the output's elements).
  auto scalarOf = [&](int64_t i) {
    Value s = tensor::ExtractSliceOp::create(
        b, loc, RankedTensorType::get({1}, elem), values.value,
        ArrayRef<OpFoldResult>{b.getIndexAttr(i)},
        ArrayRef<OpFoldResult>{b.getIndexAttr(1)},
        ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
    return buildReshape(b, loc, s, {});
  };
  Value off = scalarOf(0), on = scalarOf(1);
  SmallVector<int64_t> outShape(indices.shape());
  outShape.insert(outShape.begin() + axis, depth);
  SmallVector<AffineExpr> ie;
  for (int64_t d = 0; d <= r; ++d)
    if (d != axis)
      ie.push_back(getAffineDimExpr(d, mctx));
  AffineMap scalarMap = AffineMap::get(r + 1, 0, {}, mctx);
  int32_t idxDType = indices.dtype;
  bool negativeFromEnd = ctx.opset >= 11;
  Value out = buildGeneric(
      b, loc, ValueRange{indices.value, off, on},
      {AffineMap::get(r + 1, 0, ie, mctx), scalarMap, scalarMap}, outShape,
      elem, 0, std::nullopt,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value i = castScalar(nb, l, a[0], idxDType, kInt64, nb.getI64Type());
        if (negativeFromEnd) {
          Value neg =
              arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt, i,
                                    arith::ConstantIntOp::create(nb, l, 0, 64));
          i = arith::SelectOp::create(
              nb, l, neg,
              arith::AddIOp::create(
                  nb, l, i, arith::ConstantIntOp::create(nb, l, depth, 64)),
              i);
        }
        Value here = arith::IndexCastOp::create(
            nb, l, nb.getI64Type(), linalg::IndexOp::create(nb, l, axis));
        Value hot =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, i, here);
        return arith::SelectOp::create(nb, l, hot, a[2], a[1]);
      });
  ctx.setOutput(0, {out, values.dtype});
  return success();
}

} // namespace

void registerIndexingOps(OpRegistry &r) {
  r.add("ScatterElements", importScatterElements);
  r.add("Scatter", importScatterElements);
  r.add("ScatterND", importScatterND);
  r.add("OneHot", importOneHot);
}

} // namespace ddpc::onnx_import

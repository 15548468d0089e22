//===- Shape.cpp - Import of ONNX data-movement and shape ops -------------===//
//
// Part of ddpc. Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat,
// Slice, Gather, GatherElements, GatherND, Expand, Shape, Constant,
// ConstantOfShape, Identity and Dropout (inference). Shapes are static, so
// shape-producing ops (Shape, ConstantOfShape, and ops on import-time
// constants) fold on the host.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;

namespace ddpc::onnx_import {
namespace {

DenseElementsAttr i64Attr(MLIRContext *ctx, ArrayRef<int64_t> shape,
                          ArrayRef<int64_t> values) {
  auto t = RankedTensorType::get(shape, IntegerType::get(ctx, 64));
  return DenseElementsAttr::get(t, values);
}

/// Reshapes a host constant (no data movement).
DenseElementsAttr reshapeConst(DenseElementsAttr a, ArrayRef<int64_t> shape) {
  return a.reshape(RankedTensorType::get(shape, a.getElementType()));
}

/// Output shape of Reshape per the ONNX spec (0 copies, -1 infers).
FailureOr<SmallVector<int64_t>> reshapeTarget(NodeContext &ctx,
                                              ArrayRef<int64_t> inShape,
                                              ArrayRef<int64_t> spec,
                                              bool allowZero) {
  SmallVector<int64_t> out;
  int64_t inferIdx = -1, known = 1;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == 0 && !allowZero) {
      if (i >= inShape.size()) {
        (void)ctx.invalid("shape entry 0 at an index past the input rank");
        return failure();
      }
      d = inShape[i];
    }
    if (d == -1) {
      if (inferIdx >= 0) {
        (void)ctx.invalid("shape has more than one -1");
        return failure();
      }
      inferIdx = i;
      out.push_back(1);
      continue;
    }
    if (d < 0) {
      (void)ctx.invalid("negative shape entry " + Twine(d));
      return failure();
    }
    if (llvm::MulOverflow(known, d, known)) {
      (void)ctx.invalid("shape " + shapeString(spec) +
                        " has more elements than int64 can count");
      return failure();
    }
    out.push_back(d);
  }
  int64_t total = numElements(inShape);
  if (inferIdx >= 0) {
    if (known == 0 || total % known != 0) {
      (void)ctx.invalid("cannot infer the -1 dimension");
      return failure();
    }
    out[inferIdx] = total / known;
  } else if (known != total) {
    (void)ctx.invalid("reshape from " + Twine(total) + " to " + Twine(known) +
                      " elements");
    return failure();
  }
  return out;
}

LogicalResult setReshaped(NodeContext &ctx, ArrayRef<int64_t> shape) {
  if (auto c = ctx.constInput(0)) {
    int32_t dt = ctx.importer.constants[ctx.node.input(0)].second;
    return ctx.setConstOutput(0, reshapeConst(*c, shape), dt);
  }
  TValue x = ctx.input(0);
  ctx.setOutput(
      0, {buildReshape(ctx.builder(), ctx.loc(), x.value, shape), x.dtype});
  return success();
}

/// Shape and dtype of input `i`, whether constant or not.
SmallVector<int64_t> inputShape(NodeContext &ctx, int i) {
  if (auto c = ctx.constInput(i)) {
    auto s = cast<RankedTensorType>(c->getType()).getShape();
    return SmallVector<int64_t>(s.begin(), s.end());
  }
  auto s = ctx.input(i).shape();
  return SmallVector<int64_t>(s.begin(), s.end());
}

LogicalResult importReshape(NodeContext &ctx) {
  SmallVector<int64_t> spec;
  if (ctx.opset < 5) {
    spec = ctx.attrInts("shape");
  } else {
    auto s = ctx.constIntsInput(1);
    if (failed(s))
      return failure();
    spec = *s;
  }
  auto shape = reshapeTarget(ctx, inputShape(ctx, 0), spec,
                             ctx.attrFlag("allowzero", false));
  if (failed(shape))
    return failure();
  return setReshaped(ctx, *shape);
}

LogicalResult importFlatten(NodeContext &ctx) {
  auto in = inputShape(ctx, 0);
  int64_t rank = in.size();
  int64_t axis = ctx.attrInt("axis", 1);
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis > rank)
    return ctx.invalid("axis out of range");
  int64_t a = numElements(ArrayRef<int64_t>(in).take_front(axis));
  int64_t b = numElements(ArrayRef<int64_t>(in).drop_front(axis));
  return setReshaped(ctx, {a, b});
}

FailureOr<SmallVector<int64_t>> axesOf(NodeContext &ctx, int inputIdx,
                                       int64_t rank) {
  SmallVector<int64_t> axes;
  if (ctx.opset >= 13) {
    if (ctx.hasInput(inputIdx)) {
      auto a = ctx.constIntsInput(inputIdx);
      if (failed(a))
        return failure();
      axes = *a;
    }
  } else {
    axes = ctx.attrInts("axes");
  }
  for (auto &a : axes) {
    auto n = normalizeAxis(a, rank);
    if (failed(n)) {
      (void)ctx.invalid("axis " + Twine(a) + " out of range");
      return failure();
    }
    a = *n;
  }
  llvm::sort(axes);
  return axes;
}

LogicalResult importSqueeze(NodeContext &ctx) {
  auto in = inputShape(ctx, 0);
  auto axes = axesOf(ctx, 1, in.size());
  if (failed(axes))
    return failure();
  SmallVector<int64_t> out;
  for (int64_t d = 0; d < (int64_t)in.size(); ++d) {
    bool drop = axes->empty() ? in[d] == 1 : llvm::is_contained(*axes, d);
    if (drop && in[d] != 1)
      return ctx.invalid("cannot squeeze dimension " + Twine(d) + " of size " +
                         Twine(in[d]));
    if (!drop)
      out.push_back(in[d]);
  }
  return setReshaped(ctx, out);
}

LogicalResult importUnsqueeze(NodeContext &ctx) {
  auto in = inputShape(ctx, 0);
  SmallVector<int64_t> raw;
  if (ctx.opset >= 13) {
    auto a = ctx.constIntsInput(1);
    if (failed(a))
      return failure();
    raw = *a;
  } else {
    raw = ctx.attrInts("axes");
  }
  int64_t outRank = in.size() + raw.size();
  SmallVector<int64_t> axes;
  for (int64_t a : raw) {
    auto n = normalizeAxis(a, outRank);
    if (failed(n))
      return ctx.invalid("axis " + Twine(a) + " out of range");
    axes.push_back(*n);
  }
  SmallVector<int64_t> out;
  size_t j = 0;
  for (int64_t d = 0; d < outRank; ++d) {
    if (llvm::is_contained(axes, d))
      out.push_back(1);
    else if (j < in.size())
      out.push_back(in[j++]);
    else
      return ctx.invalid("duplicate axes");
  }
  return setReshaped(ctx, out);
}

LogicalResult importTranspose(NodeContext &ctx) {
  TValue x = ctx.input(0);
  int64_t rank = x.rank();
  SmallVector<int64_t> perm = ctx.attrInts("perm");
  if (perm.empty())
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  if ((int64_t)perm.size() != rank)
    return ctx.invalid("perm has the wrong length");
  SmallVector<int64_t> outShape;
  SmallVector<AffineExpr> exprs(rank);
  MLIRContext *mctx = &ctx.importer.context;
  for (int64_t i = 0; i < rank; ++i) {
    auto p = normalizeAxis(perm[i], rank);
    if (failed(p))
      return ctx.invalid("perm entry out of range");
    outShape.push_back(x.shape()[*p]);
    exprs[*p] = getAffineDimExpr(i, mctx);
  }
  for (auto &e : exprs)
    if (!e)
      return ctx.invalid("perm is not a permutation");
  Value r = buildGeneric(
      ctx.builder(), ctx.loc(), x.value, {AffineMap::get(rank, 0, exprs, mctx)},
      outShape, x.elementType(), 0, std::nullopt,
      [](OpBuilder &, Location, ValueRange a) { return a[0]; });
  ctx.setOutput(0, {r, x.dtype});
  return success();
}

LogicalResult importConcat(NodeContext &ctx) {
  SmallVector<SmallVector<int64_t>> shapes;
  for (int i = 0; i < ctx.numInputs(); ++i)
    shapes.push_back(inputShape(ctx, i));
  int64_t rank = shapes[0].size();
  auto axisOr = normalizeAxis(ctx.attrInt("axis", ctx.opset < 4 ? 1 : 0), rank);
  if (failed(axisOr))
    return ctx.invalid("axis out of range");
  int64_t axis = *axisOr;
  SmallVector<int64_t> outShape = shapes[0];
  outShape[axis] = 0;
  for (auto &s : shapes) {
    if ((int64_t)s.size() != rank)
      return ctx.invalid("inputs have different ranks");
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && s[d] != shapes[0][d])
        return ctx.invalid("inputs differ outside the concat axis");
    outShape[axis] += s[axis];
  }
  // Fold 1-D integer constants (shape computations).
  bool allConst = rank == 1;
  for (int i = 0; i < ctx.numInputs() && allConst; ++i)
    allConst =
        ctx.constInput(i) &&
        isa<IntegerType>(ctx.constInput(i)->getElementType()) &&
        ctx.constInput(i)->getElementType().getIntOrFloatBitWidth() == 64;
  if (allConst) {
    SmallVector<int64_t> vals;
    for (int i = 0; i < ctx.numInputs(); ++i)
      for (const APInt &v : ctx.constInput(i)->getValues<APInt>())
        vals.push_back(v.getSExtValue());
    return ctx.setConstOutput(0, i64Attr(&ctx.importer.context, outShape, vals),
                              ctx.importer.constants[ctx.node.input(0)].second);
  }
  TValue first = ctx.input(0);
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  Value out = tensor::EmptyOp::create(b, loc, outShape, first.elementType());
  int64_t offset = 0;
  for (int i = 0; i < ctx.numInputs(); ++i) {
    TValue t = ctx.input(i);
    if (t.dtype != first.dtype)
      return ctx.invalid("inputs have different dtypes");
    if (t.shape()[axis] == 0)
      continue;
    SmallVector<OpFoldResult> offsets(rank, b.getIndexAttr(0)), sizes,
        strides(rank, b.getIndexAttr(1));
    offsets[axis] = b.getIndexAttr(offset);
    for (int64_t d : t.shape())
      sizes.push_back(b.getIndexAttr(d));
    out = tensor::InsertSliceOp::create(b, loc, t.value, out, offsets, sizes,
                                        strides);
    offset += t.shape()[axis];
  }
  ctx.setOutput(0, {out, first.dtype});
  return success();
}

LogicalResult importSlice(NodeContext &ctx) {
  auto inShape = inputShape(ctx, 0);
  int64_t rank = inShape.size();
  SmallVector<int64_t> starts, ends, axes, steps;
  if (ctx.opset < 10) {
    starts = ctx.attrInts("starts");
    ends = ctx.attrInts("ends");
    axes = ctx.attrInts("axes");
  } else {
    auto s = ctx.constIntsInput(1), e = ctx.constIntsInput(2);
    if (failed(s) || failed(e))
      return failure();
    starts = *s;
    ends = *e;
    if (ctx.hasInput(3)) {
      auto a = ctx.constIntsInput(3);
      if (failed(a))
        return failure();
      axes = *a;
    }
    if (ctx.hasInput(4)) {
      auto st = ctx.constIntsInput(4);
      if (failed(st))
        return failure();
      steps = *st;
    }
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(i);
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    return ctx.invalid("starts/ends/axes/steps lengths differ");
  SmallVector<int64_t> outStart(rank, 0), outStep(rank, 1),
      outShape(inShape.begin(), inShape.end());
  for (size_t i = 0; i < starts.size(); ++i) {
    auto ax = normalizeAxis(axes[i], rank);
    if (failed(ax))
      return ctx.invalid("axis out of range");
    int64_t dim = inShape[*ax], step = steps[i];
    if (step == 0)
      return ctx.invalid("step 0");
    int64_t s = starts[i], e = ends[i];
    // Clamp per the ONNX spec.
    if (s < 0)
      s += dim;
    if (e < 0)
      e += dim;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
    }
    int64_t n =
        step > 0 ? (e - s + step - 1) / step : (s - e - step - 1) / -step;
    outShape[*ax] = std::max<int64_t>(n, 0);
    outStart[*ax] = s;
    outStep[*ax] = step;
  }
  // Constant folding of 1-D integer slices (shape computations).
  if (auto c = ctx.constInput(0)) {
    if (rank == 1 && isa<IntegerType>(c->getElementType()) &&
        c->getElementType().getIntOrFloatBitWidth() == 64) {
      SmallVector<int64_t> all, vals;
      for (const APInt &v : c->getValues<APInt>())
        all.push_back(v.getSExtValue());
      for (int64_t i = 0; i < outShape[0]; ++i)
        vals.push_back(all[outStart[0] + i * outStep[0]]);
      return ctx.setConstOutput(
          0, i64Attr(&ctx.importer.context, outShape, vals),
          ctx.importer.constants[ctx.node.input(0)].second);
    }
  }
  TValue x = ctx.input(0);
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  if (numElements(outShape) == 0) {
    Value r = tensor::EmptyOp::create(b, loc, outShape, x.elementType());
    ctx.setOutput(0, {r, x.dtype});
    return success();
  }
  // Positive steps: a strided tensor.extract_slice. Negative steps: slice the
  // covered range first, then reverse-read it with a generic.
  SmallVector<OpFoldResult> offsets, sizes, strides;
  bool anyNegative = false;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t st = outStep[d], n = outShape[d];
    if (st > 0) {
      offsets.push_back(b.getIndexAttr(outStart[d]));
      strides.push_back(b.getIndexAttr(st));
    } else {
      anyNegative = true;
      // Elements start, start+step, ... (descending): take them ascending.
      offsets.push_back(b.getIndexAttr(outStart[d] + (n - 1) * st));
      strides.push_back(b.getIndexAttr(-st));
    }
    sizes.push_back(b.getIndexAttr(n));
  }
  auto sliceType = RankedTensorType::get(outShape, x.elementType());
  Value r = tensor::ExtractSliceOp::create(b, loc, sliceType, x.value, offsets,
                                           sizes, strides);
  if (anyNegative) {
    MLIRContext *mctx = &ctx.importer.context;
    SmallVector<AffineExpr> exprs;
    for (int64_t d = 0; d < rank; ++d)
      exprs.push_back(outStep[d] > 0
                          ? getAffineDimExpr(d, mctx)
                          : outShape[d] - 1 - getAffineDimExpr(d, mctx));
    r = buildGeneric(b, loc, r, {AffineMap::get(rank, 0, exprs, mctx)},
                     outShape, x.elementType(), 0, std::nullopt,
                     [](OpBuilder &, Location, ValueRange a) { return a[0]; });
  }
  ctx.setOutput(0, {r, x.dtype});
  return success();
}

} // namespace

/// Checks the indices of input `i` against `bound` (the size of the
/// indexed axis, `axisDesc`): at import time when they are constant (an
/// invalid-model error naming the node and the index), else at run time
/// (buildIndexCheck) unless --no-runtime-checks.
/// With `numComponents` m > 1, only component `component` of the last axis
/// (of size m) is checked (GatherND's index tuples: one bound per data
/// axis).
LogicalResult checkIndices(NodeContext &ctx, int i, int64_t bound,
                           const std::string &axisDesc, int64_t component,
                           int64_t numComponents) {
  auto c = ctx.constInput(i);
  Type elem = c ? c->getElementType() : ctx.input(i).elementType();
  if (!isa<IntegerType>(elem))
    return ctx.invalid("indices '" + ctx.node.input(i) + "' must be integers");
  // An empty axis has no valid index (a clamp to [0, -1] would read
  // before the tensor).
  if (bound == 0)
    return ctx.invalid(axisDesc + " has size 0: no index into it is valid");
  if (c) {
    int64_t pos = 0;
    for (const APInt &v : c->getValues<APInt>()) {
      if (pos++ % numComponents != component)
        continue;
      int64_t x = v.getSExtValue();
      if (x < -bound || x >= bound)
        return ctx.invalid("index " + Twine(x) + " of '" + ctx.node.input(i) +
                           "' is out of range for " + axisDesc + " (size " +
                           Twine(bound) + "; valid: " + Twine(-bound) + ".." +
                           Twine(bound - 1) + ")");
    }
    return success();
  }
  if (!ctx.importer.options.runtimeChecks)
    return success();
  std::string node = ctx.node.name().empty() ? "" : ctx.node.name();
  if (auto name = dyn_cast<NameLoc>(ctx.loc()))
    node = name.getName().str();
  Value values = ctx.input(i).value;
  if (numComponents > 1) {
    // Component j as a tensor of its own (the check reads a dense buffer).
    auto shape = cast<RankedTensorType>(values.getType()).getShape();
    int64_t rank = shape.size();
    MLIRContext *mctx = &ctx.importer.context;
    SmallVector<AffineExpr> exprs;
    for (int64_t d = 0; d + 1 < rank; ++d)
      exprs.push_back(getAffineDimExpr(d, mctx));
    exprs.push_back(getAffineConstantExpr(component, mctx));
    values = buildGeneric(
        ctx.builder(), ctx.loc(), values,
        {AffineMap::get(rank - 1, 0, exprs, mctx)}, shape.drop_back(),
        cast<RankedTensorType>(values.getType()).getElementType(), 0,
        std::nullopt, [](OpBuilder &, Location, ValueRange a) { return a[0]; });
  }
  std::string which =
      numComponents > 1 ? " component " + std::to_string(component) : "";
  buildIndexCheck(ctx.builder(), ctx.loc(), values, bound,
                  printableText(ctx.node.op_type() + " node '" + node +
                                "' (indices '" + ctx.node.input(i) + "'" +
                                which + " into " + axisDesc + ")"));
  return success();
}

Value readableIndex(OpBuilder &b, Location l, Value v, int64_t dimSize) {
  Value idx = arith::IndexCastOp::create(b, l, b.getIndexType(), v);
  Value zero = arith::ConstantIndexOp::create(b, l, 0);
  Value n = arith::ConstantIndexOp::create(b, l, dimSize);
  Value neg = arith::CmpIOp::create(b, l, arith::CmpIPredicate::slt, idx, zero);
  idx = arith::SelectOp::create(b, l, neg, arith::AddIOp::create(b, l, idx, n),
                                idx);
  return arith::MinSIOp::create(
      b, l, arith::MaxSIOp::create(b, l, idx, zero).getResult(),
      arith::ConstantIndexOp::create(b, l, dimSize - 1).getResult());
}

namespace {

LogicalResult importGather(NodeContext &ctx) {
  auto dataShape = inputShape(ctx, 0);
  auto idxShape = inputShape(ctx, 1);
  int64_t rank = dataShape.size();
  auto axisOr = normalizeAxis(ctx.attrInt("axis", 0), rank);
  if (failed(axisOr))
    return ctx.invalid("axis out of range");
  int64_t axis = *axisOr;
  if (failed(checkIndices(ctx, 1, dataShape[axis],
                          "axis " + std::to_string(axis) + " of '" +
                              ctx.node.input(0) + "'")))
    return failure();
  SmallVector<int64_t> outShape(dataShape.begin(), dataShape.begin() + axis);
  outShape.append(idxShape.begin(), idxShape.end());
  outShape.append(dataShape.begin() + axis + 1, dataShape.end());
  // Fold gathers on 1-D integer constants (e.g. Shape -> Gather).
  if (auto c = ctx.constInput(0)) {
    auto idx = ctx.constInput(1);
    if (idx && rank == 1 && isa<IntegerType>(c->getElementType()) &&
        c->getElementType().getIntOrFloatBitWidth() == 64) {
      SmallVector<int64_t> all, vals;
      for (const APInt &v : c->getValues<APInt>())
        all.push_back(v.getSExtValue());
      for (const APInt &v : idx->getValues<APInt>()) {
        int64_t i = v.getSExtValue();
        if (i < 0)
          i += rank == 1 ? dataShape[0] : 0;
        vals.push_back(all[i]);
      }
      return ctx.setConstOutput(
          0, i64Attr(&ctx.importer.context, outShape, vals),
          ctx.importer.constants[ctx.node.input(0)].second);
    }
  }
  TValue data = ctx.input(0), indices = ctx.input(1);
  if (!isa<IntegerType>(indices.elementType()))
    return ctx.invalid("indices must be integers");

  MLIRContext *mctx = &ctx.importer.context;
  int64_t q = idxShape.size();
  int64_t outRank = outShape.size();
  // Iteration space = output dims. Indices are read at dims [axis, axis+q).
  SmallVector<AffineExpr> idxExprs;
  for (int64_t i = 0; i < q; ++i)
    idxExprs.push_back(getAffineDimExpr(axis + i, mctx));
  AffineMap idxMap = AffineMap::get(outRank, 0, idxExprs, mctx);
  int64_t dimSize = dataShape[axis];
  Value dataV = data.value;
  Value r = buildGeneric(
      ctx.builder(), ctx.loc(), indices.value, {idxMap}, outShape,
      data.elementType(), 0, std::nullopt,
      [&](OpBuilder &b, Location l, ValueRange a) -> Value {
        Value idx = readableIndex(b, l, a[0], dimSize);
        SmallVector<Value> coords;
        for (int64_t d = 0; d < axis; ++d)
          coords.push_back(linalg::IndexOp::create(b, l, d));
        coords.push_back(idx);
        for (int64_t d = axis + 1; d < rank; ++d)
          coords.push_back(linalg::IndexOp::create(b, l, d - 1 + q));
        return tensor::ExtractOp::create(b, l, dataV, coords);
      });
  ctx.setOutput(0, {r, data.dtype});
  return success();
}

/// GatherElements: out[i_0, .., i_n] = data[i_0, .., idx[i_0, .., i_n], ..,
/// i_n] with the index at `axis`; indices have data's rank, and every
/// other axis no larger than data's.
LogicalResult importGatherElements(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"axis"})))
    return failure();
  TValue data = ctx.input(0), indices = ctx.input(1);
  int64_t rank = data.rank();
  if (indices.rank() != rank)
    return ctx.invalid("indices have rank " + Twine(indices.rank()) +
                       ", data " + Twine(rank));
  auto axisOr = normalizeAxis(ctx.attrInt("axis", 0), rank);
  if (failed(axisOr))
    return ctx.invalid("axis out of range");
  int64_t axis = *axisOr;
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && indices.shape()[d] > data.shape()[d])
      return ctx.invalid("indices axis " + Twine(d) + " (size " +
                         Twine(indices.shape()[d]) + ") exceeds data's (" +
                         Twine(data.shape()[d]) + ")");
  if (numElements(indices.shape()) == 0) {
    ctx.setOutput(0,
                  {tensor::EmptyOp::create(ctx.builder(), ctx.loc(),
                                           indices.shape(), data.elementType()),
                   data.dtype});
    return success();
  }
  if (failed(checkIndices(ctx, 1, data.shape()[axis],
                          "axis " + std::to_string(axis) + " of '" +
                              ctx.node.input(0) + "'")))
    return failure();
  int64_t dimSize = data.shape()[axis];
  Value dataV = data.value;
  Value r = buildElementwise(
      ctx.builder(), ctx.loc(), indices.value, indices.shape(),
      data.elementType(), [&](OpBuilder &b, Location l, ValueRange a) -> Value {
        Value idx = readableIndex(b, l, a[0], dimSize);
        SmallVector<Value> coords;
        for (int64_t d = 0; d < rank; ++d)
          coords.push_back(
              d == axis ? idx : linalg::IndexOp::create(b, l, d).getResult());
        return tensor::ExtractOp::create(b, l, dataV, coords);
      });
  ctx.setOutput(0, {r, data.dtype});
  return success();
}

/// GatherND (opsets 11, 12, 13; batch_dims from 12): data [B..., D...],
/// indices [B..., Q..., m] -> [B..., Q..., D_{b+m}...]; each index tuple
/// of m components picks data[b..., idx_0, .., idx_{m-1}, :]. One generic
/// over the output; the m components are inputs read at a constant last
/// coordinate, and data is read by tensor.extract, so the VJP is the
/// scatter-add of capturedTensorVJP (repeated tuples accumulate).
LogicalResult importGatherND(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"batch_dims"})))
    return failure();
  TValue data = ctx.input(0), indices = ctx.input(1);
  int64_t r = data.rank(), q = indices.rank();
  int64_t bd = ctx.attrInt("batch_dims", 0);
  if (r < 1 || q < 1)
    return ctx.invalid("data and indices must have rank >= 1");
  if (bd < 0 || bd >= std::min(r, q))
    return ctx.invalid("batch_dims " + Twine(bd) +
                       " must be in [0, min(rank(data), rank(indices)))");
  for (int64_t d = 0; d < bd; ++d)
    if (data.shape()[d] != indices.shape()[d])
      return ctx.invalid("batch dim " + Twine(d) + " differs: data " +
                         shapeString(data.shape()) + ", indices " +
                         shapeString(indices.shape()));
  int64_t m = indices.shape()[q - 1];
  if (m < 1 || m > r - bd)
    return ctx.invalid("indices' last dim " + Twine(m) + " must be in [1, " +
                       Twine(r - bd) + "]");
  SmallVector<int64_t> outShape(indices.shape().begin(),
                                indices.shape().end() - 1);
  outShape.append(data.shape().begin() + bd + m, data.shape().end());
  if (numElements(outShape) == 0) {
    ctx.setOutput(0, {tensor::EmptyOp::create(ctx.builder(), ctx.loc(),
                                              outShape, data.elementType()),
                      data.dtype});
    return success();
  }
  for (int64_t j = 0; j < m; ++j)
    if (failed(checkIndices(ctx, 1, data.shape()[bd + j],
                            "axis " + std::to_string(bd + j) + " of '" +
                                ctx.node.input(0) + "'",
                            j, m)))
      return failure();
  if (!isa<IntegerType>(indices.elementType()))
    return ctx.invalid("indices must be integers");
  MLIRContext *mctx = &ctx.importer.context;
  int64_t outRank = outShape.size();
  // Output dims: [0, q-1) the index tuple's position (batch dims first),
  // [q-1, outRank) the slice of data.
  SmallVector<Value> ins(m, indices.value);
  SmallVector<AffineMap> maps;
  for (int64_t j = 0; j < m; ++j) {
    SmallVector<AffineExpr> e;
    for (int64_t d = 0; d + 1 < q; ++d)
      e.push_back(getAffineDimExpr(d, mctx));
    e.push_back(getAffineConstantExpr(j, mctx));
    maps.push_back(AffineMap::get(outRank, 0, e, mctx));
  }
  Value dataV = data.value;
  auto dataShape = data.shape();
  Value out = buildGeneric(
      ctx.builder(), ctx.loc(), ins, maps, outShape, data.elementType(), 0,
      std::nullopt, [&](OpBuilder &b, Location l, ValueRange a) -> Value {
        SmallVector<Value> coords;
        for (int64_t d = 0; d < bd; ++d)
          coords.push_back(linalg::IndexOp::create(b, l, d));
        for (int64_t j = 0; j < m; ++j)
          coords.push_back(readableIndex(b, l, a[j], dataShape[bd + j]));
        for (int64_t d = q - 1; d < outRank; ++d)
          coords.push_back(linalg::IndexOp::create(b, l, d));
        return tensor::ExtractOp::create(b, l, dataV, coords);
      });
  ctx.setOutput(0, {out, data.dtype});
  return success();
}

/// Range: start, limit and delta must be import-time constants (the output
/// shape depends on them); the result is a host constant, n =
/// max(ceil((limit - start) / delta), 0) elements start + i delta.
LogicalResult importRange(NodeContext &ctx) {
  SmallVector<DenseElementsAttr> c;
  for (int i = 0; i < 3; ++i) {
    auto v = ctx.constInput(i);
    if (!v) {
      return ctx.unsupported("input #" + Twine(i) + " ('" + ctx.node.input(i) +
                             "') must be a constant known at compile time; "
                             "bind it with --bind-input " +
                             ctx.node.input(i) + "=FILE.npy");
    }
    if (v->getNumElements() != 1)
      return ctx.invalid("input #" + Twine(i) + " must be a scalar");
    c.push_back(*v);
  }
  int32_t dtype = ctx.importer.constants[ctx.node.input(0)].second;
  Type elem = c[0].getElementType();
  bool isF = isa<FloatType>(elem);
  auto asDouble = [&](DenseElementsAttr a) {
    return isF ? (*a.getValues<APFloat>().begin()).convertToDouble()
               : double((*a.getValues<APInt>().begin()).getSExtValue());
  };
  double start = asDouble(c[0]), limit = asDouble(c[1]), delta = asDouble(c[2]);
  if (delta == 0)
    return ctx.invalid("delta is 0");
  if (!std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
    return ctx.invalid("start, limit and delta must be finite (got " +
                       std::to_string(start) + ", " + std::to_string(limit) +
                       ", " + std::to_string(delta) + ")");
  double count = std::ceil((limit - start) / delta);
  if (!(count < 1e8))
    return ctx.invalid("Range of more than 10^8 elements");
  int64_t n = std::max<int64_t>(int64_t(count), 0);
  auto t = RankedTensorType::get({n}, elem);
  if (isF) {
    SmallVector<APFloat> vals;
    for (int64_t i = 0; i < n; ++i) {
      APFloat v(start + double(i) * delta);
      bool lost;
      v.convert(cast<FloatType>(elem).getFloatSemantics(),
                APFloat::rmNearestTiesToEven, &lost);
      vals.push_back(v);
    }
    return ctx.setConstOutput(0, DenseElementsAttr::get(t, vals), dtype);
  }
  int64_t s0 = (*c[0].getValues<APInt>().begin()).getSExtValue();
  int64_t d0 = (*c[2].getValues<APInt>().begin()).getSExtValue();
  SmallVector<APInt> vals;
  for (int64_t i = 0; i < n; ++i)
    vals.push_back(APInt(elem.getIntOrFloatBitWidth(), s0 + i * d0, true));
  return ctx.setConstOutput(0, DenseElementsAttr::get(t, vals), dtype);
}

LogicalResult importExpand(NodeContext &ctx) {
  auto spec = ctx.constIntsInput(1);
  if (failed(spec))
    return failure();
  TValue x = ctx.input(0);
  for (int64_t d : *spec)
    if (d < 0)
      return ctx.invalid("shape " + shapeString(*spec) +
                         " has a negative dimension");
  auto out = broadcastShapes({x.shape(), ArrayRef<int64_t>(*spec)});
  if (failed(out))
    return ctx.invalid("shape cannot be broadcast to the input");
  Value r = buildElementwise(
      ctx.builder(), ctx.loc(), x.value, *out, x.elementType(),
      [](OpBuilder &, Location, ValueRange a) { return a[0]; });
  ctx.setOutput(0, {r, x.dtype});
  return success();
}

LogicalResult importShape(NodeContext &ctx) {
  auto in = inputShape(ctx, 0);
  int64_t rank = in.size();
  int64_t start = ctx.attrInt("start", 0), end = ctx.attrInt("end", rank);
  if (start < 0)
    start += rank;
  if (end < 0)
    end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  SmallVector<int64_t> vals;
  for (int64_t i = start; i < end; ++i)
    vals.push_back(in[i]);
  return ctx.setConstOutput(
      0, i64Attr(&ctx.importer.context, {(int64_t)vals.size()}, vals), kInt64);
}

LogicalResult importSize(NodeContext &ctx) {
  return ctx.setConstOutput(
      0, i64Attr(&ctx.importer.context, {}, {numElements(inputShape(ctx, 0))}),
      kInt64);
}

LogicalResult importConstant(NodeContext &ctx) {
  MLIRContext *mctx = &ctx.importer.context;
  // ONNX Constant: exactly one of the value attributes.
  int numValues = 0;
  for (const char *name :
       {"value", "value_float", "value_floats", "value_int", "value_ints",
        "value_string", "value_strings", "sparse_value"})
    numValues += ctx.attr(name) != nullptr;
  if (numValues != 1)
    return ctx.invalid("needs exactly one value attribute, has " +
                       Twine(numValues));
  if (const auto *a = ctx.attr("value")) {
    auto attr = ctx.importer.tensorToAttr(a->t(), "Constant value");
    if (failed(attr))
      return failure();
    return ctx.setConstOutput(0, *attr, a->t().data_type());
  }
  if (const auto *a = ctx.attr("value_float"))
    return ctx.setConstOutput(
        0,
        DenseElementsAttr::get(
            RankedTensorType::get({}, Float32Type::get(mctx)), a->f()),
        kFloat);
  if (const auto *a = ctx.attr("value_floats")) {
    SmallVector<float> v(a->floats().begin(), a->floats().end());
    return ctx.setConstOutput(
        0,
        DenseElementsAttr::get(
            RankedTensorType::get({(int64_t)v.size()}, Float32Type::get(mctx)),
            ArrayRef<float>(v)),
        kFloat);
  }
  if (const auto *a = ctx.attr("value_int"))
    return ctx.setConstOutput(0, i64Attr(mctx, {}, {a->i()}), kInt64);
  if (const auto *a = ctx.attr("value_ints")) {
    SmallVector<int64_t> v(a->ints().begin(), a->ints().end());
    return ctx.setConstOutput(0, i64Attr(mctx, {(int64_t)v.size()}, v), kInt64);
  }
  return ctx.unsupported("only value, value_float(s) and value_int(s) "
                         "constants are supported");
}

LogicalResult importConstantOfShape(NodeContext &ctx) {
  auto shape = ctx.constIntsInput(0);
  if (failed(shape))
    return failure();
  for (int64_t d : *shape)
    if (d < 0)
      return ctx.invalid("negative dimension");
  int32_t dtype = kFloat;
  Attribute value;
  if (const auto *a = ctx.attr("value")) {
    auto attr = ctx.importer.tensorToAttr(a->t(), "ConstantOfShape value");
    if (failed(attr))
      return failure();
    if (attr->getNumElements() != 1)
      return ctx.invalid("value must have one element, has " +
                         Twine(attr->getNumElements()));
    dtype = a->t().data_type();
    value = *attr->value_begin<Attribute>();
  } else {
    value = FloatAttr::get(Float32Type::get(&ctx.importer.context), 0.0);
  }
  auto type = RankedTensorType::get(*shape, ctx.importer.elementType(dtype));
  return ctx.setConstOutput(0, DenseElementsAttr::get(type, value), dtype);
}

LogicalResult importIdentity(NodeContext &ctx) {
  if (auto c = ctx.constInput(0))
    return ctx.setConstOutput(0, *c,
                              ctx.importer.constants[ctx.node.input(0)].second);
  ctx.setOutput(0, ctx.input(0));
  return success();
}

/// Dropout in a training program: keep an element with probability
/// 1 - ratio and scale kept elements by 1 / (1 - ratio) (inverted dropout, as
/// torch.nn.Dropout). The uniform number of element i is splitmix64 (Steele,
/// Lea & Flood, "Fast splittable pseudorandom number generators", OOPSLA
/// 2014) of seed + (rank * numel + i) * golden-ratio, i.e. a function of the
/// element's position in the global batch: masks do not depend on how the
/// batch is split over ranks.
LogicalResult importDropoutTraining(NodeContext &ctx, double ratio) {
  TValue x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  if (ratio >= 1.0)
    return ctx.invalid("ratio must be < 1");
  Value rng = ctx.importer.rngArg;
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  int64_t numel = numElements(x.shape());
  int64_t rank = x.rank();
  SmallVector<int64_t> strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * x.shape()[d + 1];
  auto keepBit = [=](OpBuilder &nb, Location l) -> Value {
    Type i64 = nb.getI64Type();
    auto cst = [&](uint64_t v) -> Value {
      return arith::ConstantOp::create(nb, l,
                                       IntegerAttr::get(i64, APInt(64, v)));
    };
    Value zero = arith::ConstantIndexOp::create(nb, l, 0);
    Value one = arith::ConstantIndexOp::create(nb, l, 1);
    Value seed = tensor::ExtractOp::create(nb, l, rng, ValueRange{zero});
    Value rk = tensor::ExtractOp::create(nb, l, rng, ValueRange{one});
    Value idx = arith::MulIOp::create(nb, l, rk, cst(numel));
    for (int64_t d = 0; d < rank; ++d) {
      Value i = arith::IndexCastOp::create(nb, l, i64,
                                           linalg::IndexOp::create(nb, l, d));
      idx = arith::AddIOp::create(
          nb, l, idx, arith::MulIOp::create(nb, l, i, cst(strides[d])));
    }
    Value z = arith::AddIOp::create(
        nb, l, seed,
        arith::MulIOp::create(nb, l, arith::AddIOp::create(nb, l, idx, cst(1)),
                              cst(0x9E3779B97F4A7C15ULL)));
    auto mix = [&](Value v, int64_t shift, uint64_t mul) -> Value {
      Value s = arith::ShRUIOp::create(nb, l, v, cst(shift));
      v = arith::XOrIOp::create(nb, l, v, s);
      return mul ? arith::MulIOp::create(nb, l, v, cst(mul)).getResult() : v;
    };
    z = mix(z, 30, 0xBF58476D1CE4E5B9ULL);
    z = mix(z, 27, 0x94D049BB133111EBULL);
    z = mix(z, 31, 0);
    // 53 random bits -> [0, 1).
    Value u = arith::UIToFPOp::create(
        nb, l, nb.getF64Type(), arith::ShRUIOp::create(nb, l, z, cst(11)));
    u = arith::MulFOp::create(
        nb, l, u,
        scalarConst(nb, l, nb.getF64Type(), 1.0 / 9007199254740992.0));
    return arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OGE, u,
                                 scalarConst(nb, l, nb.getF64Type(), ratio));
  };
  Type elem = x.elementType();
  double scale = 1.0 / (1.0 - ratio);
  Value y = buildElementwise(
      b, loc, x.value, x.shape(), elem,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value keep = keepBit(nb, l);
        Value scaled =
            arith::MulFOp::create(nb, l, a[0], scalarConst(nb, l, elem, scale));
        return arith::SelectOp::create(nb, l, keep, scaled,
                                       scalarConst(nb, l, elem, 0.0));
      });
  ctx.setOutput(0, {y, x.dtype});
  if (ctx.hasOutput(1)) {
    Value mask = buildElementwise(
        b, loc, ValueRange{}, x.shape(), b.getI1Type(),
        [&](OpBuilder &nb, Location l, ValueRange) { return keepBit(nb, l); });
    ctx.setOutput(1, {mask, kBool});
  }
  return success();
}

/// Dropout in inference mode is the identity; the optional mask is all true.
LogicalResult importDropout(NodeContext &ctx) {
  // training_mode=true: training programs decide per function (forward_eval
  // reads it as inference, ImportOptions::evalMode).
  const ImportOptions &options = ctx.importer.options;
  if (ctx.opset >= 12 && ctx.hasInput(2) && !options.trainingMode &&
      !options.evalMode) {
    auto training = ctx.constIntsInput(2);
    if (failed(training))
      return failure();
    bool zeroRatio = false;
    if (ctx.hasInput(1)) {
      auto ratio = ctx.constInput(1);
      zeroRatio =
          ratio && ratio->isSplat() && ratio->getSplatValue<APFloat>().isZero();
    }
    if (!training->empty() && (*training)[0] != 0 && !zeroRatio)
      return ctx.unsupported("training_mode=true (random masks) in inference "
                             "programs; export the model in eval mode "
                             "(model.eval()) or compile it with --train");
  }
  if (ctx.opset < 7 && !ctx.attrFlag("is_test", false))
    return ctx.unsupported("is_test=0 (training mode)");
  if (ctx.importer.options.trainingMode) {
    // Training programs would need a random mask from a seeded generator;
    // refuse rather than silently training without dropout.
    double ratio = ctx.opset < 12 ? ctx.attrFloat("ratio", 0.5f) : 0.5;
    if (ctx.opset >= 12 && ctx.hasInput(1)) {
      auto r = ctx.constInput(1);
      ratio = r && r->isSplat() ? r->getSplatValue<APFloat>().convertToDouble()
                                : 0.5;
    }
    if (ratio > 0.0)
      return importDropoutTraining(ctx, ratio);
  }
  TValue x = ctx.input(0);
  ctx.setOutput(0, x);
  if (ctx.hasOutput(1)) {
    auto t = RankedTensorType::get(x.shape(), ctx.builder().getI1Type());
    Value mask = arith::ConstantOp::create(ctx.builder(), ctx.loc(),
                                           DenseElementsAttr::get(t, true));
    ctx.setOutput(1, {mask, kBool});
  }
  return success();
}

} // namespace

void registerShapeOps(OpRegistry &r) {
  r.add("Reshape", importReshape);
  r.add("Flatten", importFlatten);
  r.add("Squeeze", importSqueeze);
  r.add("Unsqueeze", importUnsqueeze);
  r.add("Transpose", importTranspose);
  r.add("Concat", importConcat);
  r.add("Slice", importSlice);
  r.add("Gather", importGather);
  r.add("GatherElements", importGatherElements);
  r.add("GatherND", importGatherND);
  r.add("Range", importRange);
  r.add("Expand", importExpand);
  r.add("Shape", importShape);
  r.add("Size", importSize);
  r.add("Constant", importConstant);
  r.add("ConstantOfShape", importConstantOfShape);
  r.add("Identity", importIdentity);
  r.add("Dropout", importDropout);
}

} // namespace ddpc::onnx_import

//===- Movement.cpp - Import of ONNX Split, Pad, Tile and Trilu -----------===//
//
// Part of ddpc. Data movement whose sizes are import-time constants: Split
// (tensor.extract_slice per output), Pad (tensor.pad for the constant mode,
// a gather-style linalg.generic for reflect, edge and wrap), Tile (a
// broadcast then a collapse) and Trilu (a masked copy). Every form keeps a
// VJP: extract_slice, tensor.pad and broadcasts have adjoints, and reads of
// a captured tensor inside a generic scatter-add their cotangent.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/Support/CheckedArithmetic.h"

using namespace mlir;

namespace ddpc::onnx_import {
namespace {

/// Static slice [offsets, offsets + sizes) of `x`, unit strides.
Value sliceOf(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> offsets,
              ArrayRef<int64_t> sizes) {
  Type elem = cast<RankedTensorType>(x.getType()).getElementType();
  // An empty slice may start at the axis' end, which extract_slice refuses.
  if (numElements(sizes) == 0)
    return tensor::EmptyOp::create(b, loc, sizes, elem);
  SmallVector<OpFoldResult> o, s, st;
  for (size_t d = 0; d < offsets.size(); ++d) {
    o.push_back(b.getIndexAttr(offsets[d]));
    s.push_back(b.getIndexAttr(sizes[d]));
    st.push_back(b.getIndexAttr(1));
  }
  auto t = RankedTensorType::get(sizes, elem);
  return tensor::ExtractSliceOp::create(b, loc, t, x, o, s, st);
}

/// Split: the `split` sizes (input from opset 13, attribute before), else
/// `num_outputs` parts (opset 18: ceil(n / k) each, the last smaller), else
/// equal parts, one per output.
LogicalResult importSplit(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"axis", "split", "num_outputs"})))
    return failure();
  TValue x = ctx.input(0);
  auto axisOr = normalizeAxis(ctx.attrInt("axis", 0), x.rank());
  if (failed(axisOr))
    return ctx.invalid("axis " + Twine(ctx.attrInt("axis", 0)) +
                       " out of range for rank " + Twine(x.rank()));
  int64_t axis = *axisOr, n = x.shape()[axis];
  int64_t outs = ctx.numOutputs();
  SmallVector<int64_t> sizes;
  if (ctx.hasAttr("num_outputs") &&
      (ctx.opset < 18 || ctx.hasInput(1) || ctx.hasAttr("split")))
    return ctx.invalid(ctx.opset < 18
                           ? "num_outputs is an attribute of Split from opset "
                             "18 on"
                           : "give either the 'split' input or num_outputs, "
                             "not both");
  if (ctx.opset >= 13 && ctx.hasInput(1)) {
    auto s = ctx.constIntsInput(1);
    if (failed(s))
      return failure();
    sizes = *s;
  } else if (ctx.opset < 13 && ctx.hasAttr("split")) {
    sizes = ctx.attrInts("split");
  } else if (ctx.hasAttr("num_outputs")) {
    int64_t k = ctx.attrInt("num_outputs", 0);
    if (k < 1 || k != outs)
      return ctx.invalid("num_outputs " + Twine(k) + " but the node has " +
                         Twine(outs) + " outputs");
    int64_t part = (n + k - 1) / k;
    if (n > 0 && part * (k - 1) > n)
      return ctx.invalid("num_outputs " + Twine(k) + " parts of " +
                         Twine(part) + " (ceil(" + Twine(n) + " / " + Twine(k) +
                         ")) leave a negative last part");
    for (int64_t i = 0, left = n; i < k; ++i, left -= part)
      sizes.push_back(std::max<int64_t>(std::min(part, left), 0));
  } else {
    // Opset 18 dropped the implicit equal split (ONNX's shape inference
    // refuses such a node too).
    if (ctx.opset >= 18)
      return ctx.invalid("Split (opset 18) needs the 'split' input or the "
                         "num_outputs attribute");
    if (n % outs != 0)
      return ctx.invalid("axis " + Twine(axis) + " (size " + Twine(n) +
                         ") does not split into " + Twine(outs) +
                         " equal parts; give 'split'");
    sizes.assign(outs, n / outs);
  }
  if ((int64_t)sizes.size() != outs)
    return ctx.invalid("split has " + Twine(sizes.size()) +
                       " entries but the node has " + Twine(outs) + " outputs");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0)
      return ctx.invalid("negative split size " + Twine(s));
    total += s;
  }
  if (total != n)
    return ctx.invalid("split sizes sum to " + Twine(total) + ", axis " +
                       Twine(axis) + " has " + Twine(n));
  SmallVector<int64_t> offsets(x.rank(), 0), shape(x.shape());
  for (int64_t i = 0; i < outs; ++i) {
    shape[axis] = sizes[i];
    if (ctx.hasOutput(i))
      ctx.setOutput(i,
                    {sliceOf(ctx.builder(), ctx.loc(), x.value, offsets, shape),
                     x.dtype});
    offsets[axis] += sizes[i];
  }
  return success();
}

/// Pad, opset 2-24: pads (attribute before 11, else input 1) as
/// [begin_0, ..., begin_n, end_0, ..., end_n] over `axes` (opset 18), the
/// constant value (attribute `value` / input 2), mode constant, reflect,
/// edge or wrap. Negative pads crop first.
LogicalResult importPad(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"mode", "pads", "value"})))
    return failure();
  TValue x = ctx.input(0);
  int64_t rank = x.rank();
  SmallVector<int64_t> pads;
  if (ctx.opset < 11) {
    pads = ctx.attrInts("pads");
  } else {
    auto p = ctx.constIntsInput(1);
    if (failed(p))
      return failure();
    pads = *p;
  }
  SmallVector<int64_t> axes;
  if (ctx.opset >= 18 && ctx.hasInput(3)) {
    auto a = ctx.constIntsInput(3);
    if (failed(a))
      return failure();
    for (int64_t v : *a) {
      auto n = normalizeAxis(v, rank);
      if (failed(n))
        return ctx.invalid("axis " + Twine(v) + " out of range");
      if (llvm::is_contained(axes, *n))
        return ctx.invalid("axis " + Twine(*n) + " appears twice in axes");
      axes.push_back(*n);
    }
  } else {
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  int64_t k = axes.size();
  if ((int64_t)pads.size() != 2 * k)
    return ctx.invalid("pads has " + Twine(pads.size()) +
                       " entries, expected " + Twine(2 * k));
  SmallVector<int64_t> low(rank, 0), high(rank, 0);
  for (int64_t i = 0; i < k; ++i) {
    low[axes[i]] = pads[i];
    high[axes[i]] = pads[k + i];
  }
  std::string mode = ctx.attrString("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" &&
      mode != "wrap")
    return ctx.unsupported("mode '" + mode + "'");
  if (mode == "wrap" && ctx.opset < 19)
    return ctx.invalid("mode 'wrap' needs opset 19");
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  // Negative pads remove elements: crop, then pad by the positive parts.
  SmallVector<int64_t> offsets(rank), sizes(rank);
  bool crop = false;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t lo = std::min<int64_t>(low[d], 0),
            hi = std::min<int64_t>(high[d], 0);
    // Pads near the int64 limits overflow the axis size (checked).
    std::optional<int64_t> kept = llvm::checkedAdd(x.shape()[d], lo);
    if (kept)
      kept = llvm::checkedAdd(*kept, hi);
    if (!kept || *kept < 0)
      return ctx.invalid("pads " + shapeString(pads) +
                         " remove more than axis " + Twine(d) + " holds");
    offsets[d] = -lo;
    sizes[d] = *kept;
    crop |= lo < 0 || hi < 0;
    low[d] = std::max<int64_t>(low[d], 0);
    high[d] = std::max<int64_t>(high[d], 0);
    std::optional<int64_t> grown = llvm::checkedAdd(*kept, low[d]);
    if (grown)
      grown = llvm::checkedAdd(*grown, high[d]);
    if (!grown)
      return ctx.invalid("pads " + shapeString(pads) +
                         " overflow int64 in the size of axis " + Twine(d));
  }
  Value v = crop ? sliceOf(b, loc, x.value, offsets, sizes) : x.value;
  Type elem = x.elementType();
  if (mode == "constant") {
    TypedAttr value = scalarAttr(elem, 0.0);
    if (ctx.opset < 11) {
      value = scalarAttr(elem, ctx.attrFloat("value", 0.0f));
    } else if (ctx.hasInput(2)) {
      auto c = ctx.constInput(2);
      if (c && (c->getElementType() != elem || c->getNumElements() != 1))
        return ctx.invalid("constant_value must be one element of X's dtype");
      if (c) {
        value = cast<TypedAttr>(*c->value_begin<Attribute>());
      } else {
        // A run-time value (a graph input): one element read on the device.
        TValue cv = ctx.input(2);
        if (cv.dtype != x.dtype || numElements(cv.shape()) != 1)
          return ctx.invalid("constant_value must be one element of X's dtype");
        SmallVector<Value> zeros(
            cv.rank(), arith::ConstantIndexOp::create(b, loc, 0).getResult());
        Value pv = tensor::ExtractOp::create(b, loc, cv.value, zeros);
        SmallVector<OpFoldResult> lo, hi;
        SmallVector<int64_t> shape(
            cast<RankedTensorType>(v.getType()).getShape());
        for (int64_t d = 0; d < rank; ++d) {
          lo.push_back(b.getIndexAttr(low[d]));
          hi.push_back(b.getIndexAttr(high[d]));
          shape[d] += low[d] + high[d];
        }
        // An empty X: a fill, as in buildPad.
        Value r =
            numElements(cast<RankedTensorType>(v.getType()).getShape()) == 0
                ? linalg::FillOp::create(
                      b, loc, pv,
                      tensor::EmptyOp::create(b, loc, shape, elem).getResult())
                      .getResult(0)
                : tensor::PadOp::create(
                      b, loc, RankedTensorType::get(shape, elem), v, lo, hi, pv)
                      .getResult();
        ctx.setOutput(0, {r, x.dtype});
        return success();
      }
    }
    ctx.setOutput(0, {buildPad(b, loc, v, low, high, value), x.dtype});
    return success();
  }
  // reflect, edge, wrap: out[i] reads in[src(i - low)] per axis.
  SmallVector<int64_t> inShape(cast<RankedTensorType>(v.getType()).getShape());
  SmallVector<int64_t> outShape(rank);
  for (int64_t d = 0; d < rank; ++d) {
    outShape[d] = inShape[d] + low[d] + high[d];
    if (outShape[d] > 0 && inShape[d] == 0)
      return ctx.invalid("mode '" + mode + "' pads an empty axis " + Twine(d));
    if (mode == "reflect" && inShape[d] == 1 && (low[d] || high[d]))
      return ctx.invalid("mode 'reflect' pads axis " + Twine(d) + " of size 1");
  }
  Value r = buildGeneric(
      b, loc, ValueRange{}, {}, outShape, elem, 0, std::nullopt,
      [&](OpBuilder &nb, Location l, ValueRange) -> Value {
        SmallVector<Value> coords;
        for (int64_t d = 0; d < rank; ++d) {
          Value i = linalg::IndexOp::create(nb, l, d);
          int64_t n = inShape[d];
          if (!low[d] && !high[d]) {
            coords.push_back(i);
            continue;
          }
          auto c = [&](int64_t val) -> Value {
            return arith::ConstantIndexOp::create(nb, l, val);
          };
          Value j = arith::SubIOp::create(nb, l, i, c(low[d]));
          Value src;
          if (mode == "edge") {
            src = arith::MinSIOp::create(
                nb, l, arith::MaxSIOp::create(nb, l, j, c(0)).getResult(),
                c(n - 1));
          } else if (mode == "wrap") {
            // ((j mod n) + n) mod n.
            Value m = arith::RemSIOp::create(nb, l, j, c(n));
            src = arith::RemSIOp::create(
                nb, l, arith::AddIOp::create(nb, l, m, c(n)), c(n));
          } else {
            // Reflect without repeating the edge, period 2(n - 1):
            // t = |j| mod 2(n-1); src = t < n ? t : 2(n-1) - t.
            int64_t period = 2 * (n - 1);
            Value neg = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt,
                                              j, c(0));
            Value absJ = arith::SelectOp::create(
                nb, l, neg, arith::SubIOp::create(nb, l, c(0), j), j);
            Value t = arith::RemSIOp::create(nb, l, absJ, c(period));
            Value inside = arith::CmpIOp::create(
                nb, l, arith::CmpIPredicate::slt, t, c(n));
            src = arith::SelectOp::create(
                nb, l, inside, t, arith::SubIOp::create(nb, l, c(period), t));
          }
          coords.push_back(src);
        }
        return tensor::ExtractOp::create(nb, l, v, coords);
      });
  ctx.setOutput(0, {r, x.dtype});
  return success();
}

/// Tile: x [d_0, ..., d_n] broadcast to [r_0, d_0, ..., r_n, d_n], then
/// collapsed to [r_0 d_0, ..., r_n d_n] (each copy is a whole x).
LogicalResult importTile(NodeContext &ctx) {
  auto reps = ctx.constIntsInput(1);
  if (failed(reps))
    return failure();
  TValue x = ctx.input(0);
  int64_t rank = x.rank();
  if ((int64_t)reps->size() != rank)
    return ctx.invalid("repeats has " + Twine(reps->size()) +
                       " entries, input rank is " + Twine(rank));
  SmallVector<int64_t> wide, out;
  SmallVector<AffineExpr> exprs;
  MLIRContext *mctx = &ctx.importer.context;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t r = (*reps)[d];
    if (r < 0)
      return ctx.invalid("negative repeat " + Twine(r));
    wide.push_back(r);
    wide.push_back(x.shape()[d]);
    out.push_back(r * x.shape()[d]);
    exprs.push_back(getAffineDimExpr(2 * d + 1, mctx));
  }
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  if (numElements(out) == 0) {
    ctx.setOutput(
        0, {tensor::EmptyOp::create(b, loc, out, x.elementType()), x.dtype});
    return success();
  }
  Value w =
      buildGeneric(b, loc, x.value, {AffineMap::get(2 * rank, 0, exprs, mctx)},
                   wide, x.elementType(), 0, std::nullopt,
                   [](OpBuilder &, Location, ValueRange a) { return a[0]; });
  SmallVector<ReassociationIndices> groups;
  for (int64_t d = 0; d < rank; ++d)
    groups.push_back({2 * d, 2 * d + 1});
  Value r =
      rank == 0
          ? x.value
          : tensor::CollapseShapeOp::create(b, loc, w, groups).getResult();
  ctx.setOutput(0, {r, x.dtype});
  return success();
}

/// Trilu: keeps the elements of the last two axes with j - i >= k (upper)
/// or j - i <= k (lower), zeroes the rest.
LogicalResult importTrilu(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"upper"})))
    return failure();
  TValue x = ctx.input(0);
  if (x.rank() < 2)
    return ctx.invalid("input rank " + Twine(x.rank()) + " < 2");
  int64_t k = 0;
  if (ctx.hasInput(1)) {
    auto kv = ctx.constIntsInput(1);
    if (failed(kv))
      return failure();
    if (kv->size() != 1)
      return ctx.invalid("k must be one integer");
    k = (*kv)[0];
  }
  bool upper = ctx.attrFlag("upper", true);
  int64_t rank = x.rank();
  Value r = buildElementwise(
      ctx.builder(), ctx.loc(), x.value, x.shape(), x.elementType(),
      [&](OpBuilder &b, Location l, ValueRange a) -> Value {
        Value i = linalg::IndexOp::create(b, l, rank - 2);
        Value j = linalg::IndexOp::create(b, l, rank - 1);
        Value diff = arith::SubIOp::create(b, l, j, i);
        Value kc = arith::ConstantIndexOp::create(b, l, k);
        Value keep = arith::CmpIOp::create(
            b, l, upper ? arith::CmpIPredicate::sge : arith::CmpIPredicate::sle,
            diff, kc);
        return arith::SelectOp::create(b, l, keep, a[0],
                                       scalarConst(b, l, a[0].getType(), 0));
      });
  ctx.setOutput(0, {r, x.dtype});
  return success();
}

} // namespace

void registerMovementOps(OpRegistry &r) {
  r.add("Split", importSplit);
  r.add("Pad", importPad);
  r.add("Tile", importTile);
  r.add("Trilu", importTrilu);
}

} // namespace ddpc::onnx_import

//===- Attention.cpp - Import of ONNX Attention and RotaryEmbedding -------===//
//
// Part of ddpc. The transformer ops of opset 23: RotaryEmbedding (RoPE) and
// Attention (scaled dot-product attention, opsets 23 and 24). Both are
// compositions of the builders the other importers use (slices and
// insert_slice, reshapes, elementwise generics, batched contractions,
// Softmax), so that fusion, every target's lowering and the generic VJP
// rules apply to them unchanged.
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

/// The slice of `x` starting at `offsets` with `sizes` (unit strides).
Value sliceOf(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> offsets,
              ArrayRef<int64_t> sizes) {
  auto t = cast<RankedTensorType>(x.getType());
  SmallVector<OpFoldResult> o, s, st;
  for (size_t d = 0; d < offsets.size(); ++d) {
    o.push_back(b.getIndexAttr(offsets[d]));
    s.push_back(b.getIndexAttr(sizes[d]));
    st.push_back(b.getIndexAttr(1));
  }
  auto type = RankedTensorType::get(sizes, t.getElementType());
  return tensor::ExtractSliceOp::create(b, loc, type, x, o, s, st);
}

/// `dest` with `src` written at `offsets` (unit strides).
Value insertAt(OpBuilder &b, Location loc, Value src, Value dest,
               ArrayRef<int64_t> offsets) {
  auto t = cast<RankedTensorType>(src.getType());
  SmallVector<OpFoldResult> o, s, st;
  for (size_t d = 0; d < offsets.size(); ++d) {
    o.push_back(b.getIndexAttr(offsets[d]));
    s.push_back(b.getIndexAttr(t.getDimSize(d)));
    st.push_back(b.getIndexAttr(1));
  }
  return tensor::InsertSliceOp::create(b, loc, src, dest, o, s, st);
}

/// Concatenation of `parts` along `axis` (tensor.empty + insert_slice, as
/// Concat imports).
Value concatAlong(OpBuilder &b, Location loc, ArrayRef<Value> parts,
                  int64_t axis) {
  auto first = cast<RankedTensorType>(parts[0].getType());
  SmallVector<int64_t> shape(first.getShape());
  shape[axis] = 0;
  for (Value p : parts)
    shape[axis] += cast<RankedTensorType>(p.getType()).getDimSize(axis);
  Value out = tensor::EmptyOp::create(b, loc, shape, first.getElementType());
  SmallVector<int64_t> offsets(shape.size(), 0);
  for (Value p : parts) {
    out = insertAt(b, loc, p, out, offsets);
    offsets[axis] += cast<RankedTensorType>(p.getType()).getDimSize(axis);
  }
  return out;
}

/// [d0, d1, d2, d3] -> [d0, d2, d1, d3]: between ONNX's [batch, seq, heads,
/// head] view of a 3-D input and the [batch, heads, seq, head] layout.
Value swapDims12(OpBuilder &b, Location loc, Value x) {
  auto t = cast<RankedTensorType>(x.getType());
  MLIRContext *ctx = b.getContext();
  ArrayRef<int64_t> s = t.getShape();
  SmallVector<int64_t> out{s[0], s[2], s[1], s[3]};
  AffineMap map =
      AffineMap::get(4, 0,
                     {getAffineDimExpr(0, ctx), getAffineDimExpr(2, ctx),
                      getAffineDimExpr(1, ctx), getAffineDimExpr(3, ctx)},
                     ctx);
  return buildGeneric(b, loc, x, {map}, out, t.getElementType(), 0,
                      std::nullopt,
                      [](OpBuilder &, Location, ValueRange a) { return a[0]; });
}

/// cache[position_ids[b, s], i] for position_ids [B, S] and cache
/// [max_pos, n]: a Gather along axis 0 (its run-time index check included).
FailureOr<Value> gatherRows(NodeContext &ctx, int cacheInput, int idsInput) {
  TValue cache = ctx.input(cacheInput), ids = ctx.input(idsInput);
  if (!isa<IntegerType>(ids.elementType()))
    return ctx.invalid("position_ids must be integers");
  int64_t rows = cache.shape()[0];
  if (failed(checkIndices(ctx, idsInput, rows,
                          "axis 0 of '" + ctx.node.input(cacheInput) + "'")))
    return failure();
  MLIRContext *mctx = ctx.builder().getContext();
  SmallVector<int64_t> outShape(ids.shape());
  outShape.push_back(cache.shape()[1]);
  AffineMap idsMap = AffineMap::get(
      3, 0, {getAffineDimExpr(0, mctx), getAffineDimExpr(1, mctx)}, mctx);
  Value data = cache.value;
  return buildGeneric(
      ctx.builder(), ctx.loc(), ids.value, {idsMap}, outShape,
      cache.elementType(), 0, std::nullopt,
      [&](OpBuilder &b, Location l, ValueRange a) -> Value {
        Value row = readableIndex(b, l, a[0], rows);
        Value col = linalg::IndexOp::create(b, l, 2);
        return tensor::ExtractOp::create(b, l, data, ValueRange{row, col});
      });
}

/// RotaryEmbedding-23. X is [B, H, S, D], or [B, S, H*D] with num_heads;
/// cos_cache/sin_cache are [max_pos, rd/2] read at position_ids [B, S], or
/// [B, S, rd/2] without position_ids. The first rd lanes of each head are
/// split into halves (or even/odd lanes when interleaved) x1, x2 and
/// rotated: cos*x1 - sin*x2, sin*x1 + cos*x2; lanes rd.. pass unchanged.
/// Built as: slice the rotated lanes, view them as [.., 2, rd/2] (halves)
/// or [.., rd/2, 2] (interleaved), slice x1 and x2 out of the pair dim,
/// rotate elementwise, concatenate back and insert into X.
LogicalResult importRotaryEmbedding(NodeContext &ctx) {
  if (failed(
          ctx.checkAttrs({"interleaved", "num_heads", "rotary_embedding_dim"})))
    return failure();
  if (ctx.numInputs() < 3 || ctx.numInputs() > 4 || !ctx.hasInput(1) ||
      !ctx.hasInput(2))
    return ctx.invalid("takes X, cos_cache, sin_cache and optional "
                       "position_ids (3 or 4 inputs)");
  if (ctx.numOutputs() != 1)
    return ctx.invalid("has one output");
  TValue x = ctx.input(0), cosC = ctx.input(1), sinC = ctx.input(2);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  if (cosC.dtype != x.dtype || sinC.dtype != x.dtype)
    return ctx.invalid("cos_cache and sin_cache must have X's dtype");
  bool interleaved = ctx.attrFlag("interleaved", false);
  int64_t numHeads = ctx.attrInt("num_heads", 0);
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  // The working view: [B, H, S, D] (4-D) or [B, S, H, D] (3-D); seqDim is
  // where S stands in it.
  Value xv = x.value;
  int64_t seqDim;
  if (x.rank() == 4) {
    seqDim = 2;
    if (numHeads != 0 && numHeads != x.shape()[1])
      return ctx.invalid("num_heads " + Twine(numHeads) +
                         " differs from X's head dimension " +
                         Twine(x.shape()[1]));
  } else if (x.rank() == 3) {
    seqDim = 1;
    if (numHeads <= 0)
      return ctx.invalid("a 3-D X needs num_heads > 0");
    if (x.shape()[2] % numHeads != 0)
      return ctx.invalid("hidden size " + Twine(x.shape()[2]) +
                         " is not a multiple of num_heads " + Twine(numHeads));
    xv = buildReshape(
        b, loc, xv,
        {x.shape()[0], x.shape()[1], numHeads, x.shape()[2] / numHeads});
  } else {
    return ctx.invalid("X must be 3-D or 4-D, not of shape " +
                       shapeString(x.shape()));
  }
  SmallVector<int64_t> view(cast<RankedTensorType>(xv.getType()).getShape());
  int64_t batch = view[0], seq = view[seqDim], head = view[3];
  int64_t rd = ctx.attrInt("rotary_embedding_dim", 0);
  if (rd == 0)
    rd = head;
  if (rd < 0 || rd > head || rd % 2 != 0)
    return ctx.invalid("rotary_embedding_dim " + Twine(rd) +
                       " must be even and at most the head size " +
                       Twine(head));
  int64_t half = rd / 2;
  // cos and sin as [B, S, rd/2].
  Value cosV = cosC.value, sinV = sinC.value;
  SmallVector<int64_t> want{batch, seq, half};
  if (ctx.hasInput(3)) {
    TValue ids = ctx.input(3);
    if (ids.rank() != 2 || ids.shape()[0] != batch || ids.shape()[1] != seq)
      return ctx.invalid(
          "position_ids of shape " + shapeString(ids.shape()) +
          " must be [batch, sequence] = " + shapeString({batch, seq}));
    for (const TValue *c : {&cosC, &sinC})
      if (c->rank() != 2 || c->shape()[1] != half)
        return ctx.invalid("with position_ids, the caches must be "
                           "[max_position, rotary_embedding_dim/2 = " +
                           Twine(half) + "], not " + shapeString(c->shape()));
    if (cosC.shape() != sinC.shape())
      return ctx.invalid("cos_cache and sin_cache have different shapes");
    auto gc = gatherRows(ctx, 1, 3);
    if (failed(gc))
      return failure();
    auto gs = gatherRows(ctx, 2, 3);
    if (failed(gs))
      return failure();
    cosV = *gc;
    sinV = *gs;
  } else {
    for (const TValue *c : {&cosC, &sinC})
      if (c->shape() != ArrayRef<int64_t>(want))
        return ctx.invalid("without position_ids, the caches must be "
                           "[batch, sequence, rotary_embedding_dim/2] = " +
                           shapeString(want) + ", not " +
                           shapeString(c->shape()));
  }
  // The rotated lanes as [.., 2, half] or [.., half, 2]; x1 and x2 are the
  // two slices of the pair dim, and the caches broadcast over the heads
  // and the pair dim.
  SmallVector<int64_t> lanes(view);
  lanes[3] = rd;
  Value xr = rd == head ? xv : sliceOf(b, loc, xv, {0, 0, 0, 0}, lanes);
  SmallVector<int64_t> pairShape(view.begin(), view.begin() + 3);
  int64_t pairDim = interleaved ? 4 : 3;
  if (interleaved)
    pairShape.append({half, 2});
  else
    pairShape.append({2, half});
  Value xp = buildReshape(b, loc, xr, pairShape);
  SmallVector<int64_t> partShape(pairShape);
  partShape[pairDim] = 1;
  SmallVector<int64_t> off(5, 0);
  Value x1 = sliceOf(b, loc, xp, off, partShape);
  off[pairDim] = 1;
  Value x2 = sliceOf(b, loc, xp, off, partShape);
  SmallVector<int64_t> cacheShape(5, 1);
  cacheShape[0] = batch;
  cacheShape[seqDim] = seq;
  cacheShape[interleaved ? 3 : 4] = half;
  cosV = buildReshape(b, loc, cosV, cacheShape);
  sinV = buildReshape(b, loc, sinV, cacheShape);
  Type elem = x.elementType();
  auto rotate = [&](bool first) {
    return buildElementwise(
        b, loc, ValueRange{x1, x2, cosV, sinV}, partShape, elem,
        [first](OpBuilder &nb, Location l, ValueRange a) -> Value {
          Value c1 = arith::MulFOp::create(nb, l, a[2], a[0]);
          Value s1 = arith::MulFOp::create(nb, l, a[3], a[0]);
          Value c2 = arith::MulFOp::create(nb, l, a[2], a[1]);
          Value s2 = arith::MulFOp::create(nb, l, a[3], a[1]);
          return first ? arith::SubFOp::create(nb, l, c1, s2).getResult()
                       : arith::AddFOp::create(nb, l, s1, c2).getResult();
        });
  };
  Value rotated = concatAlong(b, loc, {rotate(true), rotate(false)}, pairDim);
  rotated = buildReshape(b, loc, rotated, lanes);
  Value out =
      rd == head ? rotated : insertAt(b, loc, rotated, xv, {0, 0, 0, 0});
  if (x.rank() == 3)
    out = buildReshape(b, loc, out, x.shape());
  ctx.setOutput(0, {out, x.dtype});
  return success();
}

} // namespace

void registerAttentionOps(OpRegistry &r) {
  r.add("RotaryEmbedding", importRotaryEmbedding);
}

} // namespace ddpc::onnx_import

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

#include <cmath>
#include <limits>

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
  // extract_slice refuses offset 0 on an axis of size 0: an empty slice is
  // an empty tensor.
  if (numElements(sizes) == 0)
    return tensor::EmptyOp::create(b, loc, sizes, t.getElementType());
  return tensor::ExtractSliceOp::create(b, loc, type, x, o, s, st);
}

/// `dest` with `src` written at `offsets` (unit strides).
Value insertAt(OpBuilder &b, Location loc, Value src, Value dest,
               ArrayRef<int64_t> offsets) {
  auto t = cast<RankedTensorType>(src.getType());
  // Writing nothing leaves `dest` (insert_slice refuses it on empty axes).
  if (t.getNumElements() == 0)
    return dest;
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
  // Unset (or 0), the whole head rotates, in pairs of lanes.
  if (rd == 0 && head % 2 != 0)
    return ctx.invalid("head size D = " + Twine(head) +
                       " is odd: without rotary_embedding_dim all D lanes "
                       "rotate in pairs");
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

/// The ONNX dtype input `i` has in the graph (before promoteHalfPrecision
/// widens float16/bfloat16 to float32).
int32_t graphDType(NodeContext &ctx, int i) {
  const std::string &name = ctx.node.input(i);
  if (auto v = ctx.importer.values.find(name); v != ctx.importer.values.end())
    return v->second.dtype;
  if (auto c = ctx.importer.constants.find(name);
      c != ctx.importer.constants.end())
    return c->second.second;
  return kUndefined;
}

/// Attention's batched products with grouped-query heads: `a` [B, Hq, S, n]
/// against `b` [B, Hkv, L, n] (transB: b read as [.., n, L] transposed, i.e.
/// Q K^T) or [B, Hkv, n, L]. Hq = Hkv * r, query head h uses kv head
/// h / r (np.repeat of the kv heads); for r > 1 both sides are viewed as
/// [B, Hkv, r, ., .] and [B, Hkv, 1, ., .] so that the contraction
/// broadcasts the kv head instead of materializing the repeat.
Value headProduct(OpBuilder &b, Location loc, Value a, Value bm, bool transB,
                  Type elem) {
  auto at = cast<RankedTensorType>(a.getType());
  auto bt = cast<RankedTensorType>(bm.getType());
  int64_t hq = at.getDimSize(1), hkv = bt.getDimSize(1);
  SmallVector<int64_t> outShape;
  if (hq == hkv)
    return buildContraction(b, loc, a, bm, false, transB, elem, outShape);
  int64_t r = hq / hkv;
  ArrayRef<int64_t> as = at.getShape(), bs = bt.getShape();
  Value a5 = buildReshape(b, loc, a, {as[0], hkv, r, as[2], as[3]});
  Value b5 = buildReshape(b, loc, bm, {bs[0], hkv, 1, bs[2], bs[3]});
  Value c = buildContraction(b, loc, a5, b5, false, transB, elem, outShape);
  return buildReshape(
      b, loc, c, {as[0], hq, outShape[outShape.size() - 2], outShape.back()});
}

/// Attention-23/24: softmax(softcap(scale Q K^T) + bias) V over Q, K, V in
/// [B, heads, seq, head] (4-D) or [B, seq, heads*head] with q_num_heads and
/// kv_num_heads (3-D). past_key/past_value are concatenated before K and V
/// (present_key/present_value). The bias is -inf where a bool attn_mask is
/// false, where is_causal hides a key (key > query + past length, the
/// causal diagonal offset by the past), where a key is at or past
/// nonpad_kv_seqlen[b] (opset 24), and beyond the end of an attn_mask
/// shorter than the keys; a float attn_mask is added. Softmax is the
/// reference's (maximum subtracted): a row masked everywhere is NaN, as in
/// the ONNX reference. qk_matmul_output is the scaled product (mode 0),
/// after softcap (1), after the bias (2) or after softmax (3), as the spec
/// says (the reference's mode 0 with a softcap returns the capped product;
/// no node test has that combination). Masked scores are -inf as in the
/// reference and the node tests (onnxruntime uses the lowest float). Both
/// opsets combine attn_mask and is_causal as the reference does (opset 23's
/// text allowed only one; its node tests give both). float16/bfloat16 compute
/// in float32.
LogicalResult importAttention(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"is_causal", "kv_num_heads", "q_num_heads",
                             "qk_matmul_output_mode", "scale", "softcap",
                             "softmax_precision"})))
    return failure();
  int maxIn = ctx.opset >= 24 ? 7 : 6;
  if (ctx.numInputs() < 3 || ctx.numInputs() > maxIn || !ctx.hasInput(1) ||
      !ctx.hasInput(2))
    return ctx.invalid("takes Q, K, V and up to " + Twine(maxIn - 3) +
                       " optional inputs; it has " + Twine(ctx.numInputs()));
  if (ctx.numOutputs() > 4)
    return ctx.invalid("has at most 4 outputs");
  int32_t dt = graphDType(ctx, 0);
  if (!isFloatDType(dt))
    return ctx.unsupported(Twine("dtype ") + dtypeName(dt));
  for (int i : {1, 4})
    if (ctx.hasInput(i) && graphDType(ctx, i) != dt)
      return ctx.invalid("input #" + Twine(i) + " must have Q's dtype " +
                         dtypeName(dt));
  for (int i : {2, 5})
    if (ctx.hasInput(i) && graphDType(ctx, i) != dt)
      return ctx.unsupported("V and past_value of a dtype other than Q's (" +
                             Twine(dtypeName(graphDType(ctx, i))) + " vs " +
                             dtypeName(dt) + ")");
  bool hasMask = ctx.hasInput(3);
  int32_t maskDType = hasMask ? graphDType(ctx, 3) : kUndefined;
  if (hasMask && maskDType != kBool && maskDType != dt)
    return ctx.unsupported("attn_mask of dtype " + Twine(dtypeName(maskDType)) +
                           " (a bool mask or one of Q's dtype is supported)");
  if (ctx.hasInput(4) != ctx.hasInput(5))
    return ctx.invalid("past_key and past_value must be given together");
  bool hasPast = ctx.hasInput(4);
  bool hasNonpad = ctx.hasInput(6);
  if (hasNonpad && hasPast)
    return ctx.invalid("nonpad_kv_seqlen cannot be used with past_key and "
                       "past_value");
  int64_t mode = ctx.attrInt("qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3)
    return ctx.invalid("qk_matmul_output_mode " + Twine(mode) +
                       " is not 0, 1, 2 or 3");
  if (ctx.hasAttr("softmax_precision")) {
    int64_t p = ctx.attrInt("softmax_precision", 0);
    if (p != kFloat && p != kFloat16 && p != kBFloat16 &&
        !(p == kDouble && dt == kDouble))
      return ctx.unsupported(
          "softmax_precision " + Twine(p) +
          " (float, float16 and bfloat16 compute in at least float32, "
          "double only for double inputs)");
  }
  if (dt == kFloat16 || dt == kBFloat16)
    ctx.promoteHalfPrecision(dt);
  TValue q = ctx.input(0), k = ctx.input(1), v = ctx.input(2);
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  Type elem = q.elementType();
  int64_t rank = q.rank();
  if (rank != 3 && rank != 4)
    return ctx.invalid("Q must be 3-D or 4-D, not of shape " +
                       shapeString(q.shape()));
  if (k.rank() != rank || v.rank() != rank)
    return ctx.invalid("Q, K and V must have the same rank");
  int64_t qHeadsAttr = ctx.attrInt("q_num_heads", 0),
          kvHeadsAttr = ctx.attrInt("kv_num_heads", 0);
  Value q4 = q.value, k4 = k.value, v4 = v.value;
  if (rank == 3) {
    if (qHeadsAttr <= 0 || kvHeadsAttr <= 0)
      return ctx.invalid("3-D inputs need q_num_heads > 0 and "
                         "kv_num_heads > 0");
    auto split = [&](const TValue &t, int64_t heads, Value &out) {
      if (t.shape()[2] % heads != 0)
        return false;
      out = swapDims12(b, loc,
                       buildReshape(b, loc, t.value,
                                    {t.shape()[0], t.shape()[1], heads,
                                     t.shape()[2] / heads}));
      return true;
    };
    if (!split(q, qHeadsAttr, q4) || !split(k, kvHeadsAttr, k4) ||
        !split(v, kvHeadsAttr, v4))
      return ctx.invalid("a hidden size is not a multiple of its head count");
  }
  auto shapeOf = [](Value x) {
    return SmallVector<int64_t>(cast<RankedTensorType>(x.getType()).getShape());
  };
  SmallVector<int64_t> qs = shapeOf(q4), ks = shapeOf(k4), vs = shapeOf(v4);
  int64_t batch = qs[0], hq = qs[1], seq = qs[2], hkv = ks[1];
  if (rank == 4 &&
      ((qHeadsAttr && qHeadsAttr != hq) || (kvHeadsAttr && kvHeadsAttr != hkv)))
    return ctx.invalid("q_num_heads/kv_num_heads differ from the heads of "
                       "the 4-D Q and K");
  if (ks[0] != batch || vs[0] != batch)
    return ctx.invalid("Q, K and V have different batch sizes");
  if (ks[3] != qs[3])
    return ctx.invalid("Q and K have different head sizes (" + Twine(qs[3]) +
                       " vs " + Twine(ks[3]) + ")");
  if (vs[1] != hkv || vs[2] != ks[2])
    return ctx.invalid("K and V differ in heads or sequence length");
  if (hkv == 0 || hq % hkv != 0)
    return ctx.invalid("the query heads (" + Twine(hq) +
                       ") are not a multiple of the kv heads (" + Twine(hkv) +
                       ")");
  int64_t past = 0;
  if (hasPast) {
    TValue pk = ctx.input(4), pv = ctx.input(5);
    if (pk.rank() != 4 || pv.rank() != 4 || pk.shape()[0] != batch ||
        pk.shape()[1] != hkv || pk.shape()[3] != ks[3] ||
        pv.shape()[0] != batch || pv.shape()[1] != hkv ||
        pv.shape()[3] != vs[3] || pv.shape()[2] != pk.shape()[2])
      return ctx.invalid("past_key " + shapeString(pk.shape()) +
                         " and past_value " + shapeString(pv.shape()) +
                         " must be [batch, kv_heads, past, head] of K's and "
                         "V's batch, heads and head sizes");
    past = pk.shape()[2];
    k4 = concatAlong(b, loc, {pk.value, k4}, 2);
    v4 = concatAlong(b, loc, {pv.value, v4}, 2);
  }
  int64_t total = ks[2] + past;
  SmallVector<int64_t> scoreShape{batch, hq, seq, total};
  double scale = ctx.hasAttr("scale") ? ctx.attrFloat("scale", 1.0f)
                                      : 1.0 / std::sqrt((double)qs[3]);
  // Head size 0: Q K^T is an empty sum, 0 whatever the scale (the reference
  // scales the empty Q and K), not 0 * inf = NaN.
  if (qs[3] == 0)
    scale = 1.0;
  double softcap = ctx.attrFloat("softcap", 0.0f);
  bool causal = ctx.attrFlag("is_causal", false);

  Value scores = headProduct(b, loc, q4, k4, /*transB=*/true, elem);
  scores =
      buildElementwise(b, loc, scores, scoreShape, elem,
                       [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                         return arith::MulFOp::create(
                             nb, l, a[0], scalarConst(nb, l, elem, scale));
                       });
  Value rawScores = scores;
  if (softcap > 0)
    scores =
        buildElementwise(b, loc, scores, scoreShape, elem,
                         [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                           Value c = scalarConst(nb, l, elem, softcap);
                           Value t = math::TanhOp::create(
                               nb, l, arith::DivFOp::create(nb, l, a[0], c));
                           return arith::MulFOp::create(nb, l, t, c);
                         });
  Value capped = scores;

  // The bias: one elementwise generic over the scores.
  SmallVector<Value> ins{scores};
  int maskAt = -1, nonpadAt = -1;
  if (hasMask) {
    TValue m = ctx.input(3);
    if (m.rank() < 2 || m.rank() > 4)
      return ctx.invalid("attn_mask must be 2-D to 4-D, not of shape " +
                         shapeString(m.shape()));
    int64_t mlen = m.shape().back();
    if (mlen > total)
      return ctx.invalid("attn_mask's last dimension " + Twine(mlen) +
                         " is longer than the keys (" + Twine(total) + ")");
    Value mv = m.value;
    if (mlen < total) {
      // Keys past the mask's end are masked out (false, -inf).
      SmallVector<int64_t> low(m.rank(), 0), high(m.rank(), 0);
      high.back() = total - mlen;
      mv = buildPad(
          b, loc, mv, low, high,
          maskDType == kBool
              ? TypedAttr(b.getBoolAttr(false))
              : scalarAttr(elem, -std::numeric_limits<double>::infinity()));
    }
    SmallVector<int64_t> ms = shapeOf(mv);
    if (!broadcastsTo(ms, scoreShape))
      return ctx.invalid("attn_mask of shape " + shapeString(m.shape()) +
                         " does not broadcast to the scores " +
                         shapeString(scoreShape));
    maskAt = ins.size();
    ins.push_back(mv);
  }
  if (hasNonpad) {
    TValue n = ctx.input(6);
    if (!isa<IntegerType>(n.elementType()) || n.rank() != 1 ||
        n.shape()[0] != batch)
      return ctx.invalid("nonpad_kv_seqlen must be an integer [batch] tensor");
    nonpadAt = ins.size();
    ins.push_back(buildReshape(b, loc, n.value, {batch, 1, 1, 1}));
  }
  bool boolMask = maskDType == kBool;
  if (ins.size() > 1 || causal)
    scores = buildElementwise(
        b, loc, ins, scoreShape, elem,
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          Value s = a[0];
          Value ninf = scalarConst(nb, l, elem,
                                   -std::numeric_limits<double>::infinity());
          if (maskAt >= 0)
            s = boolMask
                    ? arith::SelectOp::create(nb, l, a[maskAt], s, ninf)
                          .getResult()
                    : arith::AddFOp::create(nb, l, s, a[maskAt]).getResult();
          Value key = linalg::IndexOp::create(nb, l, 3);
          if (causal) {
            Value query = linalg::IndexOp::create(nb, l, 2);
            Value last = arith::AddIOp::create(
                nb, l, query, arith::ConstantIndexOp::create(nb, l, past));
            Value keep = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sle,
                                               key, last);
            s = arith::SelectOp::create(nb, l, keep, s, ninf);
          }
          if (nonpadAt >= 0) {
            Value len = arith::IndexCastOp::create(nb, l, nb.getIndexType(),
                                                   a[nonpadAt]);
            Value keep = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt,
                                               key, len);
            s = arith::SelectOp::create(nb, l, keep, s, ninf);
          }
          return s;
        });
  Value biased = scores;
  Value probs = buildSoftmax(b, loc, biased, {3}, false);
  Value y = headProduct(b, loc, probs, v4, /*transB=*/false, elem);
  if (rank == 3) {
    y = swapDims12(b, loc, y);
    y = buildReshape(b, loc, y, {batch, seq, hq * vs[3]});
  }
  ctx.setOutput(0, {y, q.dtype});
  ctx.setOutput(1, {k4, q.dtype});
  ctx.setOutput(2, {v4, q.dtype});
  Value qk[] = {rawScores, capped, biased, probs};
  ctx.setOutput(3, {qk[mode], q.dtype});
  return success();
}

} // namespace

void registerAttentionOps(OpRegistry &r) {
  r.add("RotaryEmbedding", importRotaryEmbedding);
  r.add("Attention", importAttention);
}

} // namespace ddpc::onnx_import

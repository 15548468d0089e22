//===- Conv.cpp - Import of ONNX Conv and pooling ops ---------------------===//
//
// Part of ddpc. Conv (N-d, groups, dilations, strides, explicit or auto
// padding), ConvTranspose (the same, plus output_padding and
// output_shape), MaxPool, AveragePool (count_include_pad, ceil_mode), LpPool
// ((sum of |x|^p over the window)^(1/p), pads contributing 0) and the
// global forms of the three, following the ONNX operator spec
// (Operators.md, "Conv" and "MaxPool" output-shape formulas).
//
// Conv is one contraction linalg.generic over [N, G, M/G, O... | C/G, K...]
// reading the zero-padded input at o*s + k*d.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace ddpc::onnx_import {
namespace {

/// Spatial geometry of a windowed op.
struct Window {
  SmallVector<int64_t> kernel, strides, dilations, padBegin, padEnd, out;
};

/// (kernel - 1) * dilation + 1, the extent of a dilated kernel; nullopt
/// when it overflows int64 (dilations near 2^63).
std::optional<int64_t> kernelExtent(int64_t kernel, int64_t dilation) {
  std::optional<int64_t> e = llvm::checkedMul(kernel - 1, dilation);
  return e ? llvm::checkedAdd<int64_t>(*e, 1) : std::nullopt;
}

/// Computes output sizes and pads from the attributes. `extraEnd` receives
/// additional end padding needed by ceil_mode windows.
LogicalResult computeWindow(NodeContext &ctx, ArrayRef<int64_t> inSpatial,
                            ArrayRef<int64_t> kernel, bool ceilMode,
                            Window &w) {
  size_t k = inSpatial.size();
  w.kernel.assign(kernel.begin(), kernel.end());
  if (w.kernel.size() != k)
    return ctx.invalid("kernel_shape has " + Twine(w.kernel.size()) +
                       " dims, expected " + Twine(k));
  w.strides = ctx.attrInts("strides");
  if (w.strides.empty())
    w.strides.assign(k, 1);
  w.dilations = ctx.attrInts("dilations");
  if (w.dilations.empty())
    w.dilations.assign(k, 1);
  if (w.strides.size() != k || w.dilations.size() != k)
    return ctx.invalid("strides/dilations have the wrong length");
  for (size_t i = 0; i < k; ++i)
    if (w.strides[i] <= 0 || w.dilations[i] <= 0 || w.kernel[i] <= 0)
      return ctx.invalid("kernel, strides and dilations must be positive");
  std::string autoPad = ctx.attrString("auto_pad", "NOTSET");
  SmallVector<int64_t> pads = ctx.attrInts("pads");
  w.padBegin.assign(k, 0);
  w.padEnd.assign(k, 0);
  w.out.assign(k, 0);
  for (size_t i = 0; i < k; ++i) {
    int64_t in = inSpatial[i], s = w.strides[i];
    std::optional<int64_t> extOr = kernelExtent(w.kernel[i], w.dilations[i]);
    if (!extOr)
      return ctx.invalid("dilations " + shapeString(w.dilations) +
                         " overflow int64 in the kernel extent");
    int64_t ext = *extOr;
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      // ceil(in / s) without in + s - 1 (s may be near 2^63); then
      // (out - 1) * s <= in, and only adding ext can overflow.
      int64_t out = in / s + (in % s != 0);
      std::optional<int64_t> need = llvm::checkedAdd((out - 1) * s, ext);
      if (!need)
        return ctx.invalid("dilations " + shapeString(w.dilations) +
                           " overflow int64 in the padded size");
      int64_t total = std::max<int64_t>(0, *need - in);
      int64_t small = total / 2, big = total - small;
      w.padBegin[i] = autoPad == "SAME_UPPER" ? small : big;
      w.padEnd[i] = total - w.padBegin[i];
      w.out[i] = out;
      continue;
    }
    if (autoPad == "VALID") {
      w.out[i] = (in - ext) / s + 1;
      if (in < ext)
        return ctx.invalid("kernel larger than the input");
      continue;
    }
    if (autoPad != "NOTSET")
      return ctx.unsupported("auto_pad='" + autoPad + "'");
    if (!pads.empty()) {
      if (pads.size() != 2 * k)
        return ctx.invalid("pads has the wrong length");
      w.padBegin[i] = pads[i];
      w.padEnd[i] = pads[i + k];
      // Negative pads would crop (onnxruntime refuses them too).
      if (w.padBegin[i] < 0 || w.padEnd[i] < 0)
        return ctx.invalid("pads " + shapeString(pads) +
                           " has a negative entry");
    }
    std::optional<int64_t> padded = llvm::checkedAdd(in, w.padBegin[i]);
    if (padded)
      padded = llvm::checkedAdd(*padded, w.padEnd[i]);
    if (!padded)
      return ctx.invalid("pads " + shapeString(pads) +
                         " overflow int64 in the padded size");
    int64_t span = *padded - ext;
    if (span < 0)
      return ctx.invalid("kernel larger than the padded input");
    int64_t out = span / s + (ceilMode && span % s != 0) + 1;
    // A ceil-mode window must start inside the input or the begin padding.
    // (An overflowing start lies past it.)
    std::optional<int64_t> last = llvm::checkedMul(out - 1, s);
    if (ceilMode && (!last || *last >= in + w.padBegin[i]))
      --out;
    w.out[i] = out;
  }
  return success();
}

/// End padding so that every window of `w` lies inside the padded input.
SmallVector<int64_t> fullPadEnd(ArrayRef<int64_t> inSpatial, const Window &w) {
  SmallVector<int64_t> end;
  for (size_t i = 0; i < inSpatial.size(); ++i) {
    int64_t need =
        (w.out[i] - 1) * w.strides[i] + (w.kernel[i] - 1) * w.dilations[i] + 1;
    end.push_back(std::max(w.padEnd[i], need - inSpatial[i] - w.padBegin[i]));
  }
  return end;
}

/// The contraction both Conv and ConvTranspose end in: `xp` [N, C, P...]
/// (already padded so that every window lies inside it), `wg` [G, M/G,
/// C/G, K...]; returns [N, M, out...] with out[i] read at o*s + k*d. One
/// generic in the form ddpc-conv-to-library-call recognizes (cuDNN or
/// im2col + GEMM) and whose VJPs are generic contractions again.
Value buildConvContraction(OpBuilder &b, Location loc, Value xp, Value wg,
                           int64_t g, ArrayRef<int64_t> strides,
                           ArrayRef<int64_t> dilations,
                           ArrayRef<int64_t> outSpatial) {
  MLIRContext *mctx = b.getContext();
  auto xpShape = cast<RankedTensorType>(xp.getType()).getShape();
  auto wShape = cast<RankedTensorType>(wg.getType()).getShape();
  Type elem = cast<RankedTensorType>(xp.getType()).getElementType();
  int64_t k = outSpatial.size();
  int64_t n = xpShape[0], c = xpShape[1], mg = wShape[1];
  // [N, G, C/G, P...].
  SmallVector<int64_t> xg{n, g, c / g};
  xg.append(xpShape.begin() + 2, xpShape.end());
  Value xv = buildReshape(b, loc, xp, xg);
  // Dims: n=0, g=1, m=2, o_i=3+i, c=3+k, k_i=4+k+i.
  unsigned numDims = 4 + 2 * k;
  auto d = [&](unsigned i) { return getAffineDimExpr(i, mctx); };
  SmallVector<AffineExpr> xe{d(0), d(1), d(3 + k)}, we{d(1), d(2), d(3 + k)};
  for (int64_t i = 0; i < k; ++i) {
    xe.push_back(d(3 + i) * strides[i] + d(4 + k + i) * dilations[i]);
    we.push_back(d(4 + k + i));
  }
  SmallVector<int64_t> outShape{n, g, mg};
  outShape.append(outSpatial.begin(), outSpatial.end());
  Value r =
      buildGeneric(b, loc, ValueRange{xv, wg},
                   {AffineMap::get(numDims, 0, xe, mctx),
                    AffineMap::get(numDims, 0, we, mctx)},
                   outShape, elem, 1 + k, scalarAttr(elem, 0.0),
                   [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                     return arith::AddFOp::create(
                         nb, l, a[2], arith::MulFOp::create(nb, l, a[0], a[1]));
                   });
  SmallVector<int64_t> finalShape{n, g * mg};
  finalShape.append(outSpatial.begin(), outSpatial.end());
  return buildReshape(b, loc, r, finalShape);
}

/// Adds the optional bias input 2 ([M]) per output channel of `r` [N, M,
/// ...]; fails (recorded) on a bias of another shape.
FailureOr<Value> addChannelBias(NodeContext &ctx, Value r) {
  if (!ctx.hasInput(2))
    return r;
  auto shape = cast<RankedTensorType>(r.getType()).getShape();
  int64_t m = shape[1];
  TValue bias = ctx.input(2);
  if (bias.rank() != 1 || bias.shape()[0] != m)
    return ctx.invalid("B must have shape [" + Twine(m) + "]");
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  SmallVector<int64_t> bs{m};
  bs.append(shape.size() - 2, 1);
  Value bv = buildReshape(b, loc, bias.value, bs);
  return buildElementwise(b, loc, ValueRange{r, bv}, shape,
                          cast<RankedTensorType>(r.getType()).getElementType(),
                          [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                            return arith::AddFOp::create(nb, l, a[0], a[1]);
                          });
}

/// The attributes, X and W of Conv and ConvTranspose (`transposed`): one
/// float dtype, the same rank >= 3, and kernel_shape (when given) equal to
/// W's spatial dims.
LogicalResult checkConvOperands(NodeContext &ctx, const TValue &x,
                                const TValue &w, bool transposed) {
  if (failed(transposed ? ctx.checkAttrs({"auto_pad", "dilations", "group",
                                          "kernel_shape", "output_padding",
                                          "output_shape", "pads", "strides"})
                        : ctx.checkAttrs({"auto_pad", "dilations", "group",
                                          "kernel_shape", "pads", "strides"})))
    return failure();
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  if (x.dtype != w.dtype)
    return ctx.invalid("X and W have different dtypes");
  if (x.rank() < 3 || w.rank() != x.rank())
    return ctx.invalid("X and W must have the same rank >= 3");
  SmallVector<int64_t> ks = ctx.attrInts("kernel_shape");
  if (!ks.empty() && ArrayRef<int64_t>(ks) != w.shape().drop_front(2))
    return ctx.invalid("kernel_shape does not match W");
  return success();
}

LogicalResult importConv(NodeContext &ctx) {
  TValue x = ctx.input(0), w = ctx.input(1);
  if (failed(checkConvOperands(ctx, x, w, /*transposed=*/false)))
    return failure();
  int64_t rank = x.rank();
  int64_t k = rank - 2;
  int64_t c = x.shape()[1], m = w.shape()[0];
  int64_t g = ctx.attrInt("group", 1);
  if (g <= 0 || c % g != 0 || m % g != 0 || w.shape()[1] != c / g)
    return ctx.invalid("channels (" + Twine(c) + ", " + Twine(m) +
                       ") do not match group " + Twine(g) + " and W's shape");
  SmallVector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
  SmallVector<int64_t> inSpatial(x.shape().begin() + 2, x.shape().end());
  Window win;
  if (failed(computeWindow(ctx, inSpatial, kernel, false, win)))
    return failure();

  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  Type elem = x.elementType();
  SmallVector<int64_t> low(2, 0), high(2, 0);
  low.append(win.padBegin);
  high.append(fullPadEnd(inSpatial, win));
  Value xp = buildPad(b, loc, x.value, low, high, scalarAttr(elem, 0.0));
  // [G, M/G, C/G, K...].
  SmallVector<int64_t> wg{g, m / g, c / g};
  wg.append(kernel);
  Value wv = buildReshape(b, loc, w.value, wg);
  Value r = buildConvContraction(b, loc, xp, wv, g, win.strides, win.dilations,
                                 win.out);
  auto biased = addChannelBias(ctx, r);
  if (failed(biased))
    return failure();
  ctx.setOutput(0, {*biased, x.dtype});
  return success();
}

/// ConvTranspose (opsets 1, 11, 22), the adjoint of Conv: X [N, C, I...],
/// W [C, M/G, K...], optional B [M]; Y [N, M, O...] with
/// O = s (I - 1) + output_padding + (K - 1) d + 1 - pad_begin - pad_end.
///
/// Lowered as a stride-1 Conv (buildConvContraction) of X dilated by the
/// stride (s - 1 zeros between elements, a strided tensor.insert_slice into
/// zeros) and padded by (K - 1) d - pad_begin before and (K - 1) d -
/// pad_end + output_padding after (cropped where that is negative), with
/// the kernel flipped and its channel dims swapped. So it reuses Conv's
/// whole path: cuDNN / im2col + GEMM on CUDA, the library call on the CPU,
/// and generic VJPs w.r.t. X, W and B (slices, pads and contractions
/// already have rules). The zeros cost s^k times the multiply-adds of a
/// scatter formulation, which is the price of one code path.
LogicalResult importConvTranspose(NodeContext &ctx) {
  TValue x = ctx.input(0), w = ctx.input(1);
  if (failed(checkConvOperands(ctx, x, w, /*transposed=*/true)))
    return failure();
  int64_t rank = x.rank();
  int64_t k = rank - 2;
  int64_t n = x.shape()[0], c = x.shape()[1], mg = w.shape()[1];
  int64_t g = ctx.attrInt("group", 1);
  if (g <= 0 || c % g != 0 || w.shape()[0] != c)
    return ctx.invalid("channels (X " + Twine(c) + ", W " +
                       shapeString(w.shape()) + ") do not match group " +
                       Twine(g));
  SmallVector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
  auto orOnes = [&](StringRef name, int64_t dflt,
                    SmallVector<int64_t> &v) -> LogicalResult {
    v = ctx.attrInts(name);
    if (v.empty())
      v.assign(k, dflt);
    if ((int64_t)v.size() != k)
      return ctx.invalid(name + " has " + Twine(v.size()) +
                         " entries, expected " + Twine(k));
    return success();
  };
  SmallVector<int64_t> strides, dilations, outPad;
  if (failed(orOnes("strides", 1, strides)) ||
      failed(orOnes("dilations", 1, dilations)) ||
      failed(orOnes("output_padding", 0, outPad)))
    return failure();
  for (int64_t i = 0; i < k; ++i) {
    if (strides[i] <= 0 || dilations[i] <= 0 || kernel[i] <= 0)
      return ctx.invalid("kernel, strides and dilations must be positive");
    // Opset 11+: output_padding < stride or dilation (it only selects
    // computed values); opset 1 asks only for it to be non-negative.
    if (outPad[i] < 0 ||
        (ctx.opset >= 11 && outPad[i] >= std::max(strides[i], dilations[i])))
      return ctx.invalid("output_padding " + shapeString(outPad) +
                         " must be non-negative and less than the stride or "
                         "dilation");
  }
  SmallVector<int64_t> inSpatial(x.shape().begin() + 2, x.shape().end());
  if (llvm::is_contained(inSpatial, 0))
    return ctx.unsupported("X of shape " + shapeString(x.shape()) +
                           " has an empty spatial dim");
  // Size before the pads are removed, checked: strides or dilations near
  // 2^63 overflow int64 (the attribute is named).
  SmallVector<int64_t> full(k);
  for (int64_t i = 0; i < k; ++i) {
    std::optional<int64_t> ext = kernelExtent(kernel[i], dilations[i]);
    if (!ext)
      return ctx.invalid("dilations " + shapeString(dilations) +
                         " overflow int64 in the output size");
    std::optional<int64_t> f = llvm::checkedMul(strides[i], inSpatial[i] - 1);
    if (f)
      f = llvm::checkedAdd(*f, outPad[i]);
    if (f)
      f = llvm::checkedAdd(*f, *ext);
    if (!f)
      return ctx.invalid("strides " + shapeString(strides) +
                         " overflow int64 in the output size");
    // Bounded so that the pads and sizes below cannot overflow either.
    if (*f > kMaxTensorElements)
      return ctx.invalid("strides " + shapeString(strides) + " and dilations " +
                         shapeString(dilations) + " make spatial dim " +
                         Twine(i) + " " + Twine(*f) +
                         " long before the pads, more than 2^40");
    full[i] = *f;
  }

  std::string autoPad = ctx.attrString("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "SAME_UPPER" &&
      autoPad != "SAME_LOWER" && autoPad != "VALID")
    return ctx.unsupported("auto_pad='" + autoPad + "'");
  SmallVector<int64_t> outShapeAttr = ctx.attrInts("output_shape");
  if (!outShapeAttr.empty()) {
    // Spatial sizes only, in every opset (onnxruntime and the reference
    // refuse [N, M, O...] too).
    if ((int64_t)outShapeAttr.size() != k)
      return ctx.invalid("output_shape " + shapeString(outShapeAttr) +
                         " must have one entry per spatial dim (" + Twine(k) +
                         "), not include N and C");
    // Pads from output_shape make it at most the unpadded size `full`
    // (total padding >= 0), or larger by less than a stride: one the
    // input could not have come from (by the inverse Conv's size,
    // (O + total - ext) / s + 1 = I, as onnxruntime checks) is refused.
    for (int64_t o : outShapeAttr)
      if (o <= 0)
        return ctx.invalid("output_shape " + shapeString(outShapeAttr) +
                           " must be positive");
    for (int64_t i = 0; i < k; ++i)
      if (outShapeAttr[i] - full[i] >= strides[i])
        return ctx.invalid(
            "output_shape " + shapeString(outShapeAttr) +
            " does not fit X's spatial size " + shapeString(inSpatial) +
            " (strides " + shapeString(strides) + ", kernel " +
            shapeString(kernel) + ", dilations " + shapeString(dilations) +
            ", output_padding " + shapeString(outPad) + "): dim " + Twine(i) +
            " must be in [1, " +
            Twine(llvm::checkedAdd(full[i], strides[i] - 1)
                      .value_or(std::numeric_limits<int64_t>::max())) +
            "]");
  }
  SmallVector<int64_t> padBegin(k, 0), padEnd(k, 0);
  bool same = autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER";
  if (!outShapeAttr.empty() || same) {
    // Pads from the total padding (spec: "output_shape can also be
    // explicitly specified ..."); SAME without output_shape asks for
    // O = I s. Negative totals extend the output with zeros (bias only).
    for (int64_t i = 0; i < k; ++i) {
      // I s = full - ext - output_padding + s: no overflow (full is
      // bounded, and I = 1 where s is not).
      int64_t out =
          outShapeAttr.empty() ? inSpatial[i] * strides[i] : outShapeAttr[i];
      int64_t total = full[i] - out;
      int64_t half = llvm::divideFloorSigned(total, 2), rest = total - half;
      // The smaller half goes first for SAME_UPPER (extra padding at the
      // end). Opset 1 states the split the other way round for an
      // explicit output_shape: the smaller half first unless SAME_UPPER.
      bool smallFirst = autoPad == "SAME_UPPER";
      if (ctx.opset < 11 && !outShapeAttr.empty())
        smallFirst = !smallFirst;
      padBegin[i] = smallFirst ? half : rest;
      padEnd[i] = total - padBegin[i];
    }
  } else if (autoPad == "NOTSET") {
    SmallVector<int64_t> pads = ctx.attrInts("pads");
    if (!pads.empty()) {
      if ((int64_t)pads.size() != 2 * k)
        return ctx.invalid("pads has " + Twine(pads.size()) +
                           " entries, expected " + Twine(2 * k));
      for (int64_t i = 0; i < k; ++i) {
        padBegin[i] = pads[i];
        padEnd[i] = pads[i + k];
        if (padBegin[i] < 0 || padEnd[i] < 0)
          return ctx.invalid("pads " + shapeString(pads) +
                             " has a negative entry");
      }
    }
  }
  SmallVector<int64_t> outSpatial(k);
  for (int64_t i = 0; i < k; ++i) {
    // The pads are < 2^63 and full <= 2^40: only the second subtraction
    // can overflow.
    outSpatial[i] = llvm::checkedSub(full[i] - padBegin[i], padEnd[i])
                        .value_or(std::numeric_limits<int64_t>::min());
    if (outSpatial[i] <= 0)
      return ctx.invalid("the pads leave an output of size " +
                         Twine(outSpatial[i]) + " in spatial dim " + Twine(i));
  }

  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  Type elem = x.elementType();
  // X dilated by the strides and padded: lo/hi may be negative (pads
  // larger than the kernel's extent crop).
  SmallVector<int64_t> lo(k), hi(k), bigShape{n, c};
  SmallVector<int64_t> offs(2, 0), strd(2, 1), cropOffs(2, 0), cropShape{n, c};
  bool crop = false;
  for (int64_t i = 0; i < k; ++i) {
    int64_t ext = (kernel[i] - 1) * dilations[i];
    lo[i] = ext - padBegin[i];
    hi[i] = ext - padEnd[i] + outPad[i];
    int64_t dil = (inSpatial[i] - 1) * strides[i] + 1;
    bigShape.push_back(dil + std::max<int64_t>(lo[i], 0) +
                       std::max<int64_t>(hi[i], 0));
    offs.push_back(std::max<int64_t>(lo[i], 0));
    strd.push_back(strides[i]);
    cropOffs.push_back(std::max<int64_t>(-lo[i], 0));
    cropShape.push_back(dil + lo[i] + hi[i]);
    crop |= lo[i] < 0 || hi[i] < 0;
  }
  MLIRContext *mctx = b.getContext();
  auto ofr = [&](ArrayRef<int64_t> v) {
    return getAsIndexOpFoldResult(mctx, v);
  };
  Value zero = arith::ConstantOp::create(b, loc, scalarAttr(elem, 0.0));
  Value empty = tensor::EmptyOp::create(b, loc, bigShape, elem);
  Value xp = linalg::FillOp::create(b, loc, zero, empty).getResult(0);
  SmallVector<int64_t> one(rank, 1);
  // With N = 0 or C = 0 there is nothing to place (and the slice ops
  // refuse offset 0 on an empty axis): the zeros are X dilated and padded.
  // The contraction then sums over no channels, so Y is the bias.
  bool emptyX = numElements(x.shape()) == 0;
  if (!emptyX)
    xp = tensor::InsertSliceOp::create(b, loc, x.value, xp, ofr(offs),
                                       ofr(x.shape()), ofr(strd));
  if (crop && emptyX)
    xp = tensor::EmptyOp::create(b, loc, cropShape, elem);
  else if (crop)
    xp = tensor::ExtractSliceOp::create(
        b, loc, RankedTensorType::get(cropShape, elem), xp, ofr(cropOffs),
        ofr(cropShape), ofr(one));
  // W [C, M/G, K...] -> [G, C/G, M/G, K...] -> flipped [G, M/G, C/G, K...].
  SmallVector<int64_t> wsplit{g, c / g, mg};
  wsplit.append(kernel);
  Value wv = buildReshape(b, loc, w.value, wsplit);
  SmallVector<int64_t> wgShape{g, mg, c / g};
  wgShape.append(kernel);
  auto d = [&](unsigned i) { return getAffineDimExpr(i, mctx); };
  SmallVector<AffineExpr> flip{d(0), d(2), d(1)};
  for (int64_t i = 0; i < k; ++i)
    flip.push_back(kernel[i] - 1 - d(3 + i));
  Value wf = buildGeneric(
      b, loc, wv, {AffineMap::get(rank + 1, 0, flip, mctx)}, wgShape, elem, 0,
      std::nullopt, [](OpBuilder &, Location, ValueRange a) { return a[0]; });
  SmallVector<int64_t> unit(k, 1);
  Value r =
      buildConvContraction(b, loc, xp, wf, g, unit, dilations, outSpatial);
  auto biased = addChannelBias(ctx, r);
  if (failed(biased))
    return failure();
  ctx.setOutput(0, {*biased, x.dtype});
  return success();
}

enum class PoolKind { Max, Average, Lp };

/// LpPool's p: a float attribute in opset 1, an int from opset 2 (default 2).
double lpPoolP(NodeContext &ctx) {
  return ctx.opset < 2 ? ctx.attrFloat("p", 2.0f)
                       : static_cast<double>(ctx.attrInt("p", 2));
}

/// |x|^p, the term LpPool sums.
Value lpTerm(OpBuilder &b, Location l, Value x, double p) {
  if (p == 2.0)
    return arith::MulFOp::create(b, l, x, x);
  Value ax = math::AbsFOp::create(b, l, x);
  if (p == 1.0)
    return ax;
  return math::PowFOp::create(b, l, ax, scalarConst(b, l, x.getType(), p));
}

/// s^(1/p), LpPool's result from the sum of its terms.
Value lpRoot(OpBuilder &b, Location l, Value s, double p) {
  if (p == 1.0)
    return s;
  if (p == 2.0)
    return math::SqrtOp::create(b, l, s);
  return math::PowFOp::create(b, l, s, scalarConst(b, l, s.getType(), 1.0 / p));
}

/// Checks LpPool's p: a finite number > 0 (the spec does not say; 1/p
/// must exist).
LogicalResult checkLpPoolP(NodeContext &ctx, double p) {
  if (!(p > 0.0) || !std::isfinite(p))
    return ctx.invalid("p must be a finite number > 0, got " +
                       std::to_string(p));
  return success();
}

/// MaxPool's attributes and X's dtype as each opset defines them: 1
/// (auto_pad, kernel_shape, pads, strides), 8 (+ storage_order; the
/// Indices output, which the schema's arity check admits), 10 (+ ceil_mode,
/// dilations), 12 (+ int8, uint8 X).
LogicalResult checkMaxPoolAttrs(NodeContext &ctx, const TValue &x) {
  LogicalResult known =
      ctx.opset < 8
          ? ctx.checkAttrs({"auto_pad", "kernel_shape", "pads", "strides"})
      : ctx.opset < 10 ? ctx.checkAttrs({"auto_pad", "kernel_shape", "pads",
                                         "storage_order", "strides"})
                       : ctx.checkAttrs({"auto_pad", "ceil_mode", "dilations",
                                         "kernel_shape", "pads",
                                         "storage_order", "strides"});
  if (failed(known))
    return failure();
  if (!isFloatDType(x.dtype) && ctx.opset < 12)
    return ctx.invalid(Twine("X of dtype ") + dtypeName(x.dtype) +
                       " (integer MaxPool needs opset 12)");
  return success();
}

/// MaxPool's Indices (opset 8+): per output element, the flat index into X
/// [N, C, D...] of the maximum Y took, the first in the window's row-major
/// scan order among equal values (onnxruntime's strict `>` scan), padding
/// never counted. With `storageOrder` (storage_order=1) the spatial part is
/// column-major over (D...): the first spatial dim varies fastest, N and C
/// stay row-major (onnxruntime's c * D1...Dk + h + w * H for 2-D). A NaN
/// maximum (Y propagates NaN) points at the window's first NaN.
///
/// Built as a min-reduction over the window of the row-major spatial offset
/// of elements equal to Y (row-major order is the scan order), then an
/// elementwise map to the flat index. i64 results: no cotangent flows here,
/// so Y keeps its own gradient.
Value buildMaxPoolIndices(OpBuilder &b, Location loc, Value xp, Value y,
                          ArrayRef<int64_t> inSpatial, const Window &win,
                          bool storageOrder) {
  MLIRContext *mctx = b.getContext();
  auto yShape = cast<RankedTensorType>(y.getType()).getShape();
  int64_t k = inSpatial.size();
  Type i64 = b.getI64Type();
  unsigned numDims = 2 + 2 * k;
  auto d = [&](unsigned i) { return getAffineDimExpr(i, mctx); };
  SmallVector<AffineExpr> xe{d(0), d(1)}, ye{d(0), d(1)};
  for (int64_t i = 0; i < k; ++i) {
    xe.push_back(d(2 + i) * win.strides[i] + d(2 + k + i) * win.dilations[i]);
    ye.push_back(d(2 + i));
  }
  // A dummy input that brings the kernel dims into the iteration space.
  Type elem = cast<RankedTensorType>(xp.getType()).getElementType();
  Value kernelT = tensor::EmptyOp::create(b, loc, win.kernel, elem);
  SmallVector<AffineExpr> ke;
  for (int64_t i = 0; i < k; ++i)
    ke.push_back(d(2 + k + i));
  int64_t sentinel = std::numeric_limits<int64_t>::max();
  bool isF = isa<FloatType>(elem);
  Value offset = buildGeneric(
      b, loc, ValueRange{xp, y, kernelT},
      {AffineMap::get(numDims, 0, xe, mctx),
       AffineMap::get(numDims, 0, ye, mctx),
       AffineMap::get(numDims, 0, ke, mctx)},
      yShape, i64, k, IntegerAttr::get(i64, sentinel),
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        auto cst = [&](int64_t v) {
          return arith::ConstantIntOp::create(nb, l, v, 64).getResult();
        };
        // Position in X of this window element, and whether it is inside.
        Value inside = arith::ConstantIntOp::create(nb, l, 1, 1);
        Value lin = cst(0);
        for (int64_t i = 0; i < k; ++i) {
          auto index = [&](unsigned dim) {
            return arith::IndexCastOp::create(
                       nb, l, i64, linalg::IndexOp::create(nb, l, dim))
                .getResult();
          };
          Value pos = arith::SubIOp::create(
              nb, l,
              arith::AddIOp::create(
                  nb, l,
                  arith::MulIOp::create(nb, l, index(2 + i),
                                        cst(win.strides[i])),
                  arith::MulIOp::create(nb, l, index(2 + k + i),
                                        cst(win.dilations[i]))),
              cst(win.padBegin[i]));
          Value ok = arith::AndIOp::create(
              nb, l,
              arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sge, pos,
                                    cst(0)),
              arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt, pos,
                                    cst(inSpatial[i])));
          inside = arith::AndIOp::create(nb, l, inside, ok);
          lin = arith::AddIOp::create(
              nb, l, arith::MulIOp::create(nb, l, lin, cst(inSpatial[i])), pos);
        }
        Value eq;
        if (isF)
          eq = arith::OrIOp::create(
              nb, l,
              arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, a[0],
                                    a[1]),
              arith::CmpFOp::create(nb, l, arith::CmpFPredicate::UNO, a[0],
                                    a[0]));
        else
          eq = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, a[0],
                                     a[1]);
        Value take = arith::AndIOp::create(nb, l, eq, inside);
        Value cand = arith::SelectOp::create(nb, l, take, lin, cst(sentinel));
        return arith::MinSIOp::create(nb, l, cand, a[3]);
      });
  int64_t spatial = numElements(inSpatial), channels = yShape[1];
  return buildElementwise(
      b, loc, offset, yShape, i64,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        auto cst = [&](int64_t v) {
          return arith::ConstantIntOp::create(nb, l, v, 64).getResult();
        };
        auto index = [&](unsigned dim) {
          return arith::IndexCastOp::create(nb, l, i64,
                                            linalg::IndexOp::create(nb, l, dim))
              .getResult();
        };
        Value off = a[0];
        if (storageOrder) {
          // Row-major digits of the offset, recombined first-dim-fastest.
          Value rest = off, colMajor = cst(0);
          int64_t colStride = 1;
          SmallVector<int64_t> colStrides(k);
          for (int64_t i = 0; i < k; ++i) {
            colStrides[i] = colStride;
            colStride *= inSpatial[i];
          }
          for (int64_t i = k - 1; i >= 0; --i) {
            Value digit =
                arith::RemSIOp::create(nb, l, rest, cst(inSpatial[i]));
            rest = arith::DivSIOp::create(nb, l, rest, cst(inSpatial[i]));
            colMajor = arith::AddIOp::create(
                nb, l, colMajor,
                arith::MulIOp::create(nb, l, digit, cst(colStrides[i])));
          }
          off = colMajor;
        }
        Value plane = arith::AddIOp::create(
            nb, l, arith::MulIOp::create(nb, l, index(0), cst(channels)),
            index(1));
        return arith::AddIOp::create(
            nb, l, arith::MulIOp::create(nb, l, plane, cst(spatial)), off);
      });
}

LogicalResult importPool(NodeContext &ctx, PoolKind kind) {
  bool isMax = kind == PoolKind::Max;
  TValue x = ctx.input(0);
  double p = kind == PoolKind::Lp ? lpPoolP(ctx) : 1.0;
  if (kind == PoolKind::Lp && failed(checkLpPoolP(ctx, p)))
    return failure();
  if (!isFloatDType(x.dtype) && !(isMax && x.dtype != kBool))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  if (isMax && failed(checkMaxPoolAttrs(ctx, x)))
    return failure();
  int64_t rank = x.rank();
  if (rank < 3)
    return ctx.invalid("input must have rank >= 3");
  int64_t k = rank - 2;
  SmallVector<int64_t> kernel = ctx.attrInts("kernel_shape");
  if ((int64_t)kernel.size() != k)
    return ctx.invalid("kernel_shape is required with one entry per spatial "
                       "dim");
  SmallVector<int64_t> inSpatial(x.shape().begin() + 2, x.shape().end());
  Window win;
  bool ceilMode = ctx.attrFlag("ceil_mode", false);
  if (failed(computeWindow(ctx, inSpatial, kernel, ceilMode, win)))
    return failure();
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  MLIRContext *mctx = b.getContext();
  Type elem = x.elementType();
  bool isU = isUnsignedDType(x.dtype);
  SmallVector<int64_t> low(2, 0), high(2, 0);
  low.append(win.padBegin);
  high.append(fullPadEnd(inSpatial, win));
  TypedAttr padValue = isMax ? lowestAttr(elem, isU) : scalarAttr(elem, 0.0);
  Value xp = buildPad(b, loc, x.value, low, high, padValue);
  // Dims: [n, c, o..., k...]; the kernel dims come from a dummy input.
  unsigned numDims = 2 + 2 * k;
  auto d = [&](unsigned i) { return getAffineDimExpr(i, mctx); };
  SmallVector<AffineExpr> xe{d(0), d(1)}, ke;
  for (int64_t i = 0; i < k; ++i) {
    xe.push_back(d(2 + i) * win.strides[i] + d(2 + k + i) * win.dilations[i]);
    ke.push_back(d(2 + k + i));
  }
  Value kernelT = tensor::EmptyOp::create(b, loc, kernel, elem);
  SmallVector<int64_t> outShape{x.shape()[0], x.shape()[1]};
  outShape.append(win.out);
  bool isF = isa<FloatType>(elem);
  Value r = buildGeneric(
      b, loc, ValueRange{xp, kernelT},
      {AffineMap::get(numDims, 0, xe, mctx),
       AffineMap::get(numDims, 0, ke, mctx)},
      outShape, elem, k, isMax ? lowestAttr(elem, isU) : scalarAttr(elem, 0.0),
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        if (kind == PoolKind::Lp)
          return arith::AddFOp::create(nb, l, a[2], lpTerm(nb, l, a[0], p));
        if (!isMax)
          return arith::AddFOp::create(nb, l, a[2], a[0]);
        if (isF)
          return arith::MaximumFOp::create(nb, l, a[2], a[0]);
        return isU ? arith::MaxUIOp::create(nb, l, a[2], a[0]).getResult()
                   : arith::MaxSIOp::create(nb, l, a[2], a[0]).getResult();
      });
  if (kind == PoolKind::Lp)
    r = buildElementwise(b, loc, r, outShape, elem,
                         [&](OpBuilder &nb, Location l, ValueRange a) {
                           return lpRoot(nb, l, a[0], p);
                         });
  if (kind == PoolKind::Average) {
    // Divisor per output position: window elements inside the input (or
    // inside input + explicit pads with count_include_pad), separable per dim.
    bool includePad = ctx.attrFlag("count_include_pad", false);
    SmallVector<float> divisor(numElements(win.out), 1.0f);
    int64_t stride = numElements(win.out);
    for (int64_t i = 0; i < k; ++i) {
      stride /= win.out[i];
      int64_t lo = includePad ? -win.padBegin[i] : 0;
      int64_t hi = inSpatial[i] + (includePad ? win.padEnd[i] : 0);
      for (int64_t idx = 0; idx < (int64_t)divisor.size(); ++idx) {
        int64_t o = (idx / stride) % win.out[i];
        int64_t cnt = 0;
        for (int64_t kk = 0; kk < win.kernel[i]; ++kk) {
          int64_t pos =
              o * win.strides[i] + kk * win.dilations[i] - win.padBegin[i];
          cnt += pos >= lo && pos < hi;
        }
        divisor[idx] *= cnt;
      }
    }
    auto divType = RankedTensorType::get(win.out, b.getF32Type());
    Value div = arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(divType, ArrayRef<float>(divisor)));
    r = buildElementwise(b, loc, ValueRange{r, div}, outShape, elem,
                         [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                           Value dv = a[1];
                           if (dv.getType() != elem)
                             dv = castScalar(nb, l, dv, kFloat, x.dtype, elem);
                           return arith::DivFOp::create(nb, l, a[0], dv);
                         });
  }
  ctx.setOutput(0, {r, x.dtype});
  if (isMax && ctx.hasOutput(1))
    ctx.setOutput(1, {buildMaxPoolIndices(b, loc, xp, r, inSpatial, win,
                                          ctx.attrFlag("storage_order", false)),
                      kInt64});
  return success();
}

LogicalResult importGlobalPool(NodeContext &ctx, PoolKind kind) {
  bool isMax = kind == PoolKind::Max;
  double p = kind == PoolKind::Lp ? lpPoolP(ctx) : 1.0;
  if (kind == PoolKind::Lp && failed(checkLpPoolP(ctx, p)))
    return failure();
  TValue x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  int64_t rank = x.rank();
  if (rank < 3)
    return ctx.invalid("input must have rank >= 3");
  SmallVector<int64_t> axes;
  int64_t count = 1;
  for (int64_t d = 2; d < rank; ++d) {
    axes.push_back(d);
    count *= x.shape()[d];
  }
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  Type elem = x.elementType();
  Value r = buildReduction(
      b, loc, x.value, axes, true,
      isMax ? lowestAttr(elem, false) : scalarAttr(elem, 0.0),
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        if (isMax)
          return arith::MaximumFOp::create(nb, l, a[0], a[1]);
        if (kind == PoolKind::Lp)
          return arith::AddFOp::create(nb, l, a[0], lpTerm(nb, l, a[1], p));
        return arith::AddFOp::create(nb, l, a[0], a[1]);
      });
  if (kind == PoolKind::Lp) {
    auto shape = cast<RankedTensorType>(r.getType()).getShape();
    r = buildElementwise(b, loc, r, shape, elem,
                         [&](OpBuilder &nb, Location l, ValueRange a) {
                           return lpRoot(nb, l, a[0], p);
                         });
  }
  if (kind == PoolKind::Average) {
    auto shape = cast<RankedTensorType>(r.getType()).getShape();
    r = buildElementwise(b, loc, r, shape, elem,
                         [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                           return arith::DivFOp::create(
                               nb, l, a[0], scalarConst(nb, l, elem, count));
                         });
  }
  ctx.setOutput(0, {r, x.dtype});
  return success();
}

} // namespace

void registerConvOps(OpRegistry &r) {
  r.add("Conv", importConv);
  r.add("ConvTranspose", importConvTranspose);
  r.add("MaxPool", [](NodeContext &c) { return importPool(c, PoolKind::Max); });
  r.add("AveragePool",
        [](NodeContext &c) { return importPool(c, PoolKind::Average); });
  r.add("LpPool", [](NodeContext &c) { return importPool(c, PoolKind::Lp); });
  r.add("GlobalAveragePool",
        [](NodeContext &c) { return importGlobalPool(c, PoolKind::Average); });
  r.add("GlobalMaxPool",
        [](NodeContext &c) { return importGlobalPool(c, PoolKind::Max); });
  r.add("GlobalLpPool",
        [](NodeContext &c) { return importGlobalPool(c, PoolKind::Lp); });
}

} // namespace ddpc::onnx_import

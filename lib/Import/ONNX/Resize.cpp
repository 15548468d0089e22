//===- Resize.cpp - Import of ONNX Resize and Upsample --------------------===//
//
// Part of ddpc. Resize (opsets 10, 11, 13, 18, 19) and the deprecated
// Upsample (opsets 7, 9). Shapes are static, and every mode (nearest,
// linear, cubic, antialiased or not, any coordinate transformation) is
// separable per axis: along one axis the output is W X with a constant
// [out_len x in_len] interpolation matrix W computed here, at compile time.
// Each resized axis becomes one contraction linalg.generic, so the forward
// pass and its VJP (W^T applied to the cotangent) are ops ddpc already
// lowers and differentiates on every target. tf_crop_and_resize zeroes the
// rows of extrapolated output positions and adds a constant
// extrapolation_value term for them.
//
// The matrices follow the ONNX spec's Resize section (coordinate
// transformation, nearest_mode, cubic_coeff_a, exclude_outside, antialias
// filter stretched by max(1, 1/scale)); neighbors outside the input read
// the edge element. Where the spec's text and the node tests' reference
// data differ, the node tests win: align_corners and tf_crop_and_resize
// divide by scale * in_len - 1, and they and pytorch_half_pixel test
// scale * in_len == 1, with that length fractional for a fractional scale
// (onnxruntime uses out_len). Resize-10 and Upsample state no mapping;
// they take onnxruntime's: x_resized / scale, nearest flooring when
// upsampling and rounding up when downsampling.
//
// X: any float dtype (float16/bfloat16 computed in float32), any shape;
// integer and bool X with mode nearest only (copied exactly). scales,
// sizes and roi must be constants (initializers, folded values or
// --bind-input): they set the output shape.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"

#include <cmath>

using namespace mlir;

namespace ddpc::onnx_import {
namespace {

enum class InterpMode { Nearest, Linear, Cubic };

/// What the interpolation of every axis shares (the node's attributes).
struct ResizeAttrs {
  InterpMode mode = InterpMode::Nearest;
  /// round_prefer_floor, round_prefer_ceil, floor, ceil; or "legacy" for
  /// Resize-10 and Upsample, which have no nearest_mode: floor when
  /// upsampling and ceil when downsampling, as onnxruntime reads them.
  std::string nearestMode = "round_prefer_floor";
  std::string coordMode = "half_pixel";
  double cubicA = -0.75;
  bool excludeOutside = false;
  bool antialias = false;
  double extrapolation = 0.0;
};

/// One resized axis.
struct AxisResize {
  int64_t inLen = 0, outLen = 0;
  double scale = 1.0;
  double roiStart = 0.0, roiEnd = 1.0;
};

/// Nearest-neighbor weights of the two taps around x (ratio in (0, 1]).
SmallVector<double> nearestCoeffs(StringRef nearestMode, double ratio,
                                  double scale) {
  if (ratio == 1.0)
    return {0.0, 1.0};
  bool right;
  if (nearestMode == "round_prefer_floor")
    right = ratio > 0.5;
  else if (nearestMode == "round_prefer_ceil")
    right = ratio >= 0.5;
  else if (nearestMode == "floor")
    right = false;
  else if (nearestMode == "ceil")
    right = true;
  else // legacy
    right = scale < 1.0;
  return {right ? 0.0 : 1.0, right ? 1.0 : 0.0};
}

/// Keys' cubic convolution kernel with parameter a.
double cubicKernel(double x, double a) {
  x = std::fabs(x);
  if (x <= 1)
    return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2)
    return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

/// Tap weights for the fractional offset `ratio` of the source coordinate
/// past its left neighbor (1 when the coordinate is an integer).
SmallVector<double> coefficients(const ResizeAttrs &at, double ratio,
                                 double scale) {
  SmallVector<double> c;
  switch (at.mode) {
  case InterpMode::Nearest:
    return nearestCoeffs(at.nearestMode, ratio, scale);
  case InterpMode::Linear:
    if (!at.antialias)
      return {1.0 - ratio, ratio};
    {
      // The triangle filter stretched by 1/scale when downsampling.
      double s = std::min(scale, 1.0);
      int64_t start = (int64_t)std::floor(-1.0 / s) + 1;
      int64_t taps = 2 - 2 * start;
      for (int64_t i = start; i < start + taps; ++i)
        c.push_back(std::clamp(1.0 - std::fabs((i - ratio) * s), 0.0, 1.0));
    }
    break;
  case InterpMode::Cubic:
    if (!at.antialias) {
      for (double d : {ratio + 1, ratio, 1 - ratio, 2 - ratio})
        c.push_back(cubicKernel(d, at.cubicA));
      return c;
    }
    {
      double s = std::min(scale, 1.0);
      int64_t start = (int64_t)std::floor(-2.0 / s) + 1;
      for (int64_t i = start; i < 2 - start; ++i)
        c.push_back(cubicKernel(s * (i - ratio), at.cubicA));
    }
    break;
  }
  // Antialiased filters are normalized to sum 1.
  double sum = 0;
  for (double v : c)
    sum += v;
  for (double &v : c)
    v /= sum;
  return c;
}

/// Source coordinate of output index y (the spec's
/// coordinate_transformation_mode); `outWidth` is scale * in_len, which is
/// fractional when the size comes from a scale.
double sourceCoordinate(const ResizeAttrs &at, const AxisResize &ax, double y) {
  double in = (double)ax.inLen, outWidth = ax.scale * in;
  StringRef m = at.coordMode;
  if (m == "align_corners")
    return outWidth == 1 ? 0.0 : y * (in - 1) / (outWidth - 1);
  if (m == "asymmetric")
    return y / ax.scale;
  if (m == "tf_half_pixel_for_nn")
    return (y + 0.5) / ax.scale;
  if (m == "tf_crop_and_resize") {
    double span = ax.roiEnd - ax.roiStart;
    double x = outWidth == 1 ? span * (in - 1) / 2
                             : y * span * (in - 1) / (outWidth - 1);
    return x + ax.roiStart * (in - 1);
  }
  if (m == "pytorch_half_pixel")
    return outWidth == 1 ? -0.5 : (y + 0.5) / ax.scale - 0.5;
  if (m == "half_pixel_symmetric") {
    double offset = in / 2 * (1 - (double)ax.outLen / outWidth);
    return offset + (y + 0.5) / ax.scale - 0.5;
  }
  return (y + 0.5) / ax.scale - 0.5; // half_pixel
}

/// The [outLen x inLen] interpolation matrix of one axis (row-major), and
/// which output positions tf_crop_and_resize extrapolates (their rows are
/// zero).
void interpolationMatrix(const ResizeAttrs &at, const AxisResize &ax,
                         std::vector<double> &w, std::vector<bool> &outside) {
  int64_t in = ax.inLen;
  w.assign(ax.outLen * in, 0.0);
  outside.assign(ax.outLen, false);
  for (int64_t y = 0; y < ax.outLen; ++y) {
    double x = sourceCoordinate(at, ax, (double)y);
    if (at.coordMode == "tf_crop_and_resize" && (x < 0 || x > in - 1)) {
      outside[y] = true;
      continue;
    }
    double fl = std::floor(x);
    double ratio = x == fl ? 1.0 : x - fl;
    SmallVector<double> c = coefficients(at, ratio, ax.scale);
    int64_t n = c.size();
    // The n taps nearest to x, ties to the left: an even window starts
    // n/2 - 1 left of floor(x) (n/2 when x is an integer); an odd one is
    // centered on the nearest integer, ties down.
    int64_t p = (int64_t)fl;
    double frac = x - fl;
    int64_t start = n % 2 == 0 ? p - n / 2 + (frac == 0 ? 0 : 1)
                               : p - (n - 1) / 2 + (frac <= 0.5 ? 0 : 1);
    if (at.excludeOutside) {
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        if (start + j < 0 || start + j >= in)
          c[j] = 0;
        sum += c[j];
      }
      if (sum != 0)
        for (double &v : c)
          v /= sum;
    }
    for (int64_t j = 0; j < n; ++j)
      w[y * in + std::clamp<int64_t>(start + j, 0, in - 1)] += c[j];
  }
}

/// A constant of `elem` (f32, f64, or an integer type holding integral
/// values) with `shape` and the values `v`.
Value denseConst(OpBuilder &b, Location loc, Type elem, ArrayRef<int64_t> shape,
                 ArrayRef<double> v) {
  auto t = RankedTensorType::get(shape, elem);
  DenseElementsAttr attr;
  if (elem.isF32()) {
    std::vector<float> f(v.begin(), v.end());
    attr = DenseElementsAttr::get(t, ArrayRef<float>(f));
  } else if (elem.isF64()) {
    attr = DenseElementsAttr::get(t, v);
  } else {
    unsigned width = cast<IntegerType>(elem).getWidth();
    SmallVector<APInt> ints;
    for (double d : v)
      ints.push_back(APInt(width, (uint64_t)d));
    attr = DenseElementsAttr::get(t, ints);
  }
  return arith::ConstantOp::create(b, loc, attr);
}

/// out[..., o, ...] = sum_i w[o, i] * x[..., i, ...] along `axis`.
Value contractAxis(OpBuilder &b, Location loc, Value x, int64_t axis,
                   int64_t outLen, ArrayRef<double> w) {
  MLIRContext *ctx = b.getContext();
  auto xt = cast<RankedTensorType>(x.getType());
  Type elem = xt.getElementType();
  int64_t rank = xt.getRank(), inLen = xt.getDimSize(axis);
  Value wm = denseConst(b, loc, elem, {outLen, inLen}, w);
  SmallVector<int64_t> outShape(xt.getShape());
  outShape[axis] = outLen;
  // Dims: the output's, then the reduced input index k.
  unsigned numDims = rank + 1;
  AffineExpr k = getAffineDimExpr(rank, ctx);
  SmallVector<AffineExpr> xe;
  for (int64_t d = 0; d < rank; ++d)
    xe.push_back(d == axis ? k : getAffineDimExpr(d, ctx));
  AffineMap xMap = AffineMap::get(numDims, 0, xe, ctx);
  AffineMap wMap =
      AffineMap::get(numDims, 0, {getAffineDimExpr(axis, ctx), k}, ctx);
  bool isF = isa<FloatType>(elem);
  return buildGeneric(
      b, loc, ValueRange{x, wm}, {xMap, wMap}, outShape, elem, 1,
      scalarAttr(elem, 0.0), [&](OpBuilder &nb, Location l, ValueRange a) {
        if (isF)
          return arith::AddFOp::create(nb, l, a[2],
                                       arith::MulFOp::create(nb, l, a[0], a[1]))
              .getResult();
        return arith::AddIOp::create(nb, l, a[2],
                                     arith::MulIOp::create(nb, l, a[0], a[1]))
            .getResult();
      });
}

/// Whether axis `ax` is left as it is (the reference skips such axes).
bool isIdentity(const AxisResize &ax, bool crop) {
  auto close = [](double a, double b) {
    return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b));
  };
  return ax.outLen == ax.inLen && close(ax.scale, 1.0) &&
         (!crop || (ax.roiStart == 0.0 && ax.roiEnd == 1.0));
}

/// The most elements one axis's interpolation matrix may have (2^24: a
/// 4096 x 4096 resize, 64 MiB of float32 constant).
constexpr int64_t kMaxMatrixElements = int64_t(1) << 24;

/// Builds the resize of `x` (float or, for nearest, integer) along `axes`.
Value buildResize(OpBuilder &b, Location loc, Value x, const ResizeAttrs &at,
                  ArrayRef<AxisResize> axes) {
  bool crop = at.coordMode == "tf_crop_and_resize";
  auto xt = cast<RankedTensorType>(x.getType());
  int64_t rank = xt.getRank();
  // Extrapolated positions: 1 - prod over axes of (inside), broadcast.
  SmallVector<int64_t> maskShape(rank, 1);
  std::vector<double> inside(1, 1.0);
  bool anyOutside = false;
  Value r = x;
  for (int64_t d = 0; d < rank; ++d) {
    const AxisResize &ax = axes[d];
    if (isIdentity(ax, crop))
      continue;
    std::vector<double> w;
    std::vector<bool> outside;
    interpolationMatrix(at, ax, w, outside);
    r = contractAxis(b, loc, r, d, ax.outLen, w);
    if (!crop)
      continue;
    // Outer product of the mask so far with this axis's mask.
    std::vector<double> next;
    next.reserve(inside.size() * ax.outLen);
    for (double m : inside)
      for (int64_t o = 0; o < ax.outLen; ++o) {
        next.push_back(outside[o] ? 0.0 : m);
        anyOutside |= outside[o];
      }
    inside = std::move(next);
    maskShape[d] = ax.outLen;
  }
  if (!anyOutside || at.extrapolation == 0.0)
    return r;
  for (double &m : inside)
    m = at.extrapolation * (1.0 - m);
  Type elem = xt.getElementType();
  Value term = denseConst(b, loc, elem, maskShape, inside);
  auto rt = cast<RankedTensorType>(r.getType());
  return buildElementwise(
      b, loc, ValueRange{r, term}, rt.getShape(), elem,
      [](OpBuilder &nb, Location l, ValueRange a) {
        return arith::AddFOp::create(nb, l, a[0], a[1]).getResult();
      });
}

/// Defines the node's output as the resize of `x`; unsupported when an
/// axis's matrix would exceed kMaxMatrixElements.
LogicalResult defineResize(NodeContext &ctx, TValue x, const ResizeAttrs &at,
                           ArrayRef<AxisResize> axes) {
  bool crop = at.coordMode == "tf_crop_and_resize";
  for (size_t d = 0; d < axes.size(); ++d) {
    const AxisResize &ax = axes[d];
    if (isIdentity(ax, crop) || ax.inLen == 0)
      continue;
    if (ax.outLen > kMaxMatrixElements / ax.inLen)
      return ctx.unsupported("resizing axis " + Twine(d) + " from " +
                             Twine(ax.inLen) + " to " + Twine(ax.outLen) +
                             " (an interpolation matrix above 2^24 elements)");
  }
  Value r = buildResize(ctx.builder(), ctx.loc(), x.value, at, axes);
  ctx.setOutput(0, {r, x.dtype});
  return success();
}

/// The versioned Resize schema a node of `opset` follows.
int64_t resizeVersion(int64_t opset) {
  for (int64_t v : {19, 18, 13, 11, 10})
    if (opset >= v)
      return v;
  return 0;
}

/// Checks X's dtype and the mode against each other; widens half floats.
LogicalResult checkResizeInput(NodeContext &ctx, const ResizeAttrs &at,
                               TValue &x) {
  int32_t dt = x.dtype;
  if (dt == kFloat16 || dt == kBFloat16) {
    ctx.promoteHalfPrecision(dt);
    x = ctx.input(0);
    return success();
  }
  if (dt == kFloat || dt == kDouble)
    return success();
  if (isSignedIntDType(dt) || isUnsignedDType(dt) || dt == kBool) {
    if (at.mode == InterpMode::Nearest)
      return success();
    return ctx.unsupported(
        Twine("linear and cubic Resize of ") + dtypeName(dt) +
        " X (the rounding back to an integer type is not specified)");
  }
  return ctx.unsupported(Twine("Resize of ") + dtypeName(dt) + " X");
}

/// Reads `mode` (nearest, linear and, from opset 11, cubic).
LogicalResult readMode(NodeContext &ctx, ResizeAttrs &at, bool cubicAllowed) {
  std::string mode = ctx.attrString("mode", "nearest");
  if (mode == "nearest")
    at.mode = InterpMode::Nearest;
  else if (mode == "linear")
    at.mode = InterpMode::Linear;
  else if (mode == "cubic" && cubicAllowed)
    at.mode = InterpMode::Cubic;
  else
    return ctx.invalid(
        "mode '" + mode + "' is not one of " +
        (cubicAllowed ? "nearest, linear, cubic" : "nearest, linear"));
  return success();
}

/// Per-axis sizes from `scales` (output = floor(in * scale)).
LogicalResult axesFromScales(NodeContext &ctx, ArrayRef<int64_t> shape,
                             ArrayRef<double> scales,
                             SmallVectorImpl<AxisResize> &axes) {
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!(scales[d] > 0) || !std::isfinite(scales[d]))
      return ctx.invalid("scales[" + Twine(d) +
                         "] = " + std::to_string(scales[d]) +
                         " is not a positive number");
    double out = std::floor(scales[d] * (double)shape[d]);
    if (out > (double)kMaxTensorElements)
      return ctx.invalid("scales[" + Twine(d) +
                         "] = " + std::to_string(scales[d]) + " makes axis " +
                         Twine(d) + " too long");
    axes[d].outLen = (int64_t)out;
    axes[d].scale = scales[d];
  }
  return success();
}

/// Resize, opsets 10 to 19 (see the file comment).
LogicalResult importResize(NodeContext &ctx) {
  int64_t version = resizeVersion(ctx.opset);
  if (version == 0)
    return ctx.invalid("Resize needs opset 10 or later");
  if (version == 10) {
    if (failed(ctx.checkAttrs({"mode"})))
      return failure();
  } else if (version < 18) {
    if (failed(ctx.checkAttrs({"mode", "coordinate_transformation_mode",
                               "cubic_coeff_a", "exclude_outside",
                               "extrapolation_value", "nearest_mode"})))
      return failure();
  } else if (failed(ctx.checkAttrs(
                 {"mode", "coordinate_transformation_mode", "cubic_coeff_a",
                  "exclude_outside", "extrapolation_value", "nearest_mode",
                  "antialias", "axes", "keep_aspect_ratio_policy"}))) {
    return failure();
  }
  ResizeAttrs at;
  if (failed(readMode(ctx, at, version >= 11)))
    return failure();
  TValue x = ctx.input(0);
  if (failed(checkResizeInput(ctx, at, x)))
    return failure();
  ArrayRef<int64_t> shape = x.shape();
  int64_t rank = x.rank();
  SmallVector<AxisResize> axes(rank);
  for (int64_t d = 0; d < rank; ++d) {
    axes[d].inLen = axes[d].outLen = shape[d];
  }

  if (version == 10) {
    // Resize-10 states no coordinate mapping; it is Upsample's
    // (x_original = x_resized / scale), as in onnxruntime.
    at.coordMode = "asymmetric";
    at.nearestMode = "legacy";
    auto scales = ctx.constFloatsInput(1);
    if (failed(scales))
      return failure();
    if ((int64_t)scales->size() != rank)
      return ctx.invalid("scales has " + Twine(scales->size()) +
                         " elements for X of rank " + Twine(rank));
    if (failed(axesFromScales(ctx, shape, *scales, axes)))
      return failure();
    return defineResize(ctx, x, at, axes);
  }

  at.coordMode = ctx.attrString("coordinate_transformation_mode", "half_pixel");
  bool knownCoord =
      llvm::is_contained({"half_pixel", "pytorch_half_pixel", "align_corners",
                          "asymmetric", "tf_crop_and_resize"},
                         at.coordMode) ||
      (version == 11 && at.coordMode == "tf_half_pixel_for_nn") ||
      (version >= 19 && at.coordMode == "half_pixel_symmetric");
  if (!knownCoord)
    return ctx.invalid("coordinate_transformation_mode '" + at.coordMode +
                       "' is not defined in Resize-" + Twine(version));
  at.nearestMode = ctx.attrString("nearest_mode", "round_prefer_floor");
  if (!llvm::is_contained(
          {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"},
          at.nearestMode))
    return ctx.invalid("nearest_mode '" + at.nearestMode +
                       "' is not one of round_prefer_floor, "
                       "round_prefer_ceil, floor, ceil");
  at.cubicA = ctx.attrFloat("cubic_coeff_a", -0.75f);
  at.excludeOutside = ctx.attrFlag("exclude_outside", false);
  at.extrapolation = ctx.attrFloat("extrapolation_value", 0.0f);
  // The spec's antialias filter is for linear and cubic; nearest ignores it.
  at.antialias = version >= 18 && ctx.attrFlag("antialias", false) &&
                 at.mode != InterpMode::Nearest;
  std::string policy =
      version >= 18 ? ctx.attrString("keep_aspect_ratio_policy", "stretch")
                    : std::string("stretch");
  if (!llvm::is_contained({"stretch", "not_larger", "not_smaller"}, policy))
    return ctx.invalid("keep_aspect_ratio_policy '" + policy +
                       "' is not one of stretch, not_larger, not_smaller");

  // The axes that roi, scales and sizes refer to.
  SmallVector<int64_t> axisList;
  if (version >= 18 && ctx.hasAttr("axes")) {
    for (int64_t a : ctx.attrInts("axes")) {
      auto n = normalizeAxis(a, rank);
      if (failed(n))
        return ctx.invalid("axes value " + Twine(a) + " is out of range for " +
                           "X of rank " + Twine(rank));
      if (llvm::is_contained(axisList, *n))
        return ctx.invalid("axes repeats axis " + Twine(*n));
      axisList.push_back(*n);
    }
  } else {
    for (int64_t d = 0; d < rank; ++d)
      axisList.push_back(d);
  }
  int64_t na = axisList.size();

  // An empty tensor stands for an absent optional input.
  auto present = [&](int i) {
    auto c = ctx.constInput(i);
    return ctx.hasInput(i) && !(c && c->getNumElements() == 0);
  };
  // Which of the two is given is known once both are constants.
  if (ctx.hasInput(2) && !ctx.constInput(2))
    return ctx.notConstant(2, "a float constant");
  if (ctx.hasInput(3) && !ctx.constInput(3))
    return ctx.notConstant(3, "an integer constant");
  bool hasScales = present(2), hasSizes = present(3);
  if (hasScales == hasSizes)
    return ctx.invalid(hasScales ? "both scales and sizes are given"
                                 : "neither scales nor sizes is given");
  if (hasScales) {
    auto scales = ctx.constFloatsInput(2);
    if (failed(scales))
      return failure();
    if ((int64_t)scales->size() != na)
      return ctx.invalid("scales has " + Twine(scales->size()) +
                         " elements for " + Twine(na) + " axes");
    SmallVector<double> all(rank, 1.0);
    for (int64_t i = 0; i < na; ++i)
      all[axisList[i]] = (*scales)[i];
    if (failed(axesFromScales(ctx, shape, all, axes)))
      return failure();
  } else {
    auto sizes = ctx.constIntsInput(3);
    if (failed(sizes))
      return failure();
    if ((int64_t)sizes->size() != na)
      return ctx.invalid("sizes has " + Twine(sizes->size()) +
                         " elements for " + Twine(na) + " axes");
    for (int64_t i = 0; i < na; ++i) {
      int64_t d = axisList[i], s = (*sizes)[i];
      if (s < 0 || s > kMaxTensorElements)
        return ctx.invalid("sizes[" + Twine(i) + "] = " + Twine(s) +
                           " is out of range");
      if (shape[d] == 0 && s != 0)
        return ctx.invalid("axis " + Twine(d) + " of length 0 cannot be " +
                           "resized to " + Twine(s));
      axes[d].outLen = s;
      axes[d].scale = shape[d] == 0 ? 1.0 : (double)s / (double)shape[d];
    }
    if (policy != "stretch") {
      // One scale for all axes (the smallest or largest), sizes rounded
      // half up.
      double scale = axes[axisList[0]].scale;
      for (int64_t d : axisList)
        scale = policy == "not_larger" ? std::min(scale, axes[d].scale)
                                       : std::max(scale, axes[d].scale);
      for (int64_t d : axisList) {
        axes[d].scale = scale;
        axes[d].outLen = (int64_t)std::floor(scale * (double)shape[d] + 0.5);
      }
    }
  }

  if (at.coordMode == "tf_crop_and_resize") {
    if (!present(1))
      return ctx.invalid("coordinate_transformation_mode "
                         "'tf_crop_and_resize' needs the roi input");
    auto roi = ctx.constFloatsInput(1);
    if (failed(roi))
      return failure();
    if ((int64_t)roi->size() != 2 * na)
      return ctx.invalid("roi has " + Twine(roi->size()) + " elements for " +
                         Twine(na) + " axes (needs starts and ends)");
    for (double v : *roi)
      if (!std::isfinite(v))
        return ctx.invalid("roi holds a non-finite value");
    for (int64_t i = 0; i < na; ++i) {
      axes[axisList[i]].roiStart = (*roi)[i];
      axes[axisList[i]].roiEnd = (*roi)[na + i];
    }
  }
  return defineResize(ctx, x, at, axes);
}

/// Upsample, opsets 7 (scales attribute) and 9 (scales input): Resize-10's
/// mapping; deprecated from opset 10.
LogicalResult importUpsample(NodeContext &ctx) {
  if (ctx.opset >= 10)
    return ctx.invalid("Upsample is deprecated from opset 10 (use Resize)");
  if (ctx.opset < 7)
    return ctx.unsupported("Upsample before opset 7 (height_scale and "
                           "width_scale attributes)");
  if (failed(ctx.checkAttrs(
          ctx.opset < 9 ? std::initializer_list<StringRef>{"mode", "scales"}
                        : std::initializer_list<StringRef>{"mode"})))
    return failure();
  ResizeAttrs at;
  if (failed(readMode(ctx, at, false)))
    return failure();
  at.coordMode = "asymmetric";
  at.nearestMode = "legacy";
  TValue x = ctx.input(0);
  if (failed(checkResizeInput(ctx, at, x)))
    return failure();
  SmallVector<double> scales;
  if (ctx.opset < 9) {
    if (!ctx.hasAttr("scales"))
      return ctx.invalid("the scales attribute is required");
    for (float f : ctx.attrFloats("scales"))
      scales.push_back(f);
  } else {
    auto s = ctx.constFloatsInput(1);
    if (failed(s))
      return failure();
    scales = *s;
  }
  int64_t rank = x.rank();
  if ((int64_t)scales.size() != rank)
    return ctx.invalid("scales has " + Twine(scales.size()) +
                       " elements for X of rank " + Twine(rank));
  SmallVector<AxisResize> axes(rank);
  for (int64_t d = 0; d < rank; ++d) {
    if (scales[d] < 1)
      return ctx.invalid("scales[" + Twine(d) +
                         "] = " + std::to_string(scales[d]) + " is below 1");
    axes[d].inLen = x.shape()[d];
  }
  if (failed(axesFromScales(ctx, x.shape(), scales, axes)))
    return failure();
  return defineResize(ctx, x, at, axes);
}

} // namespace

void registerResizeOps(OpRegistry &r) {
  r.add("Resize", importResize);
  r.add("Upsample", importUpsample);
}

} // namespace ddpc::onnx_import

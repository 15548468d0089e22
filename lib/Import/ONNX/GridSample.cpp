//===- GridSample.cpp - Import of ONNX GridSample -------------------------===//
//
// Part of ddpc. GridSample (opsets 16, 20, 22): X [N, C, D1..Dr] sampled at
// the normalized positions grid [N, O1..Or, r] (component 0 is the last,
// innermost spatial dim), giving Y [N, C, O1..Or]. Opset 16 is 2-D with
// modes bilinear, nearest and bicubic; 20 and 22 are N-D with linear,
// nearest and cubic. padding_mode zeros, border or reflection;
// align_corners 0 or 1. X float (float16/bfloat16 computed in float32), grid
// any float dtype (converted to X's).
//
// Semantics of the spec's reference (onnx.reference GridSample), which
// onnxruntime follows: a position is denormalized per dim (align_corners:
// x = (g + 1) (L - 1) / 2, else ((g + 1) L - 1) / 2); nearest rounds it
// half to even first; outside the borders [-0.5, L - 0.5] (align_corners:
// [0, L - 1]) border mode clamps it to [0, L - 1] and reflection mode
// reflects it back between the borders; then the taps (1, 2 or 4 per dim,
// Keys' cubic with a = -0.75) read X with the padding mode: zeros outside,
// the clamped index, or the reflected index. One exception: cubic with
// border padding clamps only the taps, not the position, as onnxruntime and
// PyTorch do (the reference's clamped position gives other values near the
// border; no node test samples there).
//
// One all-parallel linalg.generic over Y; each grid component is an input
// (a slice of grid), and X is read by tensor.extract at the computed taps.
// So autodiff gives X's cotangent as a scatter-add (capturedTensorVJP:
// atomics on CUDA) and grid's through the interpolation weights (zero for
// nearest, whose positions are rounded).
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

enum class SampleMode { Nearest, Linear, Cubic };
enum class PaddingMode { Zeros, Border, Reflection };

/// The most taps one output element may read (a 3-D cubic sample).
constexpr int64_t kMaxTaps = 64;

/// Scalar float arithmetic on values of one type inside a generic body.
struct Scalars {
  OpBuilder &b;
  Location l;
  Type t;

  Value c(double v) { return scalarConst(b, l, t, v); }
  Value add(Value x, Value y) { return arith::AddFOp::create(b, l, x, y); }
  Value sub(Value x, Value y) { return arith::SubFOp::create(b, l, x, y); }
  Value mul(Value x, Value y) { return arith::MulFOp::create(b, l, x, y); }
  Value lt(Value x, Value y) {
    return arith::CmpFOp::create(b, l, arith::CmpFPredicate::OLT, x, y);
  }
  Value gt(Value x, Value y) {
    return arith::CmpFOp::create(b, l, arith::CmpFPredicate::OGT, x, y);
  }
  Value sel(Value cond, Value x, Value y) {
    return arith::SelectOp::create(b, l, cond, x, y);
  }
  Value floor(Value x) { return math::FloorOp::create(b, l, x); }
  /// min(max(x, lo), hi); NaN becomes lo (maxnumf ignores NaN), so the
  /// result is always a finite value in [lo, hi].
  Value clampNum(Value x, double lo, double hi) {
    Value m = arith::MaxNumFOp::create(b, l, x, c(lo));
    return arith::MinNumFOp::create(b, l, m, c(hi));
  }
};

/// The borders of one spatial dim: [-0.5, L - 0.5], or [0, L - 1] with
/// align_corners.
struct Borders {
  double lo, hi;
};

/// The reference's reflection of x into [lo, hi]: by the nearer border,
/// again and again until inside (x - lo or hi - x taken modulo the range,
/// alternating which border it is measured from).
Value reflect(Scalars &s, Value x, Borders bd) {
  double range = bd.hi - bd.lo;
  if (range == 0.0)
    return s.c(bd.lo);
  auto fold = [&](Value dx, double from, double other) {
    // n = floor(dx / range), r = dx - n range; n even: from -/+ r.
    Value n = s.floor(arith::DivFOp::create(s.b, s.l, dx, s.c(range)));
    Value r = s.sub(dx, s.mul(n, s.c(range)));
    Value half = s.floor(s.mul(n, s.c(0.5)));
    Value even = arith::CmpFOp::create(s.b, s.l, arith::CmpFPredicate::OEQ,
                                       s.sub(n, s.add(half, half)), s.c(0.0));
    double dir = from < other ? 1.0 : -1.0;
    Value toward = s.add(s.c(from), s.mul(s.c(dir), r));
    Value back = s.sub(s.c(other), s.mul(s.c(dir), r));
    return s.sel(even, toward, back);
  };
  Value below = fold(s.sub(s.c(bd.lo), x), bd.lo, bd.hi);
  Value above = fold(s.sub(x, s.c(bd.hi)), bd.hi, bd.lo);
  return s.sel(s.lt(x, s.c(bd.lo)), below,
               s.sel(s.gt(x, s.c(bd.hi)), above, x));
}

/// Keys' cubic convolution weights (a = -0.75) of the taps floor(x) - 1 ..
/// floor(x) + 2 for the offset t = x - floor(x) in [0, 1).
SmallVector<Value> cubicWeights(Scalars &s, Value t) {
  const double a = -0.75;
  // |d| <= 1: ((a + 2) d - (a + 3)) d^2 + 1; 1 < |d| < 2: ((a d - 5a) d +
  // 8a) d - 4a.
  auto near = [&](Value d) {
    Value p = s.sub(s.mul(s.c(a + 2), d), s.c(a + 3));
    return s.add(s.mul(p, s.mul(d, d)), s.c(1.0));
  };
  auto far = [&](Value d) {
    Value p = s.add(s.mul(s.sub(s.mul(s.c(a), d), s.c(5 * a)), d), s.c(8 * a));
    return s.sub(s.mul(p, d), s.c(4 * a));
  };
  Value one = s.c(1.0), two = s.c(2.0);
  return {far(s.add(t, one)), near(t), near(s.sub(one, t)), far(s.sub(two, t))};
}

/// GridSample's attributes, read per opset.
struct GridSampleAttrs {
  std::string modeName;
  SampleMode mode = SampleMode::Linear;
  PaddingMode padding = PaddingMode::Zeros;
  bool alignCorners = false;
};

LogicalResult readAttrs(NodeContext &ctx, GridSampleAttrs &at) {
  if (failed(ctx.checkAttrs({"align_corners", "mode", "padding_mode"})))
    return failure();
  bool v16 = ctx.opset < 20;
  std::string mode = ctx.attrString("mode", v16 ? "bilinear" : "linear");
  at.modeName = mode;
  if (mode == "nearest")
    at.mode = SampleMode::Nearest;
  else if (mode == (v16 ? "bilinear" : "linear"))
    at.mode = SampleMode::Linear;
  else if (mode == (v16 ? "bicubic" : "cubic"))
    at.mode = SampleMode::Cubic;
  else
    return ctx.invalid(
        "mode '" + mode + "' is not one of " +
        (v16 ? "bilinear, nearest, bicubic" : "linear, nearest, cubic") +
        " at opset " + Twine(ctx.opset));
  std::string pad = ctx.attrString("padding_mode", "zeros");
  if (pad == "zeros")
    at.padding = PaddingMode::Zeros;
  else if (pad == "border")
    at.padding = PaddingMode::Border;
  else if (pad == "reflection")
    at.padding = PaddingMode::Reflection;
  else
    return ctx.invalid("padding_mode '" + pad +
                       "' is not one of zeros, border, reflection");
  at.alignCorners = ctx.attrFlag("align_corners", false);
  return success();
}

/// One tap along one dim: the index read (an index value inside [0, L)),
/// its weight (null for nearest) and, for zeros padding, whether the
/// unclamped position lies inside the input (null otherwise).
struct Tap {
  Value index, weight, inside;
};

/// The taps of spatial dim `d` (length `len`) for the grid value `g`.
SmallVector<Tap> axisTaps(Scalars &s, const GridSampleAttrs &at, Value g,
                          int64_t len) {
  double L = static_cast<double>(len);
  Borders bd = at.alignCorners ? Borders{0.0, L - 1} : Borders{-0.5, L - 0.5};
  Value gp1 = s.add(g, s.c(1.0));
  Value x = at.alignCorners ? s.mul(gp1, s.c((L - 1) / 2))
                            : s.sub(s.mul(gp1, s.c(L / 2)), s.c(0.5));
  if (at.mode == SampleMode::Nearest)
    x = math::RoundEvenOp::create(s.b, s.l, x);
  // Cubic border sampling clamps each tap instead (below), as onnxruntime
  // and PyTorch do; the reference clamps the position first.
  if (at.padding == PaddingMode::Border && at.mode != SampleMode::Cubic) {
    Value outside = arith::OrIOp::create(s.b, s.l, s.lt(x, s.c(bd.lo)),
                                         s.gt(x, s.c(bd.hi)));
    Value clamped = arith::MinimumFOp::create(
        s.b, s.l, arith::MaximumFOp::create(s.b, s.l, x, s.c(0.0)), s.c(L - 1));
    x = s.sel(outside, clamped, x);
  } else if (at.padding == PaddingMode::Reflection) {
    x = reflect(s, x, bd);
  }
  // Tap positions (integer-valued floats) and weights.
  SmallVector<std::pair<Value, Value>> pos;
  if (at.mode == SampleMode::Nearest) {
    pos.push_back({x, Value()});
  } else {
    Value x0 = s.floor(x);
    Value t = s.sub(x, x0);
    if (at.mode == SampleMode::Linear) {
      pos.push_back({x0, s.sub(s.c(1.0), t)});
      pos.push_back({s.add(x0, s.c(1.0)), t});
    } else {
      SmallVector<Value> w = cubicWeights(s, t);
      for (int64_t i = 0; i < 4; ++i)
        pos.push_back({s.add(x0, s.c(i - 1.0)), w[i]});
    }
  }
  SmallVector<Tap> taps;
  for (auto [p, w] : pos) {
    Tap tap;
    tap.weight = w;
    if (at.padding == PaddingMode::Zeros)
      tap.inside = arith::AndIOp::create(
          s.b, s.l,
          arith::CmpFOp::create(s.b, s.l, arith::CmpFPredicate::OGE, p,
                                s.c(0.0)),
          arith::CmpFOp::create(s.b, s.l, arith::CmpFPredicate::OLE, p,
                                s.c(L - 1)));
    else if (at.padding == PaddingMode::Reflection)
      p = reflect(s, p, bd);
    // Clamped before the conversion, so that it is always defined and
    // never reads outside X (the border mode's reading, and harmless for
    // the others: zeros masks the value, reflection is already inside).
    Value i64 = arith::FPToSIOp::create(s.b, s.l, s.b.getI64Type(),
                                        s.clampNum(p, 0.0, L - 1));
    tap.index = arith::IndexCastOp::create(s.b, s.l, s.b.getIndexType(), i64);
    taps.push_back(tap);
  }
  return taps;
}

LogicalResult importGridSample(NodeContext &ctx) {
  GridSampleAttrs at;
  if (failed(readAttrs(ctx, at)))
    return failure();
  TValue x = ctx.input(0), grid = ctx.input(1);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("X of dtype ") + dtypeName(x.dtype) +
                           " (GridSample samples float X only)");
  if (!isFloatDType(grid.dtype))
    return ctx.invalid(Twine("grid of dtype ") + dtypeName(grid.dtype) +
                       " (it must be a float tensor)");
  if (x.dtype == kFloat16 || x.dtype == kBFloat16) {
    ctx.promoteHalfPrecision(x.dtype);
    x = ctx.input(0);
    grid = ctx.input(1);
  }
  int64_t rank = x.rank(), r = rank - 2;
  if (ctx.opset < 20 && rank != 4)
    return ctx.invalid("X has rank " + Twine(rank) +
                       "; GridSample-16 samples 4-D X (N, C, H, W)");
  if (rank < 3)
    return ctx.invalid("X has rank " + Twine(rank) + ", expected >= 3");
  ArrayRef<int64_t> xs = x.shape(), gs = grid.shape();
  if (grid.rank() != rank || gs[0] != xs[0] || gs[rank - 1] != r)
    return ctx.invalid("grid has shape " + shapeString(gs) +
                       " for X of shape " + shapeString(xs) + " (expected [" +
                       Twine(xs[0]) + ", D1_out.., " + Twine(r) + "])");
  int64_t taps = at.mode == SampleMode::Nearest  ? 1
                 : at.mode == SampleMode::Linear ? 2
                                                 : 4;
  int64_t total = 1;
  for (int64_t d = 0; d < r && total <= kMaxTaps; ++d)
    total *= taps;
  if (total > kMaxTaps)
    return ctx.unsupported("mode '" + at.modeName + "' over " + Twine(r) +
                           " spatial dims (more than " + Twine(kMaxTaps) +
                           " taps per output element)");
  SmallVector<int64_t> outShape{xs[0], xs[1]};
  outShape.append(gs.begin() + 1, gs.end() - 1);
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  Type elem = x.elementType();
  if (numElements(outShape) == 0) {
    ctx.setOutput(0,
                  {tensor::EmptyOp::create(b, loc, outShape, elem), x.dtype});
    return success();
  }
  for (int64_t d = 2; d < rank; ++d)
    if (xs[d] == 0)
      return ctx.unsupported("sampling X of shape " + shapeString(xs) +
                             " (a spatial dim of size 0)");

  // Grid in X's (compute) type, one [N, O..] input per component.
  Value gv = grid.value;
  if (grid.elementType() != elem)
    gv = buildElementwise(
        b, loc, gv, gs, elem, [&](OpBuilder &nb, Location l, ValueRange a) {
          return castScalar(nb, l, a[0], grid.dtype, x.dtype, elem);
        });
  MLIRContext *mctx = b.getContext();
  SmallVector<int64_t> compShape(gs.begin(), gs.end() - 1);
  SmallVector<Value> comps;
  for (int64_t j = 0; j < r; ++j) {
    SmallVector<int64_t> offs(rank, 0), sizes(gs), ones(rank, 1);
    offs[rank - 1] = j;
    sizes[rank - 1] = 1;
    Value slice = tensor::ExtractSliceOp::create(
        b, loc, RankedTensorType::get(sizes, elem), gv,
        getAsIndexOpFoldResult(mctx, offs), getAsIndexOpFoldResult(mctx, sizes),
        getAsIndexOpFoldResult(mctx, ones));
    comps.push_back(buildReshape(b, loc, slice, compShape));
  }
  // Component j holds the position along spatial dim r - 1 - j; the inputs
  // are ordered by spatial dim.
  std::reverse(comps.begin(), comps.end());
  SmallVector<AffineExpr> ce{getAffineDimExpr(0, mctx)};
  for (int64_t d = 0; d < r; ++d)
    ce.push_back(getAffineDimExpr(2 + d, mctx));
  SmallVector<AffineMap> maps(r, AffineMap::get(rank, 0, ce, mctx));
  Value xv = x.value;
  Value y = buildGeneric(
      b, loc, comps, maps, outShape, elem, 0, std::nullopt,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Scalars s{nb, l, elem};
        SmallVector<SmallVector<Tap>> perDim;
        for (int64_t d = 0; d < r; ++d)
          perDim.push_back(axisTaps(s, at, a[d], xs[2 + d]));
        Value n = linalg::IndexOp::create(nb, l, 0);
        Value c = linalg::IndexOp::create(nb, l, 1);
        // Every combination of one tap per dim, the last dim fastest.
        Value sum;
        SmallVector<int64_t> choice(r, 0);
        for (int64_t t = 0; t < total; ++t) {
          int64_t rest = t;
          for (int64_t d = r - 1; d >= 0; --d) {
            choice[d] = rest % taps;
            rest /= taps;
          }
          SmallVector<Value> coords{n, c};
          Value weight, inside;
          for (int64_t d = 0; d < r; ++d) {
            const Tap &tap = perDim[d][choice[d]];
            coords.push_back(tap.index);
            if (tap.weight)
              weight = weight ? s.mul(weight, tap.weight) : tap.weight;
            if (tap.inside)
              inside = inside ? arith::AndIOp::create(nb, l, inside, tap.inside)
                                    .getResult()
                              : tap.inside;
          }
          Value v = tensor::ExtractOp::create(nb, l, xv, coords);
          if (inside)
            v = s.sel(inside, v, s.c(0.0));
          if (weight)
            v = s.mul(weight, v);
          sum = sum ? s.add(sum, v) : v;
        }
        return sum;
      });
  ctx.setOutput(0, {y, x.dtype});
  return success();
}

} // namespace

void registerGridSampleOps(OpRegistry &r) {
  r.add("GridSample", importGridSample);
}

} // namespace ddpc::onnx_import

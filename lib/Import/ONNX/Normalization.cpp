//===- Normalization.cpp - Import of ONNX normalization ops ---------------===//
//
// Part of ddpc. Softmax, LogSoftmax (numerically stable: x - max),
// BatchNormalization (inference form), LayerNormalization,
// InstanceNormalization and LRN.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"
#include "ddpc/Parallel/Collectives.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;

namespace ddpc::onnx_import {
namespace {

SmallVector<int64_t> keptShape(ArrayRef<int64_t> shape,
                               ArrayRef<int64_t> axes) {
  SmallVector<int64_t> s;
  for (int64_t d = 0; d < (int64_t)shape.size(); ++d)
    s.push_back(llvm::is_contained(axes, d) ? 1 : shape[d]);
  return s;
}

Value reduceSum(OpBuilder &b, Location l, Value x, ArrayRef<int64_t> axes) {
  Type elem = cast<RankedTensorType>(x.getType()).getElementType();
  return buildReduction(b, l, x, axes, true, scalarAttr(elem, 0.0),
                        [](OpBuilder &nb, Location nl, ValueRange a) -> Value {
                          return arith::AddFOp::create(nb, nl, a[0], a[1]);
                        });
}

Value reduceMax(OpBuilder &b, Location l, Value x, ArrayRef<int64_t> axes) {
  Type elem = cast<RankedTensorType>(x.getType()).getElementType();
  return buildReduction(b, l, x, axes, true, lowestAttr(elem, false),
                        [](OpBuilder &nb, Location nl, ValueRange a) -> Value {
                          return arith::MaximumFOp::create(nb, nl, a[0], a[1]);
                        });
}

} // namespace

/// softmax(x) or log_softmax(x) over `axes`, with the maximum subtracted
/// first so that exp cannot overflow.
Value buildSoftmax(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> axes,
                   bool logSoftmax) {
  auto t = cast<RankedTensorType>(x.getType());
  Type elem = t.getElementType();
  Value m = reduceMax(b, loc, x, axes);
  Value e =
      buildElementwise(b, loc, ValueRange{x, m}, t.getShape(), elem,
                       [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                         return math::ExpOp::create(
                             nb, l, arith::SubFOp::create(nb, l, a[0], a[1]));
                       });
  Value s = reduceSum(b, loc, e, axes);
  if (logSoftmax)
    return buildElementwise(
        b, loc, ValueRange{x, m, s}, t.getShape(), elem,
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          return arith::SubFOp::create(nb, l,
                                       arith::SubFOp::create(nb, l, a[0], a[1]),
                                       math::LogOp::create(nb, l, a[2]));
        });
  return buildElementwise(
      b, loc, ValueRange{e, s}, t.getShape(), elem,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        return arith::DivFOp::create(nb, l, a[0], a[1]);
      });
}

namespace {

LogicalResult importSoftmax(NodeContext &ctx, bool logSoftmax) {
  TValue x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  int64_t rank = x.rank();
  auto axisOr =
      normalizeAxis(ctx.attrInt("axis", ctx.opset < 13 ? 1 : -1), rank);
  if (failed(axisOr))
    return ctx.invalid("axis out of range");
  SmallVector<int64_t> axes;
  // Before opset 13 the input is coerced to 2-D at `axis`.
  for (int64_t d = *axisOr; d < (ctx.opset < 13 ? rank : *axisOr + 1); ++d)
    axes.push_back(d);
  Value r = buildSoftmax(ctx.builder(), ctx.loc(), x.value, axes, logSoftmax);
  ctx.setOutput(0, {r, x.dtype});
  return success();
}

/// Reshapes a per-channel [C] tensor to [C, 1, ..., 1] so that numpy
/// broadcasting against [N, C, d1, ...] aligns it with axis 1.
Value channelParam(OpBuilder &b, Location l, Value p, int64_t rank) {
  auto t = cast<RankedTensorType>(p.getType());
  SmallVector<int64_t> s{t.getNumElements()};
  s.append(std::max<int64_t>(rank - 2, 0), 1);
  return buildReshape(b, l, p, s);
}

/// Checks that input `i` is a [C] tensor of x's dtype (C = x's dim 1):
/// BatchNormalization's and InstanceNormalization's per-channel inputs.
/// Another dtype is invalid for InstanceNormalization (one type T) and not
/// supported by training-mode BatchNormalization (its T1/T2 may differ).
LogicalResult checkPerChannel(NodeContext &ctx, int i, const TValue &x) {
  TValue p = ctx.input(i);
  if (p.rank() != 1 || p.shape()[0] != x.shape()[1])
    return ctx.invalid("input #" + Twine(i) + " ('" + ctx.node.input(i) +
                       "') has shape " + shapeString(p.shape()) +
                       "; it must be [C] = [" + Twine(x.shape()[1]) + "]");
  if (p.dtype != x.dtype) {
    std::string why = "input #" + std::to_string(i) + " ('" +
                      ctx.node.input(i) + "') is " + dtypeName(p.dtype) +
                      ", X is " + dtypeName(x.dtype);
    return ctx.node.op_type() == "BatchNormalization"
               ? ctx.unsupported(why + " (mixed dtypes in training mode)")
               : ctx.invalid(why);
  }
  return success();
}

LogicalResult importBatchNormTraining(NodeContext &ctx);
void normalize(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> axes,
               double eps, Value &centered, Value &mean, Value &invStd,
               Value *varOut = nullptr);

/// Whether the node is in training mode as its flags say: training_mode=1
/// from opset 14, the outputs past Y before it (BatchNormalization-9's
/// "output case #1"; PyTorch's training-mode exports write them).
static bool batchNormFlagsTrain(NodeContext &ctx) {
  if (ctx.opset >= 14)
    return ctx.attrFlag("training_mode", false);
  for (int i = 1; i < ctx.numOutputs(); ++i)
    if (ctx.hasOutput(i))
      return true;
  return false;
}

/// The batch mean and biased variance of x per channel, [C] each: the
/// saved_mean and saved_var outputs before opset 14.
static std::pair<Value, Value> batchStatistics(NodeContext &ctx,
                                               const TValue &x) {
  SmallVector<int64_t> axes{0};
  for (int64_t d = 2; d < x.rank(); ++d)
    axes.push_back(d);
  Value centered, mean, invStd, var;
  normalize(ctx.builder(), ctx.loc(), x.value, axes, 0.0, centered, mean,
            invStd, &var);
  int64_t c = x.shape()[1];
  return {buildReshape(ctx.builder(), ctx.loc(), mean, {c}),
          buildReshape(ctx.builder(), ctx.loc(), var, {c})};
}

/// BatchNormalization, opsets 1-15. Training programs decide the mode
/// (ImportOptions): forward_train normalizes with batch statistics,
/// forward_eval with the running ones, whatever the exporter's flags say;
/// inference programs do what the flags say (the ONNX spec). Every
/// optional output is defined in both modes: in inference the running
/// statistics pass through unchanged and saved_mean/saved_var are the
/// batch's.
LogicalResult importBatchNorm(NodeContext &ctx) {
  const ImportOptions &options = ctx.importer.options;
  bool flagsTrain = batchNormFlagsTrain(ctx);
  if (options.trainingMode || (flagsTrain && !options.evalMode))
    return importBatchNormTraining(ctx);
  if (ctx.opset < 9 && !ctx.attrFlag("spatial", true))
    return ctx.unsupported("spatial=0");
  if (ctx.opset < 7 && ctx.hasAttr("is_test") &&
      !ctx.attrFlag("is_test", false))
    return ctx.unsupported("is_test=0 (training)");
  if (ctx.opset >= 14 && !flagsTrain && ctx.numOutputs() > 1)
    return ctx.invalid("with training_mode=0 it has one output, not " +
                       Twine(ctx.numOutputs()));
  TValue x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  if (x.rank() < 2)
    return ctx.invalid("input must have rank >= 2");
  int64_t c = x.shape()[1];
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  SmallVector<Value> params;
  for (int i = 1; i <= 4; ++i) {
    TValue p = ctx.input(i);
    if (p.rank() != 1 || p.shape()[0] != c)
      return ctx.invalid("parameter #" + Twine(i) + " must have shape [C]");
    Value v = p.value;
    if (p.elementType() != x.elementType())
      v = buildElementwise(b, loc, v, p.shape(), x.elementType(),
                           [&](OpBuilder &nb, Location l, ValueRange a) {
                             return castScalar(nb, l, a[0], p.dtype, x.dtype,
                                               x.elementType());
                           });
    params.push_back(channelParam(b, loc, v, x.rank()));
  }
  double eps = ctx.attrFloat("epsilon", 1e-5f);
  Type elem = x.elementType();
  SmallVector<Value> ins{x.value};
  ins.append(params);
  Value r = buildElementwise(
      b, loc, ins, x.shape(), elem,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        // (x - mean) / sqrt(var + eps) * scale + bias
        Value inv = math::RsqrtOp::create(
            nb, l,
            arith::AddFOp::create(nb, l, a[4], scalarConst(nb, l, elem, eps)));
        Value n = arith::MulFOp::create(
            nb, l, arith::SubFOp::create(nb, l, a[0], a[3]), inv);
        return arith::AddFOp::create(
            nb, l, arith::MulFOp::create(nb, l, n, a[1]), a[2]);
      });
  ctx.setOutput(0, {r, x.dtype});
  // Inference of a node with training outputs (forward_eval): the running
  // statistics are not updated; the batch statistics are computed only if
  // something reads them.
  ctx.setOutput(1, ctx.input(3));
  ctx.setOutput(2, ctx.input(4));
  if (ctx.hasOutput(3) || ctx.hasOutput(4)) {
    auto [bm, bv] = batchStatistics(ctx, x);
    ctx.setOutput(3, {bm, x.dtype});
    ctx.setOutput(4, {bv, x.dtype});
  }
  return success();
}

/// Normalizes `x` over `axes`: returns (x - mean), mean and 1/sqrt(var+eps),
/// the last two with the reduced dims kept as size 1.
void normalize(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> axes,
               double eps, Value &centered, Value &mean, Value &invStd,
               Value *varOut) {
  auto t = cast<RankedTensorType>(x.getType());
  Type elem = t.getElementType();
  int64_t count = 1;
  for (int64_t a : axes)
    count *= t.getDimSize(a);
  auto ks = keptShape(t.getShape(), axes);
  Value sum = reduceSum(b, loc, x, axes);
  mean =
      buildElementwise(b, loc, sum, ks, elem,
                       [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                         return arith::DivFOp::create(
                             nb, l, a[0], scalarConst(nb, l, elem, count));
                       });
  centered =
      buildElementwise(b, loc, ValueRange{x, mean}, t.getShape(), elem,
                       [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                         return arith::SubFOp::create(nb, l, a[0], a[1]);
                       });
  Value sq = buildElementwise(
      b, loc, centered, t.getShape(), elem,
      [&](OpBuilder &nb, Location l, ValueRange a) {
        return arith::MulFOp::create(nb, l, a[0], a[0]).getResult();
      });
  Value var =
      buildElementwise(b, loc, reduceSum(b, loc, sq, axes), ks, elem,
                       [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                         return arith::DivFOp::create(
                             nb, l, a[0], scalarConst(nb, l, elem, count));
                       });
  if (varOut)
    *varOut = var;
  invStd = buildElementwise(
      b, loc, var, ks, elem,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value v = a[0];
        return math::RsqrtOp::create(
            nb, l,
            arith::AddFOp::create(nb, l, v, scalarConst(nb, l, elem, eps)));
      });
}

/// `normalize` over the global batch of all ranks: per-channel sums and the
/// element count are all-reduced, then the squared deviations (two passes,
/// the same arithmetic as one rank holding the whole batch).
void normalizeSync(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> axes,
                   double eps, Value &centered, Value &mean, Value &invStd,
                   Value &var) {
  auto t = cast<RankedTensorType>(x.getType());
  Type elem = t.getElementType();
  auto ks = keptShape(t.getShape(), axes);
  int64_t c = numElements(ks);
  int64_t localCount = t.getNumElements() / c;
  // [sum_0 .. sum_{C-1}, count] summed over ranks.
  Value sum = buildReshape(b, loc, reduceSum(b, loc, x, axes), {c});
  Value packed =
      tensor::EmptyOp::create(b, loc, ArrayRef<int64_t>{c + 1}, elem);
  packed = tensor::InsertSliceOp::create(
      b, loc, sum, packed, ArrayRef<OpFoldResult>{b.getIndexAttr(0)},
      ArrayRef<OpFoldResult>{b.getIndexAttr(c)},
      ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
  Value cnt = arith::ConstantOp::create(
      b, loc,
      DenseElementsAttr::get(RankedTensorType::get({1}, elem),
                             scalarAttr(elem, localCount)));
  packed = tensor::InsertSliceOp::create(
      b, loc, cnt, packed, ArrayRef<OpFoldResult>{b.getIndexAttr(c)},
      ArrayRef<OpFoldResult>{b.getIndexAttr(1)},
      ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
  Value global = buildAllReduceSum(b, loc, packed);
  auto slice = [&](int64_t off, int64_t n) -> Value {
    return tensor::ExtractSliceOp::create(
        b, loc, RankedTensorType::get({n}, elem), global,
        ArrayRef<OpFoldResult>{b.getIndexAttr(off)},
        ArrayRef<OpFoldResult>{b.getIndexAttr(n)},
        ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
  };
  Value gsum = slice(0, c), gcount = slice(c, 1);
  Value mean1 =
      buildElementwise(b, loc, ValueRange{gsum, gcount}, {c}, elem,
                       [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                         return arith::DivFOp::create(nb, l, a[0], a[1]);
                       });
  mean = buildReshape(b, loc, mean1, ks);
  centered =
      buildElementwise(b, loc, ValueRange{x, mean}, t.getShape(), elem,
                       [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                         return arith::SubFOp::create(nb, l, a[0], a[1]);
                       });
  Value sq = buildElementwise(
      b, loc, centered, t.getShape(), elem,
      [](OpBuilder &nb, Location l, ValueRange a) {
        return arith::MulFOp::create(nb, l, a[0], a[0]).getResult();
      });
  Value gsq = buildAllReduceSum(
      b, loc, buildReshape(b, loc, reduceSum(b, loc, sq, axes), {c}));
  Value var1 =
      buildElementwise(b, loc, ValueRange{gsq, gcount}, {c}, elem,
                       [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                         return arith::DivFOp::create(nb, l, a[0], a[1]);
                       });
  var = buildReshape(b, loc, var1, ks);
  invStd = buildElementwise(
      b, loc, var, ks, elem,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        return math::RsqrtOp::create(
            nb, l,
            arith::AddFOp::create(nb, l, a[0], scalarConst(nb, l, elem, eps)));
      });
}

/// BatchNormalization with training_mode=1 (opset 14+): normalizes with the
/// batch statistics (biased variance) and outputs the updated running
/// statistics: running = input_running * momentum + batch * (1 - momentum).
LogicalResult importBatchNormTraining(NodeContext &ctx) {
  TValue x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  int64_t rank = x.rank();
  if (rank < 2)
    return ctx.invalid("input must have rank >= 2");
  for (int i = 1; i <= 4; ++i)
    if (failed(checkPerChannel(ctx, i, x)))
      return failure();
  SmallVector<int64_t> axes{0};
  for (int64_t d = 2; d < rank; ++d)
    axes.push_back(d);
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  Type elem = x.elementType();
  Value centered, mean, invStd, var;
  double eps = ctx.attrFloat("epsilon", 1e-5f);
  if (ctx.importer.options.syncBatchNorm && ctx.importer.options.trainingMode)
    normalizeSync(b, loc, x.value, axes, eps, centered, mean, invStd, var);
  else
    normalize(b, loc, x.value, axes, eps, centered, mean, invStd, &var);
  Value scale = channelParam(b, loc, ctx.input(1).value, rank);
  Value bias = channelParam(b, loc, ctx.input(2).value, rank);
  Value y = buildElementwise(
      b, loc, ValueRange{centered, invStd, scale, bias}, x.shape(), elem,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value v = arith::MulFOp::create(
            nb, l, arith::MulFOp::create(nb, l, a[0], a[1]), a[2]);
        return arith::AddFOp::create(nb, l, v, a[3]);
      });
  ctx.setOutput(0, {y, x.dtype});
  int64_t c = x.shape()[1];
  double momentum = ctx.attrFloat("momentum", 0.9f);
  Value mean1 = buildReshape(b, loc, mean, {c});
  Value var1 = buildReshape(b, loc, var, {c});
  auto running = [&](int inputIdx, Value batch) {
    return buildElementwise(
        b, loc, ValueRange{ctx.input(inputIdx).value, batch}, {c}, elem,
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          Value m = scalarConst(nb, l, elem, momentum);
          Value m1 = scalarConst(nb, l, elem, 1.0 - momentum);
          return arith::AddFOp::create(nb, l,
                                       arith::MulFOp::create(nb, l, a[0], m),
                                       arith::MulFOp::create(nb, l, a[1], m1));
        });
  };
  Value runMean = running(3, mean1), runVar = running(4, var1);
  ctx.setOutput(1, {runMean, x.dtype});
  ctx.setOutput(2, {runVar, x.dtype});
  // Before opset 14: saved_mean and saved_var, the batch statistics.
  ctx.setOutput(3, {mean1, x.dtype});
  ctx.setOutput(4, {var1, x.dtype});
  // Training programs return the new running statistics of buffer inputs.
  for (auto [idx, v] : {std::pair<int, Value>{3, runMean}, {4, runVar}})
    if (ctx.importer.bufferNames.contains(ctx.node.input(idx)))
      ctx.importer.bufferUpdates.push_back(
          {ctx.node.input(idx), TValue{v, x.dtype}});
  return success();
}

LogicalResult importLayerNorm(NodeContext &ctx) {
  TValue x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  int64_t rank = x.rank();
  auto axisOr = normalizeAxis(ctx.attrInt("axis", -1), rank);
  if (failed(axisOr))
    return ctx.invalid("axis out of range");
  SmallVector<int64_t> axes;
  for (int64_t d = *axisOr; d < rank; ++d)
    axes.push_back(d);
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  Value centered, mean, invStd;
  normalize(b, loc, x.value, axes, ctx.attrFloat("epsilon", 1e-5f), centered,
            mean, invStd);
  SmallVector<Value> ins{centered, invStd, ctx.input(1).value};
  bool hasBias = ctx.hasInput(2);
  if (hasBias)
    ins.push_back(ctx.input(2).value);
  for (size_t i = 2; i < ins.size(); ++i)
    if (!broadcastsTo(cast<RankedTensorType>(ins[i].getType()).getShape(),
                      x.shape()))
      return ctx.invalid("Scale/B cannot be broadcast to X");
  Value y = buildElementwise(
      b, loc, ins, x.shape(), x.elementType(),
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value v = arith::MulFOp::create(
            nb, l, arith::MulFOp::create(nb, l, a[0], a[1]), a[2]);
        return hasBias ? arith::AddFOp::create(nb, l, v, a[3]).getResult() : v;
      });
  ctx.setOutput(0, {y, x.dtype});
  ctx.setOutput(1, {mean, x.dtype});
  ctx.setOutput(2, {invStd, x.dtype});
  return success();
}

LogicalResult importInstanceNorm(NodeContext &ctx) {
  TValue x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  int64_t rank = x.rank();
  if (rank < 3)
    return ctx.invalid("input must have rank >= 3");
  for (int i = 1; i <= 2; ++i)
    if (failed(checkPerChannel(ctx, i, x)))
      return failure();
  SmallVector<int64_t> axes;
  for (int64_t d = 2; d < rank; ++d)
    axes.push_back(d);
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  Value centered, mean, invStd;
  normalize(b, loc, x.value, axes, ctx.attrFloat("epsilon", 1e-5f), centered,
            mean, invStd);
  Value scale = channelParam(b, loc, ctx.input(1).value, rank);
  Value bias = channelParam(b, loc, ctx.input(2).value, rank);
  Value y = buildElementwise(
      b, loc, ValueRange{centered, invStd, scale, bias}, x.shape(),
      x.elementType(), [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value v = arith::MulFOp::create(
            nb, l, arith::MulFOp::create(nb, l, a[0], a[1]), a[2]);
        return arith::AddFOp::create(nb, l, v, a[3]);
      });
  ctx.setOutput(0, {y, x.dtype});
  return success();
}

/// RMSNormalization (opset 23): x / sqrt(mean(x^2 over axes axis..) + eps)
/// * scale (Zhang & Sennrich, "Root Mean Square Layer Normalization", 2019).
LogicalResult importRMSNorm(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"axis", "epsilon", "stash_type"})))
    return failure();
  TValue x = ctx.input(0), scale = ctx.input(1);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  int64_t rank = x.rank();
  auto axisOr = normalizeAxis(ctx.attrInt("axis", -1), rank);
  if (failed(axisOr))
    return ctx.invalid("axis out of range");
  if (!broadcastsTo(scale.shape(), x.shape()))
    return ctx.invalid("scale cannot be broadcast to X");
  SmallVector<int64_t> axes;
  int64_t count = 1;
  for (int64_t d = *axisOr; d < rank; ++d) {
    axes.push_back(d);
    count *= x.shape()[d];
  }
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  Type elem = x.elementType();
  Value sq = buildElementwise(
      b, loc, x.value, x.shape(), elem,
      [](OpBuilder &nb, Location l, ValueRange a) {
        return arith::MulFOp::create(nb, l, a[0], a[0]).getResult();
      });
  Value ss = reduceSum(b, loc, sq, axes);
  double eps = ctx.attrFloat("epsilon", 1e-5f);
  Value inv = buildElementwise(
      b, loc, ss, keptShape(x.shape(), axes), elem,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value ms =
            arith::DivFOp::create(nb, l, a[0], scalarConst(nb, l, elem, count));
        return math::RsqrtOp::create(
            nb, l,
            arith::AddFOp::create(nb, l, ms, scalarConst(nb, l, elem, eps)));
      });
  Value y = buildElementwise(
      b, loc, ValueRange{x.value, inv, scale.value}, x.shape(), elem,
      [](OpBuilder &nb, Location l, ValueRange a) -> Value {
        return arith::MulFOp::create(
            nb, l, arith::MulFOp::create(nb, l, a[0], a[1]), a[2]);
      });
  ctx.setOutput(0, {y, x.dtype});
  return success();
}

/// LpNormalization: x / ||x||_p along `axis`, p = 1 or 2; a zero norm
/// gives 0 (onnxruntime).
LogicalResult importLpNorm(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"axis", "p"})))
    return failure();
  TValue x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  auto axisOr = normalizeAxis(ctx.attrInt("axis", -1), x.rank());
  if (failed(axisOr))
    return ctx.invalid("axis out of range");
  int64_t p = ctx.attrInt("p", 2);
  if (p != 1 && p != 2)
    return ctx.invalid("p must be 1 or 2, got " + Twine(p));
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  Type elem = x.elementType();
  Value t =
      buildElementwise(b, loc, x.value, x.shape(), elem,
                       [p](OpBuilder &nb, Location l, ValueRange a) -> Value {
                         if (p == 1)
                           return math::AbsFOp::create(nb, l, a[0]);
                         return arith::MulFOp::create(nb, l, a[0], a[0]);
                       });
  Value norm = reduceSum(b, loc, t, {*axisOr});
  Value y = buildElementwise(
      b, loc, ValueRange{x.value, norm}, x.shape(), elem,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value n = p == 2 ? math::SqrtOp::create(nb, l, a[1]).getResult() : a[1];
        Value zero = scalarConst(nb, l, elem, 0.0);
        Value isZero =
            arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, n, zero);
        // Divide by 1 where the norm is 0, so neither value nor VJP is NaN.
        Value safe = arith::SelectOp::create(nb, l, isZero,
                                             scalarConst(nb, l, elem, 1.0), n);
        return arith::SelectOp::create(
            nb, l, isZero, zero, arith::DivFOp::create(nb, l, a[0], safe));
      });
  ctx.setOutput(0, {y, x.dtype});
  return success();
}

/// The negative log-likelihood of log-probabilities `logp` [N, C, d...] at
/// the classes `target` [N, d...] (ints), weighted by `weight` [C] (or 1),
/// 0 where target == ignore_index; reduced by `reduction` (none, sum, or
/// mean: the sum over the sum of the weights taken), as ONNX's
/// NegativeLogLikelihoodLoss and PyTorch's nll_loss. A target outside
/// [0, C) that is not ignore_index is counted by a run-time check.
LogicalResult buildNLL(NodeContext &ctx, Value logp, int32_t dtype,
                       int targetInput, int weightInput) {
  auto xt = cast<RankedTensorType>(logp.getType());
  TValue target = ctx.input(targetInput);
  int64_t rank = xt.getRank();
  if (rank < 2)
    return ctx.invalid("input must have rank >= 2 ([N, C, ...])");
  if (!isa<IntegerType>(target.elementType()) || target.dtype == kBool)
    return ctx.invalid("target must be integers");
  SmallVector<int64_t> want{xt.getDimSize(0)};
  for (int64_t d = 2; d < rank; ++d)
    want.push_back(xt.getDimSize(d));
  if (target.shape() != ArrayRef<int64_t>(want))
    return ctx.invalid("target has shape " + shapeString(target.shape()) +
                       ", expected " + shapeString(want));
  int64_t classes = xt.getDimSize(1);
  if (classes == 0)
    return ctx.invalid("the class axis is empty");
  Value weight;
  if (ctx.hasInput(weightInput)) {
    TValue w = ctx.input(weightInput);
    if (w.shape() != ArrayRef<int64_t>{classes} || w.dtype != dtype)
      return ctx.invalid("weight must be [C] of the input's dtype");
    weight = w.value;
  }
  std::string reduction = ctx.attrString("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    return ctx.invalid("reduction must be none, sum or mean, got '" +
                       reduction + "'");
  bool hasIgnore = ctx.hasAttr("ignore_index");
  int64_t ignore = ctx.attrInt("ignore_index", 0);
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  Type elem = xt.getElementType();
  Type ti = target.elementType();
  auto isIgnored = [&](OpBuilder &nb, Location l, Value t) -> Value {
    if (!hasIgnore)
      return arith::ConstantIntOp::create(nb, l, nb.getI1Type(), 0);
    return arith::CmpIOp::create(
        nb, l, arith::CmpIPredicate::eq, t,
        arith::ConstantOp::create(nb, l, IntegerAttr::get(ti, ignore)));
  };
  if (ctx.importer.options.runtimeChecks) {
    Value bad = buildElementwise(
        b, loc, target.value, target.shape(), b.getI1Type(),
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          Value t = a[0];
          Value lo = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt, t,
                                           scalarConst(nb, l, ti, 0));
          Value hi = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sge, t,
                                           scalarConst(nb, l, ti, classes));
          Value out = arith::OrIOp::create(nb, l, lo, hi);
          return arith::AndIOp::create(
              nb, l, out,
              arith::XOrIOp::create(
                  nb, l, isIgnored(nb, l, t),
                  arith::ConstantIntOp::create(nb, l, nb.getI1Type(), 1)));
        });
    std::string node = ctx.node.name();
    if (auto name = dyn_cast<NameLoc>(loc))
      node = name.getName().str();
    buildCountCheck(b, loc, bad,
                    printableText(("target '" + ctx.node.input(targetInput) +
                                   "' outside [0, " + Twine(classes) + ") in " +
                                   ctx.node.op_type() + " node '" + node + "'")
                                      .str()));
  }
  // Per element: the clamped class, whether it counts, and its weight.
  auto classAt = [&](OpBuilder &nb, Location l, Value t) -> Value {
    Value idx = arith::IndexCastOp::create(nb, l, nb.getIndexType(), t);
    Value zero = arith::ConstantIndexOp::create(nb, l, 0);
    idx = arith::MaxSIOp::create(nb, l, idx, zero);
    return arith::MinSIOp::create(
        nb, l, idx, arith::ConstantIndexOp::create(nb, l, classes - 1));
  };
  auto weightAt = [&](OpBuilder &nb, Location l, Value t) -> Value {
    Value w = weight ? tensor::ExtractOp::create(nb, l, weight,
                                                 ValueRange{classAt(nb, l, t)})
                           .getResult()
                     : scalarConst(nb, l, elem, 1.0);
    return arith::SelectOp::create(nb, l, isIgnored(nb, l, t),
                                   scalarConst(nb, l, elem, 0.0), w);
  };
  Value loss = buildElementwise(
      b, loc, target.value, target.shape(), elem,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        SmallVector<Value> coords{linalg::IndexOp::create(nb, l, 0),
                                  classAt(nb, l, a[0])};
        for (int64_t d = 2; d < rank; ++d)
          coords.push_back(linalg::IndexOp::create(nb, l, d - 1));
        Value x = tensor::ExtractOp::create(nb, l, logp, coords);
        return arith::NegFOp::create(
            nb, l, arith::MulFOp::create(nb, l, x, weightAt(nb, l, a[0])));
      });
  if (reduction == "none") {
    ctx.setOutput(0, {loss, dtype});
    return success();
  }
  SmallVector<int64_t> all;
  for (int64_t d = 0; d < target.rank(); ++d)
    all.push_back(d);
  auto sumAll = [&](Value v) {
    return buildReduction(b, loc, v, all, false, scalarAttr(elem, 0.0),
                          [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                            return arith::AddFOp::create(nb, l, a[0], a[1]);
                          });
  };
  Value total = sumAll(loss);
  // The mean over no elements is 0 (onnxruntime; all elements ignored
  // stays 0 / 0 = NaN, as there and in PyTorch).
  bool empty = llvm::is_contained(target.shape(), int64_t(0));
  if (reduction == "mean" && !empty) {
    Value w = buildElementwise(b, loc, target.value, target.shape(), elem,
                               [&](OpBuilder &nb, Location l, ValueRange a) {
                                 return weightAt(nb, l, a[0]);
                               });
    total =
        buildElementwise(b, loc, ValueRange{total, sumAll(w)}, {}, elem,
                         [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                           return arith::DivFOp::create(nb, l, a[0], a[1]);
                         });
  }
  ctx.setOutput(0, {total, dtype});
  return success();
}

LogicalResult importNLLLoss(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"reduction", "ignore_index"})))
    return failure();
  TValue x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  return buildNLL(ctx, x.value, x.dtype, 1, 2);
}

/// SoftmaxCrossEntropyLoss: NLL of log_softmax(scores) over axis 1; the
/// optional second output is that log_softmax.
LogicalResult importSoftmaxCrossEntropy(NodeContext &ctx) {
  if (failed(ctx.checkAttrs({"reduction", "ignore_index"})))
    return failure();
  TValue x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  if (x.rank() < 2)
    return ctx.invalid("scores must have rank >= 2 ([N, C, ...])");
  Value logp = buildSoftmax(ctx.builder(), ctx.loc(), x.value, {1}, true);
  if (failed(buildNLL(ctx, logp, x.dtype, 1, 2)))
    return failure();
  if (ctx.hasOutput(1))
    ctx.setOutput(1, {logp, x.dtype});
  return success();
}

/// LRN (AlexNet): y = x / (bias + alpha/size * sum_{window over C} x^2)^beta.
LogicalResult importLRN(NodeContext &ctx) {
  TValue x = ctx.input(0);
  if (!isFloatDType(x.dtype))
    return ctx.unsupported(Twine("dtype ") + dtypeName(x.dtype));
  int64_t rank = x.rank();
  if (rank < 3)
    return ctx.invalid("input must have rank >= 3");
  int64_t size = ctx.attrInt("size", 0);
  if (size <= 0)
    return ctx.invalid("size must be positive");
  double alpha = ctx.attrFloat("alpha", 1e-4f),
         beta = ctx.attrFloat("beta", 0.75f),
         bias = ctx.attrFloat("bias", 1.0f);
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  OpBuilder &b = ctx.builder();
  Location loc = ctx.loc();
  MLIRContext *mctx = b.getContext();
  Type elem = x.elementType();
  Value sq = buildElementwise(
      b, loc, x.value, x.shape(), elem,
      [](OpBuilder &nb, Location l, ValueRange a) {
        return arith::MulFOp::create(nb, l, a[0], a[0]).getResult();
      });
  SmallVector<int64_t> low(rank, 0), high(rank, 0);
  low[1] = lo;
  high[1] = hi;
  Value sqPad = buildPad(b, loc, sq, low, high, scalarAttr(elem, 0.0));
  // Iteration: [n, c, spatial..., k]; reads sqPad[n, c + k, spatial...].
  SmallVector<AffineExpr> exprs;
  for (int64_t d = 0; d < rank; ++d)
    exprs.push_back(d == 1 ? getAffineDimExpr(1, mctx) +
                                 getAffineDimExpr(rank, mctx)
                           : getAffineDimExpr(d, mctx));
  // The window dim size comes from an input of shape [size].
  Value window = tensor::EmptyOp::create(b, loc, ArrayRef<int64_t>{size}, elem);
  AffineMap winMap =
      AffineMap::get(rank + 1, 0, {getAffineDimExpr(rank, mctx)}, mctx);
  Value sum =
      buildGeneric(b, loc, ValueRange{sqPad, window},
                   {AffineMap::get(rank + 1, 0, exprs, mctx), winMap},
                   x.shape(), elem, 1, scalarAttr(elem, 0.0),
                   [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                     return arith::AddFOp::create(nb, l, a[2], a[0]);
                   });
  Value y = buildElementwise(
      b, loc, ValueRange{x.value, sum}, x.shape(), elem,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value d = arith::AddFOp::create(
            nb, l, scalarConst(nb, l, elem, bias),
            arith::MulFOp::create(nb, l, scalarConst(nb, l, elem, alpha / size),
                                  a[1]));
        return arith::DivFOp::create(
            nb, l, a[0],
            math::PowFOp::create(nb, l, d, scalarConst(nb, l, elem, beta)));
      });
  ctx.setOutput(0, {y, x.dtype});
  return success();
}

} // namespace

void registerNormalizationOps(OpRegistry &r) {
  r.add("Softmax", [](NodeContext &c) { return importSoftmax(c, false); });
  r.add("LogSoftmax", [](NodeContext &c) { return importSoftmax(c, true); });
  r.add("BatchNormalization", importBatchNorm);
  r.add("LayerNormalization", importLayerNorm);
  r.add("InstanceNormalization", importInstanceNorm);
  r.add("LRN", importLRN);
  r.add("RMSNormalization", importRMSNorm);
  r.add("LpNormalization", importLpNorm);
  r.add("NegativeLogLikelihoodLoss", importNLLLoss);
  r.add("SoftmaxCrossEntropyLoss", importSoftmaxCrossEntropy);
}

} // namespace ddpc::onnx_import

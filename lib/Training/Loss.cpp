//===- Loss.cpp - The losses of a training step ---------------------------===//
//
// Part of ddpc. Softmax cross-entropy (torch.nn.CrossEntropyLoss, mean
// reduction), mean squared error (torch.nn.MSELoss) and the model's own
// scalar loss ("output"): their label types, their @train_micro form (loss
// and its gradient seed) and their per-sample @eval form.
//
//===----------------------------------------------------------------------===//

#include "TrainingInternal.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;

namespace ddpc::training {
namespace {

/// Per-sample softmax cross-entropy pieces for logits [B, C], labels [B].
struct CrossEntropy {
  Value sampleLoss; // f32 [B]
  Value correct;    // i64 [B] (1 when argmax == label)
  Value gradLogits; // f32 [B, C]: (softmax - onehot) / B
};

CrossEntropy crossEntropy(OpBuilder &b, Location loc, Value logits,
                          Value labels) {
  auto lt = ttype(logits);
  int64_t B = lt.getDimSize(0), C = lt.getDimSize(1);
  Type f = lt.getElementType();
  Type i64 = b.getI64Type();
  Value m =
      buildReduction(b, loc, logits, {1}, true, lowestAttr(f, false),
                     [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                       return arith::MaximumFOp::create(nb, l, a[0], a[1]);
                     });
  Value e = ew(b, loc, ValueRange{logits, m}, {B, C}, f,
               [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                 return math::ExpOp::create(
                     nb, l, arith::SubFOp::create(nb, l, a[0], a[1]));
               });
  Value s =
      buildReduction(b, loc, e, {1}, true, scalarAttr(f, 0.0),
                     [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                       return arith::AddFOp::create(nb, l, a[0], a[1]);
                     });
  // Label as an index, clamped to [0, C) so bad labels cannot read out of
  // bounds (the runtime validates labels before training).
  auto clampLabel = [C](OpBuilder &nb, Location l, Value lab) -> Value {
    Value zero = arith::ConstantIntOp::create(nb, l, lab.getType(), 0);
    Value hi = arith::ConstantIntOp::create(nb, l, lab.getType(), C - 1);
    lab = arith::MaxSIOp::create(nb, l, lab, zero);
    return arith::MinSIOp::create(nb, l, lab, hi);
  };
  Value m1 = buildReshape(b, loc, m, {B});
  Value s1 = buildReshape(b, loc, s, {B});
  MLIRContext *ctx = b.getContext();
  auto d0 = getAffineDimExpr(0, ctx);
  AffineMap id1 = AffineMap::get(1, 0, {d0}, ctx);
  // sample_loss[b] = log(s[b]) + m[b] - logits[b, label[b]]
  Value sampleLoss = buildGeneric(
      b, loc, ValueRange{m1, s1, labels}, {id1, id1, id1}, {B}, f, 0,
      std::nullopt, [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value lab = clampLabel(nb, l, a[2]);
        Value idx = arith::IndexCastOp::create(nb, l, nb.getIndexType(), lab);
        Value row = linalg::IndexOp::create(nb, l, 0);
        Value picked = tensor::ExtractOp::create(nb, l, logits, {row, idx});
        Value lse = arith::AddFOp::create(
            nb, l, math::LogOp::create(nb, l, a[1]), a[0]);
        return arith::SubFOp::create(nb, l, lse, picked);
      });
  // argmax (first maximal index) == label
  Value argmaxInit = arith::ConstantOp::create(
      b, loc,
      DenseElementsAttr::get(RankedTensorType::get({B}, i64),
                             b.getI64IntegerAttr(C)));
  (void)argmaxInit;
  AffineMap id2 = AffineMap::getMultiDimIdentityMap(2, ctx);
  AffineMap row2 = AffineMap::get(2, 0, {d0}, ctx);
  Value argmax = buildGeneric(
      b, loc, ValueRange{logits, m1}, {id2, row2}, {B}, i64, 1,
      TypedAttr(b.getI64IntegerAttr(C)),
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value c = arith::IndexCastOp::create(nb, l, nb.getI64Type(),
                                             linalg::IndexOp::create(nb, l, 1));
        Value isMax =
            arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, a[0], a[1]);
        Value better = arith::MinSIOp::create(nb, l, a[2], c);
        return arith::SelectOp::create(nb, l, isMax, better, a[2]);
      });
  Value correct = buildGeneric(
      b, loc, ValueRange{argmax, labels}, {id1, id1}, {B}, i64, 0, std::nullopt,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value eq =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, a[0], a[1]);
        return arith::ExtUIOp::create(nb, l, nb.getI64Type(), eq);
      });
  // d logits = (e / s - onehot(label)) / B
  Value grad = buildGeneric(
      b, loc, ValueRange{e, s1, labels}, {id2, row2, row2}, {B, C}, f, 0,
      std::nullopt, [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value p = arith::DivFOp::create(nb, l, a[0], a[1]);
        Value c = arith::IndexCastOp::create(nb, l, nb.getI64Type(),
                                             linalg::IndexOp::create(nb, l, 1));
        Value hit = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, c,
                                          clampLabel(nb, l, a[2]));
        Value one = scalarConst(nb, l, f, 1.0),
              zero = scalarConst(nb, l, f, 0.0);
        Value d = arith::SubFOp::create(
            nb, l, p, arith::SelectOp::create(nb, l, hit, one, zero));
        return arith::DivFOp::create(nb, l, d, scalarConst(nb, l, f, B));
      });
  return {sampleLoss, correct, grad};
}

} // namespace

FailureOr<RankedTensorType>
labelTypeForLoss(const TrainOptions &opts, RankedTensorType outType,
                 int64_t batch, RankedTensorType labelInputType,
                 TrainingProgramInfo &info, std::string &error) {
  Type i64 = IntegerType::get(outType.getContext(), 64);
  RankedTensorType labelType;
  if ((opts.loss == "cross-entropy" || opts.loss == "mse") &&
      (outType.getRank() == 0 || outType.getDimSize(0) != batch)) {
    std::string shape;
    for (int64_t d : outType.getShape())
      shape += (shape.empty() ? "" : ",") + std::to_string(d);
    error = "--loss " + opts.loss + ": the first output has shape [" + shape +
            "], but its leading dimension must be the per-rank batch (" +
            std::to_string(batch) + ", the data inputs')";
    // A scalar first output is usually the model's own loss, its labels
    // one of the inputs.
    if (outType.getRank() == 0)
      error += "; if it is the loss and a graph input holds the labels, use "
               "--loss output --label-input NAME";
    return failure();
  }
  if (opts.loss == "cross-entropy") {
    if (outType.getRank() != 2 || !outType.getElementType().isF32()) {
      error = "--loss cross-entropy needs float32 logits [batch, classes]; "
              "the first output has another shape";
      return failure();
    }
    labelType = RankedTensorType::get({batch}, i64);
    info.classification = true;
    info.labelDType = 7;
    info.numClasses = outType.getDimSize(1);
  } else if (opts.loss == "mse") {
    labelType = outType;
    info.classification = false;
    info.labelDType = 1;
  } else if (opts.loss == "output") {
    if (outType.getRank() != 0) {
      error = "--loss output needs a scalar first output";
      return failure();
    }
    if (labelInputType)
      labelType = labelInputType;
    else
      labelType = RankedTensorType::get({batch}, i64);
    info.classification = false;
    info.labelDType = 7;
  } else {
    error = "unknown --loss '" + opts.loss +
            "' (supported: cross-entropy, mse, output)";
    return failure();
  }

  return labelType;
}

MicroBatchLoss buildMicroBatchLoss(OpBuilder &fb, Location loc, StringRef loss,
                                   Value out, Value labels, int64_t batch) {
  auto outType = ttype(out);
  Type f32 = fb.getF32Type();
  auto scalarF = RankedTensorType::get({}, f32);
  auto scalarI = RankedTensorType::get({}, fb.getI64Type());
  MicroBatchLoss r;
  if (loss == "cross-entropy") {
    CrossEntropy ce = crossEntropy(fb, loc, out, labels);
    r.loss = scaleTensor(fb, loc, sumAll(fb, loc, ce.sampleLoss), 1.0 / batch);
    r.correct = sumAll(fb, loc, ce.correct);
    r.seed = ce.gradLogits;
  } else if (loss == "mse") {
    int64_t n = outType.getNumElements();
    Value diff = ew(fb, loc, ValueRange{out, labels}, outType.getShape(), f32,
                    [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                      return arith::SubFOp::create(nb, l, a[0], a[1]);
                    });
    Value sq = ew(fb, loc, diff, outType.getShape(), f32,
                  [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                    return arith::MulFOp::create(nb, l, a[0], a[0]);
                  });
    r.loss = scaleTensor(fb, loc, sumAll(fb, loc, sq), 1.0 / n);
    r.seed = scaleTensor(fb, loc, diff, 2.0 / n);
    r.correct = arith::ConstantOp::create(
        fb, loc, DenseElementsAttr::get(scalarI, fb.getI64IntegerAttr(0)));
  } else {
    r.loss = out;
    r.seed = arith::ConstantOp::create(
        fb, loc, DenseElementsAttr::get(scalarF, fb.getF32FloatAttr(1.0f)));
    r.correct = arith::ConstantOp::create(
        fb, loc, DenseElementsAttr::get(scalarI, fb.getI64IntegerAttr(0)));
  }
  return r;
}

std::pair<Value, Value> buildPerSampleLoss(OpBuilder &fb, Location loc,
                                           StringRef loss, Value out,
                                           Value labels, int64_t B) {
  Type f32 = fb.getF32Type();
  auto vecI = RankedTensorType::get({B}, fb.getI64Type());
  Value sampleLoss, correct;
  if (loss == "cross-entropy") {
    CrossEntropy ce = crossEntropy(fb, loc, out, labels);
    sampleLoss = ce.sampleLoss;
    correct = ce.correct;
  } else {
    // Per-sample loss: mse over each sample's elements; "output": the
    // scalar loss for every sample.
    Value perSample;
    if (loss == "mse") {
      auto ot = ttype(out);
      int64_t per = ot.getNumElements() / B;
      Value sq = ew(fb, loc, ValueRange{out, labels}, ot.getShape(), f32,
                    [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                      Value d = arith::SubFOp::create(nb, l, a[0], a[1]);
                      return arith::MulFOp::create(nb, l, d, d);
                    });
      Value flat = buildReshape(fb, loc, sq, {B, per});
      perSample = scaleTensor(
          fb, loc,
          buildReduction(fb, loc, flat, {1}, false, scalarAttr(f32, 0.0),
                         [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                           return arith::AddFOp::create(nb, l, a[0], a[1]);
                         }),
          1.0 / per);
    } else {
      perSample = ew(fb, loc, out, {B}, f32,
                     [](OpBuilder &, Location, ValueRange a) { return a[0]; });
    }
    sampleLoss = perSample;
    correct = arith::ConstantOp::create(
        fb, loc, DenseElementsAttr::get(vecI, fb.getI64IntegerAttr(0)));
  }
  return {sampleLoss, correct};
}

} // namespace ddpc::training

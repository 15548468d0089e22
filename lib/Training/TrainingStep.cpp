//===- TrainingStep.cpp - Training-step synthesis -------------------------===//
//
// Part of ddpc.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Training/TrainingStep.h"
#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"

#include "ddpc/Import/ONNX/TensorBuilders.h"
#include "ddpc/Support/RuntimeSymbols.h"
#include "ddpc/Training/Autodiff.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;

namespace ddpc {

static bool isFloatTensorType(Type t) {
  auto rt = dyn_cast<RankedTensorType>(t);
  return rt && isa<FloatType>(rt.getElementType());
}

LogicalResult makeVJPFunction(func::FuncOp func, std::string &error) {
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder b(ret);
  Location loc = func.getLoc();
  MLIRContext *ctx = func.getContext();
  unsigned numIn = func.getNumArguments();
  SmallVector<Value> outs(ret.getOperands().begin(), ret.getOperands().end());
  SmallVector<std::pair<Value, Value>> seeds;
  SmallVector<DictionaryAttr> newArgAttrs;
  for (unsigned i = 0; i < numIn; ++i)
    newArgAttrs.push_back(func.getArgAttrDict(i));
  for (auto [i, v] : llvm::enumerate(outs)) {
    if (!isFloatTensorType(v.getType()))
      continue;
    BlockArgument ct = body.addArgument(v.getType(), loc);
    seeds.push_back({v, ct});
    auto name = func.getResultAttrOfType<StringAttr>(i, attrs::kName);
    auto dtype = func.getResultAttrOfType<IntegerAttr>(i, attrs::kDType);
    newArgAttrs.push_back(DictionaryAttr::get(
        ctx, {NamedAttribute(StringAttr::get(ctx, attrs::kName),
                             StringAttr::get(ctx, "d_" + name.str())),
              NamedAttribute(StringAttr::get(ctx, attrs::kDType), dtype)}));
  }
  SmallVector<Value> wrt;
  SmallVector<unsigned> wrtIdx;
  for (unsigned i = 0; i < numIn; ++i)
    if (isFloatTensorType(body.getArgument(i).getType())) {
      wrt.push_back(body.getArgument(i));
      wrtIdx.push_back(i);
    }
  auto grads = buildVJP(b, loc, seeds, wrt, error);
  if (failed(grads))
    return failure();
  SmallVector<DictionaryAttr> resAttrs;
  for (unsigned i = 0; i < outs.size(); ++i)
    resAttrs.push_back(func.getResultAttrDict(i));
  for (auto [j, g] : llvm::enumerate(*grads)) {
    outs.push_back(g);
    unsigned i = wrtIdx[j];
    auto name = func.getArgAttrOfType<StringAttr>(i, attrs::kName);
    auto dtype = func.getArgAttrOfType<IntegerAttr>(i, attrs::kDType);
    resAttrs.push_back(DictionaryAttr::get(
        ctx, {NamedAttribute(StringAttr::get(ctx, attrs::kName),
                             StringAttr::get(ctx, "d_" + name.str())),
              NamedAttribute(StringAttr::get(ctx, attrs::kDType), dtype)}));
  }
  func::ReturnOp::create(b, loc, outs);
  ret.erase();
  SmallVector<Type> argTypes(body.getArgumentTypes());
  SmallVector<Type> resTypes;
  for (Value v : outs)
    resTypes.push_back(v.getType());
  func.setFunctionType(FunctionType::get(ctx, argTypes, resTypes));
  func.setAllArgAttrs(newArgAttrs);
  func.setAllResultAttrs(resAttrs);
  return success();
}

} // namespace ddpc

//===----------------------------------------------------------------------===//
// Training functions
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdio>
#include <cstdlib>

namespace ddpc {
namespace {

using BodyFn = std::function<Value(OpBuilder &, Location, ValueRange)>;

Value ew(OpBuilder &b, Location loc, ValueRange ins, ArrayRef<int64_t> shape,
         Type elem, const BodyFn &fn) {
  return buildElementwise(
      b, loc, ins, shape, elem,
      [&](OpBuilder &nb, Location l, ValueRange a) { return fn(nb, l, a); });
}

RankedTensorType ttype(Value v) { return cast<RankedTensorType>(v.getType()); }

StringRef role(func::FuncOp f, unsigned arg) {
  auto r = f.getArgAttrOfType<StringAttr>(arg, attrs::kRole);
  return r ? r.getValue() : StringRef();
}
StringRef resultRole(func::FuncOp f, unsigned res) {
  auto r = f.getResultAttrOfType<StringAttr>(res, attrs::kRole);
  return r ? r.getValue() : StringRef();
}
StringRef argName(func::FuncOp f, unsigned arg) {
  return f.getArgAttrOfType<StringAttr>(arg, attrs::kName).getValue();
}

/// Clones `fn`'s body into the current block with its arguments mapped to
/// `args`; returns the values it returns.
SmallVector<Value> inlineBody(OpBuilder &b, func::FuncOp fn, ValueRange args) {
  IRMapping mapping;
  Block &body = fn.getBody().front();
  for (auto [from, to] : llvm::zip(body.getArguments(), args))
    mapping.map(from, to);
  for (Operation &op : body.without_terminator())
    b.clone(op, mapping);
  SmallVector<Value> results;
  for (Value v : body.getTerminator()->getOperands())
    results.push_back(mapping.lookupOrDefault(v));
  return results;
}

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

Value sumAll(OpBuilder &b, Location loc, Value x) {
  auto t = ttype(x);
  SmallVector<int64_t> axes;
  for (int64_t i = 0; i < t.getRank(); ++i)
    axes.push_back(i);
  Type elem = t.getElementType();
  bool isF = isa<FloatType>(elem);
  return buildReduction(
      b, loc, x, axes, false, scalarAttr(elem, 0.0),
      [isF](OpBuilder &nb, Location l, ValueRange a) -> Value {
        if (isF)
          return arith::AddFOp::create(nb, l, a[0], a[1]);
        return arith::AddIOp::create(nb, l, a[0], a[1]);
      });
}

Value scaleTensor(OpBuilder &b, Location loc, Value x, double s) {
  auto t = ttype(x);
  Type f = t.getElementType();
  return ew(b, loc, x, t.getShape(), f,
            [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
              return arith::MulFOp::create(nb, l, a[0],
                                           scalarConst(nb, l, f, s));
            });
}

/// Shortest round-trippable text of a hyper-parameter (%.17g trimmed).
std::string fmtNum(double v) {
  char buf[64];
  for (int prec = 6; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v)
      break;
  }
  return buf;
}

void setNames(func::FuncOp f, ArrayRef<std::string> argNames,
              ArrayRef<std::string> resNames) {
  OpBuilder b(f.getContext());
  for (auto [i, n] : llvm::enumerate(argNames))
    f.setArgAttr(i, attrs::kName, b.getStringAttr(n));
  for (auto [i, n] : llvm::enumerate(resNames))
    f.setResultAttr(i, attrs::kName, b.getStringAttr(n));
}

/// The step functions' names for the data arguments: "data" for a single
/// data input, "data.<input name>" for each of several.
void appendDataNames(SmallVectorImpl<std::string> &names,
                     const TrainingProgramInfo &info) {
  for (const auto &d : info.data)
    names.push_back(info.data.size() == 1 ? std::string("data")
                                          : "data." + d.name);
}

} // namespace

LogicalResult buildTrainingFunctions(ModuleOp module, func::FuncOp fwdTrain,
                                     func::FuncOp fwdEval,
                                     const TrainOptions &opts,
                                     TrainingProgramInfo &info,
                                     std::string &error) {
  MLIRContext *ctx = module.getContext();
  Location loc = fwdTrain.getLoc();
  OpBuilder b(ctx);
  Type f32 = b.getF32Type(), i64 = b.getI64Type();

  // Classify the forward function's arguments.
  SmallVector<unsigned> paramIdx, bufferIdx, inputIdx;
  int rngArg = -1;
  for (unsigned i = 0; i < fwdTrain.getNumArguments(); ++i) {
    StringRef r = role(fwdTrain, i);
    if (r == "param")
      paramIdx.push_back(i);
    else if (r == "buffer")
      bufferIdx.push_back(i);
    else if (r == "rng")
      rngArg = i;
    else
      inputIdx.push_back(i);
  }
  FunctionType fty = fwdTrain.getFunctionType();
  for (unsigned i : llvm::concat<unsigned>(paramIdx, bufferIdx))
    if (!cast<RankedTensorType>(fty.getInput(i)).getElementType().isF32()) {
      error = "parameter '" + argName(fwdTrain, i).str() +
              "' is not float32; training supports float32 parameters";
      return failure();
    }
  if (paramIdx.empty()) {
    error = "the model has no trainable float initializer (all frozen, or "
            "none reaches the first output)";
    return failure();
  }
  // --loss output without --label-input: a graph input named "labels"
  // (the Hugging Face convention, forward(input_ids, labels)) holds them;
  // without one the program reads a --labels file it does not use.
  std::string labelInput = opts.labelInput;
  if (labelInput.empty() && opts.loss == "output") {
    if (llvm::any_of(inputIdx, [&](unsigned i) {
          return argName(fwdTrain, i) == "labels";
        })) {
      labelInput = "labels";
      info.notes.push_back("--loss output: the graph input 'labels' holds "
                           "the labels (--labels FILE); pass --label-input "
                           "NAME for another");
    } else {
      info.notes.push_back(
          "--loss output without --label-input: the model's loss reads no "
          "labels, so the program takes a --labels file of [N] int64 that it "
          "does not use; pass --label-input NAME if a graph input holds them");
    }
  }
  // --label-input: checked before the inputs are classified, whose errors
  // would otherwise hide a misspelled name or the wrong loss.
  if (!labelInput.empty()) {
    if (opts.loss != "output") {
      error = "--label-input with --loss " + opts.loss +
              " is not supported (labels are a separate input; --label-input "
              "is for --loss output)";
      return failure();
    }
    if (llvm::none_of(inputIdx, [&](unsigned i) {
          return argName(fwdTrain, i) == labelInput;
        })) {
      error = "--label-input " + labelInput + ": no graph input of that name";
      return failure();
    }
  }
  // The data inputs (every graph input but the labels, in graph-input
  // order: token ids, an attention mask, ...) and, when --label-input names
  // a graph input, the labels. All are sharded along their leading (batch)
  // dimension.
  SmallVector<unsigned> dataArgs;
  int labelArg = -1;
  for (unsigned i : inputIdx) {
    if (!labelInput.empty() && argName(fwdTrain, i) == labelInput)
      labelArg = i;
    else
      dataArgs.push_back(i);
  }
  if (dataArgs.empty()) {
    error = "the model has no data input";
    return failure();
  }
  SmallVector<RankedTensorType> dataTypes;
  int64_t B = -1;
  for (unsigned i : dataArgs) {
    auto t = cast<RankedTensorType>(fty.getInput(i));
    // float32 samples, or integer token ids (int64, int32).
    auto dtypeAttr = fwdTrain.getArgAttrOfType<IntegerAttr>(i, attrs::kDType);
    int32_t dd = dtypeAttr ? dtypeAttr.getInt() : 0;
    if (dd != 1 && dd != 7 && dd != 6) {
      std::string got;
      llvm::raw_string_ostream os(got);
      os << t.getElementType();
      error = "the data input '" + argName(fwdTrain, i).str() +
              "' has element type " + got +
              "; training programs take float32 data or int64/int32 token ids";
      return failure();
    }
    if (t.getRank() == 0) {
      error = "the data input '" + argName(fwdTrain, i).str() +
              "' is a scalar; data inputs have the batch as their leading "
              "dimension";
      return failure();
    }
    if (B < 0) {
      B = t.getDimSize(0);
    } else if (t.getDimSize(0) != B) {
      error = "the data inputs '" + argName(fwdTrain, dataArgs[0]).str() +
              "' and '" + argName(fwdTrain, i).str() +
              "' have leading dimensions " + std::to_string(B) + " and " +
              std::to_string(t.getDimSize(0)) +
              "; every data input is sharded along the batch, so they must "
              "agree (--batch-size sets them)";
      return failure();
    }
    dataTypes.push_back(t);
    info.data.push_back(
        {argName(fwdTrain, i).str(), dd, SmallVector<int64_t>(t.getShape())});
  }
  const unsigned D = dataArgs.size();
  unsigned outIdx = 0;
  auto outType = cast<RankedTensorType>(fty.getResult(outIdx));

  // Labels.
  RankedTensorType labelType;
  if ((opts.loss == "cross-entropy" || opts.loss == "mse") &&
      (outType.getRank() == 0 || outType.getDimSize(0) != B)) {
    std::string shape;
    for (int64_t d : outType.getShape())
      shape += (shape.empty() ? "" : ",") + std::to_string(d);
    error = "--loss " + opts.loss + ": the first output has shape [" + shape +
            "], but its leading dimension must be the per-rank batch (" +
            std::to_string(B) + ", the data inputs')";
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
    labelType = RankedTensorType::get({B}, i64);
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
    if (labelArg >= 0)
      labelType = cast<RankedTensorType>(fty.getInput(labelArg));
    else
      labelType = RankedTensorType::get({B}, i64);
    info.classification = false;
    info.labelDType = 7;
  } else {
    error = "unknown --loss '" + opts.loss +
            "' (supported: cross-entropy, mse, output)";
    return failure();
  }

  SmallVector<Type> paramTypes, bufferTypes;
  for (unsigned i : paramIdx) {
    paramTypes.push_back(fty.getInput(i));
    auto t = cast<RankedTensorType>(fty.getInput(i));
    info.params.push_back(
        {argName(fwdTrain, i).str(), SmallVector<int64_t>(t.getShape())});
  }
  for (unsigned i : bufferIdx) {
    bufferTypes.push_back(fty.getInput(i));
    auto t = cast<RankedTensorType>(fty.getInput(i));
    info.buffers.push_back(
        {argName(fwdTrain, i).str(), SmallVector<int64_t>(t.getShape())});
  }
  info.batchSize = B;
  info.labelShape.assign(labelType.getShape().begin(),
                         labelType.getShape().end());
  if (labelArg >= 0 && opts.loss == "output") {
    // The program reads --labels as int64 or float32 (TrainABI.h).
    Type e = labelType.getElementType();
    if (e.isInteger(64)) {
      info.labelDType = 7;
    } else if (e.isF32()) {
      info.labelDType = 1;
    } else {
      std::string got;
      llvm::raw_string_ostream os(got);
      os << e;
      error = "--label-input '" + labelInput + "' has element type " + got +
              "; training programs read labels as int64 or float32";
      return failure();
    }
  }
  auto scalarF = RankedTensorType::get({}, f32);
  auto scalarI = RankedTensorType::get({}, i64);

  // Buffer update results of the forward function, by buffer name.
  llvm::StringMap<unsigned> bufferUpdateRes;
  for (unsigned r = 0; r < fwdTrain.getNumResults(); ++r)
    if (resultRole(fwdTrain, r) == "buffer_update")
      bufferUpdateRes[fwdTrain.getResultAttrOfType<StringAttr>(r, attrs::kName)
                          .getValue()] = r;

  b.setInsertionPointToEnd(module.getBody());
  unsigned P = paramTypes.size(), NB = bufferTypes.size();

  //===------------------------------------------------------------------===//
  // @train_micro(params, buffers, grad_acc, data, labels)
  //     -> (new_buffers, new_grad_acc, loss, correct)
  {
    SmallVector<Type> ins, outs;
    ins.append(paramTypes);
    ins.append(bufferTypes);
    ins.append(paramTypes);
    ins.append(dataTypes.begin(), dataTypes.end());
    ins.push_back(labelType);
    ins.push_back(RankedTensorType::get({2}, i64)); // rng {seed, rank}
    outs.append(bufferTypes);
    outs.append(paramTypes);
    outs.push_back(scalarF);
    outs.push_back(scalarI);
    auto fn = func::FuncOp::create(b, loc, kTrainMicroFunc,
                                   b.getFunctionType(ins, outs));
    Block *entry = fn.addEntryBlock();
    OpBuilder fb = OpBuilder::atBlockBegin(entry);
    SmallVector<Value> fwdArgs(fwdTrain.getNumArguments());
    for (auto [j, i] : llvm::enumerate(paramIdx))
      fwdArgs[i] = entry->getArgument(j);
    for (auto [j, i] : llvm::enumerate(bufferIdx))
      fwdArgs[i] = entry->getArgument(P + j);
    for (auto [j, i] : llvm::enumerate(dataArgs))
      fwdArgs[i] = entry->getArgument(2 * P + NB + j);
    Value labels = entry->getArgument(2 * P + NB + D);
    if (labelArg >= 0)
      fwdArgs[labelArg] = labels;
    if (rngArg >= 0)
      fwdArgs[rngArg] = entry->getArgument(2 * P + NB + D + 1);
    SmallVector<Value> fwdRes = inlineBody(fb, fwdTrain, fwdArgs);
    Value out = fwdRes[outIdx];
    Value loss, correct, seed;
    if (opts.loss == "cross-entropy") {
      CrossEntropy ce = crossEntropy(fb, loc, out, labels);
      loss = scaleTensor(fb, loc, sumAll(fb, loc, ce.sampleLoss), 1.0 / B);
      correct = sumAll(fb, loc, ce.correct);
      seed = ce.gradLogits;
    } else if (opts.loss == "mse") {
      int64_t n = outType.getNumElements();
      Value diff = ew(fb, loc, ValueRange{out, labels}, outType.getShape(), f32,
                      [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                        return arith::SubFOp::create(nb, l, a[0], a[1]);
                      });
      Value sq = ew(fb, loc, diff, outType.getShape(), f32,
                    [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                      return arith::MulFOp::create(nb, l, a[0], a[0]);
                    });
      loss = scaleTensor(fb, loc, sumAll(fb, loc, sq), 1.0 / n);
      seed = scaleTensor(fb, loc, diff, 2.0 / n);
      correct = arith::ConstantOp::create(
          fb, loc, DenseElementsAttr::get(scalarI, fb.getI64IntegerAttr(0)));
    } else {
      loss = out;
      seed = arith::ConstantOp::create(
          fb, loc, DenseElementsAttr::get(scalarF, fb.getF32FloatAttr(1.0f)));
      correct = arith::ConstantOp::create(
          fb, loc, DenseElementsAttr::get(scalarI, fb.getI64IntegerAttr(0)));
    }
    SmallVector<Value> wrt;
    for (unsigned j = 0; j < P; ++j)
      wrt.push_back(entry->getArgument(j));
    auto grads = buildVJP(fb, loc, {{out, seed}}, wrt, error);
    if (failed(grads))
      return failure();
    SmallVector<Value> results;
    for (auto [j, i] : llvm::enumerate(bufferIdx)) {
      auto it = bufferUpdateRes.find(argName(fwdTrain, i));
      results.push_back(it == bufferUpdateRes.end() ? entry->getArgument(P + j)
                                                    : fwdRes[it->second]);
    }
    // Each accumulation right where its gradient is complete, so that the
    // accumulator's final value is ready in backward order (the gradient
    // buckets of ddpc-bucket-gradient-allreduce start there).
    for (unsigned j = 0; j < P; ++j) {
      Value acc = entry->getArgument(P + NB + j);
      Value g = (*grads)[j];
      OpBuilder::InsertionGuard guard(fb);
      if (g.getParentBlock() == entry)
        fb.setInsertionPointAfterValue(g);
      results.push_back(
          ew(fb, loc, ValueRange{acc, g}, ttype(acc).getShape(), f32,
             [](OpBuilder &nb, Location l, ValueRange a) -> Value {
               return arith::AddFOp::create(nb, l, a[0], a[1]);
             }));
    }
    results.push_back(loss);
    results.push_back(correct);
    func::ReturnOp::create(fb, loc, results);
    for (unsigned j = 0; j < P; ++j) {
      fn.setArgAttr(P + NB + j, attrs::kRole, fb.getStringAttr("grad_acc"));
      fn.setResultAttr(NB + j, attrs::kRole, fb.getStringAttr("new_grad_acc"));
    }
    SmallVector<std::string> argNames, resNames;
    for (const auto &s : info.params)
      argNames.push_back(s.name);
    for (const auto &s : info.buffers)
      argNames.push_back(s.name);
    for (const auto &s : info.params)
      argNames.push_back("grad_acc." + s.name);
    appendDataNames(argNames, info);
    argNames.push_back("labels");
    argNames.push_back("rng");
    for (const auto &s : info.buffers)
      resNames.push_back("new." + s.name);
    for (const auto &s : info.params)
      resNames.push_back("grad_acc." + s.name);
    resNames.push_back("loss");
    resNames.push_back("correct");
    setNames(fn, argNames, resNames);
  }

  //===------------------------------------------------------------------===//
  // @apply(params, opt_state, grad_acc, lr, step, grad_scale)
  //     -> (new_params, new_opt_state)
  bool adamw = opts.optimizer == "adamw";
  if (!adamw && opts.optimizer != "sgd") {
    error =
        "unknown --optimizer '" + opts.optimizer + "' (supported: sgd, adamw)";
    return failure();
  }
  int S = adamw ? 2 : (opts.momentum != 0.0 ? 1 : 0);
  info.optSlots = S;
  if (adamw)
    info.optimizerDesc = "adamw lr=" + fmtNum(opts.lr) + " betas=(" +
                         fmtNum(opts.beta1) + "," + fmtNum(opts.beta2) +
                         ") eps=" + fmtNum(opts.eps) +
                         " weight_decay=" + fmtNum(opts.weightDecay);
  else
    info.optimizerDesc = "sgd lr=" + fmtNum(opts.lr) +
                         " momentum=" + fmtNum(opts.momentum) +
                         " dampening=" + fmtNum(opts.dampening) +
                         " nesterov=" + (opts.nesterov ? "1" : "0") +
                         " weight_decay=" + fmtNum(opts.weightDecay);
  {
    SmallVector<Type> ins, outs;
    ins.append(paramTypes);
    for (Type t : paramTypes)
      for (int s = 0; s < S; ++s)
        ins.push_back(t);
    ins.append(paramTypes);
    ins.push_back(scalarF);
    ins.push_back(scalarI);
    ins.push_back(scalarF);
    outs.append(paramTypes);
    for (Type t : paramTypes)
      for (int s = 0; s < S; ++s)
        outs.push_back(t);
    auto fn =
        func::FuncOp::create(b, loc, kApplyFunc, b.getFunctionType(ins, outs));
    Block *entry = fn.addEntryBlock();
    OpBuilder fb = OpBuilder::atBlockBegin(entry);
    unsigned base = P + P * S;
    Value lr = entry->getArgument(base + P);
    Value step = entry->getArgument(base + P + 1);
    Value gradScale = entry->getArgument(base + P + 2);
    SmallVector<Value> newParams, newState;
    double wd = opts.weightDecay, mom = opts.momentum, damp = opts.dampening;
    double b1 = opts.beta1, b2 = opts.beta2, eps = opts.eps;
    bool nesterov = opts.nesterov;
    for (unsigned j = 0; j < P; ++j) {
      Value p = entry->getArgument(j);
      Value g = entry->getArgument(base + j);
      fn.setArgAttr(base + j, attrs::kRole, fb.getStringAttr("grad_acc"));
      auto shape = ttype(p).getShape();
      // g = grad_acc * grad_scale (mean over ranks and micro-batches)
      g = ew(fb, loc, ValueRange{g, gradScale}, shape, f32,
             [](OpBuilder &nb, Location l, ValueRange a) -> Value {
               return arith::MulFOp::create(nb, l, a[0], a[1]);
             });
      if (!adamw) {
        if (wd != 0.0)
          g = ew(fb, loc, ValueRange{g, p}, shape, f32,
                 [wd](OpBuilder &nb, Location l, ValueRange a) -> Value {
                   Value w = scalarConst(nb, l, a[0].getType(), wd);
                   return arith::AddFOp::create(
                       nb, l, a[0], arith::MulFOp::create(nb, l, w, a[1]));
                 });
        Value update = g;
        if (S == 1) {
          Value buf = entry->getArgument(P + j);
          // torch: buf = g on the first step, else mom*buf + (1-damp)*g.
          Value nbuf =
              ew(fb, loc, ValueRange{buf, g, step}, shape, f32,
                 [mom, damp](OpBuilder &nb, Location l, ValueRange a) -> Value {
                   Type t = a[0].getType();
                   Value later = arith::AddFOp::create(
                       nb, l,
                       arith::MulFOp::create(nb, l, scalarConst(nb, l, t, mom),
                                             a[0]),
                       arith::MulFOp::create(
                           nb, l, scalarConst(nb, l, t, 1.0 - damp), a[1]));
                   Value first = arith::CmpIOp::create(
                       nb, l, arith::CmpIPredicate::sle, a[2],
                       arith::ConstantIntOp::create(nb, l, a[2].getType(), 1));
                   return arith::SelectOp::create(nb, l, first, a[1], later);
                 });
          newState.push_back(nbuf);
          update =
              nesterov
                  ? ew(fb, loc, ValueRange{g, nbuf}, shape, f32,
                       [mom](OpBuilder &nb, Location l, ValueRange a) -> Value {
                         return arith::AddFOp::create(
                             nb, l, a[0],
                             arith::MulFOp::create(
                                 nb, l, scalarConst(nb, l, a[0].getType(), mom),
                                 a[1]));
                       })
                  : nbuf;
        }
        newParams.push_back(
            ew(fb, loc, ValueRange{p, update, lr}, shape, f32,
               [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                 return arith::SubFOp::create(
                     nb, l, a[0], arith::MulFOp::create(nb, l, a[2], a[1]));
               }));
        continue;
      }
      // AdamW.
      Value m = entry->getArgument(P + 2 * j),
            v = entry->getArgument(P + 2 * j + 1);
      Value nm = ew(
          fb, loc, ValueRange{m, g}, shape, f32,
          [b1](OpBuilder &nb, Location l, ValueRange a) -> Value {
            Type t = a[0].getType();
            return arith::AddFOp::create(
                nb, l,
                arith::MulFOp::create(nb, l, scalarConst(nb, l, t, b1), a[0]),
                arith::MulFOp::create(nb, l, scalarConst(nb, l, t, 1.0 - b1),
                                      a[1]));
          });
      Value nv = ew(
          fb, loc, ValueRange{v, g}, shape, f32,
          [b2](OpBuilder &nb, Location l, ValueRange a) -> Value {
            Type t = a[0].getType();
            Value g2 = arith::MulFOp::create(nb, l, a[1], a[1]);
            return arith::AddFOp::create(
                nb, l,
                arith::MulFOp::create(nb, l, scalarConst(nb, l, t, b2), a[0]),
                arith::MulFOp::create(nb, l, scalarConst(nb, l, t, 1.0 - b2),
                                      g2));
          });
      Value np = ew(
          fb, loc, ValueRange{p, nm, nv, lr, step}, shape, f32,
          [b1, b2, eps, wd](OpBuilder &nb, Location l, ValueRange a) -> Value {
            Type t = a[0].getType();
            auto c = [&](double x) { return scalarConst(nb, l, t, x); };
            Value lrv = a[3];
            Value stepF = arith::SIToFPOp::create(nb, l, t, a[4]);
            Value bc1 = arith::SubFOp::create(
                nb, l, c(1.0), math::PowFOp::create(nb, l, c(b1), stepF));
            Value bc2 = arith::SubFOp::create(
                nb, l, c(1.0), math::PowFOp::create(nb, l, c(b2), stepF));
            // p * (1 - lr*wd)
            Value decayed = arith::MulFOp::create(
                nb, l, a[0],
                arith::SubFOp::create(
                    nb, l, c(1.0), arith::MulFOp::create(nb, l, lrv, c(wd))));
            Value denom = arith::AddFOp::create(
                nb, l,
                arith::DivFOp::create(nb, l, math::SqrtOp::create(nb, l, a[2]),
                                      math::SqrtOp::create(nb, l, bc2)),
                c(eps));
            Value stepSize = arith::DivFOp::create(nb, l, lrv, bc1);
            return arith::SubFOp::create(
                nb, l, decayed,
                arith::MulFOp::create(
                    nb, l, stepSize,
                    arith::DivFOp::create(nb, l, a[1], denom)));
          });
      newParams.push_back(np);
      newState.push_back(nm);
      newState.push_back(nv);
    }
    SmallVector<Value> results(newParams);
    results.append(newState);
    func::ReturnOp::create(fb, loc, results);
    SmallVector<std::string> argNames, stateNames;
    for (const auto &s : info.params)
      argNames.push_back(s.name);
    for (const auto &s : info.params)
      for (int k = 0; k < S; ++k)
        stateNames.push_back(
            (adamw ? (k ? "exp_avg_sq." : "exp_avg.") : "momentum_buffer.") +
            s.name);
    argNames.append(stateNames.begin(), stateNames.end());
    for (const auto &s : info.params)
      argNames.push_back("grad_acc." + s.name);
    argNames.append({"lr", "step", "grad_scale"});
    SmallVector<std::string> resNames;
    for (const auto &s : info.params)
      resNames.push_back("new." + s.name);
    for (const auto &n : stateNames)
      resNames.push_back("new." + n);
    setNames(fn, argNames, resNames);
  }

  //===------------------------------------------------------------------===//
  // @grad_norm(grad_acc, grad_scale) -> norm: the L2 norm over all
  // parameters of the averaged gradient grad_acc * grad_scale, as
  // torch.nn.utils.clip_grad_norm_ computes it (float32, so a norm above
  // ~1.8e19 is inf). The runtime's non-finite check reads it.
  {
    SmallVector<Type> ins(paramTypes);
    ins.push_back(scalarF);
    auto fn = func::FuncOp::create(b, loc, kGradNormFunc,
                                   b.getFunctionType(ins, {scalarF}));
    Block *entry = fn.addEntryBlock();
    OpBuilder fb = OpBuilder::atBlockBegin(entry);
    // One reduction per gradient, each starting from the previous sum (a
    // fill, not a constant tensor, which GPU kernels would read through a
    // device copy).
    Value sum = linalg::FillOp::create(fb, loc,
                                       ValueRange{arith::ConstantOp::create(
                                           fb, loc, fb.getF32FloatAttr(0.0f))},
                                       ValueRange{tensor::EmptyOp::create(
                                           fb, loc, ArrayRef<int64_t>{}, f32)})
                    .getResult(0);
    MLIRContext *mctx = fb.getContext();
    for (unsigned j = 0; j < P; ++j) {
      Value g = entry->getArgument(j);
      unsigned rank = ttype(g).getRank();
      AffineMap in = AffineMap::getMultiDimIdentityMap(rank, mctx);
      AffineMap out = AffineMap::get(rank, 0, {}, mctx);
      sum =
          linalg::GenericOp::create(
              fb, loc, TypeRange{scalarF}, ValueRange{g}, ValueRange{sum},
              ArrayRef<AffineMap>{in, out},
              SmallVector<utils::IteratorType>(rank,
                                               utils::IteratorType::reduction),
              [](OpBuilder &nb, Location l, ValueRange a) {
                Value sq = arith::MulFOp::create(nb, l, a[0], a[0]);
                linalg::YieldOp::create(
                    nb, l, arith::AddFOp::create(nb, l, a[1], sq).getResult());
              })
              .getResult(0);
    }
    Value norm = ew(fb, loc, ValueRange{sum, entry->getArgument(P)}, {}, f32,
                    [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                      return arith::MulFOp::create(
                          nb, l, math::SqrtOp::create(nb, l, a[0]), a[1]);
                    });
    func::ReturnOp::create(fb, loc, norm);
    SmallVector<std::string> argNames;
    for (const auto &s : info.params)
      argNames.push_back("grad_acc." + s.name);
    argNames.push_back("grad_scale");
    setNames(fn, argNames, {"grad_norm"});
  }

  //===------------------------------------------------------------------===//
  // @eval(params, buffers, data, labels) -> (sample_loss [B], sample_correct
  // [B])
  {
    auto evalType = fwdEval.getFunctionType();
    SmallVector<Type> ins;
    ins.append(paramTypes);
    ins.append(bufferTypes);
    ins.append(dataTypes.begin(), dataTypes.end());
    ins.push_back(labelType);
    auto vecF = RankedTensorType::get({B}, f32);
    auto vecI = RankedTensorType::get({B}, i64);
    auto fn = func::FuncOp::create(b, loc, kEvalFunc,
                                   b.getFunctionType(ins, {vecF, vecI}));
    Block *entry = fn.addEntryBlock();
    OpBuilder fb = OpBuilder::atBlockBegin(entry);
    SmallVector<Value> fwdArgs(evalType.getNumInputs());
    for (auto [j, i] : llvm::enumerate(paramIdx))
      fwdArgs[i] = entry->getArgument(j);
    for (auto [j, i] : llvm::enumerate(bufferIdx))
      fwdArgs[i] = entry->getArgument(P + j);
    for (auto [j, i] : llvm::enumerate(dataArgs))
      fwdArgs[i] = entry->getArgument(P + NB + j);
    Value labels = entry->getArgument(P + NB + D);
    if (labelArg >= 0)
      fwdArgs[labelArg] = labels;
    SmallVector<Value> fwdRes = inlineBody(fb, fwdEval, fwdArgs);
    Value out = fwdRes[outIdx];
    Value sampleLoss, correct;
    if (opts.loss == "cross-entropy") {
      CrossEntropy ce = crossEntropy(fb, loc, out, labels);
      sampleLoss = ce.sampleLoss;
      correct = ce.correct;
    } else {
      // Per-sample loss: mse over each sample's elements; "output": the
      // scalar loss for every sample.
      Value perSample;
      if (opts.loss == "mse") {
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
            buildReduction(
                fb, loc, flat, {1}, false, scalarAttr(f32, 0.0),
                [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                  return arith::AddFOp::create(nb, l, a[0], a[1]);
                }),
            1.0 / per);
      } else {
        perSample =
            ew(fb, loc, out, {B}, f32,
               [](OpBuilder &, Location, ValueRange a) { return a[0]; });
      }
      sampleLoss = perSample;
      correct = arith::ConstantOp::create(
          fb, loc, DenseElementsAttr::get(vecI, fb.getI64IntegerAttr(0)));
    }
    func::ReturnOp::create(fb, loc, ValueRange{sampleLoss, correct});
    SmallVector<std::string> argNames;
    for (const auto &s : info.params)
      argNames.push_back(s.name);
    for (const auto &s : info.buffers)
      argNames.push_back(s.name);
    appendDataNames(argNames, info);
    argNames.push_back("labels");
    setNames(fn, argNames, {"sample_loss", "sample_correct"});
  }

  fwdTrain.erase();
  fwdEval.erase();
  return success();
}

} // namespace ddpc

//===- TrainingStep.cpp - Training-step assembly --------------------------===//
//
// Part of ddpc. Assembles the TrainABI functions (@train_micro, @apply,
// @grad_norm, @eval) from the forward functions, the loss (Loss.cpp), the
// VJP (Autodiff.cpp) and the optimizer (Optimizers.cpp); and the VJP form of
// an inference model for gradient checks.
//
//===----------------------------------------------------------------------===//

#include "TrainingInternal.h"

#include "ddpc/Support/RuntimeSymbols.h"
#include "ddpc/Training/Autodiff.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"

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

namespace training {

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

} // namespace training

using namespace training;

namespace {

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

void setNames(func::FuncOp f, ArrayRef<std::string> argNames,
              ArrayRef<std::string> resNames) {
  OpBuilder b(f.getContext());
  for (auto [i, n] : llvm::enumerate(argNames))
    f.setArgAttr(i, attrs::kName, b.getStringAttr(n));
  for (auto [i, n] : llvm::enumerate(resNames))
    f.setResultAttr(i, attrs::kName, b.getStringAttr(n));
}

/// Marks the arguments and results that the training runtime passes in
/// host-shared memory (ddpc.host_shared; TrainABI.h's per-step scalars):
/// the last `args` arguments and the last `results` results.
void markHostShared(func::FuncOp f, unsigned args, unsigned results) {
  UnitAttr unit = UnitAttr::get(f.getContext());
  for (unsigned i = f.getNumArguments() - args; i < f.getNumArguments(); ++i)
    f.setArgAttr(i, attrs::kHostShared, unit);
  for (unsigned i = f.getNumResults() - results; i < f.getNumResults(); ++i)
    f.setResultAttr(i, attrs::kHostShared, unit);
}

/// ZeRO stage 3: the first `params` arguments of `f` are parameters that
/// ddpc-gather-parameters all-gathers where `f` reads them.
void markGatheredParams(func::FuncOp f, unsigned params,
                        const TrainOptions &opts) {
  if (opts.zeroStage < 3)
    return;
  auto role = StringAttr::get(f.getContext(), "param");
  for (unsigned i = 0; i < params; ++i)
    f.setArgAttr(i, attrs::kRole, role);
}

/// The step functions' names for the data arguments: "data" for a single
/// data input, "data.<input name>" for each of several.
void appendDataNames(SmallVectorImpl<std::string> &names,
                     const TrainingProgramInfo &info) {
  for (const auto &d : info.data)
    names.push_back(info.data.size() == 1 ? std::string("data")
                                          : "data." + d.name);
}

/// How the forward function's arguments map onto the step functions'
/// (argument indices of the forward function) and the types they have.
struct StepSignature {
  SmallVector<unsigned> paramIdx, bufferIdx, dataArgs;
  int rngArg = -1, labelArg = -1;
  /// The forward result that the loss reads.
  unsigned outIdx = 0;
  SmallVector<Type> paramTypes, bufferTypes;
  SmallVector<RankedTensorType> dataTypes;
  RankedTensorType labelType;
  /// Per-rank micro-batch size: the data inputs' leading dimension.
  int64_t batch = -1;
  /// Buffer update results of the forward function, by buffer name.
  llvm::StringMap<unsigned> bufferUpdateRes;

  unsigned numParams() const { return paramTypes.size(); }
  unsigned numBuffers() const { return bufferTypes.size(); }
  unsigned numData() const { return dataArgs.size(); }

  /// The arguments for inlining `fwd` into a step function whose entry
  /// block takes the params first, then the buffers, and from `dataStart`
  /// the data, the labels and (if `fwd` takes one and the block has it) the
  /// rng seed.
  SmallVector<Value> forwardArgs(func::FuncOp fwd, Block *entry,
                                 unsigned dataStart) const {
    SmallVector<Value> args(fwd.getNumArguments());
    for (auto [j, i] : llvm::enumerate(paramIdx))
      args[i] = entry->getArgument(j);
    for (auto [j, i] : llvm::enumerate(bufferIdx))
      args[i] = entry->getArgument(numParams() + j);
    for (auto [j, i] : llvm::enumerate(dataArgs))
      args[i] = entry->getArgument(dataStart + j);
    unsigned labelPos = dataStart + numData();
    if (labelArg >= 0)
      args[labelArg] = entry->getArgument(labelPos);
    if (rngArg >= 0 && labelPos + 1 < entry->getNumArguments())
      args[rngArg] = entry->getArgument(labelPos + 1);
    return args;
  }
};

/// Sets `labelInput` to the --label-input in force (the option, or for
/// --loss output a graph input named "labels") and checks it.
LogicalResult resolveLabelInput(func::FuncOp fwdTrain,
                                ArrayRef<unsigned> inputIdx,
                                const TrainOptions &opts,
                                TrainingProgramInfo &info,
                                std::string &labelInput, std::string &error) {
  // --loss output without --label-input: a graph input named "labels"
  // (the Hugging Face convention, forward(input_ids, labels)) holds them;
  // without one the program reads a --labels file it does not use.
  labelInput = opts.labelInput;
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
  return success();
}

/// The data inputs (every graph input but the labels, in graph-input
/// order: token ids, an attention mask, ...) and, when --label-input names
/// a graph input, the labels. All are sharded along their leading (batch)
/// dimension, which must agree.
LogicalResult classifyDataInputs(func::FuncOp fwdTrain,
                                 ArrayRef<unsigned> inputIdx,
                                 StringRef labelInput, StepSignature &sig,
                                 TrainingProgramInfo &info,
                                 std::string &error) {
  FunctionType fty = fwdTrain.getFunctionType();
  for (unsigned i : inputIdx) {
    if (!labelInput.empty() && argName(fwdTrain, i) == labelInput)
      sig.labelArg = i;
    else
      sig.dataArgs.push_back(i);
  }
  if (sig.dataArgs.empty()) {
    error = "the model has no data input";
    return failure();
  }
  int64_t &B = sig.batch;
  for (unsigned i : sig.dataArgs) {
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
      error = "the data inputs '" + argName(fwdTrain, sig.dataArgs[0]).str() +
              "' and '" + argName(fwdTrain, i).str() +
              "' have leading dimensions " + std::to_string(B) + " and " +
              std::to_string(t.getDimSize(0)) +
              "; every data input is sharded along the batch, so they must "
              "agree (--batch-size sets them)";
      return failure();
    }
    sig.dataTypes.push_back(t);
    info.data.push_back(
        {argName(fwdTrain, i).str(), dd, SmallVector<int64_t>(t.getShape())});
  }
  return success();
}

/// Classifies the forward function's arguments (param, buffer, rng, data,
/// labels) and checks what training supports; fills `info`'s data, params,
/// buffers, batch size and label shape and dtype.
LogicalResult classifyArguments(func::FuncOp fwdTrain, const TrainOptions &opts,
                                TrainingProgramInfo &info, StepSignature &sig,
                                std::string &error) {
  SmallVector<unsigned> inputIdx;
  for (unsigned i = 0; i < fwdTrain.getNumArguments(); ++i) {
    StringRef r = role(fwdTrain, i);
    if (r == "param")
      sig.paramIdx.push_back(i);
    else if (r == "buffer")
      sig.bufferIdx.push_back(i);
    else if (r == "rng")
      sig.rngArg = i;
    else
      inputIdx.push_back(i);
  }
  FunctionType fty = fwdTrain.getFunctionType();
  for (unsigned i : llvm::concat<unsigned>(sig.paramIdx, sig.bufferIdx))
    if (!cast<RankedTensorType>(fty.getInput(i)).getElementType().isF32()) {
      error = "parameter '" + argName(fwdTrain, i).str() +
              "' is not float32; training supports float32 parameters";
      return failure();
    }
  if (sig.paramIdx.empty()) {
    error = "the model has no trainable float initializer (all frozen, or "
            "none reaches the first output)";
    return failure();
  }
  std::string labelInput;
  if (failed(resolveLabelInput(fwdTrain, inputIdx, opts, info, labelInput,
                               error)) ||
      failed(
          classifyDataInputs(fwdTrain, inputIdx, labelInput, sig, info, error)))
    return failure();

  auto outType = cast<RankedTensorType>(fty.getResult(sig.outIdx));
  int64_t B = sig.batch;

  // Labels.
  RankedTensorType labelInputType;
  if (sig.labelArg >= 0 && opts.loss == "output")
    labelInputType = cast<RankedTensorType>(fty.getInput(sig.labelArg));
  FailureOr<RankedTensorType> labelTypeOr =
      labelTypeForLoss(opts, outType, B, labelInputType, info, error);
  if (failed(labelTypeOr))
    return failure();
  sig.labelType = *labelTypeOr;

  for (unsigned i : sig.paramIdx) {
    sig.paramTypes.push_back(fty.getInput(i));
    auto t = cast<RankedTensorType>(fty.getInput(i));
    info.params.push_back(
        {argName(fwdTrain, i).str(), SmallVector<int64_t>(t.getShape())});
  }
  for (unsigned i : sig.bufferIdx) {
    sig.bufferTypes.push_back(fty.getInput(i));
    auto t = cast<RankedTensorType>(fty.getInput(i));
    info.buffers.push_back(
        {argName(fwdTrain, i).str(), SmallVector<int64_t>(t.getShape())});
  }
  info.batchSize = B;
  info.labelShape.assign(sig.labelType.getShape().begin(),
                         sig.labelType.getShape().end());
  if (sig.labelArg >= 0 && opts.loss == "output") {
    // The program reads --labels as int64 or float32 (TrainABI.h).
    Type e = sig.labelType.getElementType();
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
  // Buffer update results of the forward function, by buffer name.
  for (unsigned r = 0; r < fwdTrain.getNumResults(); ++r)
    if (resultRole(fwdTrain, r) == "buffer_update")
      sig.bufferUpdateRes[fwdTrain
                              .getResultAttrOfType<StringAttr>(r, attrs::kName)
                              .getValue()] = r;

  return success();
}

/// @train_micro(params, buffers, grad_acc, data, labels, rng)
///     -> (new_buffers, new_grad_acc, loss, correct): forward, loss and VJP
/// of one micro-batch, gradients added to the accumulators. At ZeRO stage
/// 2 there are no accumulators: @train_micro(params, buffers, data, labels,
/// rng) -> (new_buffers, grads, loss, correct), and the gradient buckets
/// (ddpc-bucket-gradient-allreduce's shard-gradients) later make the
/// gradients temporaries that leave only through the buckets.
LogicalResult buildTrainMicro(OpBuilder &b, Location loc, func::FuncOp fwdTrain,
                              const StepSignature &sig,
                              const TrainOptions &opts,
                              const TrainingProgramInfo &info,
                              std::string &error) {
  unsigned P = sig.numParams(), NB = sig.numBuffers(), D = sig.numData();
  int64_t B = sig.batch;
  const auto &bufferIdx = sig.bufferIdx;
  const SmallVector<Type> &paramTypes = sig.paramTypes;
  const SmallVector<Type> &bufferTypes = sig.bufferTypes;
  const SmallVector<RankedTensorType> &dataTypes = sig.dataTypes;
  RankedTensorType labelType = sig.labelType;
  unsigned outIdx = sig.outIdx;
  Type f32 = b.getF32Type(), i64 = b.getI64Type();
  auto scalarF = RankedTensorType::get({}, f32);
  auto scalarI = RankedTensorType::get({}, i64);
  // ZeRO stage 2: no gradient accumulators (A = 0).
  const unsigned A = opts.zeroStage >= 2 ? 0 : P;
  SmallVector<Type> ins, outs;
  ins.append(paramTypes);
  ins.append(bufferTypes);
  if (A)
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
  // Arguments: params, buffers, grad_acc, data, labels, rng.
  SmallVector<Value> fwdArgs =
      sig.forwardArgs(fwdTrain, entry, /*dataStart=*/P + A + NB);
  Value labels = entry->getArgument(P + A + NB + D);
  SmallVector<Value> fwdRes = inlineBody(fb, fwdTrain, fwdArgs);
  Value out = fwdRes[outIdx];
  auto [loss, correct, seed] =
      buildMicroBatchLoss(fb, loc, opts.loss, out, labels, B);
  SmallVector<Value> wrt;
  for (unsigned j = 0; j < P; ++j)
    wrt.push_back(entry->getArgument(j));
  auto grads = buildVJP(fb, loc, {{out, seed}}, wrt, error);
  if (failed(grads))
    return failure();
  SmallVector<Value> results;
  for (auto [j, i] : llvm::enumerate(bufferIdx)) {
    auto it = sig.bufferUpdateRes.find(argName(fwdTrain, i));
    results.push_back(it == sig.bufferUpdateRes.end()
                          ? entry->getArgument(P + j)
                          : fwdRes[it->second]);
  }
  // Each accumulation right where its gradient is complete, so that the
  // accumulator's final value is ready in backward order (the gradient
  // buckets of ddpc-bucket-gradient-allreduce start there).
  for (unsigned j = 0; j < P; ++j) {
    Value g = (*grads)[j];
    if (!A) {
      results.push_back(g);
      continue;
    }
    Value acc = entry->getArgument(P + NB + j);
    OpBuilder::InsertionGuard guard(fb);
    if (g.getParentBlock() == entry)
      fb.setInsertionPointAfterValue(g);
    results.push_back(ew(fb, loc, ValueRange{acc, g}, ttype(acc).getShape(),
                         f32,
                         [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                           return arith::AddFOp::create(nb, l, a[0], a[1]);
                         }));
  }
  results.push_back(loss);
  results.push_back(correct);
  func::ReturnOp::create(fb, loc, results);
  for (unsigned j = 0; j < P; ++j) {
    if (A)
      fn.setArgAttr(P + NB + j, attrs::kRole, fb.getStringAttr("grad_acc"));
    fn.setResultAttr(NB + j, attrs::kRole, fb.getStringAttr("new_grad_acc"));
  }
  markGatheredParams(fn, P, opts);
  SmallVector<std::string> argNames, resNames;
  for (const auto &s : info.params)
    argNames.push_back(s.name);
  for (const auto &s : info.buffers)
    argNames.push_back(s.name);
  if (A)
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
  markHostShared(fn, /*rng*/ 1, /*loss, correct*/ 2);
  return success();
}

/// `@name(params, opt_state, grad_acc, lr, step, grad_scale) ->
/// (new_params, new_opt_state)`: `optimizer` (Optimizers.cpp) on the
/// averaged gradients of parameters of `types` named `names`.
void buildApplyFunction(OpBuilder &b, Location loc, StringRef name,
                        ArrayRef<Type> types, ArrayRef<std::string> names,
                        const Optimizer &optimizer, const TrainOptions &opts) {
  unsigned P = types.size();
  Type f32 = b.getF32Type(), i64 = b.getI64Type();
  auto scalarF = RankedTensorType::get({}, f32);
  auto scalarI = RankedTensorType::get({}, i64);
  int S = optimizer.stateSlots(opts);
  SmallVector<Type> ins, outs;
  ins.append(types.begin(), types.end());
  for (Type t : types)
    for (int s = 0; s < S; ++s)
      ins.push_back(t);
  ins.append(types.begin(), types.end());
  ins.push_back(scalarF);
  ins.push_back(scalarI);
  ins.push_back(scalarF);
  outs.append(types.begin(), types.end());
  for (Type t : types)
    for (int s = 0; s < S; ++s)
      outs.push_back(t);
  auto fn = func::FuncOp::create(b, loc, name, b.getFunctionType(ins, outs));
  Block *entry = fn.addEntryBlock();
  OpBuilder fb = OpBuilder::atBlockBegin(entry);
  unsigned base = P + P * S;
  Value lr = entry->getArgument(base + P);
  Value step = entry->getArgument(base + P + 1);
  Value gradScale = entry->getArgument(base + P + 2);
  SmallVector<Value> newParams, newState;
  for (unsigned j = 0; j < P; ++j) {
    Value p = entry->getArgument(j);
    Value g = entry->getArgument(base + j);
    fn.setArgAttr(base + j, attrs::kRole, fb.getStringAttr("grad_acc"));
    // g = grad_acc * grad_scale (mean over ranks and micro-batches)
    g = ew(fb, loc, ValueRange{g, gradScale}, ttype(p).getShape(), f32,
           [](OpBuilder &nb, Location l, ValueRange a) -> Value {
             return arith::MulFOp::create(nb, l, a[0], a[1]);
           });
    ValueRange state = entry->getArguments().slice(P + S * j, S);
    newParams.push_back(
        optimizer.update(fb, loc, opts, p, g, state, lr, step, newState));
  }
  SmallVector<Value> results(newParams);
  results.append(newState);
  func::ReturnOp::create(fb, loc, results);
  SmallVector<std::string> argNames, stateNames;
  argNames.append(names.begin(), names.end());
  for (const std::string &n : names)
    for (int k = 0; k < S; ++k)
      stateNames.push_back(optimizer.slotNames[k] + n);
  argNames.append(stateNames.begin(), stateNames.end());
  for (const std::string &n : names)
    argNames.push_back("grad_acc." + n);
  argNames.append({"lr", "step", "grad_scale"});
  SmallVector<std::string> resNames;
  for (const std::string &n : names)
    resNames.push_back("new." + n);
  for (const auto &n : stateNames)
    resNames.push_back("new." + n);
  setNames(fn, argNames, resNames);
  markHostShared(fn, /*lr, step, grad_scale*/ 3, 0);
}

/// @apply(params, opt_state, grad_acc, lr, step, grad_scale)
///     -> (new_params, new_opt_state): the optimizer step (Optimizers.cpp)
/// on the averaged gradients; at ZeRO stage 1 also @apply_shard, the same
/// step on one flat chunk of info.zeroChunk float32 elements (the update is
/// elementwise, so a rank's slice of the concatenated parameters is updated
/// chunk by chunk). Fails for an unknown --optimizer.
LogicalResult buildApply(OpBuilder &b, Location loc, const StepSignature &sig,
                         const TrainOptions &opts, TrainingProgramInfo &info,
                         std::string &error) {
  const Optimizer *optimizer = findOptimizer(opts.optimizer);
  if (!optimizer) {
    error = "unknown --optimizer '" + opts.optimizer +
            "' (supported: " + optimizerNames(", ") + ")";
    return failure();
  }
  info.optSlots = optimizer->stateSlots(opts);
  info.optimizerDesc = optimizer->describe(opts);
  SmallVector<std::string> names;
  for (const auto &s : info.params)
    names.push_back(s.name);
  buildApplyFunction(b, loc, kApplyFunc, sig.paramTypes, names, *optimizer,
                     opts);
  info.zeroStage = opts.zeroStage;
  if (opts.zeroStage >= 1) {
    Type chunk = RankedTensorType::get({info.zeroChunk}, b.getF32Type());
    SmallVector<std::string> shard = {"shard"};
    buildApplyFunction(b, loc, kApplyShardFunc, {chunk}, shard, *optimizer,
                       opts);
  }
  return success();
}

/// @grad_norm(grad_acc, grad_scale) -> norm: the L2 norm over all
/// parameters of the averaged gradient grad_acc * grad_scale, as
/// torch.nn.utils.clip_grad_norm_ computes it (float32, so a norm above
/// ~1.8e19 is inf). The runtime's non-finite check reads it.
void buildGradNorm(OpBuilder &b, Location loc, const StepSignature &sig,
                   const TrainingProgramInfo &info) {
  unsigned P = sig.numParams();
  const SmallVector<Type> &paramTypes = sig.paramTypes;
  Type f32 = b.getF32Type();
  auto scalarF = RankedTensorType::get({}, f32);
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
    sum = linalg::GenericOp::create(
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
  markHostShared(fn, /*grad_scale*/ 1, /*grad_norm*/ 1);
}

/// @eval(params, buffers, data, labels) -> (sample_loss [B],
/// sample_correct [B]): the eval-mode forward and the per-sample loss.
void buildEval(OpBuilder &b, Location loc, func::FuncOp fwdEval,
               const StepSignature &sig, const TrainOptions &opts,
               const TrainingProgramInfo &info) {
  unsigned P = sig.numParams(), NB = sig.numBuffers(), D = sig.numData();
  int64_t B = sig.batch;
  Type f32 = b.getF32Type(), i64 = b.getI64Type();
  SmallVector<Type> ins;
  ins.append(sig.paramTypes);
  ins.append(sig.bufferTypes);
  ins.append(sig.dataTypes.begin(), sig.dataTypes.end());
  ins.push_back(sig.labelType);
  auto vecF = RankedTensorType::get({B}, f32);
  auto fn = func::FuncOp::create(
      b, loc, kEvalFunc,
      b.getFunctionType(ins, {vecF, RankedTensorType::get({B}, i64)}));
  Block *entry = fn.addEntryBlock();
  OpBuilder fb = OpBuilder::atBlockBegin(entry);
  // Arguments: params, buffers, data, labels.
  SmallVector<Value> fwdArgs =
      sig.forwardArgs(fwdEval, entry, /*dataStart=*/P + NB);
  Value labels = entry->getArgument(P + NB + D);
  SmallVector<Value> fwdRes = inlineBody(fb, fwdEval, fwdArgs);
  Value out = fwdRes[sig.outIdx];
  auto [sampleLoss, correct] =
      buildPerSampleLoss(fb, loc, opts.loss, out, labels, B);
  func::ReturnOp::create(fb, loc, ValueRange{sampleLoss, correct});
  SmallVector<std::string> argNames;
  for (const auto &s : info.params)
    argNames.push_back(s.name);
  for (const auto &s : info.buffers)
    argNames.push_back(s.name);
  appendDataNames(argNames, info);
  argNames.push_back("labels");
  setNames(fn, argNames, {"sample_loss", "sample_correct"});
  markHostShared(fn, 0, /*sample_loss, sample_correct*/ 2);
  markGatheredParams(fn, P, opts);
}

} // namespace

LogicalResult buildTrainingFunctions(ModuleOp module, func::FuncOp fwdTrain,
                                     func::FuncOp fwdEval,
                                     const TrainOptions &opts,
                                     TrainingProgramInfo &info,
                                     std::string &error) {
  StepSignature sig;
  if (failed(classifyArguments(fwdTrain, opts, info, sig, error)))
    return failure();
  Location loc = fwdTrain.getLoc();
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  if (failed(buildTrainMicro(b, loc, fwdTrain, sig, opts, info, error)) ||
      failed(buildApply(b, loc, sig, opts, info, error)))
    return failure();
  buildGradNorm(b, loc, sig, info);
  buildEval(b, loc, fwdEval, sig, opts, info);
  fwdTrain.erase();
  fwdEval.erase();
  return success();
}

} // namespace ddpc

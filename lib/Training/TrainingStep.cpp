//===- TrainingStep.cpp - Training-step synthesis -------------------------===//
//
// Part of ddpc.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Training/TrainingStep.h"

#include "ddpc/Import/ONNX/TensorBuilders.h"
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
    auto name = func.getResultAttrOfType<StringAttr>(i, "ddpc.name");
    auto dtype = func.getResultAttrOfType<IntegerAttr>(i, "ddpc.dtype");
    newArgAttrs.push_back(DictionaryAttr::get(
        ctx, {NamedAttribute(StringAttr::get(ctx, "ddpc.name"),
                             StringAttr::get(ctx, "d_" + name.str())),
              NamedAttribute(StringAttr::get(ctx, "ddpc.dtype"), dtype)}));
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
    auto name = func.getArgAttrOfType<StringAttr>(i, "ddpc.name");
    auto dtype = func.getArgAttrOfType<IntegerAttr>(i, "ddpc.dtype");
    resAttrs.push_back(DictionaryAttr::get(
        ctx, {NamedAttribute(StringAttr::get(ctx, "ddpc.name"),
                             StringAttr::get(ctx, "d_" + name.str())),
              NamedAttribute(StringAttr::get(ctx, "ddpc.dtype"), dtype)}));
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

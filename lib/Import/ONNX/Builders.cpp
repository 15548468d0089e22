//===- Builders.cpp - linalg-on-tensors building helpers ------------------===//
//
// Part of ddpc. Shape-static helpers shared by the op importers: numpy
// broadcasting (ONNX Broadcasting.md), elementwise and reduction generics,
// reshapes and scalar casts.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"
#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"
#include "ddpc/Support/RuntimeSymbols.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace ddpc::onnx_import {

bool isFloatDType(int32_t t) { return isDTypeKind(t, DTypeKind::Float); }
bool isUnsignedDType(int32_t t) {
  return isDTypeKind(t, DTypeKind::UnsignedInt);
}
bool isSignedIntDType(int32_t t) {
  return isDTypeKind(t, DTypeKind::SignedInt);
}

const char *dtypeName(int32_t t) {
  if (const DTypeInfo *info = lookupDType(t))
    return info->name;
  switch (t) {
  case kString:
    return "string";
  default: {
    // The ONNX enum's own name, so that messages such as "has dtype X"
    // name it; the ONNX 1.12 library predates the 8- and 4-bit types
    // (TensorProto.DataType 17-24, ONNX 1.14-1.18).
    static const char *const kNewer[] = {
        "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ",
        "UINT4",        "INT4",           "FLOAT4E2M1", "FLOAT8E8M0"};
    if (t >= 17 && t <= 24)
      return kNewer[t - 17];
    if (::onnx::TensorProto_DataType_IsValid(t)) {
      const std::string &name = ::onnx::TensorProto_DataType_Name(
          static_cast<::onnx::TensorProto_DataType>(t));
      if (!name.empty())
        return name.c_str();
    }
    return "of an unknown ONNX code";
  }
  }
}

} // namespace ddpc::onnx_import

namespace ddpc {

int64_t numElements(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::optional<int64_t> checkedNumElements(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || llvm::MulOverflow(n, d, n) || n > kMaxTensorElements)
      return std::nullopt;
  return n;
}

FailureOr<int64_t> normalizeAxis(int64_t axis, int64_t rank) {
  // A 0-d tensor has no axis: callers index the shape with the result.
  if (axis < -rank || axis >= rank)
    return failure();
  return axis < 0 ? axis + rank : axis;
}

bool broadcastsTo(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  auto out = broadcastShapes({from, to});
  return succeeded(out) && ArrayRef<int64_t>(*out) == to;
}

FailureOr<SmallVector<int64_t>>
broadcastShapes(ArrayRef<ArrayRef<int64_t>> shapes) {
  size_t rank = 0;
  for (auto s : shapes)
    rank = std::max(rank, s.size());
  SmallVector<int64_t> out(rank, 1);
  for (auto s : shapes) {
    size_t off = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t d = s[i];
      int64_t &o = out[off + i];
      if (d == o || d == 1)
        continue;
      if (o == 1) {
        o = d;
        continue;
      }
      return failure();
    }
  }
  return out;
}

/// Indexing map that reads `inShape` broadcast into an iteration space of
/// `outRank` dims (trailing alignment; size-1 dims read index 0).
static AffineMap broadcastMap(MLIRContext *ctx, ArrayRef<int64_t> inShape,
                              ArrayRef<int64_t> outShape, unsigned numDims) {
  SmallVector<AffineExpr> exprs;
  size_t off = outShape.size() - inShape.size();
  for (size_t i = 0; i < inShape.size(); ++i) {
    if (inShape[i] == 1 && outShape[off + i] != 1)
      exprs.push_back(getAffineConstantExpr(0, ctx));
    else
      exprs.push_back(getAffineDimExpr(off + i, ctx));
  }
  return AffineMap::get(numDims, 0, exprs, ctx);
}

Value buildGeneric(OpBuilder &b, Location loc, ValueRange inputs,
                   ArrayRef<AffineMap> inputMaps, ArrayRef<int64_t> outShape,
                   Type resultElem, unsigned numReductionDims,
                   std::optional<TypedAttr> init, ScalarBodyFn body) {
  MLIRContext *ctx = b.getContext();
  unsigned numDims = outShape.size() + numReductionDims;
  Value out = tensor::EmptyOp::create(b, loc, outShape, resultElem);
  if (init) {
    Value initV = arith::ConstantOp::create(b, loc, *init);
    out = linalg::FillOp::create(b, loc, initV, out).getResult(0);
  }
  SmallVector<AffineMap> maps(inputMaps.begin(), inputMaps.end());
  SmallVector<AffineExpr> outExprs;
  for (unsigned i = 0; i < outShape.size(); ++i)
    outExprs.push_back(getAffineDimExpr(i, ctx));
  maps.push_back(AffineMap::get(numDims, 0, outExprs, ctx));
  SmallVector<utils::IteratorType> iters(outShape.size(),
                                         utils::IteratorType::parallel);
  iters.append(numReductionDims, utils::IteratorType::reduction);
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{out.getType()}, inputs, ValueRange{out}, maps, iters,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value r = body(nb, nloc, args);
        linalg::YieldOp::create(nb, nloc, r);
      });
  return generic.getResult(0);
}

Value buildElementwise(OpBuilder &b, Location loc, ValueRange inputs,
                       ArrayRef<int64_t> outShape, Type resultElem,
                       ScalarBodyFn body) {
  SmallVector<AffineMap> maps;
  for (Value in : inputs) {
    auto t = cast<RankedTensorType>(in.getType());
    maps.push_back(
        broadcastMap(b.getContext(), t.getShape(), outShape, outShape.size()));
  }
  return buildGeneric(b, loc, inputs, maps, outShape, resultElem, 0,
                      std::nullopt, body);
}

Value buildReduction(OpBuilder &b, Location loc, Value input,
                     ArrayRef<int64_t> axes, bool keepDims, TypedAttr initValue,
                     ScalarBodyFn combine) {
  MLIRContext *ctx = b.getContext();
  auto inType = cast<RankedTensorType>(input.getType());
  int64_t rank = inType.getRank();
  // Iteration space: kept dims first (in order), then reduced dims.
  SmallVector<int64_t> outShape;
  SmallVector<AffineExpr> inExprs(rank);
  unsigned nKept = 0;
  for (int64_t d = 0; d < rank; ++d)
    if (!llvm::is_contained(axes, d))
      ++nKept;
  unsigned keptIdx = 0, redIdx = nKept;
  SmallVector<int64_t> keptShape;
  for (int64_t d = 0; d < rank; ++d) {
    if (llvm::is_contained(axes, d)) {
      inExprs[d] = getAffineDimExpr(redIdx++, ctx);
    } else {
      inExprs[d] = getAffineDimExpr(keptIdx++, ctx);
      keptShape.push_back(inType.getDimSize(d));
    }
  }
  unsigned numDims = rank;
  AffineMap inMap = AffineMap::get(numDims, 0, inExprs, ctx);
  Value reduced =
      buildGeneric(b, loc, ValueRange{input}, {inMap}, keptShape,
                   inType.getElementType(), rank - nKept, initValue,
                   [&](OpBuilder &nb, Location nloc, ValueRange args) {
                     return combine(nb, nloc, ValueRange{args[1], args[0]});
                   });
  if (!keepDims)
    return reduced;
  for (int64_t d = 0; d < rank; ++d)
    outShape.push_back(llvm::is_contained(axes, d) ? 1 : inType.getDimSize(d));
  return buildReshape(b, loc, reduced, outShape);
}

Value buildReshape(OpBuilder &b, Location loc, Value input,
                   ArrayRef<int64_t> newShape) {
  auto inType = cast<RankedTensorType>(input.getType());
  if (inType.getShape() == newShape)
    return input;
  auto outType = RankedTensorType::get(newShape, inType.getElementType());
  // Collapse to 1-D (or 0-D), then expand: always valid for static shapes.
  Value flat = input;
  if (inType.getRank() > 1) {
    ReassociationIndices all;
    for (int64_t i = 0; i < inType.getRank(); ++i)
      all.push_back(i);
    flat = tensor::CollapseShapeOp::create(b, loc, input,
                                           ArrayRef<ReassociationIndices>{all});
  }
  auto flatType = cast<RankedTensorType>(flat.getType());
  if (flatType.getShape() == newShape)
    return flat;
  if (newShape.empty()) {
    // 1-D of one element (or 0-D) -> 0-D.
    if (flatType.getRank() == 0)
      return flat;
    return tensor::CollapseShapeOp::create(b, loc, outType, flat,
                                           ArrayRef<ReassociationIndices>{});
  }
  if (flatType.getRank() == 0) {
    // 0-D -> [1, 1, ...]
    return tensor::ExpandShapeOp::create(b, loc, outType, flat,
                                         ArrayRef<ReassociationIndices>{});
  }
  if (newShape.size() == 1)
    return flat;
  ReassociationIndices all;
  for (size_t i = 0; i < newShape.size(); ++i)
    all.push_back(i);
  return tensor::ExpandShapeOp::create(b, loc, outType, flat,
                                       ArrayRef<ReassociationIndices>{all});
}

Value buildPad(OpBuilder &b, Location loc, Value input, ArrayRef<int64_t> low,
               ArrayRef<int64_t> high, TypedAttr padValue) {
  if (llvm::all_of(low, [](int64_t v) { return v == 0; }) &&
      llvm::all_of(high, [](int64_t v) { return v == 0; }))
    return input;
  auto t = cast<RankedTensorType>(input.getType());
  SmallVector<int64_t> shape(t.getShape().begin(), t.getShape().end());
  SmallVector<OpFoldResult> lo, hi;
  for (size_t d = 0; d < shape.size(); ++d) {
    shape[d] += low[d] + high[d];
    lo.push_back(b.getIndexAttr(low[d]));
    hi.push_back(b.getIndexAttr(high[d]));
  }
  Value pv = arith::ConstantOp::create(b, loc, padValue);
  // Padding an empty tensor is a fill (tensor.pad's bufferization would
  // insert the empty source at an offset past the end of an axis).
  if (t.getNumElements() == 0)
    return linalg::FillOp::create(
               b, loc, pv,
               tensor::EmptyOp::create(b, loc, shape, t.getElementType())
                   .getResult())
        .getResult(0);
  return tensor::PadOp::create(b, loc,
                               RankedTensorType::get(shape, t.getElementType()),
                               input, lo, hi, pv);
}

TypedAttr scalarAttr(Type type, double v) {
  if (auto ft = dyn_cast<FloatType>(type))
    return FloatAttr::get(ft, v);
  auto it = cast<IntegerType>(type);
  if (it.getWidth() == 1)
    return IntegerAttr::get(it, v != 0 ? 1 : 0);
  return IntegerAttr::get(it, static_cast<int64_t>(v));
}

Value scalarConst(OpBuilder &b, Location loc, Type type, double v) {
  return arith::ConstantOp::create(b, loc, scalarAttr(type, v));
}

TypedAttr lowestAttr(Type type, bool isUnsigned) {
  if (auto ft = dyn_cast<FloatType>(type))
    return FloatAttr::get(
        ft, APFloat::getInf(ft.getFloatSemantics(), /*Negative=*/true));
  auto it = cast<IntegerType>(type);
  unsigned w = it.getWidth();
  APInt v = (isUnsigned || w == 1) ? APInt::getMinValue(w)
                                   : APInt::getSignedMinValue(w);
  return IntegerAttr::get(it, v);
}

TypedAttr highestAttr(Type type, bool isUnsigned) {
  if (auto ft = dyn_cast<FloatType>(type))
    return FloatAttr::get(
        ft, APFloat::getInf(ft.getFloatSemantics(), /*Negative=*/false));
  auto it = cast<IntegerType>(type);
  unsigned w = it.getWidth();
  APInt v = (isUnsigned || w == 1) ? APInt::getMaxValue(w)
                                   : APInt::getSignedMaxValue(w);
  return IntegerAttr::get(it, v);
}

namespace {

/// The private helper `name(tensor<i64> x numTensors, i64 x numInts, ptr)`
/// (created on first use) whose body passes the tensors' addresses, the
/// integers and the pointer to the runtime function `runtime` (ModelABI.h):
/// tensors stay values at the call site, and bufferization gives the
/// runtime their buffers.
void getOrCreateCheckHelper(ModuleOp module, Location loc, StringRef name,
                            StringRef runtime, unsigned numTensors,
                            unsigned numInts) {
  if (module.lookupSymbol<func::FuncOp>(name))
    return;
  MLIRContext *ctx = module.getContext();
  OpBuilder mb = OpBuilder::atBlockBegin(module.getBody());
  auto ptrType = LLVM::LLVMPointerType::get(ctx);
  Type i64 = mb.getI64Type();
  SmallVector<Type> rtArgs(numTensors, ptrType),
      helperArgs(numTensors, RankedTensorType::get({}, i64));
  rtArgs.append(numInts, i64);
  rtArgs.push_back(ptrType);
  helperArgs.append(numInts, i64);
  helperArgs.push_back(ptrType);
  if (!module.lookupSymbol<func::FuncOp>(runtime))
    func::FuncOp::create(mb, loc, runtime, mb.getFunctionType(rtArgs, {}))
        .setPrivate();
  auto fn =
      func::FuncOp::create(mb, loc, name, mb.getFunctionType(helperArgs, {}));
  fn.setPrivate();
  Block *entry = fn.addEntryBlock();
  OpBuilder fb = OpBuilder::atBlockBegin(entry);
  auto mt = MemRefType::get({}, i64);
  SmallVector<Value> args;
  for (unsigned i = 0; i < numTensors; ++i) {
    Value buf = bufferization::ToBufferOp::create(
        fb, loc, mt, entry->getArgument(i), /*read_only=*/true);
    Value addr = memref::ExtractAlignedPointerAsIndexOp::create(fb, loc, buf);
    Value addr64 = arith::IndexCastOp::create(fb, loc, i64, addr);
    args.push_back(LLVM::IntToPtrOp::create(fb, loc, ptrType, addr64));
  }
  for (unsigned i = numTensors; i < entry->getNumArguments(); ++i)
    args.push_back(entry->getArgument(i));
  func::CallOp::create(fb, loc, runtime, TypeRange{}, args);
  func::ReturnOp::create(fb, loc);
}

/// The address of a NUL-terminated global holding `text` (one global per
/// distinct text, named by its hash, so two imports of a graph agree).
Value stringAddress(OpBuilder &b, Location loc, ModuleOp module,
                    StringRef text) {
  std::string symbol =
      "__ddpc_check_" + llvm::utohexstr(llvm::hash_value(text), true);
  auto global = module.lookupSymbol<LLVM::GlobalOp>(symbol);
  if (!global) {
    OpBuilder mb = OpBuilder::atBlockEnd(module.getBody());
    std::string bytes = text.str() + '\0';
    auto type = LLVM::LLVMArrayType::get(IntegerType::get(b.getContext(), 8),
                                         bytes.size());
    global = LLVM::GlobalOp::create(mb, loc, type, /*isConstant=*/true,
                                    LLVM::Linkage::Internal, symbol,
                                    mb.getStringAttr(bytes));
  }
  return LLVM::AddressOfOp::create(b, loc, global);
}

ModuleOp enclosingModule(OpBuilder &b) {
  return b.getInsertionBlock()->getParentOp()->getParentOfType<ModuleOp>();
}

} // namespace

void buildIndexCheck(OpBuilder &b, Location loc, Value indices, int64_t bound,
                     StringRef what) {
  MLIRContext *ctx = b.getContext();
  ModuleOp module = enclosingModule(b);
  Type i64 = b.getI64Type();
  auto scalar = RankedTensorType::get({}, i64);
  getOrCreateCheckHelper(module, loc, kIndexCheckHelper, kIndexCheckFn, 2, 1);
  // min and max over all elements, as i64.
  auto type = cast<RankedTensorType>(indices.getType());
  unsigned rank = type.getRank();
  SmallVector<Value> inits;
  for (bool isMax : {false, true}) {
    Value e = tensor::EmptyOp::create(b, loc, ArrayRef<int64_t>{}, i64);
    Value start = arith::ConstantIntOp::create(
        b, loc, i64,
        isMax ? std::numeric_limits<int64_t>::min()
              : std::numeric_limits<int64_t>::max());
    inits.push_back(linalg::FillOp::create(b, loc, start, e).getResult(0));
  }
  AffineMap in = AffineMap::getMultiDimIdentityMap(rank, ctx);
  AffineMap out = AffineMap::get(rank, 0, {}, ctx);
  auto range = linalg::GenericOp::create(
      b, loc, TypeRange{scalar, scalar}, ValueRange{indices}, inits,
      ArrayRef<AffineMap>{in, out, out},
      SmallVector<utils::IteratorType>(rank, utils::IteratorType::reduction),
      [&](OpBuilder &nb, Location l, ValueRange a) {
        Value v = a[0];
        if (v.getType() != i64)
          v = arith::ExtSIOp::create(nb, l, i64, v);
        linalg::YieldOp::create(
            nb, l,
            ValueRange{arith::MinSIOp::create(nb, l, a[1], v).getResult(),
                       arith::MaxSIOp::create(nb, l, a[2], v).getResult()});
      });
  Value what64 = stringAddress(b, loc, module, what);
  Value boundV = arith::ConstantIntOp::create(b, loc, i64, bound);
  auto call = func::CallOp::create(
      b, loc, kIndexCheckHelper, TypeRange{},
      ValueRange{range.getResult(0), range.getResult(1), boundV, what64});
  call->setAttr(attrs::kIndexCheck, b.getUnitAttr());
}

void buildCountCheck(OpBuilder &b, Location loc, Value bad, StringRef what) {
  MLIRContext *ctx = b.getContext();
  ModuleOp module = enclosingModule(b);
  Type i64 = b.getI64Type();
  auto scalar = RankedTensorType::get({}, i64);
  getOrCreateCheckHelper(module, loc, kCountCheckHelper, kCountCheckFn, 1, 0);
  auto type = cast<RankedTensorType>(bad.getType());
  unsigned rank = type.getRank();
  Value e = tensor::EmptyOp::create(b, loc, ArrayRef<int64_t>{}, i64);
  Value zero = arith::ConstantIntOp::create(b, loc, i64, 0);
  Value init = linalg::FillOp::create(b, loc, zero, e).getResult(0);
  AffineMap in = AffineMap::getMultiDimIdentityMap(rank, ctx);
  AffineMap out = AffineMap::get(rank, 0, {}, ctx);
  auto count = linalg::GenericOp::create(
      b, loc, TypeRange{scalar}, ValueRange{bad}, ValueRange{init},
      ArrayRef<AffineMap>{in, out},
      SmallVector<utils::IteratorType>(rank, utils::IteratorType::reduction),
      [&](OpBuilder &nb, Location l, ValueRange a) {
        Value one = arith::ExtUIOp::create(nb, l, i64, a[0]);
        linalg::YieldOp::create(
            nb, l, arith::AddIOp::create(nb, l, a[1], one).getResult());
      });
  auto call = func::CallOp::create(
      b, loc, kCountCheckHelper, TypeRange{},
      ValueRange{count.getResult(0), stringAddress(b, loc, module, what)});
  call->setAttr(attrs::kRuntimeCheck, b.getUnitAttr());
}

} // namespace ddpc

namespace ddpc::onnx_import {

Value castScalar(OpBuilder &b, Location loc, Value v, int32_t from, int32_t to,
                 Type toType) {
  Type fromType = v.getType();
  if (fromType == toType)
    return v;
  bool fromF = isa<FloatType>(fromType), toF = isa<FloatType>(toType);
  if (fromF && toF) {
    if (cast<FloatType>(fromType).getWidth() <
        cast<FloatType>(toType).getWidth())
      return arith::ExtFOp::create(b, loc, toType, v);
    return arith::TruncFOp::create(b, loc, toType, v);
  }
  if (to == kBool) {
    // Nonzero -> true.
    if (fromF)
      return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, v,
                                   scalarConst(b, loc, fromType, 0.0));
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, v,
                                 scalarConst(b, loc, fromType, 0));
  }
  if (fromF) {
    if (isUnsignedDType(to))
      return arith::FPToUIOp::create(b, loc, toType, v);
    return arith::FPToSIOp::create(b, loc, toType, v);
  }
  bool fromUnsigned = isUnsignedDType(from) || from == kBool;
  if (toF) {
    if (fromUnsigned)
      return arith::UIToFPOp::create(b, loc, toType, v);
    return arith::SIToFPOp::create(b, loc, toType, v);
  }
  unsigned fw = cast<IntegerType>(fromType).getWidth();
  unsigned tw = cast<IntegerType>(toType).getWidth();
  if (fw < tw) {
    if (fromUnsigned)
      return arith::ExtUIOp::create(b, loc, toType, v);
    return arith::ExtSIOp::create(b, loc, toType, v);
  }
  return arith::TruncIOp::create(b, loc, toType, v);
}

} // namespace ddpc::onnx_import

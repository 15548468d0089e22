//===- Collectives.cpp - builders of collective communication -------------===//
//
// Part of ddpc (lib/Parallel). See Collectives.h and, for
// ddpc-lower-collectives, Passes.td.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Parallel/Collectives.h"
#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"
#include "ddpc/Parallel/Passes.h"
#include "ddpc/Support/RuntimeSymbols.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {
namespace {

/// One group of all `rank` dimensions.
SmallVector<ReassociationIndices> allDims(int64_t rank) {
  ReassociationIndices all;
  for (int64_t i = 0; i < rank; ++i)
    all.push_back(i);
  return {all};
}

/// `v` as a 1-D tensor of `flatType`: collapse for rank > 1, expand for 0-D.
Value flatten(OpBuilder &b, Location loc, Value v, RankedTensorType flatType) {
  auto type = cast<RankedTensorType>(v.getType());
  if (type.getRank() == 1)
    return v;
  if (type.getRank() == 0)
    return tensor::ExpandShapeOp::create(b, loc, flatType, v,
                                         ArrayRef<ReassociationIndices>{});
  return tensor::CollapseShapeOp::create(b, loc, v, allDims(type.getRank()));
}

/// The 1-D tensor `flat` back in the shape of `type` (the inverse of
/// flatten).
Value unflatten(OpBuilder &b, Location loc, Value flat, RankedTensorType type) {
  if (type.getRank() == 1)
    return flat;
  if (type.getRank() == 0)
    return tensor::CollapseShapeOp::create(b, loc, type, flat,
                                           ArrayRef<ReassociationIndices>{});
  return tensor::ExpandShapeOp::create(b, loc, type, flat,
                                       allDims(type.getRank()));
}

/// Declares the runtime collective and defines `@<name>` (private): copy
/// the argument into a fresh buffer, all-reduce it in place, return it.
void defineAllReduceHelper(ModuleOp module, Location loc, StringRef name,
                           RankedTensorType flatType) {
  MLIRContext *ctx = module.getContext();
  auto ptrType = LLVM::LLVMPointerType::get(ctx);
  OpBuilder mb = OpBuilder::atBlockBegin(module.getBody());
  if (!module.lookupSymbol<func::FuncOp>(kAllReduceFn))
    func::FuncOp::create(mb, loc, kAllReduceFn,
                         mb.getFunctionType({ptrType, mb.getI64Type()}, {}))
        .setPrivate();
  auto fn = func::FuncOp::create(mb, loc, name,
                                 mb.getFunctionType({flatType}, {flatType}));
  fn.setPrivate();
  Block *entry = fn.addEntryBlock();
  OpBuilder fb = OpBuilder::atBlockBegin(entry);
  int64_t n = flatType.getNumElements();
  auto mt = MemRefType::get({n}, flatType.getElementType());
  // A private copy receives the sum: tensors stay values.
  Value src =
      bufferization::ToBufferOp::create(fb, loc, mt, entry->getArgument(0),
                                        /*read_only=*/true);
  Value buf = memref::AllocOp::create(fb, loc, mt, fb.getI64IntegerAttr(64));
  memref::CopyOp::create(fb, loc, src, buf);
  Value addr = memref::ExtractAlignedPointerAsIndexOp::create(fb, loc, buf);
  Value addr64 = arith::IndexCastOp::create(fb, loc, fb.getI64Type(), addr);
  Value ptr = LLVM::IntToPtrOp::create(fb, loc, ptrType, addr64);
  Value count = arith::ConstantIntOp::create(fb, loc, fb.getI64Type(), n);
  func::CallOp::create(fb, loc, kAllReduceFn, TypeRange{},
                       ValueRange{ptr, count});
  Value out = bufferization::ToTensorOp::create(fb, loc, flatType, buf,
                                                /*restrict=*/true,
                                                /*writable=*/true);
  func::ReturnOp::create(fb, loc, out);
}

} // namespace

Value buildAllReduceSum(OpBuilder &b, Location loc, Value input) {
  auto module =
      b.getInsertionBlock()->getParentOp()->getParentOfType<ModuleOp>();
  if (!module.lookupSymbol(kWorldGrid)) {
    OpBuilder mb = OpBuilder::atBlockBegin(module.getBody());
    shard::GridOp::create(mb, module.getLoc(), kWorldGrid,
                          ArrayRef<int64_t>{ShapedType::kDynamic});
  }
  return shard::AllReduceOp::create(b, loc, input.getType(), kWorldGrid,
                                    ArrayRef<int16_t>{0}, input,
                                    shard::ReductionKind::Sum)
      .getResult();
}

bool isWorldAllReduceSum(Operation *op) {
  auto ar = dyn_cast<shard::AllReduceOp>(op);
  return ar && ar.getGrid() == kWorldGrid &&
         ar.getGridAxes() == ArrayRef<int16_t>{0} &&
         ar.getReduction() == shard::ReductionKind::Sum &&
         isa<RankedTensorType>(ar.getInput().getType()) &&
         ar.getInput().getType() == ar.getResult().getType();
}

#define GEN_PASS_DEF_LOWERCOLLECTIVESPASS
#include "ddpc/Parallel/Passes.h.inc"

namespace {

struct LowerCollectivesPass
    : impl::LowerCollectivesPassBase<LowerCollectivesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<shard::AllReduceOp> allReduces;
    WalkResult walk = module.walk([&](Operation *op) {
      if (op->getDialect() &&
          op->getDialect()->getNamespace() ==
              shard::ShardDialect::getDialectNamespace() &&
          !isa<shard::GridOp>(op)) {
        auto type =
            op->getNumOperands()
                ? dyn_cast<RankedTensorType>(op->getOperand(0).getType())
                : RankedTensorType();
        if (!isWorldAllReduceSum(op) || !type.hasStaticShape() ||
            !type.getElementType().isF32()) {
          op->emitOpError("is not a sum all-reduce of a static float32 "
                          "tensor over @")
              << kWorldGrid
              << ", the only collective ddpc lowers (ddpc-lower-collectives)";
          return WalkResult::interrupt();
        }
        allReduces.push_back(cast<shard::AllReduceOp>(op));
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();
    for (shard::AllReduceOp ar : allReduces) {
      auto type = cast<RankedTensorType>(ar.getType());
      int64_t n = type.getNumElements();
      auto flatType = RankedTensorType::get({n}, type.getElementType());
      std::string name = (kAllReduceHelperPrefix + llvm::Twine(n)).str();
      if (!module.lookupSymbol<func::FuncOp>(name))
        defineAllReduceHelper(module, ar.getLoc(), name, flatType);
      OpBuilder b(ar);
      Location loc = ar.getLoc();
      auto call = func::CallOp::create(
          b, loc, name, TypeRange{flatType},
          ValueRange{flatten(b, loc, ar.getInput(), flatType)});
      call->setAttr(attrs::kCollective, b.getStringAttr("all_reduce_sum"));
      call->setAttr(attrs::kBytes,
                    b.getI64IntegerAttr(n * type.getElementTypeBitWidth() / 8));
      ar.replaceAllUsesWith(unflatten(b, loc, call.getResult(0), type));
      ar.erase();
    }
    if (auto grid = module.lookupSymbol<shard::GridOp>(kWorldGrid))
      if (SymbolTable::symbolKnownUseEmpty(grid, module))
        grid.erase();
  }
};

} // namespace

} // namespace ddpc

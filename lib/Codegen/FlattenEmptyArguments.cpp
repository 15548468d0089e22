//===- FlattenEmptyArguments.cpp - zero-size memref arguments as 0xT ------===//
//
// Part of ddpc. See Passes.td (ddpc-flatten-empty-arguments).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_FLATTENEMPTYARGUMENTSPASS
#include "ddpc/Codegen/Passes.h.inc"
namespace {

/// A statically shaped memref of zero elements and rank > 1 (rank 1 is
/// what the bare-pointer convention accepts).
bool isEmptyMultiDim(Type t) {
  auto m = dyn_cast<MemRefType>(t);
  return m && m.hasStaticShape() && m.getNumElements() == 0 && m.getRank() > 1;
}

struct FlattenEmptyArgumentsPass
    : impl::FlattenEmptyArgumentsPassBase<FlattenEmptyArgumentsPass> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal() ||
          !llvm::any_of(func.getArgumentTypes(), isEmptyMultiDim))
        continue;
      Block &entry = func.getBody().front();
      OpBuilder b = OpBuilder::atBlockBegin(&entry);
      SmallVector<Type> types(func.getArgumentTypes());
      for (auto [i, arg] : llvm::enumerate(entry.getArguments())) {
        if (!isEmptyMultiDim(arg.getType()))
          continue;
        auto m = cast<MemRefType>(arg.getType());
        auto alloca = memref::AllocaOp::create(
            b, func.getLoc(),
            MemRefType::get(m.getShape(), m.getElementType()));
        arg.replaceAllUsesWith(alloca.getResult());
        types[i] = MemRefType::get({0}, m.getElementType());
        arg.setType(types[i]);
      }
      func.setType(
          FunctionType::get(&getContext(), types, func.getResultTypes()));
    }
  }
};

} // namespace
} // namespace ddpc

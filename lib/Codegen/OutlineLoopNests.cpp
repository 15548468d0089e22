//===- OutlineLoopNests.cpp - top-level loop nests as functions -----------===//
//
// Part of ddpc. See Passes.td (ddpc-outline-loop-nests).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Transforms/RegionUtils.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_OUTLINELOOPNESTSPASS
#include "ddpc/Codegen/Passes.h.inc"
namespace {

/// A value the bare-pointer calling convention passes: a scalar, or a
/// memref of static shape, identity layout and (when empty) rank <= 1.
bool isPassable(Type t) {
  if (t.isIntOrIndexOrFloat())
    return true;
  auto m = dyn_cast<MemRefType>(t);
  return m && m.hasStaticShape() && m.getLayout().isIdentity() &&
         (m.getNumElements() > 0 || m.getRank() <= 1);
}

/// An op that may be cloned into the outlined function instead of passing
/// its result: no regions, no memory effects.
bool isClonable(Operation *op) {
  return op && op->getNumRegions() == 0 && isMemoryEffectFree(op);
}

/// The values `nest` uses from above, split into the arguments of the new
/// function (`args`) and the ops to clone into it (`clones`, defs first).
/// False when some value is neither passable nor defined by a clonable op.
bool collectInputs(Operation *nest, SmallVectorImpl<Value> &args,
                   SmallVectorImpl<Operation *> &clones) {
  llvm::SetVector<Value> used;
  for (Region &r : nest->getRegions())
    getUsedValuesDefinedAbove(r, used);
  for (Value v : nest->getOperands())
    used.insert(v);
  llvm::SetVector<Value> argSet;
  llvm::SetVector<Operation *> cloneSet;
  // Depth-first: an op's operands are resolved before the op is recorded.
  std::function<bool(Value)> resolve = [&](Value v) -> bool {
    if (argSet.contains(v))
      return true;
    Operation *def = v.getDefiningOp();
    if (def && cloneSet.contains(def))
      return true;
    if (isClonable(def)) {
      for (Value operand : def->getOperands())
        if (!resolve(operand))
          return false;
      cloneSet.insert(def);
      return true;
    }
    if (!isPassable(v.getType()))
      return false;
    argSet.insert(v);
    return true;
  };
  for (Value v : used)
    if (!resolve(v))
      return false;
  args.assign(argSet.begin(), argSet.end());
  clones.assign(cloneSet.begin(), cloneSet.end());
  return true;
}

struct OutlineLoopNestsPass
    : impl::OutlineLoopNestsPassBase<OutlineLoopNestsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    MLIRContext *ctx = &getContext();
    auto internal = LLVM::LinkageAttr::get(ctx, LLVM::Linkage::Internal);
    SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
    for (func::FuncOp parent : funcs) {
      if (parent.isExternal())
        continue;
      SmallVector<Operation *> nests;
      for (Block &block : parent.getBody())
        for (Operation &op : block)
          if (isa<scf::ForOp, scf::ParallelOp>(op) && isLargeEnough(&op))
            nests.push_back(&op);
      unsigned index = 0;
      for (Operation *nest : nests) {
        SmallVector<Value> args;
        SmallVector<Operation *> clones;
        if (!collectInputs(nest, args, clones))
          continue;
        OpBuilder b(module.getContext());
        b.setInsertionPoint(parent);
        SmallVector<Type> argTypes;
        for (Value v : args)
          argTypes.push_back(v.getType());
        auto type = FunctionType::get(ctx, argTypes, nest->getResultTypes());
        std::string name =
            (parent.getSymName() + ".loop" + Twine(index++)).str();
        auto callee = func::FuncOp::create(b, nest->getLoc(), name, type);
        callee.setPrivate();
        callee->setAttr("llvm.linkage", internal);
        symbols.insert(callee);

        Block *entry = callee.addEntryBlock();
        OpBuilder body = OpBuilder::atBlockBegin(entry);
        IRMapping map;
        for (auto [v, arg] : llvm::zip(args, entry->getArguments()))
          map.map(v, arg);
        for (Operation *op : clones)
          body.clone(*op, map);
        Operation *copy = body.clone(*nest, map);
        func::ReturnOp::create(body, nest->getLoc(), copy->getResults());

        OpBuilder at(nest);
        auto call = func::CallOp::create(at, nest->getLoc(), callee, args);
        call.setNoInline(true);
        nest->replaceAllUsesWith(call.getResults());
        nest->erase();
      }
    }
  }

  bool isLargeEnough(Operation *nest) const {
    unsigned count = 0;
    nest->walk([&](Operation *) { ++count; });
    return count >= minOps;
  }
};

} // namespace
} // namespace ddpc

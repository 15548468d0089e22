//===- StageHostSharedOutputs.cpp - host-shared outputs via device copies -===//
//
// Part of ddpc. See Passes.td (ddpc-stage-host-shared-outputs).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/GPU/Passes.h"
#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_STAGEHOSTSHAREDOUTPUTSPASS
#include "ddpc/Codegen/GPU/Passes.h.inc"

namespace {

/// Whether some user may write `arg`: any user that does not declare its
/// effects (calls, views, pointer extraction for library calls) counts as
/// a writer.
bool mayBeWritten(BlockArgument arg) {
  for (Operation *user : arg.getUsers()) {
    auto effects = dyn_cast<MemoryEffectOpInterface>(user);
    if (!effects || effects.getEffectOnValue<MemoryEffects::Write>(arg))
      return true;
  }
  return false;
}

struct StageHostSharedOutputsPass
    : impl::StageHostSharedOutputsPassBase<StageHostSharedOutputsPass> {
  void runOnOperation() override {
    func::FuncOp f = getOperation();
    if (f.isExternal())
      return;
    Block &entry = f.getBody().front();
    for (BlockArgument arg : f.getArguments()) {
      auto type = dyn_cast<MemRefType>(arg.getType());
      if (!f.getArgAttr(arg.getArgNumber(), attrs::kHostShared) || !type ||
          !type.hasStaticShape() || !type.getLayout().isIdentity() ||
          arg.use_empty() || !mayBeWritten(arg))
        continue;
      OpBuilder b = OpBuilder::atBlockBegin(&entry);
      Location loc = f.getLoc();
      Value staged = memref::AllocOp::create(b, loc, type);
      auto copyIn = memref::CopyOp::create(b, loc, arg, staged);
      arg.replaceAllUsesExcept(staged, copyIn);
      f.walk([&](func::ReturnOp ret) {
        OpBuilder rb(ret);
        memref::CopyOp::create(rb, loc, staged, arg);
        memref::DeallocOp::create(rb, loc, staged);
      });
    }
  }
};

} // namespace

} // namespace ddpc

//===- GPUHostSync.cpp - host waits before host memory accesses -----------===//
//
// Part of ddpc. See Passes.td (ddpc-gpu-host-sync).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Target/CUDA/Transforms/Passes.h"

#include "ddpc/Codegen/RuntimeCalls.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_GPUHOSTSYNCPASS
#include "ddpc/Target/CUDA/Transforms/Passes.h.inc"

namespace {

bool isDeviceWork(Operation *op) {
  if (isa<gpu::LaunchFuncOp>(op))
    return true;
  if (auto call = dyn_cast<func::CallOp>(op))
    return call.getCallee() == kGemmFn || call.getCallee() == kGemmEpilogueFn ||
           call.getCallee() == kConvFn || call.getCallee() == kConvEpilogueFn ||
           call.getCallee() == kAllReduceFn ||
           call.getCallee() == kIndexCheckFn ||
           call.getCallee() == kCountCheckFn ||
           llvm::is_contained(kBucketFns, call.getCallee());
  return false;
}

/// Whether `op` (or an op nested in it) reads or writes memory on the host.
bool touchesHostMemory(Operation *op) {
  bool found = false;
  op->walk([&](Operation *inner) {
    if (isa<memref::LoadOp, memref::StoreOp, memref::AtomicRMWOp,
            memref::CopyOp, memref::GenericAtomicRMWOp>(inner) ||
        (isa<func::CallOp>(inner) && !isDeviceWork(inner) &&
         cast<func::CallOp>(inner).getCallee() != kSyncFn)) {
      found = true;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return found;
}

bool containsDeviceWork(Operation *op) {
  bool found = false;
  op->walk([&](Operation *inner) {
    if (isDeviceWork(inner) ||
        (isa<func::CallOp>(inner) &&
         cast<func::CallOp>(inner).getCallee() != kSyncFn)) {
      found = true;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return found;
}

struct GPUHostSyncPass : impl::GPUHostSyncPassBase<GPUHostSyncPass> {

  func::FuncOp syncFn;

  void sync(Operation *before) {
    OpBuilder b(before);
    func::CallOp::create(b, before->getLoc(), syncFn, ValueRange{});
  }

  /// Processes `block`; `dirty` says device work may be pending on entry.
  /// Returns whether device work may be pending at the end.
  bool processBlock(Block &block, bool dirty) {
    for (Operation &op : llvm::make_early_inc_range(block)) {
      if (isDeviceWork(&op)) {
        dirty = true;
        continue;
      }
      if (auto call = dyn_cast<func::CallOp>(op)) {
        if (call.getCallee() == kSyncFn) {
          dirty = false;
          continue;
        }
        // Another function of the program: it synchronizes before its own
        // host accesses (callees start dirty), and may leave work pending.
        dirty = true;
        continue;
      }
      if (isa<func::ReturnOp>(op)) {
        auto fn = cast<func::FuncOp>(op.getParentOp());
        if (dirty && fn.isPublic())
          sync(&op);
        continue;
      }
      if (op.getNumRegions() > 0 && containsDeviceWork(&op)) {
        // Device work inside (a host loop around launches): handle each
        // region on its own, conservatively dirty on entry.
        for (Region &r : op.getRegions())
          for (Block &inner : r)
            processBlock(inner, /*dirty=*/true);
        dirty = true;
        continue;
      }
      if (dirty && touchesHostMemory(&op)) {
        sync(&op);
        dirty = false;
      }
    }
    return dirty;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    syncFn =
        getOrDeclare(module, kSyncFn, FunctionType::get(&getContext(), {}, {}));
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      for (Block &block : fn.getBody())
        processBlock(block, /*dirty=*/true);
    }
  }
};

} // namespace

} // namespace ddpc

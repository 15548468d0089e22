//===- SerialLoopsToDevice.cpp - serial host loops to one thread ----------===//
//
// Part of ddpc. See Passes.td (ddpc-serial-loops-to-device).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/GPU/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_SERIALLOOPSTODEVICEPASS
#include "ddpc/Codegen/GPU/Passes.h.inc"

namespace {

/// Whether `loop` can run as one device thread: it touches memory only
/// through memref load/store/atomics, calls nothing, allocates nothing and
/// contains no parallel loop (those become kernels themselves).
bool isSerialDeviceLoop(scf::ForOp loop) {
  if (loop.getNumResults() != 0)
    return false;
  bool touches = false, ok = true;
  loop.walk([&](Operation *op) {
    if (isa<scf::ParallelOp, func::CallOp, memref::AllocOp, memref::AllocaOp,
            memref::DeallocOp, memref::CopyOp, linalg::LinalgOp>(op) ||
        isa<gpu::GPUDialect>(op->getDialect())) {
      ok = false;
      return WalkResult::interrupt();
    }
    if (isa<memref::LoadOp, memref::StoreOp, memref::AtomicRMWOp,
            memref::GenericAtomicRMWOp>(op))
      touches = true;
    return WalkResult::advance();
  });
  return ok && touches;
}

struct SerialLoopsToDevicePass
    : impl::SerialLoopsToDevicePassBase<SerialLoopsToDevicePass> {
  void runOnOperation() override {
    SmallVector<scf::ForOp> loops;
    getOperation().walk<WalkOrder::PreOrder>([&](scf::ForOp loop) {
      if (loop->getParentOfType<scf::ParallelOp>())
        return WalkResult::skip();
      if (isSerialDeviceLoop(loop)) {
        loops.push_back(loop);
        return WalkResult::skip(); // Outermost only.
      }
      return WalkResult::advance();
    });
    OpBuilder b(&getContext());
    for (scf::ForOp loop : loops) {
      b.setInsertionPoint(loop);
      Location loc = loop.getLoc();
      Value zero = arith::ConstantIndexOp::create(b, loc, 0);
      Value one = arith::ConstantIndexOp::create(b, loc, 1);
      auto par = scf::ParallelOp::create(b, loc, ValueRange{zero},
                                         ValueRange{one}, ValueRange{one});
      par->setAttrs(loop->getDiscardableAttrDictionary());
      loop->moveBefore(par.getBody()->getTerminator());
    }
  }
};

} // namespace

} // namespace ddpc

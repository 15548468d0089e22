//===- MemRefCopyToLinalg.cpp - memref.copy to linalg.copy ----------------===//
//
// Part of ddpc. See Passes.td (ddpc-memref-copy-to-linalg).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/GPU/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_MEMREFCOPYTOLINALGPASS
#include "ddpc/Codegen/GPU/Passes.h.inc"

namespace {

struct MemRefCopyToLinalgPass
    : impl::MemRefCopyToLinalgPassBase<MemRefCopyToLinalgPass> {
  void runOnOperation() override {
    SmallVector<memref::CopyOp> copies;
    getOperation().walk([&](memref::CopyOp op) { copies.push_back(op); });
    for (memref::CopyOp op : copies) {
      OpBuilder b(op);
      linalg::CopyOp::create(b, op.getLoc(), op.getSource(), op.getTarget());
      op->erase();
    }
  }
};

} // namespace

} // namespace ddpc

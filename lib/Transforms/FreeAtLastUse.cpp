//===- FreeAtLastUse.cpp - deallocate buffers right after their last use --===//
//
// Part of ddpc. See Passes.td (ddpc-free-at-last-use).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_FREEATLASTUSEPASS
#include "ddpc/Transforms/Passes.h.inc"

namespace {

/// The top-level op (in `block`) of the last use of `alloc`'s buffer or a
/// view of it other than `dealloc`; nullptr when the buffer may escape or
/// is used outside `block`.
Operation *lastUse(memref::AllocOp alloc, memref::DeallocOp dealloc,
                   Block &block) {
  Operation *last = alloc;
  SmallVector<Value> worklist = {alloc.getResult()};
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (user == dealloc)
        continue;
      Operation *top = block.findAncestorOpInBlock(*user);
      if (!top)
        return nullptr;
      if (isa<memref::DeallocOp>(user))
        return nullptr; // A second dealloc: leave it to its owner.
      if (auto view = dyn_cast<ViewLikeOpInterface>(user)) {
        if (view.getViewSource() != v)
          return nullptr;
        llvm::append_range(worklist, user->getResults());
      } else if (isa<memref::CastOp>(user)) {
        worklist.push_back(user->getResult(0));
      } else if (isa<memref::ExtractAlignedPointerAsIndexOp,
                     memref::ExtractStridedMetadataOp, CallOpInterface,
                     func::ReturnOp>(user) ||
                 llvm::any_of(user->getResultTypes(),
                              [](Type t) { return isa<BaseMemRefType>(t); })) {
        // The address may outlive this op: a pointer, a callee, a result,
        // or a memref result the pass does not follow.
        return nullptr;
      }
      if (last->isBeforeInBlock(top))
        last = top;
    }
  }
  return last;
}

/// The elementwise kernel right after `op` (memory-effect-free ops,
/// allocs and deallocs skipped) that reads `op`'s output, when `op` is a linalg
/// op with a reduction (a contraction or convolution): the epilogue passes
/// (Codegen/LibraryCalls.h) may fuse the two into one library call at the
/// kernel, which then reads `op`'s inputs. Null otherwise.
Operation *epilogueOf(Operation *op) {
  auto producer = dyn_cast<linalg::LinalgOp>(op);
  if (!producer || producer.getNumReductionLoops() == 0 ||
      producer->getNumRegions() != 1 || producer.getNumDpsInits() != 1)
    return nullptr;
  Operation *next = op->getNextNode();
  while (next && (isMemoryEffectFree(next) ||
                  isa<memref::AllocOp, memref::DeallocOp>(next)))
    next = next->getNextNode();
  auto kernel = dyn_cast_or_null<linalg::GenericOp>(next);
  if (!kernel || kernel.getNumReductionLoops() != 0)
    return nullptr;
  Value out = producer.getDpsInitOperand(0)->get();
  auto root = [](Value v) {
    while (auto view = v.getDefiningOp<ViewLikeOpInterface>())
      v = view.getViewSource();
    return v;
  };
  for (OpOperand *in : kernel.getDpsInputOperands())
    if (root(in->get()) == root(out))
      return kernel;
  return nullptr;
}

struct FreeAtLastUsePass : impl::FreeAtLastUsePassBase<FreeAtLastUsePass> {
  void runOnOperation() override {
    getOperation().walk([](Block *block) {
      SmallVector<std::pair<memref::DeallocOp, Operation *>> moves;
      for (auto alloc : block->getOps<memref::AllocOp>()) {
        memref::DeallocOp dealloc;
        int deallocs = 0;
        for (Operation *user : alloc->getUsers())
          if (auto d = dyn_cast<memref::DeallocOp>(user))
            dealloc = d, ++deallocs;
        if (deallocs != 1 || dealloc->getBlock() != block)
          continue;
        Operation *last = lastUse(alloc, dealloc, *block);
        if (last)
          if (Operation *kernel = epilogueOf(last))
            last = kernel;
        if (last && last->isBeforeInBlock(dealloc))
          moves.push_back({dealloc, last});
      }
      for (auto [dealloc, last] : moves)
        dealloc->moveAfter(last);
    });
  }
};

} // namespace

} // namespace ddpc

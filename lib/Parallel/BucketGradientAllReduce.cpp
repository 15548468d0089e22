//===- BucketGradientAllReduce.cpp - gradient buckets during backward -----===//
//
// Part of ddpc. See Passes.h (createBucketGradientAllReducePass).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"
#include "ddpc/Parallel/Passes.h"

#include "ddpc/Analysis/CostModel.h"

#include "ddpc/Codegen/RuntimeCalls.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Pass/Pass.h"

#include <cmath>

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_BUCKETGRADIENTALLREDUCEPASS
#include "ddpc/Parallel/Passes.h.inc"
namespace {

/// One gradient output of a function: its out-parameter and the op of the
/// entry block after which its value is final and no longer used.
struct GradOut {
  BlockArgument arg;
  int64_t count = 0;          // elements
  int64_t bytes = 0;          // CostModel.h
  Operation *ready = nullptr; // nullptr: at function entry
  unsigned position = 0;      // of `ready` in the entry block, + 1
  func::CallOp start;         // its bucket's start call
};

/// Whether `op` uses a buffer without reading or writing its elements
/// (deallocation bookkeeping).
bool onlyInspects(Operation *op) {
  return isa<memref::ExtractAlignedPointerAsIndexOp, memref::DeallocOp,
             memref::ExtractStridedMetadataOp, memref::DimOp>(op);
}

/// The last op of `entry` (or one containing it) that uses `root` or a view
/// of it, with its 1-based position; {nullptr, 0} when there is none.
std::pair<Operation *, unsigned>
lastUse(Value root, Block &entry,
        const llvm::DenseMap<Operation *, unsigned> &position) {
  SmallVector<Value> worklist{root};
  std::pair<Operation *, unsigned> last{nullptr, 0};
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    for (OpOperand &use : v.getUses()) {
      Operation *owner = use.getOwner();
      if (auto view = dyn_cast<ViewLikeOpInterface>(owner);
          view && view.getViewSource() == v) {
        llvm::append_range(worklist, owner->getResults());
        continue;
      }
      if (isa<memref::CastOp>(owner)) {
        worklist.push_back(owner->getResult(0));
        continue;
      }
      if (onlyInspects(owner) || isa<func::ReturnOp>(owner))
        continue;
      Operation *top = entry.findAncestorOpInBlock(*owner);
      if (!top)
        continue;
      unsigned pos = position.lookup(top);
      if (pos > last.second)
        last = {top, pos};
    }
  }
  return last;
}

struct BucketGradientAllReducePass
    : impl::BucketGradientAllReducePassBase<BucketGradientAllReducePass> {
  using BucketGradientAllReducePassBase::BucketGradientAllReducePassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!(bucketCapMB > 0) || !(firstBucketMB > 0) ||
        !std::isfinite(bucketCapMB) || !std::isfinite(firstBucketMB)) {
      module.emitError("ddpc-bucket-gradient-allreduce: bucket caps must be "
                       "positive finite numbers of MiB");
      return signalPassFailure();
    }
    for (auto f : llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
      if (!f.isExternal() && failed(bucket(module, f)))
        return signalPassFailure();
  }

  LogicalResult bucket(ModuleOp module, func::FuncOp f) {
    Block &entry = f.getBody().front();
    llvm::DenseMap<Operation *, unsigned> position;
    for (auto [i, op] : llvm::enumerate(entry))
      position[&op] = i + 1;
    SmallVector<GradOut> grads;
    for (BlockArgument arg : entry.getArguments()) {
      auto role =
          f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attrs::kRole);
      if (!role || role.getValue() != "new_grad_acc")
        continue;
      auto type = dyn_cast<MemRefType>(arg.getType());
      if (!type || !type.hasStaticShape() || !type.getElementType().isF32() ||
          !type.getLayout().isIdentity())
        return f.emitError("gradient output ")
               << arg.getArgNumber()
               << " must be a dense static float32 memref (run "
                  "ddpc-bucket-gradient-allreduce after bufferization)";
      GradOut g;
      g.arg = arg;
      g.count = type.getNumElements();
      g.bytes = staticBytes(type);
      std::tie(g.ready, g.position) = lastUse(arg, entry, position);
      grads.push_back(g);
    }
    if (grads.empty())
      return success();
    // Ready order: the order in which backward finishes the gradients.
    llvm::stable_sort(grads, [](const GradOut &a, const GradOut &b) {
      return a.position < b.position;
    });

    MLIRContext *ctx = module.getContext();
    OpBuilder b(ctx);
    auto ptrType = LLVM::LLVMPointerType::get(ctx);
    Type i64 = b.getI64Type();
    getOrDeclare(module, kBucketAddFn, b.getFunctionType({ptrType, i64}, {}));
    getOrDeclare(module, kBucketStartFn, b.getFunctionType({i64}, {}));
    getOrDeclare(module, kBucketWaitFn, b.getFunctionType({}, {}));

    constexpr double kMiB = 1024.0 * 1024.0;
    int64_t bucketIndex = 0;
    // In floating point: a cap of any size compares correctly.
    auto capBytes = [&] {
      return (bucketIndex == 0 ? std::min<double>(firstBucketMB, bucketCapMB)
                               : static_cast<double>(bucketCapMB)) *
             kMiB;
    };
    size_t begin = 0;
    int64_t bytes = 0;
    for (size_t i = 0; i < grads.size(); ++i) {
      bytes += grads[i].bytes;
      bool last = i + 1 == grads.size();
      if (!last && static_cast<double>(bytes) < capBytes())
        continue;
      // Bucket grads[begin..i]: starts after the last member is ready.
      const GradOut &closing = grads[i];
      if (closing.ready)
        b.setInsertionPointAfter(closing.ready);
      else
        b.setInsertionPointToStart(&entry);
      Location loc = closing.ready ? closing.ready->getLoc() : f.getLoc();
      SmallVector<Attribute> names;
      for (size_t j = begin; j <= i; ++j) {
        RuntimeArgs args{b, loc};
        Value ptr = LLVM::IntToPtrOp::create(b, loc, ptrType,
                                             args.pointer(grads[j].arg));
        func::CallOp::create(b, loc, kBucketAddFn, TypeRange{},
                             ValueRange{ptr, args.integer(grads[j].count, 64)});
        StringRef name = "";
        if (auto n = f.getArgAttrOfType<StringAttr>(grads[j].arg.getArgNumber(),
                                                    attrs::kName))
          name = n.getValue();
        name.consume_front("grad_acc.");
        names.push_back(b.getStringAttr(name));
      }
      auto start = func::CallOp::create(
          b, loc, kBucketStartFn, TypeRange{},
          ValueRange{RuntimeArgs{b, loc}.integer(bucketIndex, 64)});
      start->setAttr(attrs::kCollective,
                     b.getStringAttr(shardGradients ? "reduce_scatter_bucket"
                                                    : "allreduce_bucket"));
      start->setAttr(attrs::kBytes, b.getI64IntegerAttr(bytes));
      start->setAttr(attrs::kBucket, b.getI64IntegerAttr(bucketIndex));
      start->setAttr(attrs::kParams, b.getArrayAttr(names));
      // Where backward is when the bucket starts: after top-level op
      // `ddpc.start_op` of `ddpc.function_ops` (the rest overlaps).
      start->setAttr(attrs::kStartOp, b.getI64IntegerAttr(closing.position));
      start->setAttr(attrs::kFunctionOps, b.getI64IntegerAttr(position.size()));
      for (size_t j = begin; j <= i; ++j)
        grads[j].start = start;
      ++bucketIndex;
      begin = i + 1;
      bytes = 0;
    }
    b.setInsertionPoint(entry.getTerminator());
    func::CallOp::create(b, f.getLoc(), kBucketWaitFn, TypeRange{},
                         ValueRange{});
    if (shardGradients)
      gradientsToTemporaries(f, grads);
    return success();
  }

  /// ZeRO stage 2: each gradient out-parameter becomes a buffer allocated
  /// before its first use and freed after its bucket's start call, which
  /// copies it to the runtime; the out-parameter is erased.
  void gradientsToTemporaries(func::FuncOp f, ArrayRef<GradOut> grads) {
    Block &entry = f.getBody().front();
    OpBuilder b(f.getContext());
    llvm::BitVector erase(f.getNumArguments());
    for (GradOut g : grads) {
      // Before the earliest use in block order, the pointer reads this pass
      // inserted for the bucket included (a gradient nothing writes, e.g. a
      // zero-element one, has only those).
      Operation *first = nullptr;
      for (Operation *user : g.arg.getUsers()) {
        Operation *top = entry.findAncestorOpInBlock(*user);
        if (top && (!first || top->isBeforeInBlock(first)))
          first = top;
      }
      auto type = cast<MemRefType>(g.arg.getType());
      if (first)
        b.setInsertionPoint(first);
      else
        b.setInsertionPoint(g.start);
      auto alloc =
          memref::AllocOp::create(b, f.getLoc(), type, b.getI64IntegerAttr(64));
      g.arg.replaceAllUsesWith(alloc.getResult());
      b.setInsertionPointAfter(g.start);
      memref::DeallocOp::create(b, f.getLoc(), alloc.getResult());
      erase.set(g.arg.getArgNumber());
    }
    (void)f.eraseArguments(erase);
  }
};

} // namespace

} // namespace ddpc

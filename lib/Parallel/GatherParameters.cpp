//===- GatherParameters.cpp - ZeRO stage 3 parameter all-gathers ----------===//
//
// Part of ddpc. See Passes.td (GatherParametersPass).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"
#include "ddpc/Parallel/Passes.h"

#include "ddpc/Analysis/CostModel.h"
#include "ddpc/Codegen/RuntimeCalls.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

#include <climits>

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_GATHERPARAMETERSPASS
#include "ddpc/Parallel/Passes.h.inc"
namespace {

/// One direct use of a parameter argument: the top-level op that holds it,
/// that op's position, and the position of the last top-level op that
/// reads the value through it (a view's users included).
struct Use {
  OpOperand *operand;
  unsigned first, last;
};

/// The position of the last top-level op of `entry` that uses `v` or a
/// view of it; `at` when there is none.
unsigned lastUse(Value v, Block &entry,
                 const llvm::DenseMap<Operation *, unsigned> &position,
                 unsigned at) {
  SmallVector<Value> worklist{v};
  while (!worklist.empty()) {
    Value cur = worklist.pop_back_val();
    for (OpOperand &use : cur.getUses()) {
      Operation *owner = use.getOwner();
      if (auto view = dyn_cast<ViewLikeOpInterface>(owner);
          (view && view.getViewSource() == cur) || isa<memref::CastOp>(owner))
        llvm::append_range(worklist, owner->getResults());
      if (Operation *top = entry.findAncestorOpInBlock(*owner))
        at = std::max(at, position.lookup(top));
    }
  }
  return at;
}

struct GatherParametersPass
    : impl::GatherParametersPassBase<GatherParametersPass> {
  using GatherParametersPassBase::GatherParametersPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    for (StringRef name : {kTrainMicroFunc, kEvalFunc})
      if (auto f = module.lookupSymbol<func::FuncOp>(name);
          f && !f.isExternal() && failed(gather(module, f)))
        return signalPassFailure();
  }

  LogicalResult gather(ModuleOp module, func::FuncOp f) {
    Block &entry = f.getBody().front();
    llvm::DenseMap<Operation *, unsigned> position;
    SmallVector<Operation *> ops;
    for (auto [i, op] : llvm::enumerate(entry)) {
      position[&op] = i + 1;
      ops.push_back(&op);
    }
    // Backward starts at the first contraction or loop nest that no ONNX
    // node produced (the VJPs carry no node name); none: one phase.
    unsigned boundary = UINT_MAX;
    for (Operation &op : entry)
      if (isa<linalg::LinalgOp>(op) && !isa<linalg::FillOp>(op) &&
          nodeNamesOf(op.getLoc()).empty()) {
        boundary = position[&op];
        break;
      }

    MLIRContext *ctx = module.getContext();
    OpBuilder b(ctx);
    auto ptrType = LLVM::LLVMPointerType::get(ctx);
    getOrDeclare(module, kParamGatherFn,
                 b.getFunctionType({ptrType, b.getI64Type()}, {}));
    int64_t index = -1;
    for (BlockArgument arg : entry.getArguments()) {
      auto role =
          f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attrs::kRole);
      if (!role || role.getValue() != "param")
        continue;
      ++index;
      auto type = dyn_cast<MemRefType>(arg.getType());
      if (!type || !type.hasStaticShape() || !type.getElementType().isF32() ||
          !type.getLayout().isIdentity())
        return f.emitError("parameter argument ")
               << arg.getArgNumber()
               << " must be a dense static float32 memref (run "
                  "ddpc-gather-parameters after bufferization)";
      SmallVector<Use> uses;
      for (OpOperand &use : arg.getUses()) {
        Operation *top = entry.findAncestorOpInBlock(*use.getOwner());
        if (!top)
          return f.emitError("parameter argument ")
                 << arg.getArgNumber() << " is used outside its function body";
        unsigned at = position[top];
        unsigned last = at;
        if (top == use.getOwner())
          for (Value r : top->getResults())
            last = lastUse(r, entry, position, last);
        uses.push_back({&use, at, last});
      }
      if (uses.empty())
        continue;
      llvm::stable_sort(
          uses, [](const Use &a, const Use &c) { return a.first < c.first; });
      // Segments: the forward uses, then the backward ones; a view that
      // lives into backward keeps its segment gathered until its last use,
      // and so does a parameter to keep gathered.
      auto name =
          f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attrs::kName);
      bool keep = name && llvm::is_contained(keepGathered, name.getValue());
      SmallVector<std::pair<size_t, size_t>> segments; // [begin, end)
      unsigned segmentLast = 0;
      for (size_t i = 0; i < uses.size(); ++i) {
        bool newPhase = !keep && !segments.empty() &&
                        uses[i].first >= boundary &&
                        uses[segments.back().first].first < boundary &&
                        uses[i].first > segmentLast;
        if (segments.empty() || newPhase) {
          segments.push_back({i, i + 1});
          segmentLast = uses[i].last;
        } else {
          segments.back().second = i + 1;
          segmentLast = std::max(segmentLast, uses[i].last);
        }
      }
      for (auto [begin, end] : segments) {
        unsigned last = 0;
        for (size_t i = begin; i < end; ++i)
          last = std::max(last, uses[i].last);
        Operation *firstOp = ops[uses[begin].first - 1];
        Location loc = firstOp->getLoc();
        b.setInsertionPoint(firstOp);
        auto alloc =
            memref::AllocOp::create(b, loc, type, b.getI64IntegerAttr(64));
        RuntimeArgs args{b, loc};
        Value ptr =
            LLVM::IntToPtrOp::create(b, loc, ptrType, args.pointer(alloc));
        auto call =
            func::CallOp::create(b, loc, kParamGatherFn, TypeRange{},
                                 ValueRange{ptr, args.integer(index, 64)});
        call->setAttr(attrs::kCollective, b.getStringAttr("all_gather_param"));
        call->setAttr(attrs::kBytes, b.getI64IntegerAttr(staticBytes(type)));
        if (name)
          call->setAttr(attrs::kParams, b.getArrayAttr({name}));
        for (size_t i = begin; i < end; ++i)
          uses[i].operand->set(alloc.getResult());
        b.setInsertionPointAfter(ops[last - 1]);
        memref::DeallocOp::create(b, loc, alloc.getResult());
      }
    }
    return success();
  }
};

} // namespace

} // namespace ddpc

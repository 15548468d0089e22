//===- Rematerialize.cpp - recompute activations in the backward pass -----===//
//
// Part of ddpc. See Passes.td (ddpc-rematerialize).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Analysis/CostModel.h"
#include "ddpc/Analysis/RematGraph.h"
#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"
#include "ddpc/Support/RuntimeSymbols.h"
#include "ddpc/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/Pass.h"

#include "llvm/ADT/StringSet.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_REMATERIALIZEPASS
#include "ddpc/Transforms/Passes.h.inc"

namespace {

struct RematerializePass : impl::RematerializePassBase<RematerializePass> {
  using RematerializePassBase::RematerializePassBase;

  void runOnOperation() override {
    func::FuncOp f = getOperation();
    if (f.getSymName() != kTrainMicroFunc || f.isExternal() || nodes.empty())
      return;
    llvm::StringSet<> chosen;
    for (const std::string &n : nodes)
      chosen.insert(n);
    Block &body = f.getBody().front();

    // Values that depend on the step's random state: never recomputed.
    llvm::DenseSet<Value> random = randomValues(f);
    // Forward ops precede the loss, the first linalg op of no ONNX node;
    // everything from there on is the loss, backward and the update (a
    // fused group there may name the forward node it duplicates).
    Operation *boundary = forwardBoundary(body);
    llvm::DenseMap<Operation *, std::string> names;
    for (Operation &op : body)
      names[&op] = nodeNamesOf(op.getLoc());
    if (!boundary)
      return;
    auto recomputable = [&](Operation *op) {
      const std::string &n = names.lookup(op);
      if (n.empty() || !op->isBeforeInBlock(boundary) ||
          !isMemoryEffectFree(op) ||
          llvm::any_of(op->getResults(),
                       [&](Value v) { return random.contains(v); }))
        return false;
      SmallVector<StringRef> parts;
      StringRef(n).split(parts, '+');
      return llvm::any_of(parts,
                          [&](StringRef p) { return chosen.contains(p); });
    };
    auto isBackward = [&](Operation *user) {
      Operation *top = body.findAncestorOpInBlock(*user);
      return top && !top->isBeforeInBlock(boundary) &&
             !top->hasAttr(attrs::kRemat) && !isa<func::ReturnOp>(top);
    };

    // The chosen activations, in the order backward first reads them.
    struct Read {
      Value value;
      Operation *first;
    };
    SmallVector<Read> reads;
    for (Operation &op : body) {
      if (!recomputable(&op))
        continue;
      for (Value r : op.getResults()) {
        Operation *first = nullptr;
        for (Operation *user : r.getUsers()) {
          if (!isBackward(user))
            continue;
          Operation *top = body.findAncestorOpInBlock(*user);
          if (!first || top->isBeforeInBlock(first))
            first = top;
        }
        if (first)
          reads.push_back({r, first});
      }
    }
    llvm::stable_sort(reads, [](const Read &a, const Read &b) {
      return a.first->isBeforeInBlock(b.first);
    });

    OpBuilder b(f.getContext());
    llvm::DenseMap<Value, Value> copies;
    // The copy of `v` at the builder's point (recomputing chosen and free
    // producers of its operands too), or `v` itself.
    std::function<Value(Value)> copyOf = [&](Value v) -> Value {
      if (auto it = copies.find(v); it != copies.end())
        return it->second;
      Operation *def = v.getDefiningOp();
      if (!isa<RankedTensorType>(v.getType()) || !def ||
          def->getBlock() != &body ||
          !(recomputable(def) || isFreeToRecompute(def)))
        return v;
      IRMapping map;
      for (Value operand : def->getOperands())
        map.map(operand, copyOf(operand));
      Operation *copy = b.clone(*def, map);
      std::string n = names.lookup(def);
      copy->setAttr(attrs::kRemat, b.getStringAttr(n.empty() ? "free" : n));
      copy->setLoc(UnknownLoc::get(f.getContext()));
      for (auto [from, to] : llvm::zip(def->getResults(), copy->getResults()))
        copies[from] = to;
      return copies.lookup(v);
    };
    for (const Read &r : reads) {
      b.setInsertionPoint(r.first);
      Value original = r.value;
      Value copy = copyOf(original);
      original.replaceUsesWithIf(copy, [&](OpOperand &use) {
        return use.getOwner() != copy.getDefiningOp() &&
               isBackward(use.getOwner());
      });
    }
  }
};

} // namespace

} // namespace ddpc

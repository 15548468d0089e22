//===- ScatterToAtomic.cpp - scatter reductions to atomic adds ------------===//
//
// Part of ddpc. See Passes.td (ddpc-scatter-to-atomic).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/GPU/Passes.h"
#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"

#include "AtomicLoops.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_SCATTERTOATOMICPASS
#include "ddpc/Codegen/GPU/Passes.h.inc"

namespace {

/// A perfect scf.for nest marked `ddpc.scatter_add` (Autodiff.cpp: the
/// cotangent of a tensor read at computed coordinates, e.g. Gather's table)
/// whose only memory writes are read-modify-write additions
///   %old = memref.load %m[%i...]; %new = arith.addf %old, %v (either
///   order); memref.store %new, %m[%i...]
/// with no other access to %m becomes an scf.parallel over all its loops in
/// which each such store is `memref.atomic_rmw addf %v, %m[%i...]`: one GPU
/// thread per iteration instead of one thread for the whole loop.
LogicalResult rewriteScatterLoop(scf::ForOp outer) {
  if (outer.getNumResults() != 0)
    return failure();
  SmallVector<scf::ForOp> nest{outer};
  while (true) {
    Block *body = nest.back().getBody();
    auto inner = dyn_cast<scf::ForOp>(&body->front());
    if (!inner || body->getOperations().size() != 2 ||
        inner.getNumResults() != 0)
      break;
    nest.push_back(inner);
  }
  Block *body = nest.back().getBody();
  // Every store must be an additive update `m[i] = m[i] + v` whose load
  // has no other use; other ops must not write memory.
  struct Update {
    memref::StoreOp store;
    arith::AddFOp add;
    memref::LoadOp load;
    Value v;
  };
  SmallVector<Update> updates;
  llvm::SmallPtrSet<Operation *, 8> rmwOps;
  for (Operation &op : body->without_terminator()) {
    if (isa<memref::LoadOp>(op) || isMemoryEffectFree(&op))
      continue;
    auto store = dyn_cast<memref::StoreOp>(op);
    auto add = store ? store.getValueToStore().getDefiningOp<arith::AddFOp>()
                     : nullptr;
    if (!add || !add->hasOneUse())
      return failure();
    auto oldLoad = [&](Value x) {
      auto load = x.getDefiningOp<memref::LoadOp>();
      return load && load.getMemRef() == store.getMemRef() &&
                     load.getIndices() == store.getIndices() &&
                     load->hasOneUse()
                 ? load
                 : nullptr;
    };
    memref::LoadOp load = oldLoad(add.getLhs());
    Value v = add.getRhs();
    if (!load) {
      load = oldLoad(add.getRhs());
      v = add.getLhs();
    }
    if (!load)
      return failure();
    updates.push_back({store, add, load, v});
    rmwOps.insert(store);
    rmwOps.insert(load);
  }
  // Nothing else in the body may read an updated buffer (a read would see
  // other iterations' partial sums in any order).
  for (Update &u : updates)
    for (Operation *user : u.store.getMemRef().getUsers())
      if (outer->isAncestor(user) && !rmwOps.contains(user))
        return failure();

  OpBuilder b(outer);
  SmallVector<Value> lbs, ubs, steps;
  for (scf::ForOp loop : nest) {
    lbs.push_back(loop.getLowerBound());
    ubs.push_back(loop.getUpperBound());
    steps.push_back(loop.getStep());
  }
  // Bounds defined inside the nest (constants of an inner loop) cannot
  // bound the parallel loop.
  for (Value v : llvm::concat<Value>(lbs, ubs, steps))
    if (Operation *def = v.getDefiningOp(); def && outer->isAncestor(def))
      return failure();
  auto par = scf::ParallelOp::create(b, outer.getLoc(), lbs, ubs, steps);
  par->setAttrs(outer->getDiscardableAttrDictionary());
  Block *parBody = par.getBody();
  for (auto [loop, iv] : llvm::zip(nest, par.getInductionVars()))
    loop.getInductionVar().replaceAllUsesWith(iv);
  parBody->getOperations().splice(parBody->getTerminator()->getIterator(),
                                  body->getOperations(), body->begin(),
                                  std::prev(body->end()));
  for (Update &u : updates) {
    OpBuilder ub(u.store);
    memref::AtomicRMWOp::create(ub, u.store.getLoc(),
                                arith::AtomicRMWKind::addf, u.v,
                                u.store.getMemRef(), u.store.getIndices());
    u.store.erase();
    u.add.erase();
    u.load.erase();
  }
  outer.erase();
  return success();
}

struct ScatterToAtomicPass
    : impl::ScatterToAtomicPassBase<ScatterToAtomicPass> {

  void runOnOperation() override {
    SmallVector<scf::ForOp> scatterLoops;
    getOperation().walk([&](scf::ForOp loop) {
      if (loop->hasAttr(attrs::kScatterAdd) &&
          !loop->getParentOfType<scf::ForOp>() &&
          !loop->getParentOfType<scf::ParallelOp>())
        scatterLoops.push_back(loop);
    });
    for (scf::ForOp loop : scatterLoops)
      (void)rewriteScatterLoop(loop);
    SmallVector<linalg::GenericOp> candidates;
    getOperation().walk([&](linalg::GenericOp op) {
      if (!op.hasPureBufferSemantics() || op.getNumDpsInits() != 1)
        return;
      // A projected-permutation output (a full reduction to a scalar
      // included) is left to ddpc-split-reductions and upstream's parallel
      // loops: made atomic over all its loops here, a sum of 2.4M gradient
      // terms into one float was 2.4M serialized atomic adds (2.3 s).
      AffineMap outMap = op.getIndexingMapsArray().back();
      if (outMap.isProjectedPermutation())
        return;
      candidates.push_back(op);
    });
    for (linalg::GenericOp op : candidates)
      (void)rewriteAsAtomicLoops(op, op.getNumLoops());
  }
};

} // namespace

} // namespace ddpc

//===- MergeParallelLoops.cpp - independent loops into one kernel ---------===//
//
// Part of ddpc. See Passes.td (ddpc-merge-parallel-loops).
//
// Horizontal fusion: consecutive outermost 1-d scf.parallel loops that do
// not depend on each other through memory become one loop over the
// concatenation of their iteration spaces,
//
//   scf.parallel (%i) = (0) to (n1 + n2 + n3) {
//     scf.if (%i < n1) { body1(%i) } else {
//       scf.if (%i < n1 + n2) { body2(%i - n1) } else { body3(...) } }
//   }
//
// (for more loops a balanced tree of such comparisons), so each group is
// one GPU kernel launch instead of one per loop. The same
// idea is "horizontal fusion" in XLA (HorizontalLoopFusion) and in
// Li et al., "Automatic Horizontal Fusion for GPU Kernels", CGO 2022.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/GPU/Passes.h"
#include "ddpc/Codegen/LibraryCalls.h"
#include "ddpc/Codegen/RuntimeCalls.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"

#include <functional>

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_MERGEPARALLELLOOPSPASS
#include "ddpc/Codegen/GPU/Passes.h.inc"

namespace {

/// The value of the index `v` when it is a constant or an arith
/// add/sub/mul of constants (ddpc-collapse-parallel-loops leaves its trip
/// counts as unfolded products).
std::optional<int64_t> constantIndex(Value v, unsigned depth = 0) {
  if (std::optional<int64_t> c = getConstantIntValue(v))
    return c;
  Operation *op = v.getDefiningOp();
  if (!op || depth > 16 || op->getNumOperands() != 2 ||
      !isa<arith::AddIOp, arith::SubIOp, arith::MulIOp>(op))
    return std::nullopt;
  std::optional<int64_t> a = constantIndex(op->getOperand(0), depth + 1);
  std::optional<int64_t> b = constantIndex(op->getOperand(1), depth + 1);
  if (!a || !b)
    return std::nullopt;
  if (isa<arith::AddIOp>(op))
    return *a + *b;
  if (isa<arith::SubIOp>(op))
    return *a - *b;
  return *a * *b;
}

/// The buffers a loop reads and writes (as the memref values its ops
/// name; mayAlias relates them to others).
struct Accesses {
  llvm::SetVector<Value> reads, writes;
  bool known = true;

  void append(const Accesses &other) {
    reads.insert(other.reads.begin(), other.reads.end());
    writes.insert(other.writes.begin(), other.writes.end());
    known &= other.known;
  }

  bool touches(Value buffer) const {
    return llvm::any_of(reads, [&](Value v) { return mayAlias(v, buffer); }) ||
           llvm::any_of(writes, [&](Value v) { return mayAlias(v, buffer); });
  }
};

/// Whether `call` is a GEMM or convolution library call (RuntimeCalls.h),
/// which touches only the buffers it is passed as pointers.
bool isLibraryCall(func::CallOp call) {
  StringRef callee = call.getCallee();
  return callee == kGemmFn || callee == kGemmEpilogueFn || callee == kConvFn ||
         callee == kConvEpilogueFn;
}

/// Every memory effect of `root` and the ops nested in it. A GEMM or
/// convolution library call is taken to read and write every buffer it
/// is passed (pointerSource); its other arguments must be constants.
/// Unknown when an op has effects that are not on a named memref (another
/// call, say), or that allocate or free memory that outlives `root`.
Accesses accessesOf(Operation *root) {
  Accesses acc;
  root->walk([&](Operation *op) {
    if (op->hasTrait<OpTrait::HasRecursiveMemoryEffects>())
      return; // Nested ops are visited themselves.
    if (auto call = dyn_cast<func::CallOp>(op); call && isLibraryCall(call)) {
      for (Value arg : call.getOperands()) {
        if (Value buffer = pointerSource(arg)) {
          acc.reads.insert(buffer);
          acc.writes.insert(buffer);
        } else if (!getConstantIntValue(arg)) {
          acc.known = false;
        }
      }
      return;
    }
    auto iface = dyn_cast<MemoryEffectOpInterface>(op);
    if (!iface) {
      acc.known = false;
      return;
    }
    SmallVector<MemoryEffects::EffectInstance> effects;
    iface.getEffects(effects);
    for (const MemoryEffects::EffectInstance &e : effects) {
      Value v = e.getValue();
      if (!v || !isa<MemRefType>(v.getType())) {
        acc.known = false;
        continue;
      }
      if (isa<MemoryEffects::Read>(e.getEffect()))
        acc.reads.insert(v);
      else if (isa<MemoryEffects::Write>(e.getEffect()))
        acc.writes.insert(v);
      else if (!root->isAncestor(v.getParentRegion()->getParentOp()))
        acc.known = false; // Allocates or frees memory of the outside.
    }
  });
  return acc;
}

/// Whether running `a` and `b` in either order, or interleaved, gives the
/// same memory: neither writes what the other reads or writes.
bool independent(const Accesses &a, const Accesses &b) {
  auto conflict = [](const llvm::SetVector<Value> &xs,
                     const llvm::SetVector<Value> &ys) {
    for (Value x : xs)
      for (Value y : ys)
        if (mayAlias(x, y))
          return true;
    return false;
  };
  return a.known && b.known && !conflict(a.writes, b.reads) &&
         !conflict(a.writes, b.writes) && !conflict(b.writes, a.reads);
}

/// A 1-d outermost loop without results and with constant bounds: its
/// trip count (>= 1); none otherwise.
std::optional<int64_t> tripCount(scf::ParallelOp loop) {
  if (loop.getNumLoops() != 1 || loop.getNumResults() != 0)
    return std::nullopt;
  std::optional<int64_t> lb = constantIndex(loop.getLowerBound()[0]);
  std::optional<int64_t> ub = constantIndex(loop.getUpperBound()[0]);
  std::optional<int64_t> step = constantIndex(loop.getStep()[0]);
  if (!lb || !ub || !step || *step <= 0 || *ub <= *lb)
    return std::nullopt;
  return (*ub - *lb + *step - 1) / *step;
}

/// The kernel parameters `loop` will take once outlined: the values it uses
/// from outside, except constants (gpu-kernel-outlining sinks those into
/// the kernel).
void addKernelArguments(scf::ParallelOp loop, llvm::SetVector<Value> &args) {
  llvm::SetVector<Value> used;
  getUsedValuesDefinedAbove(loop.getRegion(), loop.getRegion(), used);
  for (Value v : used)
    if (!matchPattern(v, m_Constant()))
      args.insert(v);
}

/// An upper bound of the parameter bytes of a kernel taking `args`: a
/// memref is two pointers (the bare-pointer convention passes the
/// allocated and aligned pointers), anything else at most 8 bytes.
int64_t kernelParamBytes(const llvm::SetVector<Value> &args) {
  int64_t bytes = 0;
  for (Value v : args)
    bytes += isa<MemRefType>(v.getType()) ? 16 : 8;
  return bytes;
}

/// Clones `loop`'s body at `b`'s insertion point for the merged loop's
/// indices `iv` in [start, start + trip count): the loop's own index is
/// lb + (iv - start) * step.
void cloneBody(OpBuilder &b, scf::ParallelOp loop, Value iv, int64_t start) {
  Location loc = loop.getLoc();
  auto constant = [&](int64_t c) {
    return arith::ConstantIndexOp::create(b, loc, c).getResult();
  };
  Value local = iv;
  int64_t lb = *constantIndex(loop.getLowerBound()[0]);
  int64_t step = *constantIndex(loop.getStep()[0]);
  if (start != 0)
    local = arith::SubIOp::create(b, loc, local, constant(start));
  if (step != 1)
    local = arith::MulIOp::create(b, loc, local, constant(step));
  if (lb != 0)
    local = arith::AddIOp::create(b, loc, local, constant(lb));
  IRMapping map;
  map.map(loop.getInductionVars()[0], local);
  for (Operation &op : loop.getBody()->without_terminator())
    b.clone(op, map);
}

/// Replaces `group` (two or more loops of one block, in order, with only
/// ops between them that the loops may move past) by one loop at the
/// place of the last.
void mergeGroup(ArrayRef<scf::ParallelOp> group, ArrayRef<int64_t> trips) {
  scf::ParallelOp last = group.back();
  OpBuilder b(last);
  SmallVector<Location> locs;
  for (scf::ParallelOp loop : group)
    locs.push_back(loop.getLoc());
  Location loc = b.getFusedLoc(locs);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  int64_t total = 0;
  for (int64_t t : trips)
    total += t;
  Value end = arith::ConstantIndexOp::create(b, loc, total);
  auto merged = scf::ParallelOp::create(b, loc, ValueRange{zero},
                                        ValueRange{end}, ValueRange{one});
  Value iv = merged.getInductionVars()[0];

  // starts[k]: the merged index where loop k begins. The bodies are picked
  // by a balanced tree of comparisons, so a thread of one of k loops makes
  // about log2(k) of them.
  SmallVector<int64_t> starts(1, 0);
  for (int64_t t : trips)
    starts.push_back(starts.back() + t);
  std::function<void(size_t, size_t)> emit = [&](size_t lo, size_t hi) {
    if (hi - lo == 1) {
      cloneBody(b, group[lo], iv, starts[lo]);
      return;
    }
    size_t mid = (lo + hi) / 2;
    Location at = scf::ParallelOp(group[mid]).getLoc();
    Value bound = arith::ConstantIndexOp::create(b, at, starts[mid]);
    Value below =
        arith::CmpIOp::create(b, at, arith::CmpIPredicate::ult, iv, bound);
    auto branch = scf::IfOp::create(b, at, below, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(branch.thenBlock()->getTerminator());
    emit(lo, mid);
    b.setInsertionPoint(branch.elseBlock()->getTerminator());
    emit(mid, hi);
  };
  b.setInsertionPoint(merged.getBody()->getTerminator());
  emit(0, group.size());
  for (scf::ParallelOp loop : group)
    loop.erase();
}

struct MergeParallelLoopsPass
    : impl::MergeParallelLoopsPassBase<MergeParallelLoopsPass> {
  using Base::Base;

  void runOnOperation() override {
    // Blocks that hold outermost parallel loops: the function body and the
    // regions of host control flow (library fallbacks).
    SetVector<Block *> blocks;
    getOperation().walk<WalkOrder::PreOrder>([&](scf::ParallelOp loop) {
      blocks.insert(loop->getBlock());
      return WalkResult::skip();
    });
    for (Block *block : blocks)
      mergeIn(*block);
  }

  void mergeIn(Block &block) {
    SmallVector<scf::ParallelOp> group;
    SmallVector<int64_t> trips;
    Accesses groupAcc;
    llvm::SetVector<Value> groupArgs;
    auto flush = [&] {
      if (group.size() > 1) {
        mergeGroup(group, trips);
        ++numMerged;
        numLoopsMerged += group.size();
      }
      group.clear();
      trips.clear();
      groupAcc = Accesses();
      groupArgs.clear();
    };
    // Whether the group's kernel, with `loop` added, stays within
    // maxParamBytes of parameters.
    auto paramsFit = [&](scf::ParallelOp loop) {
      llvm::SetVector<Value> args = groupArgs;
      addKernelArguments(loop, args);
      return kernelParamBytes(args) <= maxParamBytes;
    };
    for (Operation &op : llvm::make_early_inc_range(block)) {
      if (auto loop = dyn_cast<scf::ParallelOp>(op)) {
        std::optional<int64_t> trip = tripCount(loop);
        Accesses acc = accessesOf(loop);
        if (!trip || !acc.known) {
          flush();
          continue;
        }
        if (!group.empty() && (group.size() >= static_cast<size_t>(maxLoops) ||
                               !independent(groupAcc, acc) || !paramsFit(loop)))
          flush();
        group.push_back(loop);
        trips.push_back(*trip);
        groupAcc.append(acc);
        addKernelArguments(loop, groupArgs);
        continue;
      }
      // The group's loops move down to the last one, past ops that touch
      // no memory and past fresh allocations; a dealloc of a buffer the
      // group does not touch is also harmless, and so is a library call
      // (with its fallback code) that is independent of the group.
      if (isMemoryEffectFree(&op) || isa<memref::AllocOp>(op))
        continue;
      if (auto dealloc = dyn_cast<memref::DeallocOp>(op);
          dealloc && !groupAcc.touches(dealloc.getMemref()))
        continue;
      if (isa<func::CallOp, scf::IfOp>(op) && !group.empty() &&
          independent(groupAcc, accessesOf(&op)))
        continue;
      flush();
    }
    flush();
  }
};

} // namespace

} // namespace ddpc

//===- LibraryCalls.cpp - buffer analyses for library calls ---------------===//
//
// Part of ddpc (lib/Codegen). See LibraryCalls.h.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/LibraryCalls.h"
#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"

#include "ddpc/Codegen/RuntimeCalls.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;

namespace ddpc {

bool denseF32(Value v) {
  auto t = dyn_cast<MemRefType>(v.getType());
  return t && t.hasStaticShape() && t.getLayout().isIdentity() &&
         t.getElementType().isF32();
}

bool resultsAre(AffineMap map, ArrayRef<unsigned> dims) {
  if (map.getNumResults() != dims.size())
    return false;
  for (auto [e, d] : llvm::zip(map.getResults(), dims)) {
    auto de = dyn_cast<AffineDimExpr>(e);
    if (!de || de.getPosition() != d)
      return false;
  }
  return true;
}

void copyLabels(Operation *from, Operation *to) {
  for (StringRef attr : {attrs::kFusionGroup, attrs::kFusedNodes})
    if (Attribute v = from->getAttr(attr))
      to->setAttr(attr, v);
}

Value reshapeSource(Value v) {
  while (true) {
    if (auto c = v.getDefiningOp<memref::CollapseShapeOp>())
      v = c.getSrc();
    else if (auto e = v.getDefiningOp<memref::ExpandShapeOp>())
      v = e.getSrc();
    else
      return v;
  }
}

bool mayAlias(Value x, Value y) {
  struct Ref {
    Value root;
    std::optional<std::pair<int64_t, int64_t>> bytes;
  };
  auto refOf = [](Value v) {
    Ref r;
    // Subviews, reshapes and casts stay within their source's memory, so
    // the byte range of the ddpc-plan-arena view they lie in bounds them.
    while (true) {
      v = reshapeSource(v);
      if (auto sub = v.getDefiningOp<memref::SubViewOp>())
        v = sub.getSource();
      else if (auto cast = v.getDefiningOp<memref::CastOp>())
        v = cast.getSource();
      else
        break;
    }
    if (auto view = v.getDefiningOp<memref::ViewOp>()) {
      MemRefType t = view.getType();
      std::optional<int64_t> offset = getConstantIntValue(view.getByteShift());
      Type elem = t.getElementType();
      unsigned bits = elem.isIntOrFloat() ? elem.getIntOrFloatBitWidth() : 0;
      if (offset && t.hasStaticShape() && bits && bits % 8 == 0)
        r.bytes =
            std::make_pair(*offset, *offset + t.getNumElements() * (bits / 8));
      v = view.getSource();
    }
    while (auto viewLike = v.getDefiningOp<ViewLikeOpInterface>()) {
      v = viewLike.getViewSource();
      r.bytes.reset();
    }
    r.root = v;
    return r;
  };
  Ref a = refOf(x), b = refOf(y);
  if (a.root != b.root) {
    // Distinct roots are distinct memory only when both are known bases:
    // allocations, globals and function arguments. A root chosen at run
    // time (a select, an scf.if or call result) may be any buffer.
    auto functionArgument = [](Value v) -> BlockArgument {
      auto arg = dyn_cast<BlockArgument>(v);
      return arg && isa<func::FuncOp>(arg.getOwner()->getParentOp()) &&
                     arg.getOwner()->isEntryBlock()
                 ? arg
                 : BlockArgument();
    };
    auto isBase = [&](Value v) {
      return v.getDefiningOp<memref::AllocOp>() ||
             v.getDefiningOp<memref::GetGlobalOp>() || functionArgument(v);
    };
    if (!isBase(a.root) || !isBase(b.root))
      return true;
    // Globals (the model's constants) are memory of their own.
    auto globalA = a.root.getDefiningOp<memref::GetGlobalOp>();
    auto globalB = b.root.getDefiningOp<memref::GetGlobalOp>();
    if (globalA || globalB)
      return globalA && globalB && globalA.getName() == globalB.getName();
    // The runtime passes every buffer argument of an entry (public)
    // function as its own allocation (ModelABI.h, TrainABI.h); private
    // helpers may be called with overlapping views. An allocation is new
    // memory, distinct from every argument.
    BlockArgument argA = functionArgument(a.root);
    BlockArgument argB = functionArgument(b.root);
    if (argA && argB)
      return argA.getOwner() != argB.getOwner() ||
             !cast<func::FuncOp>(argA.getOwner()->getParentOp()).isPublic();
    return false;
  }
  if (a.bytes && b.bytes)
    return a.bytes->first < b.bytes->second && b.bytes->first < a.bytes->second;
  return true;
}

/// The buffer `v` is part of: its reshapes and views looked through up to
/// an allocation, a function argument, or one ddpc-plan-arena buffer (a
/// memref.view of the arena allocation).
static Value bufferOf(Value v) {
  while (true) {
    v = reshapeSource(v);
    if (auto view = v.getDefiningOp<memref::ViewOp>())
      if (view.getSource().getDefiningOp<memref::AllocOp>())
        return v;
    auto viewLike = v.getDefiningOp<ViewLikeOpInterface>();
    if (!viewLike)
      return v;
    v = viewLike.getViewSource();
  }
}

bool usedAfter(Operation *op, Value buffer) {
  // Arena buffers share bytes only when their live ranges are disjoint:
  // a later buffer at the same offset never reads this one's contents.
  Value target = bufferOf(buffer);
  if (isa<BlockArgument>(target))
    return true;
  for (Operation *scope = op; scope && !isa<func::FuncOp>(scope);
       scope = scope->getParentOp())
    for (Operation *next = scope->getNextNode(); next;
         next = next->getNextNode()) {
      WalkResult found = next->walk([&](Operation *inner) {
        if (isa<memref::DeallocOp>(inner))
          return WalkResult::advance();
        for (Value v : inner->getOperands())
          if (isa<MemRefType>(v.getType()) && bufferOf(v) == target)
            return WalkResult::interrupt();
        return WalkResult::advance();
      });
      if (found.wasInterrupted())
        return true;
    }
  return false;
}

Operation *findZeroFillOf(Operation *at, Value c) {
  Value target = reshapeSource(c);
  for (Operation *op = at->getPrevNode(); op; op = op->getPrevNode()) {
    if (auto fill = dyn_cast<linalg::FillOp>(op)) {
      if (fill.hasPureBufferSemantics() &&
          reshapeSource(fill.getDpsInitOperand(0)->get()) == target) {
        if (!matchPattern(fill.getInputs()[0], m_AnyZeroFloat()))
          return nullptr;
        return fill;
      }
    }
    if (isMemoryEffectFree(op))
      continue;
    // Calls take pointers as integers; region ops other than linalg may
    // access buffers their operands do not show.
    if (isa<CallOpInterface>(op) ||
        (op->getNumRegions() && !isa<linalg::LinalgOp>(op)))
      return nullptr;
    for (Value v : op->getOperands())
      if (isa<MemRefType>(v.getType()) && mayAlias(v, c))
        return nullptr;
  }
  return nullptr;
}

bool eraseZeroFillOf(Operation *at, Value c) {
  Operation *fill = findZeroFillOf(at, c);
  if (fill)
    fill->erase();
  return fill;
}

func::CallOp emitGemmCall(Operation *at, int64_t batch, int64_t m, int64_t n,
                          int64_t k, int transA, int transB, Value a, Value bm,
                          Value c, int64_t strideA, int64_t strideB,
                          int64_t strideC, bool accumulate, StringRef library) {
  OpBuilder b(at);
  RuntimeArgs arg{b, at->getLoc()};
  auto i64 = [&](int64_t v) { return arg.integer(v, 64); };
  auto i32 = [&](int64_t v) { return arg.integer(v, 32); };
  auto ptr = [&](Value mem) { return arg.pointer(mem); };
  Location loc = at->getLoc();
  SmallVector<Value> args = {
      i64(batch),   i64(m),       i64(n),         i64(k), i32(transA),
      i32(transB),  ptr(a),       ptr(bm),        ptr(c), i64(strideA),
      i64(strideB), i64(strideC), i32(accumulate)};
  auto module = at->getParentOfType<ModuleOp>();
  auto fn = getOrDeclare(module, kGemmFn,
                         b.getFunctionType(ValueRange(args).getTypes(), {}));
  auto call = func::CallOp::create(b, loc, fn, args);
  copyLabels(at, call);
  call->setAttr(attrs::kLibrary, b.getStringAttr(library));
  return call;
}

scf::IfOp emitLibraryCallWithFallback(OpBuilder &b, Location loc,
                                      Operation *labels, StringRef name,
                                      ValueRange args, StringRef library) {
  auto module =
      b.getInsertionBlock()->getParentOp()->getParentOfType<ModuleOp>();
  auto fn = getOrDeclare(module, name,
                         b.getFunctionType(args.getTypes(), {b.getI32Type()}));
  auto call = func::CallOp::create(b, loc, fn, args);
  copyLabels(labels, call);
  call->setAttr(attrs::kLibrary, b.getStringAttr(library));
  Value declined =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, call.getResult(0),
                            arith::ConstantIntOp::create(b, loc, 0, 32));
  auto fallback = scf::IfOp::create(b, loc, declined, /*withElse=*/false);
  fallback->setAttr(attrs::kLibraryFallback, b.getUnitAttr());
  return fallback;
}

Value pointerSource(Value v) {
  auto cast = v.getDefiningOp<arith::IndexCastOp>();
  auto ptr =
      cast
          ? cast.getIn().getDefiningOp<memref::ExtractAlignedPointerAsIndexOp>()
          : nullptr;
  return ptr ? ptr.getSource() : Value();
}

std::optional<int64_t> constantArg(func::CallOp call, unsigned i) {
  return getConstantIntValue(call.getOperand(i));
}

linalg::GenericOp nextElementwiseKernel(Operation *op, unsigned rank) {
  Operation *next = op->getNextNode();
  SmallVector<Operation *> frees;
  while (next && (isMemoryEffectFree(next) || isa<memref::DeallocOp>(next))) {
    if (isa<memref::DeallocOp>(next))
      frees.push_back(next);
    next = next->getNextNode();
  }
  auto g = dyn_cast_or_null<linalg::GenericOp>(next);
  if (!g || !g.hasPureBufferSemantics() || g.getNumDpsInputs() != 2 ||
      g.getNumDpsInits() != 1 || g.getNumLoops() != rank ||
      g.getNumParallelLoops() != rank)
    return {};
  // Buffers freed in between (ddpc-free-at-last-use) may be the library
  // call's inputs, which a fused call at `g` still reads: free them after.
  for (Operation *free : llvm::reverse(frees))
    free->moveAfter(g);
  return g;
}

bool readsAlongLoop(AffineMap map, unsigned dim, ArrayRef<int64_t> ranges) {
  unsigned along = 0;
  for (AffineExpr e : map.getResults()) {
    if (auto d = dyn_cast<AffineDimExpr>(e)) {
      if (d.getPosition() == dim)
        ++along;
      else if (d.getPosition() >= ranges.size() || ranges[d.getPosition()] != 1)
        return false;
    } else if (auto c = dyn_cast<AffineConstantExpr>(e); !c || c.getValue()) {
      return false;
    }
  }
  return along == 1;
}

std::optional<int32_t> matchBiasActivation(Block &body, Value c, Value bias) {
  auto add = dyn_cast<arith::AddFOp>(body.front());
  if (!add || !((add.getLhs() == c && add.getRhs() == bias) ||
                (add.getLhs() == bias && add.getRhs() == c)))
    return std::nullopt;
  Value s = add.getResult();
  Value y = body.getTerminator()->getOperand(0);
  size_t ops = body.getOperations().size(); // With the yield.
  auto isZero = [](Value v) { return matchPattern(v, m_AnyZeroFloat()); };
  if (ops == 2 && y == s)
    return 0;
  if (auto max = y.getDefiningOp<arith::MaximumFOp>(); max && ops == 3) {
    if ((max.getLhs() == s && isZero(max.getRhs())) ||
        (max.getRhs() == s && isZero(max.getLhs())))
      return 1;
    return std::nullopt;
  }
  auto outer = y.getDefiningOp<arith::SelectOp>();
  if (!outer || ops != 6 || outer.getTrueValue() != s)
    return std::nullopt;
  auto positive = outer.getCondition().getDefiningOp<arith::CmpFOp>();
  auto inner = outer.getFalseValue().getDefiningOp<arith::SelectOp>();
  if (!positive || positive.getPredicate() != arith::CmpFPredicate::OGT ||
      positive.getLhs() != s || !isZero(positive.getRhs()) || !inner ||
      inner.getTrueValue() != s || !isZero(inner.getFalseValue()))
    return std::nullopt;
  auto nan = inner.getCondition().getDefiningOp<arith::CmpFOp>();
  if (!nan || nan.getPredicate() != arith::CmpFPredicate::UNO ||
      nan.getLhs() != s || nan.getRhs() != s)
    return std::nullopt;
  return 1;
}

} // namespace ddpc

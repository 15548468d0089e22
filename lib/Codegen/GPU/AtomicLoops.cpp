//===- AtomicLoops.cpp - additive generics as atomic loops ----------------===//
//
// Part of ddpc (private to lib/Codegen/GPU). See AtomicLoops.h.
//
//===----------------------------------------------------------------------===//

#include "AtomicLoops.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"

#include <functional>

using namespace mlir;

namespace ddpc {

Value additiveContribution(linalg::GenericOp op, unsigned *outputIndex) {
  Block &body = op.getRegion().front();
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  unsigned numInputs = op.getNumDpsInputs();
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  Value contribution;
  for (unsigned i = 0; i < op.getNumDpsInits(); ++i) {
    BlockArgument acc = body.getArgument(numInputs + i);
    if (acc.use_empty() && maps[numInputs + i].isPermutation())
      continue; // A plain write.
    auto add = yield.getOperand(i).getDefiningOp<arith::AddFOp>();
    if (contribution || !add || !acc.hasOneUse())
      return {};
    if (add.getLhs() == acc)
      contribution = add.getRhs();
    else if (add.getRhs() == acc)
      contribution = add.getLhs();
    else
      return {};
    if (outputIndex)
      *outputIndex = i;
  }
  return contribution;
}

LogicalResult rewriteAsAtomicLoops(linalg::GenericOp op, unsigned numOuter) {
  unsigned r = 0;
  Value contribution = additiveContribution(op, &r);
  if (!contribution)
    return failure();
  unsigned numInputs = op.getNumDpsInputs();
  Value out = op.getDpsInitOperand(r)->get();
  auto outType = dyn_cast<MemRefType>(out.getType());
  if (!contribution || !outType || !isa<FloatType>(outType.getElementType()))
    return failure();
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (llvm::any_of(ranges, ShapedType::isDynamic) || numOuter == 0 ||
      numOuter > ranges.size())
    return failure();
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  SmallVector<Value> ubs;
  for (int64_t r : ranges)
    ubs.push_back(arith::ConstantIndexOp::create(b, loc, r));
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  Block &body = op.getRegion().front();
  Operation *addOp = body.getTerminator()->getOperand(r).getDefiningOp();
  auto indices = [&](OpBuilder &nb, AffineMap map, ValueRange ivs) {
    SmallVector<Value> idx;
    for (AffineExpr e : map.getResults())
      idx.push_back(affine::AffineApplyOp::create(
          nb, loc, AffineMap::get(map.getNumDims(), 0, e), ivs));
    return idx;
  };
  // The term v(ivs), cloned from the body at `nb`'s insertion point.
  auto term = [&](OpBuilder &nb, ValueRange ivs) {
    IRMapping mapping;
    for (OpOperand *in : op.getDpsInputOperands()) {
      Value v = in->get();
      Value arg = body.getArgument(in->getOperandNumber());
      if (isa<MemRefType>(v.getType()))
        v = memref::LoadOp::create(
            nb, loc, v, indices(nb, maps[in->getOperandNumber()], ivs));
      mapping.map(arg, v);
    }
    for (Operation &inner : body.without_terminator()) {
      if (auto index = dyn_cast<linalg::IndexOp>(inner)) {
        mapping.map(index.getResult(), ivs[index.getDim()]);
        continue;
      }
      if (&inner == addOp)
        continue;
      nb.clone(inner, mapping);
    }
    // The plain writes of the other outputs, one element per iteration.
    for (auto [i, v] : llvm::enumerate(body.getTerminator()->getOperands()))
      if (i != r)
        memref::StoreOp::create(nb, loc, mapping.lookupOrDefault(v),
                                op.getDpsInitOperand(i)->get(),
                                indices(nb, maps[numInputs + i], ivs));
    return mapping.lookupOrDefault(contribution);
  };
  unsigned n = ranges.size();
  scf::ParallelOp::create(
      b, loc, SmallVector<Value>(numOuter, zero),
      ArrayRef<Value>(ubs).take_front(numOuter),
      SmallVector<Value>(numOuter, one),
      [&](OpBuilder &nb, Location l, ValueRange outer) {
        SmallVector<Value> ivs(outer.begin(), outer.end());
        Value sum;
        if (numOuter == n) {
          sum = term(nb, ivs);
        } else {
          Type elem = outType.getElementType();
          Value init = arith::ConstantOp::create(nb, l, nb.getZeroAttr(elem));
          // Nested loops over the inner dims, threading the partial sum.
          std::function<Value(OpBuilder &, unsigned, Value)> build =
              [&](OpBuilder &fb, unsigned d, Value acc) -> Value {
            auto loop = scf::ForOp::create(
                fb, l, zero, ubs[d], one, ValueRange{acc},
                [&](OpBuilder &lb, Location ll, Value iv, ValueRange args) {
                  ivs.push_back(iv);
                  Value next = d + 1 == n ? arith::AddFOp::create(
                                                lb, ll, args[0], term(lb, ivs))
                                                .getResult()
                                          : build(lb, d + 1, args[0]);
                  ivs.pop_back();
                  scf::YieldOp::create(lb, ll, next);
                });
            return loop.getResult(0);
          };
          sum = build(nb, numOuter, init);
        }
        // The output map reads only outer loops (the split reductions
        // check it; for scatters all loops are outer): inner ones are 0.
        SmallVector<Value> all(ivs);
        all.resize(n, zero);
        memref::AtomicRMWOp::create(nb, l, arith::AtomicRMWKind::addf, sum, out,
                                    indices(nb, maps[numInputs + r], all));
      });
  op->erase();
  return success();
}

} // namespace ddpc

//===- ConvEpilogues.cpp - convolution + bias/ReLU kernel to cuDNN --------===//
//
// Part of ddpc. See Passes.td (ddpc-conv-epilogues).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/Passes.h"

#include "ddpc/Codegen/LibraryCalls.h"
#include "ddpc/Codegen/RuntimeCalls.h"
#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_CONVEPILOGUESPASS
#include "ddpc/Codegen/Passes.h.inc"

namespace {

/// Operand positions of ddpc_conv2d_f32 (Runtime/Gemm.h): kind, the 14
/// shape operands (n, c, h, w, k, r, s, p, q, strides, dilations, groups),
/// x, w, y, accumulate.
constexpr unsigned kKindArg = 0, kFirstShapeArg = 1, kNumShapeArgs = 14,
                   kXArg = 15, kWArg = 16, kYArg = 17, kAccumulateArg = 18;

struct ConvEpiloguesPass : impl::ConvEpiloguesPassBase<ConvEpiloguesPass> {

  void runOnOperation() override {
    SmallVector<func::CallOp> convs;
    getOperation().walk([&](func::CallOp call) {
      if (call.getCallee() == kConvFn &&
          call.getNumOperands() == kAccumulateArg + 1 &&
          call.getNumResults() == 1)
        convs.push_back(call);
    });
    for (func::CallOp call : convs)
      (void)rewrite(call);
  }

  LogicalResult rewrite(func::CallOp call) {
    // A forward convolution that overwrites y, and its fallback.
    if (constantArg(call, kKindArg) != 0 ||
        constantArg(call, kAccumulateArg) != 0)
      return failure();
    SmallVector<int64_t> shape;
    for (unsigned i = 0; i < kNumShapeArgs; ++i) {
      std::optional<int64_t> v = constantArg(call, kFirstShapeArg + i);
      if (!v)
        return failure();
      shape.push_back(*v);
    }
    Value x = pointerSource(call.getOperand(kXArg)),
          w = pointerSource(call.getOperand(kWArg)),
          y = pointerSource(call.getOperand(kYArg));
    Value done = call.getResult(0);
    if (!x || !w || !y || !done.hasOneUse())
      return failure();
    auto declined = dyn_cast<arith::CmpIOp>(*done.getUsers().begin());
    if (!declined || !declined->hasOneUse())
      return failure();
    auto fallback = dyn_cast<scf::IfOp>(*declined->getUsers().begin());
    if (!fallback || !fallback->hasAttr(attrs::kLibraryFallback) ||
        fallback->getBlock() != call->getBlock())
      return failure();

    // The next op that touches memory: D[n,k,p,q] = act(y[n,k,p,q] +
    // bias[k]), elementwise over y's shape.
    linalg::GenericOp g = nextElementwiseKernel(fallback, 4);
    if (!g)
      return failure();
    int64_t n = shape[0], k = shape[4], p = shape[7], q = shape[8];
    if (g.getStaticLoopRanges() != SmallVector<int64_t>{n, k, p, q})
      return failure();
    Value target = reshapeSource(y);
    unsigned yi =
        reshapeSource(g.getDpsInputOperand(0)->get()) == target ? 0 : 1;
    Value yIn = g.getDpsInputOperand(yi)->get();
    Value bias = g.getDpsInputOperand(1 - yi)->get();
    Value d = g.getDpsInitOperand(0)->get();
    SmallVector<AffineMap> maps = g.getIndexingMapsArray();
    AffineMap identity = AffineMap::getMultiDimIdentityMap(4, g.getContext());
    if (reshapeSource(yIn) != target || !denseF32(yIn) || !denseF32(bias) ||
        cast<MemRefType>(bias.getType()).getNumElements() != k ||
        !denseF32(d) || maps[yi] != identity ||
        !readsAlongLoop(maps[1 - yi], 1, {n, k, p, q}) || maps[2] != identity)
      return failure();
    Block &body = g.getRegion().front();
    if (!body.getArgument(2).use_empty())
      return failure();
    std::optional<int32_t> act = matchBiasActivation(body, body.getArgument(yi),
                                                     body.getArgument(1 - yi));
    if (!act)
      return failure();
    // cuDNN reads x, w and bias while it writes D; with D != y it never
    // writes y, so nothing may read y later.
    if (mayAlias(d, x) || mayAlias(d, w) || mayAlias(d, bias) ||
        (reshapeSource(d) != target && usedAfter(g, y)))
      return failure();

    // done = ddpc_conv2d_bias_act_f32(shape..., x, w, bias, D, act);
    // if (!done) { the convolution and its fallback; the kernel }.
    OpBuilder b(g);
    Location loc = call.getLoc();
    RuntimeArgs arg{b, loc};
    SmallVector<Value> args(
        call.getOperands().slice(kFirstShapeArg, kNumShapeArgs));
    args.append({call.getOperand(kXArg), call.getOperand(kWArg),
                 arg.pointer(bias), arg.pointer(d), arg.integer(*act, 32)});
    scf::IfOp outer =
        emitLibraryCallWithFallback(b, loc, g, kConvEpilogueFn, args, "cudnn");
    Operation *yield = outer.thenBlock()->getTerminator();
    for (Operation *op : {call.getOperation(), declined.getOperation(),
                          fallback.getOperation(), g.getOperation()})
      op->moveBefore(yield);
    return success();
  }
};

} // namespace

} // namespace ddpc

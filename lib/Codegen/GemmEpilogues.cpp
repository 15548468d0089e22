//===- GemmEpilogues.cpp - GEMM + bias/ReLU kernel to cuBLASLt ------------===//
//
// Part of ddpc. See Passes.td (ddpc-gemm-epilogues).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/Passes.h"

#include "ddpc/Codegen/LibraryCalls.h"
#include "ddpc/Codegen/RuntimeCalls.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_GEMMEPILOGUESPASS
#include "ddpc/Codegen/Passes.h.inc"

namespace {

struct GemmEpiloguesPass : impl::GemmEpiloguesPassBase<GemmEpiloguesPass> {
  using impl::GemmEpiloguesPassBase<GemmEpiloguesPass>::GemmEpiloguesPassBase;

  void runOnOperation() override {
    SmallVector<func::CallOp> gemms;
    getOperation().walk([&](func::CallOp call) {
      if (call.getCallee() == kGemmFn && call.getNumOperands() == 13)
        gemms.push_back(call);
    });
    for (func::CallOp call : gemms)
      (void)rewrite(call);
  }

  LogicalResult rewrite(func::CallOp call) {
    // One GEMM that overwrites C.
    if (constantArg(call, 0) != 1 || constantArg(call, 12) != 0)
      return failure();
    Value c = pointerSource(call.getOperand(8));
    if (!c)
      return failure();
    // The next op that touches memory: D = act(C + bias), elementwise.
    linalg::GenericOp g = nextElementwiseKernel(call, 2);
    if (!g)
      return failure();
    SmallVector<AffineMap> maps = g.getIndexingMapsArray();
    MLIRContext *ctx = g.getContext();
    AffineMap identity = AffineMap::getMultiDimIdentityMap(2, ctx);
    unsigned ci = g.getDpsInputOperand(0)->get() == c ? 0 : 1;
    Value bias = g.getDpsInputOperand(1 - ci)->get();
    Value d = g.getDpsInitOperand(0)->get();
    SmallVector<int64_t> ranges = g.getStaticLoopRanges();
    if (g.getDpsInputOperand(ci)->get() != c || maps[ci] != identity ||
        !readsAlongLoop(maps[1 - ci], 1, ranges) || maps[2] != identity ||
        !denseF32(bias) ||
        cast<MemRefType>(bias.getType()).getNumElements() != ranges[1] ||
        !denseF32(d) || d.getType() != c.getType())
      return failure();
    Block &body = g.getRegion().front();
    if (!body.getArgument(2).use_empty())
      return failure();
    std::optional<int32_t> act = matchBiasActivation(body, body.getArgument(ci),
                                                     body.getArgument(1 - ci));
    if (!act)
      return failure();
    // The library reads A, B and bias while it writes D.
    Value a = pointerSource(call.getOperand(6)),
          bm = pointerSource(call.getOperand(7));
    if (!a || !bm || mayAlias(d, a) || mayAlias(d, bm) || mayAlias(d, bias))
      return failure();
    // With D != C the epilogue never writes C: nothing may read it later.
    if (reshapeSource(d) != reshapeSource(c) && usedAfter(g, c))
      return failure();

    // done = ddpc_gemm_bias_act_f32(m, n, k, transA, transB, A, B, D, bias,
    // act); if (!done) { the GEMM; the kernel }.
    OpBuilder b(g);
    Location loc = call.getLoc();
    RuntimeArgs arg{b, loc};
    auto ptr = [&](Value mem) { return arg.pointer(mem); };
    SmallVector<Value> args = {
        call.getOperand(1), call.getOperand(2),
        call.getOperand(3), call.getOperand(4),
        call.getOperand(5), call.getOperand(6),
        call.getOperand(7), ptr(d),
        ptr(bias),          arith::ConstantIntOp::create(b, loc, *act, 32)};
    scf::IfOp fallback =
        emitLibraryCallWithFallback(b, loc, g, kGemmEpilogueFn, args, library);
    Operation *yield = fallback.thenBlock()->getTerminator();
    call->moveBefore(yield);
    g->moveBefore(yield);
    return success();
  }
};

} // namespace

} // namespace ddpc

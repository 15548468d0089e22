//===- GPUPasses.cpp - memref-level helpers of the CUDA pipeline ----------===//
//
// Part of ddpc. See Passes.h for what each pass does. Everything between
// these passes in the CUDA pipeline is upstream (convert-linalg-to-parallel-
// loops, scf-parallel-loop-tiling, gpu-map-parallel-loops,
// convert-parallel-loops-to-gpu, gpu-kernel-outlining, ...).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Transforms/Passes.h"

#include "RuntimeCalls.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"

#include <functional>
#include <optional>

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_GEMMTOLIBRARYCALLPASS
#define GEN_PASS_DEF_GEMMEPILOGUESPASS
#define GEN_PASS_DEF_CONVTOGEMMPASS
#define GEN_PASS_DEF_SCATTERTOATOMICPASS
#define GEN_PASS_DEF_MEMREFCOPYTOLINALGPASS
#define GEN_PASS_DEF_PARALLELLOOPSOUTERMOSTPASS
#define GEN_PASS_DEF_SPLITREDUCTIONSPASS
#define GEN_PASS_DEF_SERIALLOOPSTODEVICEPASS
#define GEN_PASS_DEF_COLLAPSEPARALLELLOOPSPASS
#define GEN_PASS_DEF_GPUHOSTSYNCPASS
#define GEN_PASS_DEF_GPUMERGEMODULESPASS
#include "ddpc/Transforms/Passes.h.inc"

func::FuncOp getOrDeclare(ModuleOp module, StringRef name, FunctionType type) {
  if (auto f = module.lookupSymbol<func::FuncOp>(name))
    return f;
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  auto f = func::FuncOp::create(b, module.getLoc(), name, type);
  f.setPrivate();
  return f;
}

namespace {

/// Names of the runtime entry points that enqueue work on the compute
/// stream (they need no host synchronization before them).
constexpr StringLiteral kGemmFn = "ddpc_gemm_f32";
constexpr StringLiteral kGemmEpilogueFn = "ddpc_gemm_bias_act_f32";
constexpr StringLiteral kAllReduceFn = "ddpc_rt_allreduce_sum_f32";
/// Gradient buckets (ddpc-bucket-gradient-allreduce): NCCL on the
/// communication stream, ordered with events against the compute stream.
constexpr StringLiteral kBucketFns[] = {kBucketAddFn, kBucketStartFn,
                                        kBucketWaitFn};
constexpr StringLiteral kSyncFn = "ddpc_gpu_host_sync";
constexpr StringLiteral kConvFn = "ddpc_conv2d_f32";
/// Marks an scf.if that runs generated code when a library call declined
/// (returned 0): a GEMM and its epilogue kernel (ddpc-gemm-epilogues), or
/// a convolution's im2col + GEMM lowering (ddpc-conv-to-gemm, cuDNN).
constexpr StringLiteral kLibraryFallbackAttr = "ddpc.library_fallback";

bool denseF32(Value v) {
  auto t = dyn_cast<MemRefType>(v.getType());
  return t && t.hasStaticShape() && t.getLayout().isIdentity() &&
         t.getElementType().isF32();
}

//===----------------------------------------------------------------------===//
// ddpc-gemm-to-library-call
//===----------------------------------------------------------------------===//

/// Position of each dim of `map`'s results in `dims` order, or failure when
/// the results are not exactly those dims.
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

/// Copies `from`'s fusion-group labels (ddpc.fusion_group,
/// ddpc.fused_nodes) to `to`, an op that now does (part of) its work.
void copyLabels(Operation *from, Operation *to) {
  for (StringRef attr : {"ddpc.fusion_group", "ddpc.fused_nodes"})
    if (Attribute v = from->getAttr(attr))
      to->setAttr(attr, v);
}

/// `v` with memref.collapse_shape/expand_shape ops looked through: the
/// buffer `v` is a reshape of (same elements, same order).
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

/// Whether buffers `x` and `y` may share memory. Distinct allocations do
/// not; views of one allocation (ddpc-plan-arena's memref.view at constant
/// byte offsets) do only when their byte ranges overlap; function arguments
/// may alias each other (conservatively) but not allocations.
bool mayAlias(Value x, Value y) {
  struct Ref {
    Value root;
    std::optional<std::pair<int64_t, int64_t>> bytes;
  };
  auto refOf = [](Value v) {
    Ref r;
    v = reshapeSource(v);
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
  if (a.root != b.root)
    return !a.root.getDefiningOp<memref::AllocOp>() &&
           !b.root.getDefiningOp<memref::AllocOp>();
  if (a.bytes && b.bytes)
    return a.bytes->first < b.bytes->second && b.bytes->first < a.bytes->second;
  return true;
}

/// Looks backwards from `at` (a GEMM or convolution about to write all of
/// `c`) for the `linalg.fill` of zero that initializes `c` (or the buffer
/// `c` reshapes), over ops that cannot touch `c`'s memory; null if there is
/// none. eraseZeroFillOf erases it and returns whether it did: the library
/// call then overwrites `c` (BLAS/cuDNN beta = 0) instead of accumulating
/// into zeros written by a separate kernel.
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

/// Emits `ddpc_gemm_f32(batch, m, n, k, transA, transB, A, B, C, strideA,
/// strideB, strideC, accumulate)` (Gemm.h) before `at`, labelled with
/// `at`'s fusion group and ONNX nodes.
func::CallOp emitGemmCall(Operation *at, int64_t batch, int64_t m, int64_t n,
                          int64_t k, int transA, int transB, Value a, Value bm,
                          Value c, int64_t strideA, int64_t strideB,
                          int64_t strideC, bool accumulate) {
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
  call->setAttr("ddpc.library", b.getStringAttr("cublas"));
  return call;
}

struct GemmToLibraryCallPass
    : impl::GemmToLibraryCallPassBase<GemmToLibraryCallPass> {

  void runOnOperation() override {
    SmallVector<linalg::LinalgOp> candidates;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (op.hasPureBufferSemantics() && op.getNumDpsInputs() == 2 &&
          op.getNumDpsInits() == 1 && linalg::isaContractionOpInterface(op))
        candidates.push_back(op);
    });
    for (linalg::LinalgOp op : candidates)
      (void)rewrite(op);
  }

  LogicalResult rewrite(linalg::LinalgOp op) {
    Value a = op.getDpsInputOperand(0)->get();
    Value bm = op.getDpsInputOperand(1)->get();
    Value c = op.getDpsInitOperand(0)->get();
    if (!denseF32(a) || !denseF32(bm) || !denseF32(c))
      return failure();
    FailureOr<linalg::ContractionDimensions> dims =
        linalg::inferContractionDims(op);
    if (failed(dims) || dims->m.size() != 1 || dims->n.size() != 1 ||
        dims->k.size() != 1 || dims->batch.size() > 1 ||
        op.getNumLoops() != 3 + dims->batch.size())
      return failure();
    SmallVector<unsigned> batch(dims->batch.begin(), dims->batch.end());
    unsigned m = dims->m[0], n = dims->n[0], k = dims->k[0];
    auto with = [&](unsigned x, unsigned y) {
      SmallVector<unsigned> r = batch;
      r.push_back(x);
      r.push_back(y);
      return r;
    };
    SmallVector<AffineMap> maps = op.getIndexingMapsArray();
    // inferContractionDims names m/n relative to the first input; the
    // output's dim order decides which is the row dimension here.
    if (!resultsAre(maps[2], with(m, n))) {
      if (!resultsAre(maps[2], with(n, m)))
        return failure();
      std::swap(m, n);
    }
    // The multiplication commutes: either input may be the [m, k] operand
    // (VJPs of MatMul produce both orders).
    auto classify = [&](AffineMap aMap, AffineMap bMap, int &transA,
                        int &transB) {
      if (resultsAre(aMap, with(m, k)))
        transA = 0;
      else if (resultsAre(aMap, with(k, m)))
        transA = 1;
      else
        return false;
      if (resultsAre(bMap, with(k, n)))
        transB = 0;
      else if (resultsAre(bMap, with(n, k)))
        transB = 1;
      else
        return false;
      return true;
    };
    int transA, transB;
    if (!classify(maps[0], maps[1], transA, transB)) {
      if (!classify(maps[1], maps[0], transA, transB))
        return failure();
      std::swap(a, bm);
    }

    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    int64_t batchSize = batch.empty() ? 1 : ranges[batch[0]];
    int64_t M = ranges[m], N = ranges[n], K = ranges[k];
    // The contraction writes every element of c (dense, batch-major).
    bool zeroed = eraseZeroFillOf(op, c);
    emitGemmCall(op, batchSize, M, N, K, transA, transB, a, bm, c, M * K, K * N,
                 M * N, /*accumulate=*/!zeroed);
    op->erase();
    return success();
  }
};

//===----------------------------------------------------------------------===//
// ddpc-gemm-epilogues
//===----------------------------------------------------------------------===//

/// The memref whose aligned pointer the i64 call argument `v` is (the form
/// emitGemmCall passes buffers in); null otherwise.
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

/// The activation when `body` is `s = c + bias` (either order) followed by
/// `yield s` (0) or by a ReLU of s (1): `maximumf(s, 0)` or the importer's
/// NaN-propagating `select(s > 0, s, select(isnan(s), s, 0))`.
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

struct GemmEpiloguesPass : impl::GemmEpiloguesPassBase<GemmEpiloguesPass> {

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
    Operation *next = call->getNextNode();
    while (next && isMemoryEffectFree(next))
      next = next->getNextNode();
    auto g = dyn_cast_or_null<linalg::GenericOp>(next);
    if (!g || !g.hasPureBufferSemantics() || g.getNumDpsInputs() != 2 ||
        g.getNumDpsInits() != 1 || g.getNumLoops() != 2 ||
        g.getNumParallelLoops() != 2)
      return failure();
    SmallVector<AffineMap> maps = g.getIndexingMapsArray();
    MLIRContext *ctx = g.getContext();
    AffineMap identity = AffineMap::getMultiDimIdentityMap(2, ctx);
    AffineMap alongN = AffineMap::get(2, 0, getAffineDimExpr(1, ctx));
    unsigned ci = g.getDpsInputOperand(0)->get() == c ? 0 : 1;
    Value bias = g.getDpsInputOperand(1 - ci)->get();
    Value d = g.getDpsInitOperand(0)->get();
    auto biasType = dyn_cast<MemRefType>(bias.getType());
    if (g.getDpsInputOperand(ci)->get() != c || maps[ci] != identity ||
        maps[1 - ci] != alongN || maps[2] != identity || !denseF32(bias) ||
        biasType.getRank() != 1 || !denseF32(d) || d.getType() != c.getType())
      return failure();
    Block &body = g.getRegion().front();
    if (!body.getArgument(2).use_empty())
      return failure();
    std::optional<int32_t> act = matchBiasActivation(body, body.getArgument(ci),
                                                     body.getArgument(1 - ci));
    if (!act)
      return failure();
    // With D != C the epilogue never writes C: nothing may read it later.
    if (reshapeSource(d) != reshapeSource(c))
      for (Operation *op = g->getNextNode(); op; op = op->getNextNode())
        if (!isa<memref::DeallocOp>(op))
          for (Value v : op->getOperands())
            if (isa<MemRefType>(v.getType()) && mayAlias(v, c))
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
    auto fn = getOrDeclare(
        g->getParentOfType<ModuleOp>(), kGemmEpilogueFn,
        b.getFunctionType(ValueRange(args).getTypes(), {b.getI32Type()}));
    auto fused = func::CallOp::create(b, loc, fn, args);
    copyLabels(g, fused);
    fused->setAttr("ddpc.library", b.getStringAttr("cublasLt"));
    Value failed = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::eq, fused.getResult(0),
        arith::ConstantIntOp::create(b, loc, 0, 32));
    auto fallback = scf::IfOp::create(b, loc, failed, /*withElse=*/false);
    fallback->setAttr(kLibraryFallbackAttr, b.getUnitAttr());
    Operation *yield = fallback.thenBlock()->getTerminator();
    call->moveBefore(yield);
    g->moveBefore(yield);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// ddpc-conv-to-gemm
//===----------------------------------------------------------------------===//

/// Coefficients (a, b) when `e` is `a * d<i> + b * d<j>` (a, b >= 1), by
/// evaluating it at unit points; failure otherwise.
std::optional<std::pair<int64_t, int64_t>>
linearIn(AffineExpr e, unsigned numDims, unsigned i, unsigned j) {
  auto at = [&](int64_t vi, int64_t vj) -> std::optional<int64_t> {
    SmallVector<AffineExpr> dims;
    for (unsigned d = 0; d < numDims; ++d)
      dims.push_back(getAffineConstantExpr(d == i   ? vi
                                           : d == j ? vj
                                                    : 0,
                                           e.getContext()));
    auto c = dyn_cast<AffineConstantExpr>(
        simplifyAffineExpr(e.replaceDims(dims), 0, 0));
    if (!c)
      return std::nullopt;
    return c.getValue();
  };
  auto zero = at(0, 0), a = at(1, 0), b = at(0, 1), ab = at(1, 1),
       big = at(7, 5);
  if (!zero || !a || !b || !ab || !big || *zero != 0 || *a < 1 || *b < 1 ||
      *ab != *a + *b || *big != 7 * *a + 5 * *b)
    return std::nullopt;
  // The other dims must not appear.
  for (unsigned d = 0; d < numDims; ++d)
    if (d != i && d != j && e.isFunctionOfDim(d))
      return std::nullopt;
  return std::make_pair(*a, *b);
}

/// Whether the body of `op` is `yield acc + in0 * in1` (either order).
bool isMulAdd(linalg::GenericOp op) {
  Block &body = op.getRegion().front();
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  auto add = yield.getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!add || body.getOperations().size() != 3)
    return false;
  Value acc = body.getArgument(2);
  Value other = add.getLhs() == acc   ? add.getRhs()
                : add.getRhs() == acc ? add.getLhs()
                                      : Value();
  auto mul = other ? other.getDefiningOp<arith::MulFOp>() : nullptr;
  if (!mul)
    return false;
  Value x = body.getArgument(0), w = body.getArgument(1);
  return (mul.getLhs() == x && mul.getRhs() == w) ||
         (mul.getLhs() == w && mul.getRhs() == x);
}

struct ConvToGemmPass : impl::ConvToGemmPassBase<ConvToGemmPass> {

  void runOnOperation() override {
    SmallVector<linalg::GenericOp> convs;
    getOperation().walk([&](linalg::GenericOp op) {
      if (op.hasPureBufferSemantics() && op.getNumDpsInputs() == 2 &&
          op.getNumDpsInits() == 1 && op.getNumLoops() == 8)
        convs.push_back(op);
    });
    for (linalg::GenericOp op : convs)
      (void)rewrite(op);
  }

  /// The operands, loop ranges and window strides/dilations of a
  /// convolution generic in the importer's loop space (n, g, oc, oh, ow,
  /// ic, kh, kw): operand `windowed` (x of the forward and weight gradient,
  /// dx of the input gradient) is indexed [n, g, ic, sh*oh + dh*kh,
  /// sw*ow + dw*kw] and static float32; the other two operands, in operand
  /// order, are dense float32 with the given dims; loops are parallel as
  /// given. Sizes: G groups of C input and OC output channels each, K =
  /// C*KH*KW (window elements), P = OH*OW (output positions).
  struct ConvMatch {
    Value windowed;
    SmallVector<Value, 2> others;
    std::pair<int64_t, int64_t> hw, ww;
    int64_t N, G, OC, OH, OW, C, KH, KW, K, P;
  };
  static std::optional<ConvMatch>
  matchConv(linalg::GenericOp op, ArrayRef<bool> parallel, unsigned windowed,
            ArrayRef<unsigned> firstDims, ArrayRef<unsigned> secondDims) {
    auto iters = op.getIteratorTypesArray();
    for (unsigned i = 0; i < 8; ++i)
      if ((iters[i] == utils::IteratorType::parallel) != parallel[i])
        return std::nullopt;
    SmallVector<AffineMap> maps = op.getIndexingMapsArray();
    AffineMap xm = maps[windowed];
    auto dim = [&](AffineExpr e, unsigned d) {
      auto de = dyn_cast<AffineDimExpr>(e);
      return de && de.getPosition() == d;
    };
    if (xm.getNumResults() != 5 || !dim(xm.getResult(0), 0) ||
        !dim(xm.getResult(1), 1) || !dim(xm.getResult(2), 5))
      return std::nullopt;
    ConvMatch m;
    m.windowed = op->getOperand(windowed);
    for (unsigned i = 0; i < 3; ++i) {
      if (i == windowed)
        continue;
      ArrayRef<unsigned> dims = m.others.empty() ? firstDims : secondDims;
      if (!resultsAre(maps[i], dims) || !denseF32(op->getOperand(i)))
        return std::nullopt;
      m.others.push_back(op->getOperand(i));
    }
    auto hw = linearIn(xm.getResult(3), 8, 3, 6);
    auto ww = linearIn(xm.getResult(4), 8, 4, 7);
    SmallVector<int64_t> r = op.getStaticLoopRanges();
    auto xt = dyn_cast<MemRefType>(m.windowed.getType());
    if (!hw || !ww || !xt || !xt.hasStaticShape() ||
        !xt.getElementType().isF32())
      return std::nullopt;
    m.hw = *hw;
    m.ww = *ww;
    m.N = r[0], m.G = r[1], m.OC = r[2], m.OH = r[3], m.OW = r[4];
    m.C = r[5], m.KH = r[6], m.KW = r[7];
    m.K = m.C * m.KH * m.KW, m.P = m.OH * m.OW;
    return m;
  }

  static Value allocF32(OpBuilder &b, Location loc, ArrayRef<int64_t> shape) {
    return memref::AllocOp::create(b, loc,
                                   MemRefType::get(shape, b.getF32Type()),
                                   b.getI64IntegerAttr(64));
  }

  /// A copy kernel gathering the convolution windows of `x` (N x 1 x C x
  /// H x W, padded) into a new buffer: with `batchOuter`,
  ///   col[n, (ic,kh,kw), (oh,ow)]   (N x K x P, forward), else
  ///   col[(ic,kh,kw), n, (oh,ow)]   (K x N x P, weight gradient),
  /// holding x[n, 0, ic, sh*oh + dh*kh, sw*ow + dw*kw].
  static Value emitIm2Col(OpBuilder &b, Location loc, Operation *labels,
                          Value x, const ConvMatch &m, bool batchOuter) {
    MLIRContext *ctx = b.getContext();
    int64_t N = m.N, OH = m.OH, OW = m.OW, C = m.C, KH = m.KH, KW = m.KW,
            K = m.K, P = m.P;
    std::pair<int64_t, int64_t> hw = m.hw, ww = m.ww;
    Value col = allocF32(b, loc,
                         batchOuter ? SmallVector<int64_t>{N, K, P}
                                    : SmallVector<int64_t>{K, N, P});
    Value col6 =
        batchOuter
            ? memref::ExpandShapeOp::create(
                  b, loc, SmallVector<int64_t>{N, C, KH, KW, OH, OW}, col,
                  SmallVector<ReassociationIndices>{{0}, {1, 2, 3}, {4, 5}})
            : memref::ExpandShapeOp::create(
                  b, loc, SmallVector<int64_t>{C, KH, KW, N, OH, OW}, col,
                  SmallVector<ReassociationIndices>{{0, 1, 2}, {3}, {4, 5}});
    // Loops in the order of col6's dims.
    unsigned pn = batchOuter ? 0 : 3, pic = batchOuter ? 1 : 0,
             pkh = batchOuter ? 2 : 1, pkw = batchOuter ? 3 : 2;
    AffineExpr n = getAffineDimExpr(pn, ctx), ic = getAffineDimExpr(pic, ctx),
               kh = getAffineDimExpr(pkh, ctx), kw = getAffineDimExpr(pkw, ctx),
               oh = getAffineDimExpr(4, ctx), ow = getAffineDimExpr(5, ctx);
    AffineMap gather = AffineMap::get(6, 0,
                                      {n, getAffineConstantExpr(0, ctx), ic,
                                       oh * hw.first + kh * hw.second,
                                       ow * ww.first + kw * ww.second},
                                      ctx);
    auto im2col = linalg::GenericOp::create(
        b, loc, ValueRange{x}, ValueRange{col6},
        ArrayRef<AffineMap>{gather, b.getMultiDimIdentityMap(6)},
        SmallVector<utils::IteratorType>(6, utils::IteratorType::parallel),
        [](OpBuilder &nb, Location l, ValueRange args) {
          linalg::YieldOp::create(nb, l, args[0]);
        });
    copyLabels(labels, im2col);
    return col;
  }

  /// Convolution kinds of ddpc_conv2d_f32 (Gemm.h).
  enum ConvKind { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

  /// When the convolution can go to the library (cuDNN on the GPU: dense
  /// operands, and the output size cuDNN derives from the padded input),
  /// emits before `op`
  ///   %done = ddpc_conv2d_f32(kind, N, G*C, H, W, G*OC, KH, KW, OH, OW, sh,
  ///                           sw, dh, dw, G, x, w, y, accumulate) : i32
  ///   scf.if (%done == 0) {} {ddpc.library_fallback}
  /// and moves `op` into the scf.if, so its GEMM lowering becomes the
  /// fallback. x [N, G*C, H, W] is the padded input (kForward,
  /// kBackwardFilter) or its gradient (kBackwardData), w [G*OC, C, KH, KW]
  /// the weights or their gradient, y [N, G*OC, OH, OW] the output or its
  /// gradient. Returns false (nothing emitted) otherwise.
  static bool emitLibraryConv(linalg::GenericOp op, ConvKind kind,
                              const ConvMatch &m, Value x, Value w, Value y,
                              bool accumulate) {
    auto xt = cast<MemRefType>(x.getType());
    int64_t h = xt.getDimSize(3), wd = xt.getDimSize(4);
    auto outSize = [](int64_t in, int64_t k, std::pair<int64_t, int64_t> sd) {
      return (in - sd.second * (k - 1) - 1) / sd.first + 1;
    };
    if (!denseF32(x) || !denseF32(w) || !denseF32(y) ||
        outSize(h, m.KH, m.hw) != m.OH || outSize(wd, m.KW, m.ww) != m.OW)
      return false;
    OpBuilder b(op);
    Location loc = op.getLoc();
    RuntimeArgs arg{b, loc};
    auto i64 = [&](int64_t v) { return arg.integer(v, 64); };
    auto i32 = [&](int64_t v) { return arg.integer(v, 32); };
    auto ptr = [&](Value mem) { return arg.pointer(mem); };
    SmallVector<Value> args = {
        i32(kind),        i64(m.N),         i64(m.G * m.C),  i64(h),
        i64(wd),          i64(m.G * m.OC),  i64(m.KH),       i64(m.KW),
        i64(m.OH),        i64(m.OW),        i64(m.hw.first), i64(m.ww.first),
        i64(m.hw.second), i64(m.ww.second), i64(m.G),        ptr(x),
        ptr(w),           ptr(y),           i32(accumulate)};
    auto fn = getOrDeclare(
        op->getParentOfType<ModuleOp>(), kConvFn,
        b.getFunctionType(ValueRange(args).getTypes(), {b.getI32Type()}));
    auto call = func::CallOp::create(b, loc, fn, args);
    copyLabels(op, call);
    call->setAttr("ddpc.library", b.getStringAttr("cudnn"));
    Value declined = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                           call.getResult(0), i32(0));
    auto fallback = scf::IfOp::create(b, loc, declined, /*withElse=*/false);
    fallback->setAttr(kLibraryFallbackAttr, b.getUnitAttr());
    op->moveBefore(fallback.thenBlock()->getTerminator());
    return true;
  }

  LogicalResult rewrite(linalg::GenericOp op) {
    if (!isMulAdd(op))
      return failure();
    if (succeeded(rewriteForward(op)) || succeeded(rewriteWeightGradient(op)))
      return success();
    return rewriteInputGradient(op);
  }

  /// A grouped convolution (G > 1) of `kind` goes to the library only; the
  /// fallback is the original generic (a generated kernel), which
  /// accumulates, so a zero fill of the written tensor moves into it.
  static LogicalResult rewriteGrouped(linalg::GenericOp op, ConvKind kind,
                                      const ConvMatch &m, Value x, Value w,
                                      Value y, Value written) {
    Operation *fill = findZeroFillOf(op, written);
    if (!emitLibraryConv(op, kind, m, x, w, y, /*accumulate=*/!fill))
      return failure();
    if (fill)
      fill->moveBefore(op);
    return success();
  }

  /// Matches the importer's input gradient of a convolution (all loops
  /// reduce): dx[n,g,ic,sh*oh+dh*kh,sw*ow+dw*kw] += w[g,oc,ic,kh,kw] *
  /// dy[n,g,oc,oh,ow] (inputs in either order). With one group it becomes one
  /// batched GEMM that overwrites a temporary (beta = 0),
  ///   dcol[n] (K x P) = w^T (K x OC) * dy[n] (OC x P), w shared,
  /// and col2im, dx[n,0,ic,sh*oh+dh*kh,sw*ow+dw*kw] += dcol[n,(ic,kh,kw),
  /// (oh,ow)]: a scatter generic that ddpc-scatter-to-atomic turns into one
  /// atomic add per dcol element (KH*KW adds per dx element at most) instead
  /// of OC adds per term.
  LogicalResult rewriteInputGradient(linalg::GenericOp op) {
    SmallVector<bool> reduce(8, false);
    SmallVector<unsigned> wDims{1, 2, 5, 6, 7}, dyDims{0, 1, 2, 3, 4};
    Value w, dy;
    auto m = matchConv(op, reduce, /*windowed=*/2, wDims, dyDims);
    if (m) {
      w = m->others[0];
      dy = m->others[1];
    } else if ((m = matchConv(op, reduce, 2, dyDims, wDims))) {
      dy = m->others[0];
      w = m->others[1];
    } else {
      return failure();
    }
    Value dx = m->windowed;
    if (m->G != 1)
      return rewriteGrouped(op, kBackwardData, *m, dx, w, dy, dx);
    int64_t N = m->N, OC = m->OC, OH = m->OH, OW = m->OW, C = m->C, KH = m->KH,
            KW = m->KW, K = m->K, P = m->P;
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    // cuDNN may overwrite dx (beta = 0); the fallback's col2im accumulates,
    // so it zeroes dx itself then.
    Operation *fill = findZeroFillOf(op, dx);
    if (emitLibraryConv(op, kBackwardData, *m, dx, w, dy,
                        /*accumulate=*/!fill) &&
        fill)
      fill->moveBefore(op);
    OpBuilder b(op);
    Value dcol = allocF32(b, loc, {N, K, P});
    Value wMat = memref::CollapseShapeOp::create(
        b, loc, w, SmallVector<ReassociationIndices>{{0, 1}, {2, 3, 4}});
    Value dyMat = memref::CollapseShapeOp::create(
        b, loc, dy, SmallVector<ReassociationIndices>{{0}, {1, 2}, {3, 4}});
    emitGemmCall(op, N, K, P, OC, /*transA=*/1, /*transB=*/0, wMat, dyMat, dcol,
                 0, OC * P, K * P, /*accumulate=*/false);
    // col2im over loops (n, ic, kh, kw, oh, ow).
    b.setInsertionPoint(op);
    Value dcol6 = memref::ExpandShapeOp::create(
        b, loc, SmallVector<int64_t>{N, C, KH, KW, OH, OW}, dcol,
        SmallVector<ReassociationIndices>{{0}, {1, 2, 3}, {4, 5}});
    AffineExpr n = getAffineDimExpr(0, ctx), ic = getAffineDimExpr(1, ctx),
               kh = getAffineDimExpr(2, ctx), kw = getAffineDimExpr(3, ctx),
               oh = getAffineDimExpr(4, ctx), ow = getAffineDimExpr(5, ctx);
    AffineMap scatter = AffineMap::get(6, 0,
                                       {n, getAffineConstantExpr(0, ctx), ic,
                                        oh * m->hw.first + kh * m->hw.second,
                                        ow * m->ww.first + kw * m->ww.second},
                                       ctx);
    auto col2im = linalg::GenericOp::create(
        b, loc, ValueRange{dcol6}, ValueRange{dx},
        ArrayRef<AffineMap>{b.getMultiDimIdentityMap(6), scatter},
        SmallVector<utils::IteratorType>(6, utils::IteratorType::reduction),
        [](OpBuilder &nb, Location l, ValueRange args) {
          linalg::YieldOp::create(
              nb, l,
              arith::AddFOp::create(nb, l, args[1], args[0]).getResult());
        });
    copyLabels(op, col2im);
    memref::DeallocOp::create(b, loc, dcol);
    op->erase();
    return success();
  }

  /// Matches the importer's weight gradient of a convolution (same loops
  /// as the forward; n, oh, ow reduce):  dw[g,oc,ic,kh,kw] +=
  /// x[n,g,ic,sh*oh+dh*kh,sw*ow+dw*kw] * dy[n,g,oc,oh,ow]. With one group,
  /// colT[(ic,kh,kw), n, (oh,ow)] and dyT[oc, n, (oh,ow)] (a transpose
  /// kernel) it is one GEMM over the N*P positions:
  ///   dw (OC x K) += dyT (OC x N*P) * colT^T (N*P x K).
  LogicalResult rewriteWeightGradient(linalg::GenericOp op) {
    auto m = matchConv(op, {false, true, true, false, false, true, true, true},
                       /*windowed=*/0, {0, 1, 2, 3, 4}, {1, 2, 5, 6, 7});
    if (!m)
      return failure();
    Value x = m->windowed, dy = m->others[0], dw = m->others[1];
    if (m->G != 1)
      return rewriteGrouped(op, kBackwardFilter, *m, x, dw, dy, dw);
    int64_t N = m->N, OC = m->OC, OH = m->OH, OW = m->OW, K = m->K, P = m->P;
    bool zeroed = eraseZeroFillOf(op, dw);
    emitLibraryConv(op, kBackwardFilter, *m, x, dw, dy,
                    /*accumulate=*/!zeroed);
    OpBuilder b(op);
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    Value colT = emitIm2Col(b, loc, op, x, *m, /*batchOuter=*/false);
    // dyT[oc, n, oh, ow] = dy[n, 0, oc, oh, ow].
    Value dyT = allocF32(b, loc, {OC, N, P});
    Value dyT4 = memref::ExpandShapeOp::create(
        b, loc, SmallVector<int64_t>{OC, N, OH, OW}, dyT,
        SmallVector<ReassociationIndices>{{0}, {1}, {2, 3}});
    AffineMap readDy =
        AffineMap::get(4, 0,
                       {getAffineDimExpr(1, ctx), getAffineConstantExpr(0, ctx),
                        getAffineDimExpr(0, ctx), getAffineDimExpr(2, ctx),
                        getAffineDimExpr(3, ctx)},
                       ctx);
    auto transpose = linalg::GenericOp::create(
        b, loc, ValueRange{dy}, ValueRange{dyT4},
        ArrayRef<AffineMap>{readDy, b.getMultiDimIdentityMap(4)},
        SmallVector<utils::IteratorType>(4, utils::IteratorType::parallel),
        [](OpBuilder &nb, Location l, ValueRange args) {
          linalg::YieldOp::create(nb, l, args[0]);
        });
    copyLabels(op, transpose);
    Value dwMat = memref::CollapseShapeOp::create(
        b, loc, dw, SmallVector<ReassociationIndices>{{0, 1}, {2, 3, 4}});
    emitGemmCall(op, 1, OC, K, N * P, 0, 1, dyT, colT, dwMat, OC * N * P,
                 K * N * P, OC * K, /*accumulate=*/!zeroed);
    b.setInsertionPoint(op);
    memref::DeallocOp::create(b, loc, colT);
    memref::DeallocOp::create(b, loc, dyT);
    op->erase();
    return success();
  }

  /// Matches the importer's forward convolution (loops n, g, oc, oh, ow |
  /// ic, kh, kw):  y[n,g,oc,oh,ow] += x[n,g,ic,sh*oh+dh*kh,sw*ow+dw*kw] *
  /// w[g,oc,ic,kh,kw]; with one group, im2col + one batched GEMM.
  LogicalResult rewriteForward(linalg::GenericOp op) {
    auto m = matchConv(op, {true, true, true, true, true, false, false, false},
                       /*windowed=*/0, {1, 2, 5, 6, 7}, {0, 1, 2, 3, 4});
    if (!m)
      return failure();
    Value x = m->windowed, w = m->others[0], y = m->others[1];
    if (m->G != 1)
      return rewriteGrouped(op, kForward, *m, x, w, y, y);
    int64_t N = m->N, OC = m->OC, K = m->K, P = m->P;
    bool zeroed = eraseZeroFillOf(op, y);
    emitLibraryConv(op, kForward, *m, x, w, y, /*accumulate=*/!zeroed);
    OpBuilder b(op);
    Location loc = op.getLoc();
    Value col = emitIm2Col(b, loc, op, x, *m, /*batchOuter=*/true);
    // y[n] (OC x P) += w (OC x K) * col[n] (K x P), w shared by the batch.
    Value wMat = memref::CollapseShapeOp::create(
        b, loc, w, SmallVector<ReassociationIndices>{{0, 1}, {2, 3, 4}});
    Value yMat = memref::CollapseShapeOp::create(
        b, loc, y, SmallVector<ReassociationIndices>{{0}, {1, 2}, {3, 4}});
    emitGemmCall(op, N, OC, P, K, 0, 0, wMat, col, yMat, 0, K * P, OC * P,
                 /*accumulate=*/!zeroed);
    b.setInsertionPoint(op);
    memref::DeallocOp::create(b, loc, col);
    op->erase();
    return success();
  }
};

//===----------------------------------------------------------------------===//
// ddpc-scatter-to-atomic
//===----------------------------------------------------------------------===//

/// The value added to the accumulator when the body of `op` (one output) is
/// `yield acc + v` (either operand order) and `acc` has no other use; null
/// otherwise.
Value additiveContribution(linalg::GenericOp op) {
  Block &body = op.getRegion().front();
  BlockArgument acc = body.getArguments().back();
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  auto add = yield.getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!add || !acc.hasOneUse())
    return {};
  if (add.getLhs() == acc)
    return add.getRhs();
  if (add.getRhs() == acc)
    return add.getLhs();
  return {};
}

/// Rewrites an additive float generic `out[map(ivs)] += v(ivs)` over static
/// loops as an scf.parallel over its first `numOuter` loops whose body sums
/// v over the remaining loops (scf.for nest, in their order) and adds that
/// partial sum to the output with one `memref.atomic_rmw addf`. With
/// numOuter = all loops, every iteration adds its own term.
LogicalResult rewriteAsAtomicLoops(linalg::GenericOp op, unsigned numOuter) {
  Value contribution = additiveContribution(op);
  Value out = op.getDpsInitOperand(0)->get();
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
  Operation *addOp = body.getTerminator()->getOperand(0).getDefiningOp();
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
                                    indices(nb, maps.back(), all));
      });
  op->erase();
  return success();
}

struct ScatterToAtomicPass
    : impl::ScatterToAtomicPassBase<ScatterToAtomicPass> {

  void runOnOperation() override {
    SmallVector<linalg::GenericOp> candidates;
    getOperation().walk([&](linalg::GenericOp op) {
      if (!op.hasPureBufferSemantics() || op.getNumDpsInits() != 1)
        return;
      AffineMap outMap = op.getIndexingMapsArray().back();
      if (outMap.isProjectedPermutation() && op.getNumParallelLoops() > 0)
        return; // Upstream maps its parallel loops to threads.
      candidates.push_back(op);
    });
    for (linalg::GenericOp op : candidates)
      (void)rewriteAsAtomicLoops(op, op.getNumLoops());
  }
};

//===----------------------------------------------------------------------===//
// ddpc-split-reductions
//===----------------------------------------------------------------------===//

struct SplitReductionsPass
    : impl::SplitReductionsPassBase<SplitReductionsPass> {
  using SplitReductionsPassBase::SplitReductionsPassBase;

  void runOnOperation() override {
    SmallVector<std::pair<linalg::GenericOp, unsigned>> candidates;
    getOperation().walk([&](linalg::GenericOp op) {
      if (!op.hasPureBufferSemantics() || op.getNumDpsInits() != 1 ||
          !additiveContribution(op))
        return;
      SmallVector<int64_t> ranges = op.getStaticLoopRanges();
      if (llvm::any_of(ranges, ShapedType::isDynamic))
        return;
      // Parallel loops first (ddpc-parallel-loops-outermost ran before).
      auto iters = op.getIteratorTypesArray();
      unsigned numParallel = 0;
      while (numParallel < iters.size() &&
             iters[numParallel] == utils::IteratorType::parallel)
        ++numParallel;
      AffineMap outMap = op.getIndexingMapsArray().back();
      if (numParallel == iters.size() || !outMap.isProjectedPermutation() ||
          llvm::any_of(outMap.getResults(), [&](AffineExpr e) {
            return cast<AffineDimExpr>(e).getPosition() >= numParallel;
          }))
        return;
      int64_t threads = 1, length = 1;
      for (unsigned i = 0; i < ranges.size(); ++i)
        (i < numParallel ? threads : length) *= ranges[i];
      if (threads >= targetThreads || length < minReduction)
        return;
      // Move reduction loops to the parallel side, outermost first, while
      // the thread count is below the target.
      unsigned numOuter = numParallel;
      while (numOuter < ranges.size() && threads < targetThreads)
        threads *= ranges[numOuter++];
      candidates.push_back({op, numOuter});
    });
    for (auto [op, numOuter] : candidates)
      (void)rewriteAsAtomicLoops(op, numOuter);
  }
};

//===----------------------------------------------------------------------===//
// ddpc-memref-copy-to-linalg
//===----------------------------------------------------------------------===//

struct MemRefCopyToLinalgPass
    : impl::MemRefCopyToLinalgPassBase<MemRefCopyToLinalgPass> {
  void runOnOperation() override {
    SmallVector<memref::CopyOp> copies;
    getOperation().walk([&](memref::CopyOp op) { copies.push_back(op); });
    for (memref::CopyOp op : copies) {
      OpBuilder b(op);
      linalg::CopyOp::create(b, op.getLoc(), op.getSource(), op.getTarget());
      op->erase();
    }
  }
};

//===----------------------------------------------------------------------===//
// ddpc-collapse-parallel-loops
//===----------------------------------------------------------------------===//

struct CollapseParallelLoopsPass
    : impl::CollapseParallelLoopsPassBase<CollapseParallelLoopsPass> {
  void runOnOperation() override {
    SmallVector<scf::ParallelOp> loops;
    getOperation().walk([&](scf::ParallelOp op) {
      if (!op->getParentOfType<scf::ParallelOp>() && op.getNumLoops() > 1)
        loops.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (scf::ParallelOp op : loops) {
      std::vector<unsigned> all;
      for (unsigned i = 0; i < op.getNumLoops(); ++i)
        all.push_back(i);
      rewriter.setInsertionPoint(op);
      collapseParallelLoops(rewriter, op, {all});
    }
  }
};

//===----------------------------------------------------------------------===//
// ddpc-parallel-loops-outermost
//===----------------------------------------------------------------------===//

struct ParallelLoopsOutermostPass
    : impl::ParallelLoopsOutermostPassBase<ParallelLoopsOutermostPass> {
  void runOnOperation() override {
    SmallVector<linalg::LinalgOp> ops;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (!op.hasPureBufferSemantics())
        return;
      auto iters = op.getIteratorTypesArray();
      // A reduction loop before a parallel one: loop conversion would put
      // the parallel loop (the kernel) inside a host loop.
      bool seenReduction = false, needed = false;
      for (utils::IteratorType t : iters) {
        if (t == utils::IteratorType::reduction)
          seenReduction = true;
        else if (seenReduction)
          needed = true;
      }
      if (needed)
        ops.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (linalg::LinalgOp op : ops) {
      rewriter.setInsertionPoint(op);
      auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
      if (!generic) {
        FailureOr<linalg::GenericOp> g =
            linalg::generalizeNamedOp(rewriter, op);
        if (failed(g))
          continue;
        generic = *g;
      }
      SmallVector<unsigned> order;
      auto iters = generic.getIteratorTypesArray();
      for (unsigned i = 0; i < iters.size(); ++i)
        if (iters[i] == utils::IteratorType::parallel)
          order.push_back(i);
      for (unsigned i = 0; i < iters.size(); ++i)
        if (iters[i] != utils::IteratorType::parallel)
          order.push_back(i);
      (void)linalg::interchangeGenericOp(rewriter, generic, order);
    }
  }
};

//===----------------------------------------------------------------------===//
// ddpc-serial-loops-to-device
//===----------------------------------------------------------------------===//

/// Whether `loop` can run as one device thread: it touches memory only
/// through memref load/store/atomics, calls nothing, allocates nothing and
/// contains no parallel loop (those become kernels themselves).
bool isSerialDeviceLoop(scf::ForOp loop) {
  if (loop.getNumResults() != 0)
    return false;
  bool touches = false, ok = true;
  loop.walk([&](Operation *op) {
    if (isa<scf::ParallelOp, func::CallOp, memref::AllocOp, memref::AllocaOp,
            memref::DeallocOp, memref::CopyOp, linalg::LinalgOp>(op) ||
        isa<gpu::GPUDialect>(op->getDialect())) {
      ok = false;
      return WalkResult::interrupt();
    }
    if (isa<memref::LoadOp, memref::StoreOp, memref::AtomicRMWOp,
            memref::GenericAtomicRMWOp>(op))
      touches = true;
    return WalkResult::advance();
  });
  return ok && touches;
}

struct SerialLoopsToDevicePass
    : impl::SerialLoopsToDevicePassBase<SerialLoopsToDevicePass> {
  void runOnOperation() override {
    SmallVector<scf::ForOp> loops;
    getOperation().walk<WalkOrder::PreOrder>([&](scf::ForOp loop) {
      if (loop->getParentOfType<scf::ParallelOp>())
        return WalkResult::skip();
      if (isSerialDeviceLoop(loop)) {
        loops.push_back(loop);
        return WalkResult::skip(); // Outermost only.
      }
      return WalkResult::advance();
    });
    OpBuilder b(&getContext());
    for (scf::ForOp loop : loops) {
      b.setInsertionPoint(loop);
      Location loc = loop.getLoc();
      Value zero = arith::ConstantIndexOp::create(b, loc, 0);
      Value one = arith::ConstantIndexOp::create(b, loc, 1);
      auto par = scf::ParallelOp::create(b, loc, ValueRange{zero},
                                         ValueRange{one}, ValueRange{one});
      par->setAttrs(loop->getDiscardableAttrDictionary());
      loop->moveBefore(par.getBody()->getTerminator());
    }
  }
};

//===----------------------------------------------------------------------===//
// ddpc-gpu-host-sync
//===----------------------------------------------------------------------===//

bool isDeviceWork(Operation *op) {
  if (isa<gpu::LaunchFuncOp>(op))
    return true;
  if (auto call = dyn_cast<func::CallOp>(op))
    return call.getCallee() == kGemmFn || call.getCallee() == kGemmEpilogueFn ||
           call.getCallee() == kConvFn || call.getCallee() == kAllReduceFn ||
           llvm::is_contained(kBucketFns, call.getCallee());
  return false;
}

/// Whether `op` (or an op nested in it) reads or writes memory on the host.
bool touchesHostMemory(Operation *op) {
  bool found = false;
  op->walk([&](Operation *inner) {
    if (isa<memref::LoadOp, memref::StoreOp, memref::AtomicRMWOp,
            memref::CopyOp, memref::GenericAtomicRMWOp>(inner) ||
        (isa<func::CallOp>(inner) && !isDeviceWork(inner) &&
         cast<func::CallOp>(inner).getCallee() != kSyncFn)) {
      found = true;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return found;
}

bool containsDeviceWork(Operation *op) {
  bool found = false;
  op->walk([&](Operation *inner) {
    if (isDeviceWork(inner) ||
        (isa<func::CallOp>(inner) &&
         cast<func::CallOp>(inner).getCallee() != kSyncFn)) {
      found = true;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return found;
}

struct GPUHostSyncPass : impl::GPUHostSyncPassBase<GPUHostSyncPass> {

  func::FuncOp syncFn;

  void sync(Operation *before) {
    OpBuilder b(before);
    func::CallOp::create(b, before->getLoc(), syncFn, ValueRange{});
  }

  /// Processes `block`; `dirty` says device work may be pending on entry.
  /// Returns whether device work may be pending at the end.
  bool processBlock(Block &block, bool dirty) {
    for (Operation &op : llvm::make_early_inc_range(block)) {
      if (isDeviceWork(&op)) {
        dirty = true;
        continue;
      }
      if (auto call = dyn_cast<func::CallOp>(op)) {
        if (call.getCallee() == kSyncFn) {
          dirty = false;
          continue;
        }
        // Another function of the program: it synchronizes before its own
        // host accesses (callees start dirty), and may leave work pending.
        dirty = true;
        continue;
      }
      if (isa<func::ReturnOp>(op)) {
        auto fn = cast<func::FuncOp>(op.getParentOp());
        if (dirty && fn.isPublic())
          sync(&op);
        continue;
      }
      if (op.getNumRegions() > 0 && containsDeviceWork(&op)) {
        // Device work inside (a host loop around launches): handle each
        // region on its own, conservatively dirty on entry.
        for (Region &r : op.getRegions())
          for (Block &inner : r)
            processBlock(inner, /*dirty=*/true);
        dirty = true;
        continue;
      }
      if (dirty && touchesHostMemory(&op)) {
        sync(&op);
        dirty = false;
      }
    }
    return dirty;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    syncFn =
        getOrDeclare(module, kSyncFn, FunctionType::get(&getContext(), {}, {}));
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      for (Block &block : fn.getBody())
        processBlock(block, /*dirty=*/true);
    }
  }
};

//===----------------------------------------------------------------------===//
// ddpc-gpu-merge-modules
//===----------------------------------------------------------------------===//

struct GPUMergeModulesPass
    : impl::GPUMergeModulesPassBase<GPUMergeModulesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<gpu::GPUModuleOp> modules(module.getOps<gpu::GPUModuleOp>());
    if (modules.empty())
      return;
    MLIRContext *ctx = &getContext();
    OpBuilder b(modules.front());
    auto merged = gpu::GPUModuleOp::create(b, module.getLoc(), "ddpc_kernels");
    Block &dest = merged.getBodyRegion().front();
    // Kernel @M::@F is renamed @ddpc_kernels::@M (module names are unique).
    DenseMap<Attribute, SymbolRefAttr> renamed;
    for (gpu::GPUModuleOp m : modules) {
      for (Operation &op :
           llvm::make_early_inc_range(m.getBody()->without_terminator())) {
        auto fn = dyn_cast<gpu::GPUFuncOp>(op);
        if (!fn) {
          signalPassFailure();
          m.emitError("unexpected op in an outlined gpu.module");
          return;
        }
        SymbolRefAttr old = SymbolRefAttr::get(
            ctx, m.getName(), {FlatSymbolRefAttr::get(ctx, fn.getName())});
        fn.setName(m.getName());
        fn->moveBefore(&dest, dest.without_terminator().end());
        renamed[old] = SymbolRefAttr::get(
            ctx, merged.getName(), {FlatSymbolRefAttr::get(ctx, m.getName())});
      }
      m->erase();
    }
    module.walk([&](gpu::LaunchFuncOp launch) {
      auto it = renamed.find(launch.getKernel());
      if (it != renamed.end())
        launch.setKernelAttr(it->second);
    });
  }
};

} // namespace

namespace {
#define GEN_PASS_REGISTRATION
#include "ddpc/Transforms/Passes.h.inc"
} // namespace

void registerTransformsPasses() { registerDDPCTransformsPasses(); }

} // namespace ddpc

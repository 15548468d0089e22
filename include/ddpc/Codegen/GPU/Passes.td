//===- Passes.td - ddpc Codegen/GPU passes -----------------*- tablegen -*-===//
//
// Part of ddpc. The GPU loop pipeline: linalg on memrefs to
// one-thread-per-element scf.parallel loops (atomics, reduction splitting, loop
// order, merging); implemented in lib/Codegen/GPU. The cuda-emulate target runs
// its output on the CPU. mlir-tblgen generates their base classes, options,
// create functions and registration (Passes.h.inc); docs/passes.md documents
// every area's passes (include/ddpc/Passes.td).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_CODEGEN_GPU_PASSES_TD
#define DDPC_CODEGEN_GPU_PASSES_TD

include "mlir/Pass/PassBase.td"

def ScatterToAtomicPass : Pass<"ddpc-scatter-to-atomic", "mlir::func::FuncOp"> {
  let summary = "Turn additive reduction generics without parallel output loops into parallel loops with atomic adds";
  let description = [{
    `ddpc-scatter-to-atomic` (func.func, bufferized IR). A linalg.generic
    whose output indexing map is not a projected permutation (a gradient of
    a convolution or pooling window w.r.t. its input: out[h + kh] += ...) has
    no parallel loop, so it would run on the host. When its body is
    `yield acc + f(inputs)` it becomes an scf.parallel over all loops whose
    body does `memref.atomic_rmw addf` of f(inputs): the same sum, computed
    by one GPU thread per iteration. Float addition order then varies
    between runs (as with PyTorch's atomics-based backward kernels). A
    reduction whose output map is a projected permutation, a full reduction
    to a scalar included, is left to ddpc-split-reductions, which bounds
    the atomic adds per output.

    Likewise a perfect scf.for nest marked `ddpc.scatter_add` (the
    gradient of a tensor that a generic reads at computed coordinates, e.g.
    Gather's table: `d_table[idx[i], j] += g[i, j]`) whose only writes are
    read-modify-write additions `m[c] = m[c] + v` to buffers it reads
    nowhere else becomes an scf.parallel over all its loops with
    `memref.atomic_rmw addf v, m[c]`; otherwise it stays serial (a
    one-thread kernel, ddpc-serial-loops-to-device).
  }];
  let dependentDialects = [
    "mlir::affine::AffineDialect",
    "mlir::arith::ArithDialect",
    "mlir::memref::MemRefDialect",
    "mlir::scf::SCFDialect"
  ];
}

def StageHostSharedOutputsPass : Pass<"ddpc-stage-host-shared-outputs", "mlir::func::FuncOp"> {
  let summary = "Compute into device copies of the host-shared arguments a step function writes";
  let description = [{
    `ddpc-stage-host-shared-outputs` (func.func, bufferized IR). The
    training runtime passes a step's per-step scalars (loss, correct count,
    per-sample losses, the gradient norm; `ddpc.host_shared`) in
    page-locked host memory, which kernels reach over the host link. A
    reduction into one of them accumulates there: ddpc-split-reductions'
    4096 atomic adds per output each cross the link (about 1 us each on an
    H200: 4.8 ms for one weight's sum of squares in @grad_norm). For every
    such argument of static shape that the function writes, the function
    instead works on a device buffer (memref.alloc) that it fills from the
    argument on entry and copies back before each return: two small
    copies, the reductions' atomics in device memory.
  }];
  let dependentDialects = [
    "mlir::memref::MemRefDialect"
  ];
}

def MemRefCopyToLinalgPass : Pass<"ddpc-memref-copy-to-linalg", "mlir::func::FuncOp"> {
  let summary = "Rewrite memref.copy as linalg.copy (a kernel on GPU targets)";
  let description = [{
    `ddpc-memref-copy-to-linalg` (func.func): memref.copy -> linalg.copy, so
    that copies between device buffers become kernels instead of host
    memcpy calls.
  }];
  let dependentDialects = [
    "mlir::linalg::LinalgDialect"
  ];
}

def ParallelLoopsOutermostPass : Pass<"ddpc-parallel-loops-outermost", "mlir::func::FuncOp"> {
  let summary = "Interchange linalg loops so that parallel loops enclose reductions";
  let description = [{
    `ddpc-parallel-loops-outermost` (func.func, bufferized IR). Loop
    conversion keeps a linalg op's loop order, so a reduction dim before a
    parallel dim (e.g. a bias gradient db[c] = sum_n dy[n, c]) would become a
    host loop launching one small kernel per iteration. This pass
    interchanges such ops (upstream linalg::interchangeGenericOp, named ops
    generalized first) so that all parallel loops come first, in their
    order, then the reductions in theirs: each thread then sums its output's
    terms in the same order as before.
  }];
}

def SplitReductionsPass : Pass<"ddpc-split-reductions", "mlir::func::FuncOp"> {
  let summary = "Spread long additive reductions with few outputs over threads (partial sums, atomic adds)";
  let description = [{
    `ddpc-split-reductions` (func.func, bufferized IR, after
    ddpc-parallel-loops-outermost). A float reduction `out[p] += v(p, r)`
    with fewer than `targetThreads` outputs and at least `minReduction` terms
    each (a bias or convolution-weight gradient, BatchNorm statistics) would
    give one GPU thread a long serial loop per output. Its outermost
    reduction loops join the parallel loops while the thread count stays
    within `targetThreads` (a loop that would overshoot it joins only while
    each thread would keep at least `minReduction` serial terms: atomic
    adds to one output serialize, so more threads than needed cost time;
    when moving such a loop whole would give an output more than 4096
    atomic adds, it is strip-mined instead, its operands' dimension
    expanded in two (memref.expand_shape) and only the outer part moved);
    each thread
    sums the remaining loops' terms and adds that partial sum to its output
    with `memref.atomic_rmw addf` (split-K in GEMM terms). Float addition order then varies between runs, as with
    ddpc-scatter-to-atomic. The generic may have other outputs that are
    plain writes (init unused, a permutation map: a multi-result kernel's
    elementwise result); each thread stores its elements of those.
  }];
  let dependentDialects = [
    "mlir::affine::AffineDialect",
    "mlir::arith::ArithDialect",
    "mlir::memref::MemRefDialect",
    "mlir::scf::SCFDialect"
  ];
  let options = [
    Option<"targetThreads", "target-threads", "int64_t", /*default=*/"65536",
           "Threads to aim for (parallel iterations after the split)">,
    Option<"minReduction", "min-reduction", "int64_t", /*default=*/"256",
           "Shortest reduction (terms per output) that is split">
  ];
}

def SerialLoopsToDevicePass : Pass<"ddpc-serial-loops-to-device", "mlir::func::FuncOp"> {
  let summary = "Wrap host loops over memory into one-iteration scf.parallel loops";
  let description = [{
    `ddpc-serial-loops-to-device` (func.func, after
    convert-linalg-to-parallel-loops). A loop nest outside any scf.parallel
    that reads or writes memory (a full reduction such as a correct-
    prediction count) would run on the host, touching device memory between
    kernels. Each outermost such scf.for (no results, no calls, allocations,
    linalg ops or parallel loops inside) is wrapped in a one-iteration
    scf.parallel, so that it becomes a one-thread kernel.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect",
    "mlir::scf::SCFDialect"
  ];
}

def CollapseParallelLoopsPass : Pass<"ddpc-collapse-parallel-loops", "mlir::func::FuncOp"> {
  let summary = "Collapse outermost n-d scf.parallel loops into 1-d loops";
  let description = [{
    `ddpc-collapse-parallel-loops` (func.func): collapses every outermost
    n-d scf.parallel into a 1-d one (row-major linearization), so that
    tiling by the block size maps one GPU thread to one output element.
  }];
  let dependentDialects = [
    "mlir::affine::AffineDialect",
    "mlir::arith::ArithDialect"
  ];
}

def MergeParallelLoopsPass : Pass<"ddpc-merge-parallel-loops", "mlir::func::FuncOp"> {
  let summary = "Merge independent consecutive 1-d scf.parallel loops into one (horizontal fusion)";
  let description = [{
    `ddpc-merge-parallel-loops` (func.func, after
    ddpc-collapse-parallel-loops, before tiling). Each outermost
    scf.parallel becomes one GPU kernel launch, and many are tiny: the
    per-channel work of BatchNorm (zero fills of the statistics, mean,
    inverse standard deviation, running statistics) runs 64 to 512 threads.
    Consecutive outermost 1-d loops of one block (without results, with
    constant bounds) that are independent through memory (none writes a
    buffer another reads or writes: `mayAlias` of LibraryCalls.h, i.e.
    distinct allocations, disjoint ddpc-plan-arena byte ranges, distinct
    entry-function arguments) become one loop over the concatenated
    iteration spaces, `scf.if (%i < n1) {body1} else {body2(%i - n1)}`,
    placed where the last of them was; a balanced tree of comparisons picks
    each thread's body. The earlier loops move down past the ops between:
    ops without memory effects, allocations, deallocations of buffers they
    do not touch, and GEMM/convolution library calls with their fallback
    code (scf.if) that are independent of them (a call touches the buffers
    passed to it as pointers). Any other op with memory effects (a host
    memory access, an allreduce bucket call) ends a group. A group stops
    growing before its kernel would take more than max-param-bytes of
    parameters (ResNet-18's 62 AdamW updates alone take 4052 bytes, and
    PTX ISA 8.0 kernels take at most 4096).
    The idea is XLA's horizontal loop fusion (also Li et al., "Automatic
    Horizontal Fusion for GPU Kernels", CGO 2022).
  }];
  let options = [
    Option<"maxLoops", "max-loops", "int64_t", /*default=*/"64",
           "Most loops merged into one">,
    Option<"maxParamBytes", "max-param-bytes", "int64_t", /*default=*/"3072",
           "Most kernel parameter bytes of a merged loop (bound: 16 per "
           "memref, 8 per other value; PTX ISA 8.0 allows 4096)">
  ];
  let statistics = [
    Statistic<"numMerged", "merged-loops", "Loops made by merging">,
    Statistic<"numLoopsMerged", "loops-merged-away", "Loops merged into others (including the first of each group)">
  ];
  let dependentDialects = [
    "mlir::arith::ArithDialect",
    "mlir::scf::SCFDialect"
  ];
}

#endif // DDPC_CODEGEN_GPU_PASSES_TD

//===- Passes.td - ddpc's own passes -----------------------*- tablegen -*-===//
//
// Part of ddpc. Declarations of the passes in lib/Transforms; mlir-tblgen
// generates their base classes, options, create functions and registration
// (Passes.h.inc). The rest of every pipeline is upstream MLIR
// (lib/Pipelines).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_TRANSFORMS_PASSES_TD
#define DDPC_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Target-independent, tensor level
//===----------------------------------------------------------------------===//

def FuseOpsPass : Pass<"ddpc-fuse-ops", "mlir::func::FuncOp"> {
  let summary = "Fuse elementwise producers into consumers (one kernel per group) and label the groups";
  let description = [{
    Operator fusion (`ddpc-fuse-ops`, on func.func, linalg on tensors).

    First erases unused inputs and results of linalg.generic ops (upstream
    patterns; the VJP generics carry all inputs of their forward op). Then
    groups elementwise (all-parallel) linalg.generic producers with their
    consumers, which may be elementwise ops or reductions, using upstream
    `linalg::fuseElementwiseOps` with a cost policy of our own:
      * the producer must be all-parallel (a reduction result is a kernel
        boundary: it needs every input before any output);
      * the consumer must read each producer element once (its indexing map
        for the operand is a permutation of all its loops), so fusion never
        multiplies work: contractions (MatMul/Gemm/Conv) keep their operands
        as separate kernels and stay recognizable for library calls;
      * a producer with several users is recomputed in them if its body
        has at most `maxRecomputeOps` operations and every use of every
        result can take it, so that it is never written;
      * otherwise, when all its other users come after the consumer in the
        block and the consumer reads it through one operand only, the fused
        op also yields the producer's results and those users read them
        (one multi-result kernel, nothing computed twice);
      * otherwise (a user before the consumer cannot take it: the next
        layer's GEMM reading a ReLU output that the backward pass reads
        again) it is not fused: its result is written anyway, and
        recomputing it would keep its inputs alive longer.
    Finally erases results of fused ops that nothing reads.
    Every linalg op that remains is one kernel ("fusion group"), and so is
    every scatter-add loop nest of a gradient (`ddpc.scatter_add`); each gets
      ddpc.fusion_group = <i64 id>   (program order within the function)
      ddpc.fused_nodes = [names]     (the ONNX nodes it computes)
    which `--dump-ir` shows. The pass never fails.
  }];
  let dependentDialects = [
    "mlir::linalg::LinalgDialect"
  ];
  let options = [
    Option<"maxRecomputeOps", "max-recompute-ops", "unsigned", /*default=*/"8",
           "Largest body (operations) of a producer with several users that is recomputed in each of them">
  ];
}

def ReadOnlyArgumentsPass : Pass<"ddpc-read-only-arguments", "mlir::ModuleOp"> {
  let summary = "Mark the tensor arguments of public functions read-only for one-shot bufferization";
  let description = [{
    `ddpc-read-only-arguments` (module, tensor level; first pass of
    bufferization). One-shot bufferization with function boundaries takes
    every function argument to be writable, so a destination-style op whose
    destination is an argument that dies there (the VJP of Concat inserts
    zeros into the cotangent) wrote into the caller's buffer: a Python
    `run()` changed the user's input array, and a training step could
    change the parameters it was given. The caller owns those buffers (the
    ABIs of ModelABI.h and TrainABI.h pass inputs for reading), so every
    tensor argument of a public function gets
    `bufferization.writable = false`; bufferization then writes into a
    copy where it would have written in place.
  }];
  let dependentDialects = [
    "mlir::bufferization::BufferizationDialect"
  ];
}

def CloneSharedFillsPass : Pass<"ddpc-clone-shared-fills", "mlir::func::FuncOp"> {
  let summary = "Give every destination use of a tensor linalg.fill its own fill (so bufferization writes in place instead of copying)";
  let description = [{
    `ddpc-clone-shared-fills` (func.func, linalg on tensors; first pass of
    bufferization). CSE merges equal fills, so one zero tensor often
    initializes several accumulations (a forward GEMM and a VJP of the same
    shape). One-shot bufferization must then copy the filled buffer for all
    but one of them: a memref.copy (a copy kernel on the GPU) where a fill
    would do. This pass gives every destination (DPS init) use its own
    clone of the fill, and of the fill's tensor.empty, right before the
    user; the original keeps the remaining uses. A fill costs what a copy of
    its result costs minus the read, and a GEMM can absorb a zero fill of
    its output (ddpc-gemm-to-library-call, beta = 0).
  }];
  let dependentDialects = [
    "mlir::linalg::LinalgDialect",
    "mlir::tensor::TensorDialect"
  ];
}

//===----------------------------------------------------------------------===//
// Target-independent, memref level (last pass of bufferization)
//===----------------------------------------------------------------------===//

def DistinctResultBuffersPass : Pass<"ddpc-distinct-result-buffers", "mlir::func::FuncOp"> {
  let summary = "Give every returned buffer its own allocation (one tensor as several graph outputs)";
  let description = [{
    `ddpc-distinct-result-buffers` (func.func, bufferized IR; right before
    upstream buffer-results-to-out-params). A graph that lists one tensor
    under several output names (Identity of an output, or the same name
    twice) returns one buffer several times,
      return %b, %b : memref<2x3xf32>, memref<2x3xf32>
    which buffer-results-to-out-params does not handle (it crashed). Every
    repeated statically shaped result gets a new allocation and a
    memref.copy of the first; the out-params pass then writes each output
    argument.
  }];
  let dependentDialects = [
    "mlir::memref::MemRefDialect"
  ];
}

def BucketGradientAllReducePass : Pass<"ddpc-bucket-gradient-allreduce", "mlir::ModuleOp"> {
  let summary = "Sum gradient outputs over ranks in buckets that start during backward, as soon as their gradients are final";
  let description = [{
    `ddpc-bucket-gradient-allreduce` (module; bufferized IR, both targets).
    Data-parallel gradient synchronization overlapped with backward, decided
    at compile time (the bucketing of PyTorch DDP's Reducer: Li et al.,
    "PyTorch Distributed: Experiences on Accelerating Data Parallel
    Training", VLDB 2020, sections 3.2.3-3.2.4).

    In every function with out-parameters marked `ddpc.role =
    "new_grad_acc"` (float32 static memrefs: @train_micro's gradient
    accumulators), a gradient is *ready* after the last op of the entry
    block that uses its buffer or a view of it (deallocation bookkeeping
    aside). Gradients are taken in ready order (the order backward finishes
    them) and packed greedily into buckets: a gradient joins the open
    bucket, which closes once it holds at least `bucketCapMB` MiB (the first
    one `firstBucketMB`, so communication starts early), as in PyTorch DDP;
    a bucket can thus exceed its cap by its last gradient. Right after the
    op that readies a bucket's last gradient the pass inserts
      func.call @ddpc_rt_bucket_add_f32(ptr, count)   (once per gradient)
      func.call @ddpc_rt_bucket_allreduce_start(bucket index : i64)
          {ddpc.collective = "allreduce_bucket", ddpc.bytes, ddpc.bucket,
           ddpc.params = [names], ddpc.start_op = position of that op
           (1-based, entry block, before insertion), ddpc.function_ops}
    and before the return `func.call @ddpc_rt_bucket_allreduce_wait()`.
    The runtime (TrainABI.h) sums each bucket in place over all ranks while
    the rest of backward runs, and waits for all of them at the end; it does
    nothing unless this call is the synchronizing micro-batch of a
    multi-rank optimizer step. Fails (with an error on the function) when a
    gradient output is not a dense static float32 memref, or a cap is not
    a positive finite number.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect",
    "mlir::func::FuncDialect",
    "mlir::LLVM::LLVMDialect",
    "mlir::memref::MemRefDialect"
  ];
  let options = [
    Option<"bucketCapMB", "bucket-cap-mb", "double", /*default=*/"25.0",
           "Bucket size cap in MiB (PyTorch DDP's bucket_cap_mb)">,
    Option<"firstBucketMB", "first-bucket-mb", "double", /*default=*/"1.0",
           "Cap of the first bucket in MiB, smaller so that communication starts early">
  ];
}

//===----------------------------------------------------------------------===//
// GPU lowering helpers (memref level, CUDA pipeline)
//===----------------------------------------------------------------------===//

def PlanArenaPass : Pass<"ddpc-plan-arena", "mlir::func::FuncOp"> {
  let summary = "Place the statically sized temporary buffers of a function in one arena at compile-time offsets";
  let description = [{
    `ddpc-plan-arena` (func.func, bufferized IR; CUDA pipeline). Static
    memory planning: every statically shaped temporary buffer of the
    function's body (a memref.alloc with one memref.dealloc in the same
    block, not escaping) gets a compile-time byte offset in one arena, so
    that buffers whose live ranges (alloc to dealloc, in program order) do
    not overlap share memory. The allocs become memref.view ops of one
    `memref.alloc() : memref<Nxi8>` (256-byte aligned offsets) made at
    function entry and freed before the return; the function gets
    `ddpc.arena_bytes = N` and `ddpc.arena_buffers = count`. Reuse is safe
    on the GPU because all device work of a rank is ordered on one stream.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect",
    "mlir::memref::MemRefDialect"
  ];
}

def GemmToLibraryCallPass : Pass<"ddpc-gemm-to-library-call", "mlir::func::FuncOp"> {
  let summary = "Replace float32 (batched) matmul generics on dense buffers with ddpc_gemm_f32 calls (cuBLAS)";
  let description = [{
    `ddpc-gemm-to-library-call` (func.func, bufferized IR). A linalg.generic
    that is a float32 contraction C[b,m,n] += A[b,m|k,k|m] * B[b,k|n,n|k]
    over dense identity-layout memrefs becomes
      func.call @ddpc_gemm_f32(batch, m, n, k, transA, transB, A, B, C,
                               strideA, strideB, strideC, accumulate)
    (i64 sizes, i32 flags, i64 aligned pointers, i64 batch strides in
    elements), which computes
    C = op(A) * op(B) + C on row-major buffers (the runtime maps it to
    cublasSgemmStridedBatched with beta = 1). When a linalg.fill of zero
    initializes C (found going backwards over ops that cannot touch C's
    memory), the fill is erased and accumulate = 0: C = op(A) * op(B),
    beta = 0. Other contractions are left alone and become generated kernels.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect",
    "mlir::func::FuncDialect",
    "mlir::memref::MemRefDialect"
  ];
}

def GemmEpiloguesPass : Pass<"ddpc-gemm-epilogues", "mlir::func::FuncOp"> {
  let summary = "Fold a bias add (+ ReLU) kernel that follows a GEMM into the GEMM call (cuBLASLt epilogue), keeping both as the fallback";
  let description = [{
    `ddpc-gemm-epilogues` (func.func, after ddpc-gemm-to-library-call). A
    single (batch 1) overwriting GEMM call whose output C is next used by an
    elementwise generic D[m,n] = act(C[m,n] + bias[n]) (act: none, or ReLU
    as maximumf(s, 0) or the importer's NaN-propagating select form; a Gemm
    or MatMul + Add (+ Relu) layer of an inference or eval function), with
    D == C or C not used afterwards, becomes
      %done = func.call @ddpc_gemm_bias_act_f32(m, n, k, transA, transB,
                                                A, B, D, bias, act) : i32
      scf.if (%done == 0) { <the GEMM call>; <the generic> }
            {ddpc.library_fallback}
    The runtime runs one cuBLASLt matmul with the BIAS or RELU_BIAS epilogue
    (bias along the columns of the row-major D, the rows of cuBLAS's
    column-major view) and returns 1, or returns 0 when cuBLASLt has no
    algorithm for it (or DDPC_GEMM_EPILOGUE=0), and the fallback runs the
    two original steps. In training the pre-activation C is also read by the
    backward pass, so training GEMMs keep their separate kernels.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect",
    "mlir::func::FuncDialect",
    "mlir::memref::MemRefDialect",
    "mlir::scf::SCFDialect"
  ];
}

def ConvEpiloguesPass : Pass<"ddpc-conv-epilogues", "mlir::func::FuncOp"> {
  let summary = "Fold a per-channel bias add (+ ReLU) kernel that follows a cuDNN forward convolution into one fused cuDNN call, keeping both as the fallback";
  let description = [{
    `ddpc-conv-epilogues` (func.func, after ddpc-conv-to-gemm). A forward
    convolution call that overwrites its output y,
      %c = func.call @ddpc_conv2d_f32(0, N, C, H, W, K, ..., x, w, y, 0)
      scf.if (%c == 0) { <im2col + GEMM> } {ddpc.library_fallback}
    whose output is next used by an elementwise generic over (n, k, p, q)
    D[n,k,p,q] = act(y[n,k,p,q] + bias[k]) (act: none, or ReLU as
    maximumf(s, 0) or the importer's NaN-propagating select form; a Conv
    with bias (+ Relu) of an inference or eval function), with D a dense
    float32 buffer disjoint from x and w, and D == y or y not used
    afterwards, becomes
      %done = func.call @ddpc_conv2d_bias_act_f32(N, C, H, W, K, R, S, P,
                Q, sh, sw, dh, dw, G, x, w, bias, D, act) : i32
      scf.if (%done == 0) { <the convolution call and its fallback>;
                            <the generic> } {ddpc.library_fallback}
    The runtime runs cuDNN's fused convolution + bias + activation forward
    (cudnnConvolutionBiasActivationForward, with the NaN-propagating ReLU
    or the identity) and returns 1, or returns 0 when cuDNN is unavailable
    or declines (or DDPC_CUDNN=0 or DDPC_CONV_EPILOGUE=0), and the original
    steps run. In training the convolution output is read again by the
    backward pass (which recomputes the bias add), so training keeps the
    separate kernel, as ddpc-gemm-epilogues does for GEMMs.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect",
    "mlir::func::FuncDialect",
    "mlir::memref::MemRefDialect",
    "mlir::scf::SCFDialect"
  ];
}

def ConvToGemmPass : Pass<"ddpc-conv-to-gemm", "mlir::func::FuncOp"> {
  let summary = "Lower 2-d convolutions and their gradients to cuDNN calls with im2col + GEMM fallbacks";
  let description = [{
    `ddpc-conv-to-gemm` (func.func, bufferized IR; CUDA pipeline). An
    ungrouped 2-d convolution generic as the importer emits it,
      y[n,0,oc,oh,ow] += x[n,0,ic,sh*oh+dh*kh, sw*ow+dw*kw] * w[0,oc,ic,kh,kw]
    (input already padded), becomes an im2col copy into a temporary
      col[n, (ic,kh,kw), (oh,ow)]   (float32, N x C*KH*KW x OH*OW)
    and one batched GEMM call y[n] (OC x OH*OW) += w (OC x C*KH*KW) *
    col[n], with w shared by the batch (batch stride 0): the explicit-GEMM
    convolution of Chellapilla et al. 2006 / Caffe, on cuBLAS. The weight
    gradient dw[0,oc,ic,kh,kw] += x[n,0,ic,...] * dy[n,0,oc,oh,ow] becomes
    colT[(ic,kh,kw), n, (oh,ow)], dyT[oc, n, (oh,ow)] (a transpose) and one
    GEMM dw (OC x C*KH*KW) += dyT (OC x N*OH*OW) * colT^T. The input
    gradient dx[n,0,ic,sh*oh+dh*kh,sw*ow+dw*kw] += w[0,oc,ic,kh,kw] *
    dy[n,0,oc,oh,ow] becomes one batched GEMM that overwrites a temporary,
    dcol[n] (C*KH*KW x OH*OW) = w^T * dy[n], and col2im: a scatter-add
    generic dx[...] += dcol[n,(ic,kh,kw),(oh,ow)] for ddpc-scatter-to-atomic.
    When all three tensors are dense and the output size is cuDNN's for the
    padded input, each of the three is first tried as one library call,
      %done = func.call @ddpc_conv2d_f32(kind, N, C, H, W, OC, KH, KW, OH,
                OW, sh, sw, dh, dw, x, w, y, accumulate) : i32
    (kind 0 forward, 1 input gradient, 2 weight gradient; Gemm.h), and the
    lowering above runs in `scf.if (%done == 0) {ddpc.library_fallback}`.
    A zero fill of the written tensor found before the op is absorbed
    (accumulate = 0); for the input gradient it moves into the fallback.
    Grouped convolutions (G > 1) get the library call too (with the group
    count; C and OC then count all groups), and their fallback is the
    original generic.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect",
    "mlir::func::FuncDialect",
    "mlir::linalg::LinalgDialect",
    "mlir::memref::MemRefDialect"
  ];
}

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
    between runs (as with PyTorch's atomics-based backward kernels).

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

def GPUHostSyncPass : Pass<"ddpc-gpu-host-sync", "mlir::ModuleOp"> {
  let summary = "Wait for the compute stream before host memory accesses that follow device work, and before returns";
  let description = [{
    `ddpc-gpu-host-sync` (module, after gpu-kernel-outlining). Kernel
    launches, GEMM and allreduce calls are asynchronous on the runtime's
    compute stream. This pass inserts `func.call @ddpc_gpu_host_sync()`
    (which waits for that stream) before every host-side memref access or
    call into other code that follows device work in the same block, and
    before the return of every public function, so that results handed back
    to the runtime are complete.
  }];
  let dependentDialects = [
    "mlir::func::FuncDialect"
  ];
}

def DeviceConstantsPass : Pass<"ddpc-device-constants", "mlir::ModuleOp"> {
  let summary = "Give kernels device copies of constant tensors (memref.global constant)";
  let description = [{
    `ddpc-device-constants` (module, GPU targets, last pass of the loop
    pipeline). A constant tensor (an inference program's weights, a
    Constant node) is a global of the host program, which kernels and
    cuDNN cannot read. Every constant `memref.global` a function reads is
    packed into one byte array `@__ddpc_device_constants` (256-byte aligned
    offsets); each such function starts with
    `call @ddpc_device_constants(%host, %bytes)`, whose runtime copies the
    array to device memory once per process and returns the copy, and each
    `memref.get_global` becomes a `memref.view` of that copy (i1 elements
    as one byte each, as LLVM stores them). Globals of other element types
    narrower than a byte, or without a dense value, are left alone.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect",
    "mlir::func::FuncDialect",
    "mlir::memref::MemRefDialect"
  ];
}

def GPUMergeModulesPass : Pass<"ddpc-gpu-merge-modules", "mlir::ModuleOp"> {
  let summary = "Move every outlined kernel into one gpu.module named ddpc_kernels (one PTX/cubin per architecture)";
  let description = [{
    `ddpc-gpu-merge-modules` (module, after gpu-kernel-outlining): moves
    every kernel into one gpu.module @ddpc_kernels (kernel @M::@F becomes
    @ddpc_kernels::@M), so each architecture is assembled once and the
    program loads one image.
  }];
}

#endif // DDPC_TRANSFORMS_PASSES_TD

//===- Passes.h - ddpc's own transformation passes --------------*- C++ -*-===//
//
// Part of ddpc. Passes that are ours (the rest of every pipeline is upstream
// MLIR, see lib/Pipelines). All are registered with `ddpc-opt` under the
// names given below.
//
// Target-independent (tensor level):
//   ddpc-fuse-ops            operator fusion into kernel-sized groups
//   ddpc-clone-shared-fills  one linalg.fill per destination use
//
// Target-independent (memref level, last pass of bufferization):
//   ddpc-bucket-gradient-allreduce  gradient allreduce in buckets that
//                                   start during backward
//
// GPU lowering helpers (memref level, used by the CUDA pipeline only):
//   ddpc-plan-arena             temporaries at compile-time arena offsets
//   ddpc-gemm-to-library-call   contraction generics -> ddpc_gemm_f32 calls
//   ddpc-gemm-epilogues         GEMM + bias (+ ReLU) kernel -> one cuBLASLt
//                               call, with the two as fallback
//   ddpc-scatter-to-atomic      reduction generics with non-injective
//                               outputs -> parallel loops with atomic adds
//   ddpc-memref-copy-to-linalg  memref.copy -> linalg.copy (device copies)
//   ddpc-collapse-parallel-loops  n-d scf.parallel -> 1-d (one thread/elem)
//   ddpc-gpu-host-sync          device/host ordering for host memory accesses
//   ddpc-gpu-merge-modules      all kernels in one gpu.module
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_TRANSFORMS_PASSES_H
#define DDPC_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace ddpc {

/// Operator fusion (`ddpc-fuse-ops`, on func.func, linalg on tensors).
///
/// First erases unused inputs and results of linalg.generic ops (upstream
/// patterns; the VJP generics carry all inputs of their forward op). Then
/// groups elementwise (all-parallel) linalg.generic producers with their
/// consumers, which may be elementwise ops or reductions, using upstream
/// `linalg::fuseElementwiseOps` with a cost policy of our own:
///   * the producer must be all-parallel (a reduction result is a kernel
///     boundary: it needs every input before any output);
///   * the consumer must read each producer element once (its indexing map
///     for the operand is a permutation of all its loops), so fusion never
///     multiplies work: contractions (MatMul/Gemm/Conv) keep their operands
///     as separate kernels and stay recognizable for library calls;
///   * a producer with several users is recomputed only if its body has at
///     most `maxRecomputeOps` operations.
/// Every linalg op that remains is one kernel ("fusion group"); it gets
///   ddpc.fusion_group = <i64 id>   (program order within the function)
///   ddpc.fused_nodes = [names]     (the ONNX nodes it computes)
/// which `--dump-ir` shows. The pass never fails.
std::unique_ptr<mlir::Pass> createFuseOpsPass(unsigned maxRecomputeOps = 8);

/// `ddpc-clone-shared-fills` (func.func, linalg on tensors; first pass of
/// bufferization). CSE merges equal fills, so one zero tensor often
/// initializes several accumulations (a forward GEMM and a VJP of the same
/// shape). One-shot bufferization must then copy the filled buffer for all
/// but one of them: a memref.copy (a copy kernel on the GPU) where a fill
/// would do. This pass gives every destination (DPS init) use its own
/// clone of the fill, and of the fill's tensor.empty, right before the
/// user; the original keeps the remaining uses. A fill costs what a copy of
/// its result costs minus the read, and a GEMM can absorb a zero fill of
/// its output (ddpc-gemm-to-library-call, beta = 0).
std::unique_ptr<mlir::Pass> createCloneSharedFillsPass();

/// `ddpc-bucket-gradient-allreduce` (module; bufferized IR, both targets).
/// Data-parallel gradient synchronization overlapped with backward, decided
/// at compile time (the bucketing of PyTorch DDP's Reducer: Li et al.,
/// "PyTorch Distributed: Experiences on Accelerating Data Parallel
/// Training", VLDB 2020, sections 3.2.3-3.2.4).
///
/// In every function with out-parameters marked `ddpc.role =
/// "new_grad_acc"` (float32 static memrefs: @train_micro's gradient
/// accumulators), a gradient is *ready* after the last op of the entry
/// block that uses its buffer or a view of it (deallocation bookkeeping
/// aside). Gradients are taken in ready order (the order backward finishes
/// them) and packed greedily into buckets: a gradient joins the open
/// bucket, which closes once it holds at least `bucketCapMB` MiB (the first
/// one `firstBucketMB`, so communication starts early), as in PyTorch DDP;
/// a bucket can thus exceed its cap by its last gradient. Right after the op that readies a bucket's last gradient
/// the pass inserts
///   func.call @ddpc_rt_bucket_add_f32(ptr, count)   (once per gradient)
///   func.call @ddpc_rt_bucket_allreduce_start(bucket index : i64)
///       {ddpc.collective = "allreduce_bucket", ddpc.bytes, ddpc.bucket,
///        ddpc.params = [names], ddpc.start_op = position of that op
///        (1-based, entry block, before insertion), ddpc.function_ops}
/// and before the return `func.call @ddpc_rt_bucket_allreduce_wait()`.
/// The runtime (TrainABI.h) sums each bucket in place over all ranks while
/// the rest of backward runs, and waits for all of them at the end; it does
/// nothing unless this call is the synchronizing micro-batch of a
/// multi-rank optimizer step. Fails (with an error on the function) when a
/// gradient output is not a dense static float32 memref, or a cap is not
/// a positive finite number.
std::unique_ptr<mlir::Pass>
createBucketGradientAllReducePass(double bucketCapMB = 25.0,
                                  double firstBucketMB = 1.0);

/// `ddpc-plan-arena` (func.func, bufferized IR; CUDA pipeline). Static
/// memory planning: every statically shaped temporary buffer of the
/// function's body (a memref.alloc with one memref.dealloc in the same
/// block, not escaping) gets a compile-time byte offset in one arena, so
/// that buffers whose live ranges (alloc to dealloc, in program order) do
/// not overlap share memory. The allocs become memref.view ops of one
/// `memref.alloc() : memref<Nxi8>` (256-byte aligned offsets) made at
/// function entry and freed before the return; the function gets
/// `ddpc.arena_bytes = N` and `ddpc.arena_buffers = count`. Reuse is safe
/// on the GPU because all device work of a rank is ordered on one stream.
std::unique_ptr<mlir::Pass> createPlanArenaPass();

/// `ddpc-gemm-to-library-call` (func.func, bufferized IR). A linalg.generic
/// that is a float32 contraction C[b,m,n] += A[b,m|k,k|m] * B[b,k|n,n|k]
/// over dense identity-layout memrefs becomes
///   func.call @ddpc_gemm_f32(batch, m, n, k, transA, transB, A, B, C,
///                            strideA, strideB, strideC, accumulate)
/// (i64 sizes, i32 flags, i64 aligned pointers, i64 batch strides in
/// elements), which computes
/// C = op(A) * op(B) + C on row-major buffers (the runtime maps it to
/// cublasSgemmStridedBatched with beta = 1). When a linalg.fill of zero
/// initializes C (found going backwards over ops that cannot touch C's
/// memory), the fill is erased and accumulate = 0: C = op(A) * op(B),
/// beta = 0. Other contractions are left alone and become generated kernels.
std::unique_ptr<mlir::Pass> createGemmToLibraryCallPass();

/// `ddpc-gemm-epilogues` (func.func, after ddpc-gemm-to-library-call). A
/// single (batch 1) overwriting GEMM call whose output C is next used by an
/// elementwise generic D[m,n] = act(C[m,n] + bias[n]) (act: none, or ReLU
/// as maximumf(s, 0) or the importer's NaN-propagating select form; a Gemm
/// or MatMul + Add (+ Relu) layer of an inference or eval function), with
/// D == C or C not used afterwards, becomes
///   %done = func.call @ddpc_gemm_bias_act_f32(m, n, k, transA, transB,
///                                             A, B, D, bias, act) : i32
///   scf.if (%done == 0) { <the GEMM call>; <the generic> }
///         {ddpc.library_fallback}
/// The runtime runs one cuBLASLt matmul with the BIAS or RELU_BIAS epilogue
/// (bias along the columns of the row-major D, the rows of cuBLAS's
/// column-major view) and returns 1, or returns 0 when cuBLASLt has no
/// algorithm for it (or DDPC_GEMM_EPILOGUE=0), and the fallback runs the
/// two original steps. In training the pre-activation C is also read by the
/// backward pass, so training GEMMs keep their separate kernels.
std::unique_ptr<mlir::Pass> createGemmEpiloguesPass();

/// `ddpc-conv-to-gemm` (func.func, bufferized IR; CUDA pipeline). An
/// ungrouped 2-d convolution generic as the importer emits it,
///   y[n,0,oc,oh,ow] += x[n,0,ic,sh*oh+dh*kh, sw*ow+dw*kw] * w[0,oc,ic,kh,kw]
/// (input already padded), becomes an im2col copy into a temporary
///   col[n, (ic,kh,kw), (oh,ow)]   (float32, N x C*KH*KW x OH*OW)
/// and one batched GEMM call y[n] (OC x OH*OW) += w (OC x C*KH*KW) *
/// col[n], with w shared by the batch (batch stride 0): the explicit-GEMM
/// convolution of Chellapilla et al. 2006 / Caffe, on cuBLAS. The weight
/// gradient dw[0,oc,ic,kh,kw] += x[n,0,ic,...] * dy[n,0,oc,oh,ow] becomes
/// colT[(ic,kh,kw), n, (oh,ow)], dyT[oc, n, (oh,ow)] (a transpose) and one
/// GEMM dw (OC x C*KH*KW) += dyT (OC x N*OH*OW) * colT^T. The input
/// gradient dx[n,0,ic,sh*oh+dh*kh,sw*ow+dw*kw] += w[0,oc,ic,kh,kw] *
/// dy[n,0,oc,oh,ow] becomes one batched GEMM that overwrites a temporary,
/// dcol[n] (C*KH*KW x OH*OW) = w^T * dy[n], and col2im: a scatter-add
/// generic dx[...] += dcol[n,(ic,kh,kw),(oh,ow)] for ddpc-scatter-to-atomic.
/// When all three tensors are dense and the output size is cuDNN's for the
/// padded input, each of the three is first tried as one library call,
///   %done = func.call @ddpc_conv2d_f32(kind, N, C, H, W, OC, KH, KW, OH,
///             OW, sh, sw, dh, dw, x, w, y, accumulate) : i32
/// (kind 0 forward, 1 input gradient, 2 weight gradient; Gemm.h), and the
/// lowering above runs in `scf.if (%done == 0) {ddpc.library_fallback}`.
/// A zero fill of the written tensor found before the op is absorbed
/// (accumulate = 0); for the input gradient it moves into the fallback.
/// Grouped convolutions (G > 1) get the library call too (with the group
/// count; C and OC then count all groups), and their fallback is the
/// original generic.
std::unique_ptr<mlir::Pass> createConvToGemmPass();

/// `ddpc-scatter-to-atomic` (func.func, bufferized IR). A linalg.generic
/// whose output indexing map is not a projected permutation (a gradient of
/// a convolution or pooling window w.r.t. its input: out[h + kh] += ...) has
/// no parallel loop, so it would run on the host. When its body is
/// `yield acc + f(inputs)` it becomes an scf.parallel over all loops whose
/// body does `memref.atomic_rmw addf` of f(inputs): the same sum, computed
/// by one GPU thread per iteration. Float addition order then varies
/// between runs (as with PyTorch's atomics-based backward kernels).
std::unique_ptr<mlir::Pass> createScatterToAtomicPass();

/// `ddpc-memref-copy-to-linalg` (func.func): memref.copy -> linalg.copy, so
/// that copies between device buffers become kernels instead of host
/// memcpy calls.
std::unique_ptr<mlir::Pass> createMemRefCopyToLinalgPass();

/// `ddpc-parallel-loops-outermost` (func.func, bufferized IR). Loop
/// conversion keeps a linalg op's loop order, so a reduction dim before a
/// parallel dim (e.g. a bias gradient db[c] = sum_n dy[n, c]) would become a
/// host loop launching one small kernel per iteration. This pass
/// interchanges such ops (upstream linalg::interchangeGenericOp, named ops
/// generalized first) so that all parallel loops come first, in their
/// order, then the reductions in theirs: each thread then sums its output's
/// terms in the same order as before.
std::unique_ptr<mlir::Pass> createParallelLoopsOutermostPass();

/// `ddpc-split-reductions` (func.func, bufferized IR, after
/// ddpc-parallel-loops-outermost). A float reduction `out[p] += v(p, r)`
/// with fewer than `targetThreads` outputs and at least `minReduction` terms
/// each (a bias or convolution-weight gradient, BatchNorm statistics) would
/// give one GPU thread a long serial loop per output. Its outermost
/// reduction loops join the parallel loops until there are `targetThreads`
/// threads; each thread sums the remaining loops' terms and adds that
/// partial sum to its output with `memref.atomic_rmw addf` (split-K in GEMM
/// terms). Float addition order then varies between runs, as with
/// ddpc-scatter-to-atomic.
std::unique_ptr<mlir::Pass>
createSplitReductionsPass(int64_t targetThreads = 65536,
                          int64_t minReduction = 256);

/// `ddpc-serial-loops-to-device` (func.func, after
/// convert-linalg-to-parallel-loops). A loop nest outside any scf.parallel
/// that reads or writes memory (a full reduction such as a correct-
/// prediction count) would run on the host, touching device memory between
/// kernels. Each outermost such scf.for (no results, no calls, allocations,
/// linalg ops or parallel loops inside) is wrapped in a one-iteration
/// scf.parallel, so that it becomes a one-thread kernel.
std::unique_ptr<mlir::Pass> createSerialLoopsToDevicePass();

/// `ddpc-collapse-parallel-loops` (func.func): collapses every outermost
/// n-d scf.parallel into a 1-d one (row-major linearization), so that
/// tiling by the block size maps one GPU thread to one output element.
std::unique_ptr<mlir::Pass> createCollapseParallelLoopsPass();

/// `ddpc-gpu-host-sync` (module, after gpu-kernel-outlining). Kernel
/// launches, GEMM and allreduce calls are asynchronous on the runtime's
/// compute stream. This pass inserts `func.call @ddpc_gpu_host_sync()`
/// (which waits for that stream) before every host-side memref access or
/// call into other code that follows device work in the same block, and
/// before the return of every public function, so that results handed back
/// to the runtime are complete.
std::unique_ptr<mlir::Pass> createGPUHostSyncPass();

/// `ddpc-gpu-merge-modules` (module, after gpu-kernel-outlining): moves
/// every kernel into one gpu.module @ddpc_kernels (kernel @M::@F becomes
/// @ddpc_kernels::@M), so each architecture is assembled once and the
/// program loads one image.
std::unique_ptr<mlir::Pass> createGPUMergeModulesPass();

/// Registers all passes above with the global pass registry.
void registerTransformsPasses();

} // namespace ddpc

#endif // DDPC_TRANSFORMS_PASSES_H

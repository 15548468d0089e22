//===- Passes.td - ddpc Parallel passes --------------------*- tablegen -*-===//
//
// Part of ddpc. Data-parallel passes: gradient communication (buckets of
// allreduces that start during backward) and the lowering of tensor-level
// collectives; implemented in lib/Parallel.
// mlir-tblgen generates their base classes, options, create functions and
// registration (Passes.h.inc); docs/passes.md documents every area's passes
// (include/ddpc/Passes.td).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_PARALLEL_PASSES_TD
#define DDPC_PARALLEL_PASSES_TD

include "mlir/Pass/PassBase.td"

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

    With `shard-gradients` (ZeRO stage 2, Rajbhandari et al., SC'20,
    sec. 5.2, P_os+g) the gradients leave the function only through the
    buckets: each `new_grad_acc` out-parameter is replaced by a
    `memref.alloc` placed before its first use and a `memref.dealloc`
    right after its bucket's start call (the runtime copies the bucket
    there and reduce-scatters it into each rank's gradient slice), and the
    out-parameter is erased from the signature. The buffers then live from
    the op that first writes them to their bucket, not for the whole step.
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
           "Cap of the first bucket in MiB, smaller so that communication starts early">,
    Option<"shardGradients", "shard-gradients", "bool", /*default=*/"false",
           "ZeRO stage 2: the gradient outputs become temporaries that live until their bucket starts">
  ];
}

def GatherParametersPass : Pass<"ddpc-gather-parameters", "mlir::ModuleOp"> {
  let summary = "ZeRO stage 3: all-gather each parameter before its uses in forward and again in backward, and free it after";
  let description = [{
    `ddpc-gather-parameters` (module; bufferized IR, after
    ddpc-bucket-gradient-allreduce; the CPU target). ZeRO stage 3
    (Rajbhandari et al., SC'20, sec. 5.3, P_os+g+p): a rank keeps only its
    slice of the parameters, so @train_micro and @eval must assemble each
    parameter where they read it. For every argument marked `ddpc.role =
    "param"` (a dense static float32 memref; index k among them, TrainABI
    order) the pass splits its uses into segments: the uses before
    backward (the first contraction or loop nest of the entry block whose
    location names no ONNX node) and the uses in backward. Before a
    segment's first use it inserts
      %g = memref.alloc() {alignment = 64}
      func.call @ddpc_rt_param_gather_f32(ptr(%g), k : i64)
          {ddpc.collective = "all_gather_param", ddpc.bytes, ddpc.params}
    which fills %g with the whole parameter from every rank's slice
    (TrainABI.h; collective, blocking), makes the segment's uses read %g,
    and frees %g after the segment's last use (through views). A view that
    lives from forward into backward keeps one segment. The argument is left
    unused; the runtime passes no buffer for it. So a parameter is whole
    only while forward or backward reads it, and the arena plans the
    gathered buffers like any temporary. A parameter named in
    `keep-gathered` gets one segment from its first use to its last, so it
    is gathered once per call and stays whole from forward into backward
    (less communication, more memory; the driver picks these under
    --memory-budget). Fails when a parameter argument is not a dense static
    float32 memref.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect",
    "mlir::func::FuncDialect",
    "mlir::LLVM::LLVMDialect",
    "mlir::memref::MemRefDialect"
  ];
  let options = [
    ListOption<"keepGathered", "keep-gathered", "std::string",
               "Parameters (ddpc.name) gathered once per call and kept whole from forward into backward">
  ];
}

def LowerCollectivesPass : Pass<"ddpc-lower-collectives", "mlir::ModuleOp"> {
  let summary = "Lower shard collectives over the world grid to calls of the ddpc runtime";
  let description = [{
    `ddpc-lower-collectives` (module; tensor IR, before bufferization, both
    targets). Tensor-level IR carries collectives as upstream `shard` ops
    over `shard.grid @ddpc_world(shape = ?)`, the 1-D grid of all ranks
    (include/ddpc/Parallel/Collectives.h). Each
      %r = shard.all_reduce %x on @ddpc_world grid_axes = [0]
             reduction = sum : tensor<S x f32> -> tensor<S x f32>
    becomes a call of the private helper `@ddpc_allreduce_sum_f32_<N>` (N =
    elements of S; one per size) on %x flattened to 1-D,
    `{ddpc.collective = "all_reduce_sum", ddpc.bytes = 4 N}`, whose body
    copies its argument into a 64-byte aligned buffer, calls the runtime's
    in-place `ddpc_rt_allreduce_sum_f32(ptr, N)` (TrainABI.h: MPI on the
    CPU, NCCL on the GPU) and returns the buffer as a tensor. The grid is
    erased once unused. Any other shard op (another reduction, element
    type, grid or a dynamic shape) fails the pass with an error on the op.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect",
    "mlir::bufferization::BufferizationDialect",
    "mlir::func::FuncDialect",
    "mlir::LLVM::LLVMDialect",
    "mlir::memref::MemRefDialect",
    "mlir::tensor::TensorDialect"
  ];
}

#endif // DDPC_PARALLEL_PASSES_TD

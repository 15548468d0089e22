//===- Passes.td - ddpc Transforms passes ------------------*- tablegen -*-===//
//
// Part of ddpc. Tensor-level graph passes (target independent), and the last
// pass of bufferization; implemented in lib/Transforms. mlir-tblgen generates
// their base classes, options, create functions and registration
// (Passes.h.inc); docs/passes.md documents every area's passes
// (include/ddpc/Passes.td).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_TRANSFORMS_PASSES_TD
#define DDPC_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

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

def FreeAtLastUsePass : Pass<"ddpc-free-at-last-use", "mlir::func::FuncOp"> {
  let summary = "Move each memref.dealloc up to right after the last use of its buffer (upstream deallocation frees at the block's end)";
  let description = [{
    `ddpc-free-at-last-use` (func.func, after upstream's
    buffer-deallocation pipeline and before
    ddpc-bucket-gradient-allreduce). Ownership-based deallocation frees
    every allocation at the end of its block, so in a training step every
    forward temporary and every backward temporary is live until the step
    returns and the peak is the sum of them all. For an allocation and its
    one unconditional dealloc in the same block, this pass moves the
    dealloc to right after the top-level op of the last use of the buffer
    or of any view of it (memref views and casts), so that the memory plan
    (Analysis/MemoryPlan.h) and the runtime reuse it for what follows.
      %a = memref.alloc() : memref<4xf32>
      linalg.fill ins(%c : f32) outs(%a : memref<4xf32>)
      "use"(%a) ...            // last use
      ...                      // %a is dead here
      memref.dealloc %a        // moved up to right after "use"
    A buffer whose address escapes (a view the pass does not know, a call,
    a pointer extracted from it, a return, a store of it) keeps its
    dealloc where it was. When the last use is a contraction or
    convolution whose result the next kernel reads elementwise, the
    dealloc goes after that kernel: ddpc-gemm-epilogues and
    ddpc-conv-epilogues may fuse the two into one library call there.
  }];
  let dependentDialects = [
    "mlir::memref::MemRefDialect"
  ];
}

def RematerializePass : Pass<"ddpc-rematerialize", "mlir::func::FuncOp"> {
  let summary = "Recompute chosen forward activations in the backward pass instead of keeping them (rematerialization)";
  let description = [{
    `ddpc-rematerialize{nodes=Relu_2,Add_1}` (func.func, linalg on tensors,
    last pass of the "fused" stage, after ddpc-fuse-ops and the last CSE,
    which would merge the copies back; only @train_micro). Chen et al.,
    "Training Deep Nets with Sublinear Memory Cost" (2016): an activation
    the backward pass reads is either kept from the forward pass until then
    or recomputed there. Forward ops are those before the loss (the first
    linalg op of no ONNX node). For every forward op whose location names
    a node of `nodes` (a fused group is recomputed whole), each
    result that later ops read is recomputed right before its first such
    read, and those reads use the copy; the forward value then dies at its
    last forward use (ddpc-free-at-last-use frees it). The copy's tensor
    operands are recomputed the same way when their producers are chosen
    too, or are free to rebuild (tensor.empty, linalg.fill, reshapes), else
    read from the forward pass, which then keeps them. Each copy carries
    `ddpc.remat` (its node names) and an unknown location. Ops that depend
    on the step's random state (`rng`, Dropout) or touch memory are never
    recomputed: a second draw would differ.
      %r = linalg.generic ... loc("Relu_2")             // forward
      ...
      %r2 = linalg.generic ... {ddpc.remat = "Relu_2"}  // backward's copy
      %g = linalg.generic ins(%r2, %dy ...)             // the VJP reads it
  }];
  let options = [
    ListOption<"nodes", "nodes", "std::string",
               "ONNX node names whose activations backward recomputes">
  ];
  let dependentDialects = [
    "mlir::linalg::LinalgDialect",
    "mlir::tensor::TensorDialect"
  ];
}

#endif // DDPC_TRANSFORMS_PASSES_TD

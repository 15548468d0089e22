//===- Passes.td - ddpc Codegen passes ---------------------*- tablegen -*-===//
//
// Part of ddpc. Target-neutral code generation on bufferized IR: contractions
// and convolutions to library calls with their epilogues, and the arena plan;
// implemented in lib/Codegen. mlir-tblgen generates their base classes,
// options, create functions and registration (Passes.h.inc); docs/passes.md
// documents every area's passes (include/ddpc/Passes.td).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_CODEGEN_PASSES_TD
#define DDPC_CODEGEN_PASSES_TD

include "mlir/Pass/PassBase.td"

def CollapseLoopDimsPass : Pass<"ddpc-collapse-loop-dims", "mlir::func::FuncOp"> {
  let summary = "Merge the adjacent loop dims of linalg.generic ops on contiguous buffers";
  let description = [{
    `ddpc-collapse-loop-dims` (bufferized IR, before
    `convert-linalg-to-loops`). An elementwise kernel over a weight of
    shape 64x64x3x3 becomes four loops whose innermost runs 3 times, and
    LLVM's loop vectorizer then vectorizes across the wrong loop with
    gathers and scatters. Each run of adjacent loop dims of one iterator type
    that every indexing map keeps contiguous (upstream's
    `areDimSequencesPreserved`) becomes one dim
    (`linalg::collapseOpIterationDims`, `memref.collapse_shape` on the
    operands): the same kernel is one loop of 36864 iterations. Only ops
    whose operands are all statically shaped memrefs of identity layout
    change; the summation order of a reduction is unchanged (the merged
    dims are visited in the same order).
  }];
  let dependentDialects = ["mlir::memref::MemRefDialect", "mlir::linalg::LinalgDialect"];
}

def OutlineLoopNestsPass : Pass<"ddpc-outline-loop-nests", "mlir::ModuleOp"> {
  let summary = "Move each top-level loop nest of a function into its own private function";
  let description = [{
    `ddpc-outline-loop-nests` (module, bufferized IR after
    `convert-linalg-to-loops`; before `convert-func-to-llvm`). A training
    step lowers to one function of tens of thousands of instructions, and
    LLVM's loop passes (IndVarSimplify most of all, through SCEV) take
    time superlinear in a function's size (docs/cpu-speed.md). Each `scf.for` / `scf.parallel` directly in a function body
    with at least `min-ops` operations becomes a private function
    (`<parent>.loop<N>`, internal linkage) called with `no_inline`, so LLVM
    optimizes many small functions and the call costs one jump per nest.

    What the nest uses from above is passed as an argument when it is a
    scalar or a memref of static shape and identity layout (what the
    bare-pointer calling convention accepts); a side-effect-free op that
    defines anything else (`memref.subview`, `memref.reinterpret_cast`,
    constants, ...) is cloned into the new function, so loop bounds stay
    constants. A nest that needs any other value stays where it is.
  }];
  let options = [
    Option<"minOps", "min-ops", "unsigned", /*default=*/"8",
           "Smallest nest (operations, nested ones included) to outline">
  ];
  let dependentDialects = ["mlir::func::FuncDialect", "mlir::LLVM::LLVMDialect"];
}

def FlattenEmptyArgumentsPass : Pass<"ddpc-flatten-empty-arguments", "mlir::ModuleOp"> {
  let summary = "Give zero-size memref arguments of defined functions the type memref<0xT>";
  let description = [{
    `ddpc-flatten-empty-arguments` (module, bufferized IR; before
    `convert-func-to-llvm{use-bare-ptr-memref-call-conv}`). Upstream's
    bare-pointer calling convention refuses a memref of zero elements with
    more than one dimension (`memref<2x0x4xf32>`) and then leaves the whole
    function unconverted. Such an argument holds no data, so each one
    becomes `memref<0xT>` (one pointer, the same ABI) and its uses read a
    `memref.alloca` of the original type, zero bytes. Functions without a
    body are unchanged.
  }];
  let dependentDialects = ["mlir::memref::MemRefDialect"];
}

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
    The CPU target runs the same calls on OpenBLAS (CpuBlas.cpp); `library`
    only names the implementation in the call's `ddpc.library` attribute
    (the plan report's column).
  }];
  let options = [
    Option<"library", "library", "std::string", /*default=*/"\"cublas\"",
           "Library named by the calls' ddpc.library attribute (cublas, openblas)">
  ];
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
    backward pass, so training GEMMs keep their separate kernels. On the CPU
    (library=openblas) the runtime runs the GEMM on OpenBLAS and the
    epilogue as a loop over D.
  }];
  let options = [
    Option<"library", "library", "std::string", /*default=*/"\"cublasLt\"",
           "Library named by the calls' ddpc.library attribute (cublasLt, openblas)">
  ];
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
    `ddpc-conv-epilogues` (func.func, after ddpc-conv-to-library-call). A forward
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

def ConvToLibraryCallPass : Pass<"ddpc-conv-to-library-call", "mlir::func::FuncOp"> {
  let summary = "Lower 2-d convolutions and their gradients to cuDNN calls with im2col + GEMM fallbacks";
  let description = [{
    `ddpc-conv-to-library-call` (func.func, bufferized IR; CUDA pipeline). An
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
    original generic. With `conv-library` empty (the CPU target, which has
    no convolution library) no ddpc_conv2d_f32 call is tried: ungrouped
    convolutions become the im2col + GEMM lowering alone, grouped ones stay
    generics.
  }];
  let options = [
    Option<"convLibrary", "conv-library", "std::string", /*default=*/"\"cudnn\"",
           "Library tried first for each convolution (cudnn); empty: none, im2col + GEMM only">,
    Option<"gemmLibrary", "gemm-library", "std::string", /*default=*/"\"cublas\"",
           "Library named by the GEMM calls' ddpc.library attribute (cublas, openblas)">
  ];
  let dependentDialects = [
    "mlir::arith::ArithDialect",
    "mlir::func::FuncDialect",
    "mlir::linalg::LinalgDialect",
    "mlir::memref::MemRefDialect"
  ];
}

#endif // DDPC_CODEGEN_PASSES_TD

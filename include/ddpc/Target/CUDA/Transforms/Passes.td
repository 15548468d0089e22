//===- Passes.td - ddpc Target/CUDA/Transforms passes ------*- tablegen -*-===//
//
// Part of ddpc. Passes of the CUDA target alone: device copies of constants,
// one gpu.module for all kernels, host/device ordering; implemented in
// lib/Target/CUDA/Transforms. mlir-tblgen generates their base classes,
// options, create functions and registration (Passes.h.inc); docs/passes.md
// documents every area's passes (include/ddpc/Passes.td).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_TARGET_CUDA_TRANSFORMS_PASSES_TD
#define DDPC_TARGET_CUDA_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

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

def GPUAssembleFatBinariesPass : Pass<"ddpc-gpu-assemble-fatbin", "mlir::ModuleOp"> {
  let summary = "Assemble each gpu.binary's PTX objects into one fatbin with the CUDA toolkit's ptxas and fatbinary";
  let description = [{
    `ddpc-gpu-assemble-fatbin` (module, after `gpu-module-to-binary
    {format=isa}`; last pass of stage "nvvm"). Each gpu.binary holds one
    PTX object per architecture; the pass assembles each with ptxas (one
    cubin per architecture) and bundles the cubins, plus the PTX of the
    newest architecture for the driver to JIT on newer GPUs, with
    fatbinary into one object that the host code loads with
    mgpuModuleLoad (include/ddpc/Target/CUDA/FatBinary.h). The toolkit is
    `cuda-path`, else $CUDA_HOME, else $CUDA_PATH, else /usr/local/cuda.
    Fails with an error naming the toolkit folder or the tool and its
    message.
  }];
  let options = [
    Option<"cudaPath", "cuda-path", "std::string", /*default=*/"\"\"",
           "CUDA toolkit folder (holding bin/ptxas and bin/fatbinary)">
  ];
}

#endif // DDPC_TARGET_CUDA_TRANSFORMS_PASSES_TD

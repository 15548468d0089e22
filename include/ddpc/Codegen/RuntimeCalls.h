//===- RuntimeCalls.h - runtime entry points that passes call ---*- C++ -*-===//
//
// Part of ddpc (every pass that inserts runtime calls). Names of the runtime
// functions that ddpc's passes insert calls to (TrainABI.h, Runtime/Gemm.h),
// and helpers that declare them and build their arguments.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_CODEGEN_RUNTIMECALLS_H
#define DDPC_CODEGEN_RUNTIMECALLS_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinOps.h"

namespace ddpc {

/// Library calls (Runtime/Gemm.h): the GEMM (ddpc-gemm-to-library-call),
/// the GEMM with a bias/ReLU epilogue (ddpc-gemm-epilogues), convolutions
/// (ddpc-conv-to-library-call) and convolutions with a bias/ReLU epilogue
/// (ddpc-conv-epilogues). They enqueue work on the compute stream.
constexpr llvm::StringLiteral kGemmFn = "ddpc_gemm_f32";
constexpr llvm::StringLiteral kGemmEpilogueFn = "ddpc_gemm_bias_act_f32";
constexpr llvm::StringLiteral kConvFn = "ddpc_conv2d_f32";
constexpr llvm::StringLiteral kConvEpilogueFn = "ddpc_conv2d_bias_act_f32";

/// The allreduce of one gradient (TrainABI.h).
constexpr llvm::StringLiteral kAllReduceFn = "ddpc_rt_allreduce_sum_f32";

/// Waits for the device's pending work (ddpc-gpu-host-sync).
constexpr llvm::StringLiteral kSyncFn = "ddpc_gpu_host_sync";

/// Run-time index check (ModelABI.h): stream-ordered on the CUDA target (the
/// runtime copies the checked values on the compute stream), so it needs
/// no host synchronization before it.
constexpr llvm::StringLiteral kIndexCheckFn = "ddpc_rt_check_indices";
constexpr llvm::StringLiteral kCountCheckFn = "ddpc_rt_check_count";

/// Gradient buckets (ddpc-bucket-gradient-allreduce, TrainABI.h): NCCL on
/// the communication stream on the GPU, ordered with events against the
/// compute stream.
constexpr llvm::StringLiteral kBucketAddFn = "ddpc_rt_bucket_add_f32";
constexpr llvm::StringLiteral kBucketStartFn = "ddpc_rt_bucket_allreduce_start";
constexpr llvm::StringLiteral kBucketWaitFn = "ddpc_rt_bucket_allreduce_wait";
constexpr llvm::StringLiteral kBucketFns[] = {kBucketAddFn, kBucketStartFn,
                                              kBucketWaitFn};

/// Arguments of runtime calls, created at `b`'s insertion point: integer
/// constants, and buffers as their aligned base address (i64), the form
/// the runtime's C entry points take.
struct RuntimeArgs {
  mlir::OpBuilder &b;
  mlir::Location loc;
  mlir::Value integer(int64_t v, unsigned bits) {
    return mlir::arith::ConstantIntOp::create(b, loc, v, bits).getResult();
  }
  mlir::Value pointer(mlir::Value mem) {
    mlir::Value idx =
        mlir::memref::ExtractAlignedPointerAsIndexOp::create(b, loc, mem);
    return mlir::arith::IndexCastOp::create(b, loc, b.getI64Type(), idx)
        .getResult();
  }
};

/// Returns the function `name` of `module`, declaring it (private, with
/// `type`) at the end of the module if it does not exist.
mlir::func::FuncOp getOrDeclare(mlir::ModuleOp module, llvm::StringRef name,
                                mlir::FunctionType type);

} // namespace ddpc

#endif // DDPC_CODEGEN_RUNTIMECALLS_H

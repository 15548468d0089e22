//===- RuntimeCalls.h - runtime entry points that passes call ---*- C++ -*-===//
//
// Part of ddpc (private to lib/Transforms). Names of the runtime functions
// that ddpc's passes insert calls to (TrainABI.h, Runtime/Gemm.h), and a
// helper that declares them.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_LIB_TRANSFORMS_RUNTIMECALLS_H
#define DDPC_LIB_TRANSFORMS_RUNTIMECALLS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace ddpc {

/// Gradient buckets (ddpc-bucket-gradient-allreduce, TrainABI.h).
constexpr llvm::StringLiteral kBucketAddFn = "ddpc_rt_bucket_add_f32";
constexpr llvm::StringLiteral kBucketStartFn = "ddpc_rt_bucket_allreduce_start";
constexpr llvm::StringLiteral kBucketWaitFn = "ddpc_rt_bucket_allreduce_wait";

/// Returns the function `name` of `module`, declaring it (private, with
/// `type`) at the end of the module if it does not exist.
mlir::func::FuncOp getOrDeclare(mlir::ModuleOp module, llvm::StringRef name,
                                mlir::FunctionType type);

} // namespace ddpc

#endif // DDPC_LIB_TRANSFORMS_RUNTIMECALLS_H

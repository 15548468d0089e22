//===- RuntimeCalls.h - runtime entry points that passes call ---*- C++ -*-===//
//
// Part of ddpc (every pass that inserts runtime calls). Helpers that declare
// the runtime's entry points (named in Support/RuntimeSymbols.h) and build
// their arguments.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_CODEGEN_RUNTIMECALLS_H
#define DDPC_CODEGEN_RUNTIMECALLS_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinOps.h"

#include "ddpc/Support/RuntimeSymbols.h"

namespace ddpc {

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

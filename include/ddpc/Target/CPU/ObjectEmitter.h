//===- ObjectEmitter.h - LLVM dialect to native object file -----*- C++ -*-===//
//
// Part of ddpc. Translates a module in the LLVM dialect to LLVM IR, optimizes
// it (O3) for the chosen CPU, and emits a relocatable object file.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_TARGET_CPU_OBJECTEMITTER_H
#define DDPC_TARGET_CPU_OBJECTEMITTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/Timing.h"

#include <string>

namespace ddpc {

struct CPUTargetOptions {
  /// LLVM CPU name; "native" means the host CPU, "generic" means x86-64.
  std::string cpu = "native";
  /// LLVM optimization level 0-3.
  unsigned optLevel = 3;
};

/// Checks `options` before compiling: `cpu` is native, generic or a CPU
/// LLVM's host target knows, `optLevel` is 0-3. Returns false and sets
/// `error` (naming the option) otherwise.
bool checkCPUTargetOptions(const CPUTargetOptions &options, std::string &error);

/// Registers the LLVM IR translations of the dialects the pipeline emits.
void registerCPUTranslations(mlir::DialectRegistry &registry);

/// Emits `module` (LLVM dialect only) as an object file at `path` (written
/// to a temporary and renamed). With `llvmIRPath` non-empty, also writes the
/// optimized LLVM IR there. With `timing`, times its three phases (LLVM IR
/// translation, LLVM optimization, object emission) as scopes nested in it.
/// Returns false and sets `error` on failure.
bool emitObjectFile(mlir::ModuleOp module, const CPUTargetOptions &options,
                    const std::string &path, std::string &error,
                    const std::string &llvmIRPath = "",
                    mlir::TimingScope *timing = nullptr);

} // namespace ddpc

#endif // DDPC_TARGET_CPU_OBJECTEMITTER_H

//===- ObjectEmitter.cpp - LLVM dialect to native object file -------------===//
//
// Part of ddpc.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Target/CPU/ObjectEmitter.h"

#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"
#include "ddpc/Support/OutputFile.h"

#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Target/LLVMIR/LLVMTranslationInterface.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/SubtargetFeature.h"

#include <unistd.h>

namespace ddpc {

bool checkCPUTargetOptions(const CPUTargetOptions &options,
                           std::string &error) {
  if (options.optLevel > 3) {
    error = "-O" + std::to_string(options.optLevel) +
            ": the optimization level is 0, 1, 2 or 3";
    return false;
  }
  if (options.cpu == "native" || options.cpu == "generic")
    return true;
  llvm::InitializeNativeTarget();
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  std::string lookupError;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, lookupError);
  if (!target)
    return true; // emitObjectFile reports it.
  // Created for the generic CPU (asking for an unknown one would print a
  // warning); isCPUStringValid checks the backend's table.
  std::unique_ptr<llvm::MCSubtargetInfo> sti(
      target->createMCSubtargetInfo(triple, "", ""));
  if (sti && !sti->isCPUStringValid(options.cpu)) {
    error = "--cpu " + options.cpu + ": not a CPU LLVM's " +
            triple.getArchName().str() +
            " backend knows; use native, generic or a name from "
            "'llc -mcpu=help' (e.g. skylake, znver3)";
    return false;
  }
  return true;
}

namespace {

/// The ddpc dialect's attributes on LLVM functions and their arguments
/// (ddpc.name, ddpc.role, ddpc.host_shared, ...) describe the program to the
/// glue generator and have no LLVM IR meaning: translation drops them. Without
/// this interface the translation warns once per argument attribute, and each
/// warning prints the whole function: quadratic, 47 of the 69 s that a
/// ResNet-18 training step took to compile (docs/compile-time.md).
struct DDPCAttributesToLLVMIR : mlir::LLVMTranslationDialectInterface {
  using LLVMTranslationDialectInterface::LLVMTranslationDialectInterface;

  mlir::LogicalResult
  convertParameterAttr(mlir::LLVM::LLVMFuncOp, int, mlir::NamedAttribute,
                       mlir::LLVM::ModuleTranslation &) const override {
    return mlir::success();
  }
};

} // namespace

void registerCPUTranslations(mlir::DialectRegistry &registry) {
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
  registry.addExtension(+[](mlir::MLIRContext *, DDPCDialect *dialect) {
    dialect->addInterfaces<DDPCAttributesToLLVMIR>();
  });
}

bool emitObjectFile(mlir::ModuleOp module, const CPUTargetOptions &options,
                    const std::string &path, std::string &error,
                    const std::string &llvmIRPath, mlir::TimingScope *timing) {
  mlir::TimingScope untimed;
  mlir::TimingScope &parent = timing ? *timing : untimed;
  static bool initialized = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)initialized;

  llvm::LLVMContext llvmContext;
  mlir::TimingScope translateTiming = parent.nest("LLVM IR translation");
  auto llvmModule = mlir::translateModuleToLLVMIR(module, llvmContext);
  translateTiming.stop();
  if (!llvmModule) {
    error = "translation of the lowered module to LLVM IR failed";
    return false;
  }
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  std::string lookupError;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, lookupError);
  if (!target) {
    error = "no LLVM target for " + triple.str() + ": " + lookupError;
    return false;
  }
  std::string cpu = options.cpu;
  std::string features;
  if (cpu == "native") {
    cpu = llvm::sys::getHostCPUName().str();
    llvm::SubtargetFeatures f;
    for (auto &kv : llvm::sys::getHostCPUFeatures())
      f.AddFeature(kv.first(), kv.second);
    features = f.getString();
  } else if (cpu == "generic") {
    cpu = "x86-64";
  }
  llvm::TargetOptions targetOptions;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, cpu, features, targetOptions, llvm::Reloc::PIC_, std::nullopt,
      options.optLevel >= 2 ? llvm::CodeGenOptLevel::Aggressive
                            : llvm::CodeGenOptLevel::Default));
  if (!tm) {
    error = "cannot create an LLVM target machine for CPU '" + cpu + "'";
    return false;
  }
  llvmModule->setDataLayout(tm->createDataLayout());
  llvmModule->setTargetTriple(triple);

  mlir::TimingScope optTiming = parent.nest("LLVM optimization");
  auto optimize =
      mlir::makeOptimizingTransformer(options.optLevel, 0, tm.get());
  if (auto err = optimize(llvmModule.get())) {
    error = "LLVM optimization failed: " + llvm::toString(std::move(err));
    return false;
  }
  optTiming.stop();
  if (!llvmIRPath.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream os(llvmIRPath, ec, llvm::sys::fs::OF_None);
    if (!ec)
      llvmModule->print(os, nullptr);
  }

  mlir::TimingScope emitTiming = parent.nest("LLVM object emission");
  runtime::OutputTarget output = runtime::resolveOutput(path);
  std::string tmpPath = output.temporary();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmpPath, ec, llvm::sys::fs::OF_None);
    if (ec) {
      error = "cannot write " + tmpPath + ": " + ec.message();
      return false;
    }
    llvm::legacy::PassManager pm;
    if (tm->addPassesToEmitFile(pm, os, nullptr,
                                llvm::CodeGenFileType::ObjectFile)) {
      error = "the LLVM target cannot emit object files";
      llvm::sys::fs::remove(tmpPath);
      return false;
    }
    pm.run(*llvmModule);
  }
  return runtime::commitOutput(tmpPath, output, error);
}

} // namespace ddpc

//===- Options.cpp - Checks of compile() options that need no model -------===//
//
// Part of ddpc. Each check fails with one line naming the option at fault,
// before the (long) compile starts.
//
//===----------------------------------------------------------------------===//

#include "DriverInternal.h"

#include "ddpc/Support/OutputFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace ddpc {
namespace driver {

bool checkOutputOptions(const CompileOptions &options, std::string &error) {
  if (options.target != "cpu" && options.target != "cuda" &&
      options.target != "cuda-emulate") {
    error = "unknown --target '" + options.target +
            "' (supported: cpu, cuda, cuda-emulate)";
    return false;
  }
  if (options.outputPath.empty()) {
    error = "no output file: pass -o FILE";
    return false;
  }
  if (!checkCPUTargetOptions(options.cpu, error))
    return false;
  bool textOutput =
      options.emit == EmitKind::MLIR || options.emit == EmitKind::LoweredMLIR ||
      options.emit == EmitKind::LLVMIR || options.emit == EmitKind::PTX;
  if (options.outputPath == "-" && !textOutput) {
    error = "-o - (stdout) works only with --emit=mlir, lowered-mlir, llvm "
            "or ptx";
    return false;
  }
  if (options.outputPath == "-")
    return true;
  // Fail before the (long) compile when the output folder is missing.
  llvm::SmallString<256> dir(options.outputPath);
  llvm::sys::path::remove_filename(dir);
  if (!dir.empty() && !llvm::sys::fs::is_directory(dir)) {
    error =
        "cannot write '" + options.outputPath + "': '" + std::string(dir) +
        (llvm::sys::fs::exists(dir) ? "' is not a folder" : "' does not exist");
    return false;
  }
  if (llvm::sys::fs::is_directory(options.outputPath)) {
    error = "-o '" + options.outputPath +
            "' is a folder; give the output a file name (e.g. -o " +
            options.outputPath + "/prog)";
    return false;
  }
  // The temporary goes beside the output (or its symlink's target).
  runtime::OutputTarget target = runtime::resolveOutput(options.outputPath);
  llvm::SmallString<256> tmpDir(target.temporary());
  llvm::sys::path::remove_filename(tmpDir);
  if (tmpDir.empty())
    tmpDir = ".";
  if (::access(tmpDir.c_str(), W_OK) != 0) {
    error = "cannot write '" + options.outputPath + "': folder '" +
            std::string(tmpDir) + "' is not writable (" + std::strerror(errno) +
            ")";
    return false;
  }
  return true;
}

bool readModel(const CompileOptions &options, const std::string &modelBytes,
               std::string &bytes, ImportOptions &import, std::string &error) {
  bytes = modelBytes;
  if (!bytes.empty())
    return true;
  auto buf = llvm::MemoryBuffer::getFile(options.inputPath, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf) {
    error =
        "cannot read '" + options.inputPath + "': " + buf.getError().message();
    return false;
  }
  bytes = (*buf)->getBuffer().str();
  if (import.modelDir.empty()) {
    llvm::SmallString<256> dir(options.inputPath);
    llvm::sys::path::remove_filename(dir);
    if (dir.empty())
      dir = ".";
    import.modelDir = std::string(dir);
  }
  return true;
}

bool checkProgramOptions(const CompileOptions &options, std::string &error) {
  const bool cuda = options.target == "cuda";
  if (!cuda && options.emit == EmitKind::PTX) {
    error = "--emit=ptx needs --target cuda";
    return false;
  }
  if (cuda && options.emit == EmitKind::SharedLibrary) {
    error = "--emit=shared is not supported with --target cuda (build an "
            "executable, or use --target cpu for in-process use)";
    return false;
  }
  if (options.vjp && options.train.enabled) {
    error = "--vjp and --train are different programs (a gradient check, a "
            "training program); give one";
    return false;
  }
  if (cuda && options.vjp) {
    error = "--vjp is not supported with --target cuda";
    return false;
  }
  if (options.train.enabled) {
    error = options.train.validate();
    if (!error.empty())
      return false;
  }
  return true;
}

bool checkMemoryBudget(const CompileOptions &options, int64_t &bytes,
                       std::string &error) {
  bytes = 0;
  if (options.memoryBudget.empty())
    return true;
  if (!options.train.enabled) {
    error = "--memory-budget applies to training programs (--train)";
    return false;
  }
  std::optional<int64_t> parsed = parseByteSize(options.memoryBudget);
  if (!parsed) {
    error = "invalid --memory-budget '" + options.memoryBudget +
            "': give a positive size per rank, in bytes or with a unit "
            "(B, KiB, MiB, GiB, TiB; KB, MB, GB, TB), e.g. 4GiB, 512MiB, "
            "100KiB or 1000000";
    return false;
  }
  bytes = *parsed;
  return true;
}

int checkMemoryStrategy(const CompileOptions &options, int64_t &zeroStage,
                        std::string &error) {
  const std::string &r = options.remat;
  // Unset: auto under a budget (the compiler picks), else 0.
  std::string z = options.zeroStage.empty()
                      ? (options.memoryBudget.empty() ? "0" : "auto")
                      : options.zeroStage;
  zeroStage = 0;
  constexpr int64_t kMaxWorldSize = int64_t(1) << 20;
  if (options.worldSize < 0 || options.worldSize > kMaxWorldSize) {
    error = "invalid --world-size " + std::to_string(options.worldSize) +
            ": give the number of ranks the program will run on (1 to " +
            std::to_string(kMaxWorldSize) + "; 0 or none: any)";
    return kCompileError;
  }
  if (options.worldSize && !options.train.enabled) {
    error = "--world-size applies to training programs (--train)";
    return kCompileError;
  }
  if (z != "0" && !options.train.enabled) {
    error = "--zero-stage applies to training programs (--train)";
    return kCompileError;
  }
  if (z == "1" || z == "2" || z == "3" || z == "auto") {
    if (z == "auto") {
      zeroStage = kZeroStageAuto;
    } else if (z == "3" && options.target != "cpu") {
      // The parameter all-gathers run inside the step on the host runtime.
      error = "--zero-stage 3 is implemented for --target cpu, not yet for " +
              options.target + "; use --target cpu, or " +
              (options.target == "cuda" ? "--zero-stage 0"
                                        : "--zero-stage 2 or lower");
      return kCompileUnsupported;
    } else if (options.target == "cuda") {
      error = "--zero-stage " + z +
              " is implemented for --target cpu and cuda-emulate, not yet "
              "for cuda; use --zero-stage 0";
      return kCompileUnsupported;
    } else {
      zeroStage = z[0] - '0';
    }
  } else if (z != "0") {
    error = "unknown --zero-stage '" + z + "' (supported: 0, 1, 2, 3, auto)";
    return kCompileError;
  }
  if (r != "off" && r != "auto" && !r.empty()) {
    error = "unknown --remat '" + r +
            "' (supported: auto, the default under --memory-budget: "
            "recompute activations in backward when no ZeRO stage fits; "
            "off: keep every saved activation)";
    return kCompileError;
  }
  if ((!r.empty() || !options.rematNodes.empty()) && !options.train.enabled) {
    error = std::string(r.empty() ? "--remat-nodes" : "--remat") +
            " applies to training programs (--train)";
    return kCompileError;
  }
  return kCompileOk;
}

int checkPrecision(const CompileOptions &options, std::string &error) {
  const std::string &p = options.precision;
  if (p == "fp32" || p == "tf32")
    return kCompileOk;
  if (p == "bf16" || p == "fp16") {
    error = "--precision " + p +
            " is not supported yet (low-precision tensors with float32 "
            "master weights); use fp32, or tf32 for tensor-core float32 "
            "contractions on --target cuda";
    return kCompileUnsupported;
  }
  error = "unknown --precision '" + p + "' (supported: fp32, tf32)";
  return kCompileError;
}

} // namespace driver
} // namespace ddpc

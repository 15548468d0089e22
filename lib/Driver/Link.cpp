//===- Link.cpp - Links the object, the glue and the runtime --------------===//
//
// Part of ddpc.
//
//===----------------------------------------------------------------------===//

#include "DriverInternal.h"

#include "ddpc/Support/OutputFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <cstdlib>

using llvm::SmallString;
using llvm::SmallVector;
using llvm::StringRef;

namespace ddpc {
namespace driver {
namespace {

/// Runs `argv` (argv[0] found on PATH), its output captured: on failure
/// `error` holds "<tool> failed: <its output>".
bool runTool(llvm::ArrayRef<std::string> argv, std::string &error) {
  auto prog = llvm::sys::findProgramByName(argv[0]);
  if (!prog) {
    error = "cannot find '" + argv[0] + "' on PATH (needed to link)";
    return false;
  }
  SmallVector<StringRef> args;
  for (auto &a : argv)
    args.push_back(a);
  std::string msg;
  SmallString<128> errFile;
  llvm::sys::fs::createTemporaryFile("ddpc-link", "txt", errFile);
  std::string errPath(errFile);
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(errPath),
                                          StringRef(errPath)};
  int rc = llvm::sys::ExecuteAndWait(*prog, args, std::nullopt, redirects, 0, 0,
                                     &msg);
  if (rc != 0) {
    auto buf = llvm::MemoryBuffer::getFile(errFile);
    std::string out = buf ? (*buf)->getBuffer().str() : msg;
    error = argv[0] + " failed: " + out;
  }
  llvm::sys::fs::remove(errFile);
  return rc == 0;
}

} // namespace

bool linkProgram(const CompileOptions &options, bool training,
                 const std::string &objPath, const std::string &gluePath,
                 std::string &error) {
  const bool cuda = options.target == "cuda";
  SmallString<256> rtLib(options.runtimeLibDir);
  llvm::sys::path::append(
      rtLib,
      cuda ? (training ? "libddpc_cuda_train_runtime.a"
                       : "libddpc_cuda_runtime.a")
           : (training ? "libddpc_train_runtime.a" : "libddpc_runtime.a"));
  if (!llvm::sys::fs::exists(rtLib)) {
    error = "runtime library not found at '" + std::string(rtLib) +
            (cuda ? "' (the CUDA runtime is built when CMake finds the CUDA "
                    "toolkit and NCCL; or pass --runtime-dir)"
                  : "' (build the project, or pass --runtime-dir)");
    return false;
  }
  runtime::OutputTarget target = runtime::resolveOutput(options.outputPath);
  std::string tmpOut = target.temporary();
  const char *cxx = std::getenv("DDPC_CXX");
  std::vector<std::string> argv = {cxx ? cxx : "c++", "-O2"};
  if (options.emit == EmitKind::SharedLibrary)
    argv.push_back("-shared");
  argv.insert(argv.end(), {"-o", tmpOut, "-x", "c", gluePath, "-x", "none",
                           objPath, std::string(rtLib), "-lm", "-lpthread"});
  {
    // Link flags recorded by the runtime's CMake configuration: OpenBLAS
    // for CPU programs, and MPI for CPU training programs; CUDA, cuBLAS and
    // NCCL for CUDA programs.
    SmallString<256> linkFile(options.runtimeLibDir);
    llvm::sys::path::append(linkFile, cuda       ? "ddpc_cuda_runtime.link"
                                      : training ? "ddpc_train_runtime.link"
                                                 : "ddpc_runtime.link");
    auto buf = llvm::MemoryBuffer::getFile(linkFile);
    if (!buf) {
      error = "cannot read '" + std::string(linkFile) +
              "' (link flags of the runtime)";
      return false;
    }
    SmallVector<StringRef> flags;
    (*buf)->getBuffer().trim().split(flags, ' ', -1, false);
    for (StringRef f : flags)
      argv.push_back(f.str());
  }
  if (options.verbose)
    llvm::errs() << "ddpc: linking " << options.outputPath << "\n";
  if (!runTool(argv, error)) {
    llvm::sys::fs::remove(tmpOut);
    return false;
  }
  return runtime::commitOutput(tmpOut, target, error);
}

} // namespace driver
} // namespace ddpc

//===- FatBinary.cpp - PTX to one fatbin per gpu.binary -------------------===//
//
// See FatBinary.h.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Target/CUDA/FatBinary.h"

#include "ddpc/Target/CUDA/Archs.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Triple.h"

#include <cstdlib>
#include <regex>

using namespace mlir;

namespace ddpc {

std::string findCUDAToolkit(const std::string &hint, std::string &error) {
  // The first of --cuda-path, $CUDA_HOME, $CUDA_PATH that is set decides
  // (as for nvcc and PyTorch's extensions): a wrong one is an error, not a
  // silent fallback to another toolkit.
  std::vector<std::pair<std::string, std::string>> candidates;
  if (!hint.empty())
    candidates.push_back({hint, "--cuda-path"});
  for (const char *env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *v = std::getenv(env); v && *v)
      candidates.push_back({v, std::string("$") + env});
  candidates.push_back({"/usr/local/cuda", ""});
  for (const auto &[root, from] : candidates) {
    SmallString<256> ptxas(root);
    llvm::sys::path::append(ptxas, "bin", "ptxas");
    if (llvm::sys::fs::can_execute(ptxas))
      return root;
    if (!from.empty()) {
      error = "no CUDA toolkit at '" + root + "' (from " + from +
              "; missing bin/ptxas)";
      return "";
    }
  }
  error = "no CUDA toolkit found (looked for bin/ptxas under $CUDA_HOME, "
          "$CUDA_PATH and /usr/local/cuda); install the CUDA toolkit or pass "
          "--cuda-path";
  return "";
}

namespace {
/// Whether LLVM's NVPTX backend (which writes the PTX) knows `chip`.
bool knownByLLVM(const std::string &chip) {
  static const bool initialized = [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTargetMC();
    return true;
  }();
  (void)initialized;
  llvm::Triple triple("nvptx64-nvidia-cuda");
  std::string err;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!target)
    return true; // Not linked in: let the toolchain judge.
  // Created for a chip every NVPTX backend knows (asking for `chip` itself
  // would print a warning when unknown); isCPUStringValid checks its table.
  std::unique_ptr<llvm::MCSubtargetInfo> sti(
      target->createMCSubtargetInfo(triple, "sm_75", ""));
  return sti && sti->isCPUStringValid(chip);
}
} // namespace

bool parseCUDAArchs(const std::string &list, std::vector<std::string> &archs,
                    std::string &error) {
  static const std::regex valid("sm_[0-9]{2,3}[af]?");
  archs.clear();
  SmallVector<StringRef> parts;
  StringRef(list).split(parts, ',', -1, /*KeepEmpty=*/true);
  if (parts.size() > 1 &&
      llvm::any_of(parts, [](StringRef p) { return p.trim().empty(); })) {
    error = "--cuda-arch '" + list +
            "' has an empty entry: expected a list such as sm_80,sm_90";
    return false;
  }
  for (StringRef p : parts) {
    std::string arch = p.trim().str();
    if (!std::regex_match(arch, valid)) {
      error = "invalid --cuda-arch entry '" + arch +
              "': expected a list such as sm_80,sm_90";
      return false;
    }
    if (std::atoi(arch.c_str() + 3) < 75) {
      error = "--cuda-arch " + arch +
              ": the CUDA 13 toolkit supports sm_75 and newer";
      return false;
    }
    if (arch.rfind("sm_101", 0) == 0) {
      error = "--cuda-arch " + arch + ": CUDA 13 renamed sm_101 to sm_110";
      return false;
    }
    if (!findCUDAArch(arch) || !knownByLLVM(arch)) {
      std::string names;
      for (const CUDAArch &a : kCUDAArchs)
        names += std::string(names.empty() ? "" : ", ") + a.name;
      error = "--cuda-arch " + arch +
              ": not an architecture both LLVM's NVPTX backend and the "
              "CUDA 13 ptxas support (" +
              names + ")";
      return false;
    }
    if (std::find(archs.begin(), archs.end(), arch) == archs.end())
      archs.push_back(arch);
  }
  if (archs.empty()) {
    error = "--cuda-arch is empty: expected a list such as sm_80,sm_90";
    return false;
  }
  return true;
}

namespace {

/// Runs `argv`; on failure sets `error` to the tool's first output lines.
bool run(ArrayRef<std::string> argv, StringRef tmpDir, std::string &error) {
  SmallString<256> log(tmpDir);
  llvm::sys::path::append(log, "tool.log");
  SmallVector<StringRef> args(argv.begin(), argv.end());
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(log),
                                          StringRef(log)};
  std::string execError;
  int rc = llvm::sys::ExecuteAndWait(argv[0], args, std::nullopt, redirects, 0,
                                     0, &execError);
  if (rc == 0)
    return true;
  std::string out;
  if (auto buf = llvm::MemoryBuffer::getFile(log))
    out = (*buf)->getBuffer().take_front(600).str();
  error = llvm::sys::path::filename(argv[0]).str() + " failed" +
          (execError.empty() ? "" : ": " + execError) +
          (out.empty() ? "" : ":\n" + out);
  return false;
}

bool writeFile(StringRef path, StringRef data, std::string &error) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec) {
    error = "cannot write '" + path.str() + "': " + ec.message();
    return false;
  }
  os << data;
  return true;
}

} // namespace

bool assembleFatBinaries(ModuleOp module, const std::string &cudaRoot,
                         std::string *ptx, std::string &error) {
  SmallString<128> tmpDir;
  if (auto ec = llvm::sys::fs::createUniqueDirectory("ddpc-cuda", tmpDir)) {
    error = "cannot create a temporary folder: " + ec.message();
    return false;
  }
  llvm::scope_exit cleanup([&] { llvm::sys::fs::remove_directories(tmpDir); });
  SmallString<256> ptxas(cudaRoot), fatbinary(cudaRoot);
  llvm::sys::path::append(ptxas, "bin", "ptxas");
  llvm::sys::path::append(fatbinary, "bin", "fatbinary");

  bool ok = true;
  module.walk([&](gpu::BinaryOp binary) {
    if (!ok)
      return;
    std::vector<std::string> fatArgs = {std::string(fatbinary), "-64",
                                        "--compress-all"};
    Attribute firstTarget;
    std::string lastPtxFile, lastSm;
    int index = 0;
    for (Attribute a : binary.getObjectsAttr()) {
      auto object = cast<gpu::ObjectAttr>(a);
      auto target = dyn_cast<NVVM::NVVMTargetAttr>(object.getTarget());
      if (!target || object.getFormat() != gpu::CompilationTarget::Assembly) {
        error = "internal error: gpu.binary @" + binary.getName().str() +
                " holds an object that is not NVVM PTX";
        ok = false;
        return;
      }
      if (!firstTarget)
        firstTarget = target;
      std::string chip = target.getChip().str();
      std::string sm = chip.substr(3); // "sm_80" -> "80"
      StringRef text = object.getObject().getValue();
      if (ptx)
        *ptx += "// ddpc: gpu.binary @" + binary.getName().str() + ", " + chip +
                "\n" + text.str() + "\n";
      SmallString<256> ptxFile(tmpDir), cubin(tmpDir);
      llvm::sys::path::append(ptxFile, std::to_string(index) + ".ptx");
      llvm::sys::path::append(cubin, std::to_string(index) + ".cubin");
      ++index;
      if (!writeFile(ptxFile, text, error) ||
          !run({std::string(ptxas), "-arch=" + chip, "-O3",
                std::string(ptxFile), "-o", std::string(cubin)},
               tmpDir, error)) {
        ok = false;
        return;
      }
      fatArgs.push_back("--image3=kind=elf,sm=" + sm +
                        ",file=" + std::string(cubin));
      lastPtxFile = std::string(ptxFile);
      lastSm = sm;
    }
    if (!firstTarget)
      return;
    fatArgs.push_back("--image3=kind=ptx,sm=" + lastSm +
                      ",file=" + lastPtxFile);
    SmallString<256> fatFile(tmpDir);
    llvm::sys::path::append(fatFile, binary.getName() + ".fatbin");
    fatArgs.push_back("--create=" + std::string(fatFile));
    if (!run(fatArgs, tmpDir, error)) {
      ok = false;
      return;
    }
    auto buf = llvm::MemoryBuffer::getFile(fatFile);
    if (!buf) {
      error = "cannot read back '" + std::string(fatFile) + "'";
      ok = false;
      return;
    }
    MLIRContext *ctx = module.getContext();
    auto fat = gpu::ObjectAttr::get(
        ctx, firstTarget, gpu::CompilationTarget::Fatbin,
        StringAttr::get(ctx, (*buf)->getBuffer()), nullptr, nullptr);
    binary.setObjectsAttr(ArrayAttr::get(ctx, {fat}));
  });
  return ok;
}

} // namespace ddpc

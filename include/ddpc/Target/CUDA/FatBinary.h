//===- FatBinary.h - PTX to one fatbin per gpu.binary -----------*- C++ -*-===//
//
// Part of ddpc's CUDA target. After `gpu-module-to-binary{format=isa}` each
// gpu.binary holds one PTX object per architecture of --cuda-arch. These
// functions assemble them with the CUDA toolkit's ptxas (one cubin per
// architecture) and fatbinary (the cubins plus the PTX of the newest
// architecture, which the driver JIT-compiles on newer GPUs), and replace
// the objects with that single fatbin, which the host code loads with
// mgpuModuleLoad (cuModuleLoadData).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_TARGET_CUDA_FATBINARY_H
#define DDPC_TARGET_CUDA_FATBINARY_H

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace ddpc {

/// The CUDA toolkit folder: `hint` if not empty, else $CUDA_HOME, else
/// $CUDA_PATH, else /usr/local/cuda. Fails (returns "", sets `error` naming
/// the folder and where it came from) when <root>/bin/ptxas is missing.
std::string findCUDAToolkit(const std::string &hint, std::string &error);

/// Parses "sm_80,sm_90" into {"sm_80", "sm_90"}; fails on anything that is
/// not one of kCUDAArchs (Archs.h; error names the bad entry).
bool parseCUDAArchs(const std::string &list, std::vector<std::string> &archs,
                    std::string &error);

/// Assembles every gpu.binary in `module` as described above. When `ptx` is
/// not null, appends the PTX of every object (with a comment naming the
/// binary and architecture). Errors name the tool and its message.
bool assembleFatBinaries(mlir::ModuleOp module, const std::string &cudaRoot,
                         std::string *ptx, std::string &error);

} // namespace ddpc

#endif // DDPC_TARGET_CUDA_FATBINARY_H

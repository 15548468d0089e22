//===- Driver.h - The one compile() used by the CLI and Python --*- C++ -*-===//
//
// Part of ddpc.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_DRIVER_DRIVER_H
#define DDPC_DRIVER_DRIVER_H

#include "ddpc/Import/ONNX/Importer.h"
#include "ddpc/Pipelines/Pipelines.h"
#include "ddpc/Target/CPU/ObjectEmitter.h"
#include "ddpc/Target/CUDA/FatBinary.h"
#include "ddpc/Training/TrainOptions.h"

#include <string>
#include <utility>
#include <vector>

namespace ddpc {

/// What `compile` produces.
enum class EmitKind {
  MLIR,          ///< the imported IR (stage "import"), as text
  LoweredMLIR,   ///< the IR in the LLVM dialect, as text
  LLVMIR,        ///< optimized LLVM IR, as text
  Object,        ///< relocatable object file (plus its glue, see ModelABI.h)
  Executable,    ///< native executable linked with the runtime
  SharedLibrary, ///< shared library exporting the ModelABI symbols (Python)
  PTX,           ///< --target cuda: the generated kernels as PTX text
};

/// `--mlir-timing`: how compile() reports where its time went (upstream
/// MLIR's DefaultTimingManager, printed to stderr when compile() returns).
enum class TimingDisplay {
  Off,
  List, ///< one line per timer name, summed, slowest first
  Tree, ///< phases with their passes nested under them
};

struct CompileOptions {
  /// Path of the .onnx file (also sets ImportOptions::modelDir).
  std::string inputPath;
  /// Output path; "-" prints text kinds to stdout.
  std::string outputPath;
  /// "cpu", "cuda", or "cuda-emulate" (the CUDA target's kernel-level IR,
  /// buildGPULoopPipeline, run serially on the CPU: a test of the CUDA
  /// lowering without a GPU).
  std::string target = "cpu";
  /// --target cuda: GPU architectures (one cubin each, plus the PTX of the
  /// last one in the fatbin) and the CUDA toolkit folder (empty: search).
  std::vector<std::string> cudaArchs = {"sm_80"};
  std::string cudaRoot;
  /// Math of the float32 contractions (`--precision`): "fp32" (IEEE
  /// float32 products; the default) or "tf32" (float32 tensors and
  /// accumulation; on --target cuda, cuBLAS(Lt) GEMMs and cuDNN
  /// convolutions may round their inputs to TF32's 10-bit mantissa and use
  /// tensor cores, as PyTorch's allow_tf32; no effect on the CPU targets).
  /// "bf16" and "fp16" are refused as not supported yet.
  std::string precision = "fp32";
  /// `--memory-budget` (training programs): the bytes one rank may hold,
  /// as "4GiB", "512MiB", "100KiB" or plain bytes (parseByteSize in
  /// Analysis/MemoryPlan.h); empty: unlimited. A memory plan whose
  /// predicted peak exceeds it fails the compile (kCompileError).
  std::string memoryBudget;
  /// `--zero-stage` (issue 20): "0" (every rank keeps the whole state),
  /// "1" (ZeRO stage 1, the optimizer state sharded over the ranks), "2"
  /// (the gradients too; CPU and cuda-emulate targets), "auto" (the lowest
  /// stage whose memory plan fits --memory-budget), empty (auto with a
  /// budget, else 0; 3 on the cpu target). `--remat`: "off" (every
  /// saved activation is kept), "auto" (when no stage fits the budget,
  /// recompute activations in backward until one does), empty (auto with
  /// a budget, else off).
  std::string zeroStage, remat;
  /// Hidden `--remat-nodes`: ONNX nodes whose activations backward
  /// recomputes, whatever the budget (tests and benchmarks).
  std::vector<std::string> rematNodes;
  /// ZeRO stage 3: parameters gathered once per micro-batch and kept whole
  /// from forward into backward (compile() picks them under a budget).
  std::vector<std::string> keepGathered;
  /// `--world-size` (training programs): the ranks the memory plan is for
  /// (ZeRO stage 1 counts 1/N of the optimizer state; the program refuses
  /// another world size); 0: any, the plan counts the state whole.
  int64_t worldSize = 0;
  EmitKind emit = EmitKind::Executable;
  ImportOptions import;
  CPUPipelineOptions pipeline;
  CPUTargetOptions cpu;
  /// When set, writes the IR after import and after every pass as
  /// DIR/NNNN_<pass-argument>.mlir (0000_import.mlir first).
  std::string dumpIRDir;
  /// MLIR's --mlir-print-ir-after-all, to stderr.
  bool printIRAfterAll = false;
  /// MLIR's --mlir-timing (--mlir-timing-display=list|tree): wall and user
  /// time of every pass and of the phases outside the pass manager (ONNX
  /// import, LLVM IR translation, LLVM optimization, object emission, glue,
  /// link), to stderr.
  TimingDisplay timing = TimingDisplay::Off;
  /// Folder holding libddpc_runtime.a; empty means next to the executable
  /// (`<bindir>/../lib`).
  std::string runtimeLibDir;
  /// Print progress lines to stderr.
  bool verbose = false;
  /// Compile the vector-Jacobian product of the model instead (`--vjp`):
  /// extra inputs d_<output>, extra outputs d_<input>; for gradient checks.
  bool vjp = false;
  /// Training-step synthesis (`--train`).
  TrainOptions train;
  /// Keep the IR text of every named stage in CompileResult::stages.
  bool captureStages = false;
};

/// What `compile` reports besides the output file.
struct CompileResult {
  /// (stage name, IR text) in pipeline order: "import", then for training
  /// programs "training", then "fused", then with --target cuda
  /// "gpu-kernels", "nvvm" and "lowered", else "bufferized" and "lowered".
  /// Filled when CompileOptions::captureStages is set.
  std::vector<std::pair<std::string, std::string>> stages;
  /// The compiler's plan as JSON: inputs, outputs, parameters (bytes),
  /// collectives and their sizes (bytes). Tensors give "dtype" as the NumPy
  /// name ("float32", see Support/DTypes.h) and "onnx_dtype" as the ONNX
  /// TensorProto.DataType number (1).
  std::string reportJSON;
};

/// Exit codes of `compile`, also the CLI's.
enum CompileStatus : int {
  kCompileOk = 0,
  kCompileError = 1,      ///< invalid model, bad option, I/O or tool failure
  kCompileUnsupported = 2 ///< an op, attribute or dtype ddpc does not support
};

/// Compiles the model at `options.inputPath` (or `modelBytes` when not
/// empty). Never leaves a half-written output: every file is written to a
/// temporary and renamed. On failure `error` holds one line.
int compile(const CompileOptions &options, std::string &error,
            const std::string &modelBytes = "",
            CompileResult *result = nullptr);

/// Path of the running executable's folder, for locating the runtime.
std::string defaultRuntimeLibDir(const char *argv0, void *mainAddr);

} // namespace ddpc

#endif // DDPC_DRIVER_DRIVER_H

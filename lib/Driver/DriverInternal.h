//===- DriverInternal.h - The pieces compile() is made of -------*- C++ -*-===//
//
// Part of ddpc. Private to lib/Driver: each piece of `compile()` in its own
// file. Options.cpp checks the options and the output path, DumpIR.cpp
// writes --dump-ir, Report.cpp holds the plan that each stage fills,
// Glue.cpp generates the C glue that describes the program to the runtime,
// Link.cpp links the object, the glue and the runtime library, and
// Driver.cpp runs the stages in order.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_LIB_DRIVER_DRIVERINTERNAL_H
#define DDPC_LIB_DRIVER_DRIVERINTERNAL_H

#include "ddpc/Analysis/MemoryPlan.h"
#include "ddpc/Driver/Driver.h"
#include "ddpc/Training/TrainingStep.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/StringSet.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddpc {
namespace driver {

//===----------------------------------------------------------------------===//
// Files and IR text (DumpIR.cpp)
//===----------------------------------------------------------------------===//

/// Writes `text` to `path` atomically (temp file + rename); "-" writes to
/// stdout. On failure `error` names the file.
bool writeFileAtomic(const std::string &path, llvm::StringRef text,
                     std::string &error);

/// The module's text as `ddpc-opt` prints it.
std::string printOp(mlir::Operation *op);

/// The text of a --dump-ir file: with locations (`loc(#locN)`, their table
/// at the end), which carry the ONNX node names that fusion records, so
/// that `ddpc-opt` replays each stage exactly.
std::string printDump(mlir::Operation *op);

/// --dump-ir DIR for one compile: the per-pass files DIR/NNNN_<pass>.mlir
/// and DIR/stages.txt, the stage table that replays each stage with
/// `ddpc-opt INPUT --pass-pipeline=PIPELINE`.
class IRDumper {
public:
  explicit IRDumper(std::string dir) : dir(std::move(dir)) {}
  /// Creates DIR, removes an earlier compile's dumps from it and writes
  /// DIR/0000_import.mlir. Fails when DIR is a file or cannot be created.
  bool start(mlir::ModuleOp module, std::string &error);
  /// Dumps the IR after each pass of `pm` that changes it.
  void instrument(mlir::PassManager &pm);
  /// The name of the last file written (the next stage's input).
  const std::string &lastFile() const { return lastDumpFile; }
  /// Appends stage `stage`, which read `input`, with the pipeline of `pm`
  /// to DIR/stages.txt (rewritten atomically).
  bool recordStage(llvm::StringRef stage, const std::string &input,
                   mlir::PassManager &pm, std::string &error);

private:
  std::string dir;
  int counter = 1;
  std::string lastDump;     // The text of the last file written,
  std::string lastDumpFile; // its name,
  std::string stagesText;   // and the stage table so far.
};

//===----------------------------------------------------------------------===//
// Options (Options.cpp)
//===----------------------------------------------------------------------===//

/// Checks the options that need no model, in the order the CLI reports
/// them: target, output path (its folder exists and is writable, it is
/// not a folder; "-" only for text). Fails with one line in `error`.
bool checkOutputOptions(const CompileOptions &options, std::string &error);

/// Checks the combinations of target, emit kind, --vjp and --train, and
/// the training options (TrainOptions::validate).
bool checkProgramOptions(const CompileOptions &options, std::string &error);

/// Checks --precision: kCompileOk, kCompileError (an unknown value) or
/// kCompileUnsupported (bf16, fp16: not implemented yet), with one line in
/// `error`.
int checkPrecision(const CompileOptions &options, std::string &error);

/// Parses --memory-budget into `bytes` (0: unlimited). Fails with one line
/// naming the option and the accepted forms.
bool checkMemoryBudget(const CompileOptions &options, int64_t &bytes,
                       std::string &error);

/// `zeroStage` of --zero-stage auto: the memory plan picks 0 or 1.
constexpr int64_t kZeroStageAuto = -1;

/// Checks --zero-stage, --world-size and --remat: kCompileOk (`zeroStage`
/// set to 0, 1 or kZeroStageAuto; an unset stage is auto under a
/// --memory-budget, else 0), kCompileUnsupported (a planned value, or stage
/// 1 on --target cuda) or kCompileError (an unknown one, or a stage or
/// world size without --train), with one line.
int checkMemoryStrategy(const CompileOptions &options, int64_t &zeroStage,
                        std::string &error);

/// Reads the model file into `bytes` unless `modelBytes` is given, and
/// sets `import.modelDir` (external data) to the model's folder when unset.
bool readModel(const CompileOptions &options, const std::string &modelBytes,
               std::string &bytes, ImportOptions &import, std::string &error);

//===----------------------------------------------------------------------===//
// The plan (Report.cpp)
//===----------------------------------------------------------------------===//

/// One graph input or output, as the importer recorded it.
struct TensorSig {
  std::string name;
  int32_t dtype; ///< ONNX TensorProto.DataType number
  llvm::SmallVector<int64_t> shape;
};

/// Reads the graph signature that the importer recorded on @main_graph;
/// false when the module has none.
bool readSignature(mlir::ModuleOp module, std::vector<TensorSig> &ins,
                   std::vector<TensorSig> &outs);

/// The compiler's plan (CompileResult::reportJSON), filled by the stages
/// that decide each part: the graph (after "fused"), the gradient buckets
/// (after bufferization), the CUDA plan (after "gpu-kernels", or for
/// cuda-emulate after "bufferized").
struct CompileReport {
  struct Parameter {
    TensorSig tensor;
    int64_t bytes;
    bool trainable;
  };
  struct Collective {
    std::string op;
    int64_t bytes;
  };
  /// A gradient allreduce bucket (ddpc-bucket-gradient-allreduce): it
  /// starts in `function` after top-level op `startOp` of `functionOps`.
  struct Bucket {
    int64_t index, bytes;
    std::vector<std::string> params; ///< in the order backward ends them
    std::string function;
    int64_t startOp, functionOps;
    /// "allreduce_bucket", or "reduce_scatter_bucket" at ZeRO stage 2.
    std::string op;
  };
  /// Per public step function: what one call launches.
  struct CUDAFunction {
    std::string name;
    int64_t launches = 0, gemms = 0, epilogueGemms = 0, convs = 0,
            epilogueConvs = 0, arenaBytes = 0;
  };
  struct CUDAPlan {
    std::vector<std::string> archs;
    int64_t kernels = 0;
    bool emulated = false;
    std::vector<CUDAFunction> functions;
  };

  bool hasGraph = false; ///< fillGraph ran; the plan has content
  std::string model;
  /// --precision, and what it means on this target.
  std::string precision, precisionMeaning;
  std::vector<TensorSig> inputs, outputs;
  std::vector<Parameter> parameters;
  /// Collectives in IR order; the buckets follow as "allreduce_bucket".
  std::vector<Collective> collectives;
  int64_t fusionGroups = 0;
  std::vector<Bucket> buckets;
  std::optional<CUDAPlan> cuda;
  /// Training programs: the per-rank memory plan (after bufferization).
  std::optional<MemoryPlan> memory;
  /// --zero-stage (0 or 1) the plan's optimizer state is for.
  int64_t zeroStage = 0;
  /// --zero-stage auto: the stage it picked and why; else empty.
  std::string zeroChoice;
  /// Rematerialization: why (--remat auto) and what backward recomputes,
  /// each with the bytes its forward copy held and its FLOPs per micro-batch.
  struct Recomputed {
    std::string producer;
    int64_t bytes = 0, flops = 0;
  };
  std::string rematChoice;
  std::vector<Recomputed> recomputed;
  /// ZeRO stage 3: the parameters kept whole from forward into backward.
  std::vector<std::string> keptGathered;
  /// Why the plan is incomplete (--emit=mlir), or empty.
  std::string partial;

  /// The graph-level plan: signature, parameters (`trainable` by name),
  /// collectives, fusion groups.
  void fillGraph(mlir::ModuleOp module, llvm::StringRef modelName,
                 const std::vector<TensorSig> &ins,
                 const std::vector<TensorSig> &outs,
                 const llvm::StringSet<> &trainable);
  /// The gradient buckets of the bufferized module.
  void fillBuckets(mlir::ModuleOp module);
  /// The CUDA plan. `emulated` (cuda-emulate): kernels are the outermost
  /// scf.parallel loops that the CUDA pipeline turns into launches.
  void fillCUDA(mlir::ModuleOp module, llvm::ArrayRef<std::string> archs,
                bool emulated);
  /// The plan as JSON (keys as documented on CompileResult::reportJSON).
  std::string toJSON() const;
};

//===----------------------------------------------------------------------===//
// Glue (Glue.cpp)
//===----------------------------------------------------------------------===//

/// The C glue of an inference program (Runtime/ModelABI.h): the signature
/// tables and the forwarder to @main_graph.
std::string generateGlue(llvm::StringRef modelName,
                         const std::vector<TensorSig> &ins,
                         const std::vector<TensorSig> &outs);

/// The C glue of a training program (Runtime/TrainABI.h). Initial
/// parameter/buffer values and the stripped ONNX model are embedded with
/// `.incbin` from files written to `blobDir`.
bool generateTrainGlue(llvm::StringRef modelName,
                       const TrainingProgramInfo &info,
                       const TrainOptions &train,
                       const std::map<std::string, std::string> &initialValues,
                       const std::string &strippedModel,
                       llvm::StringRef blobDir, std::string &glue,
                       std::string &error);

/// The memory plan's glue lines (kGlueMemoryPlan*, and kGlueMemoryBudget:
/// `budget` bytes, 0 for none) of a training program.
std::string generateMemoryPlanGlue(const MemoryPlan &plan, int64_t budget);

/// The glue lines only CUDA programs have (kGlueMathMode).
std::string generateCUDAGlue(const CompileOptions &options);

/// The serialized model `bytes` without the initializers that training
/// replaces (parameters and buffers): the runtime appends the trained ones.
bool stripTrainedInitializers(const std::string &bytes,
                              const TrainingProgramInfo &info, std::string &out,
                              std::string &error);

//===----------------------------------------------------------------------===//
// Linking (Link.cpp)
//===----------------------------------------------------------------------===//

/// Links `objPath` and the glue at `gluePath` with the runtime library of
/// the target into options.outputPath (through a temporary, renamed when
/// complete): `$DDPC_CXX` (default c++), with the runtime's recorded link
/// flags for training and CUDA programs.
bool linkProgram(const CompileOptions &options, bool training,
                 const std::string &objPath, const std::string &gluePath,
                 std::string &error);

} // namespace driver
} // namespace ddpc

#endif // DDPC_LIB_DRIVER_DRIVERINTERNAL_H

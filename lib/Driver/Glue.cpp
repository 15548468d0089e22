//===- Glue.cpp - The C glue that describes a program to its runtime ------===//
//
// Part of ddpc. The glue defines the tables of Runtime/ModelABI.h
// (inference) or Runtime/TrainABI.h (training), with the names of
// Support/RuntimeSymbols.h, and forwards the runtime's `void fn(void **)`
// entry points to the compiled functions.
//
//===----------------------------------------------------------------------===//

#include "DriverInternal.h"

#include "ddpc/Support/RuntimeSymbols.h"

#include <onnx/onnx_pb.h>

#include <type_traits>

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using llvm::StringRef;

namespace ddpc {
namespace driver {
namespace {

/// `s` as a C string literal (bytes outside printable ASCII as octal
/// escapes, so names in any encoding pass through unchanged).
std::string cString(StringRef s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += c;
    else if (c < 32 || c >= 127)
      out += llvm::formatv("\\{0}{1}{2}", c >> 6, (c >> 3) & 7, c & 7).str();
    else
      out += c;
  }
  return out + "\"";
}

template <typename, typename = void> struct HasDType : std::false_type {};
template <typename R>
struct HasDType<R, std::void_t<decltype(R::dtype)>> : std::true_type {};

/// One row per tensor of `rows` in the arrays of `table` (GlueTable),
/// each row's shape a static array of its own. `name`, `dtype`, `shape`
/// give a row's fields; `init(i)` the expression of row i's initial value.
template <typename Row>
void emitTable(llvm::raw_ostream &os, const GlueTable &table,
               const std::vector<Row> &rows,
               llvm::function_ref<std::string(size_t)> init = nullptr) {
  os << "const int32_t " << table.count << " = " << rows.size() << ";\n";
  std::string shapePrefix = table.shapes.drop_back().str() + "_";
  for (size_t i = 0; i < rows.size(); ++i) {
    os << "static const int64_t " << shapePrefix << i << "[] = {";
    for (int64_t d : rows[i].shape)
      os << d << "LL, ";
    os << "0};\n";
  }
  os << "const char *const " << table.names << "[] = {";
  for (const Row &r : rows)
    os << cString(r.name) << ", ";
  os << "0};\n";
  if constexpr (HasDType<Row>::value) {
    if (!table.dtypes.empty()) {
      os << "const int32_t " << table.dtypes << "[] = {";
      for (const Row &r : rows)
        os << r.dtype << ", ";
      os << "0};\n";
    }
  }
  os << "const int32_t " << table.ranks << "[] = {";
  for (const Row &r : rows)
    os << r.shape.size() << ", ";
  os << "0};\nconst int64_t *const " << table.shapes << "[] = {";
  for (size_t i = 0; i < rows.size(); ++i)
    os << shapePrefix << i << ", ";
  os << "0};\n";
  if (!table.init.empty()) {
    os << "const float *const " << table.init << "[] = {";
    for (size_t i = 0; i < rows.size(); ++i)
      os << init(i) << ", ";
    os << "0};\n";
  }
}

/// Forwarding wrapper `void <abiName>(void **args)` -> `<fn>(args[0], ...)`.
void emitForwarder(llvm::raw_ostream &os, StringRef abiName, StringRef fn,
                   size_t n) {
  os << "extern void " << fn << "(";
  for (size_t i = 0; i < n; ++i)
    os << (i ? ", " : "") << "void *";
  if (n == 0)
    os << "void";
  os << ");\nvoid " << abiName << "(void **a) {\n  " << fn << "(";
  for (size_t i = 0; i < n; ++i)
    os << (i ? ", " : "") << "a[" << i << "]";
  os << ");\n}\n";
}

/// The glue-local label of the initial parameter and buffer values.

/// Writes the initial values of `info`'s parameters then buffers into one
/// blob, each 64-byte aligned; `offsets` gets each one's byte offset.
bool buildStateBlob(const TrainingProgramInfo &info,
                    const std::map<std::string, std::string> &initialValues,
                    std::string &state, std::vector<size_t> &offsets,
                    std::string &error) {
  auto append = [&](const TrainingProgramInfo::State &s, StringRef kind) {
    while (state.size() % 64)
      state.push_back(0);
    offsets.push_back(state.size());
    auto it = initialValues.find(s.name);
    size_t bytes = 4;
    for (int64_t d : s.shape)
      bytes *= d;
    if (it == initialValues.end() || it->second.size() != bytes) {
      error = "internal error: no initial value for " + kind.str() + " '" +
              s.name + "'";
      return false;
    }
    state += it->second;
    return true;
  };
  for (const auto &s : info.params)
    if (!append(s, "parameter"))
      return false;
  for (const auto &s : info.buffers)
    if (!append(s, "buffer"))
      return false;
  state.push_back(0);
  return true;
}

/// The forwarders of the training step's functions (TrainABI.h gives each
/// one's argument order).
void emitTrainForwarders(llvm::raw_ostream &os,
                         const TrainingProgramInfo &info) {
  size_t P = info.params.size(), NB = info.buffers.size(), S = info.optSlots;
  size_t D = info.data.size();
  // train_micro's last input (rng) comes after the outputs in the ABI. At
  // ZeRO stage 2 it has no gradient accumulators and no gradient outputs.
  size_t A = info.zeroStage >= 2 ? 0 : P;
  size_t nin = P + A + NB + D + 1, nout = NB + A + 2;
  os << "extern void " << kTrainMicroFunc << "(";
  for (size_t i = 0; i < nin + nout + 1; ++i)
    os << (i ? ", " : "") << "void *";
  os << ");\nvoid " << kTrainMicroGlue << "(void **a) {\n  " << kTrainMicroFunc
     << "(";
  for (size_t i = 0; i < nin; ++i)
    os << "a[" << i << "], ";
  os << "a[" << nin + nout << "]";
  for (size_t i = nin; i < nin + nout; ++i)
    os << ", a[" << i << "]";
  os << ");\n}\n";
  emitForwarder(os, kApplyGlue, kApplyFunc, (P + P * S + P + 3) + (P + P * S));
  emitForwarder(os, kEvalGlue, kEvalFunc, (P + NB + D + 1) + 2);
  emitForwarder(os, kGradNormGlue, kGradNormFunc, (P + 1) + 1);
  os << "const int32_t " << kGlueZeroStage << " = " << info.zeroStage << ";\n";
  if (info.zeroStage >= 1) {
    os << "const int64_t " << kGlueZeroChunk << " = " << info.zeroChunk
       << "LL;\n";
    emitForwarder(os, kApplyShardGlue, kApplyShardFunc,
                  (1 + S + 1 + 3) + (1 + S));
  }
  if (info.zeroStage >= 2) {
    os << "const int32_t " << kGlueZeroNumBuckets << " = "
       << info.zeroBuckets.size() << ";\n";
    os << "const int32_t " << kGlueZeroBucketSizes << "[] = {";
    for (const auto &b : info.zeroBuckets)
      os << b.size() << ", ";
    os << "0};\nconst int32_t " << kGlueZeroBucketParams << "[] = {";
    for (const auto &b : info.zeroBuckets)
      for (int32_t m : b)
        os << m << ", ";
    os << "0};\n";
  }
}

} // namespace

std::string generateGlue(StringRef modelName, const std::vector<TensorSig> &ins,
                         const std::vector<TensorSig> &outs) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "/* Generated by ddpc: model description for the runtime. */\n"
        "#include <stdint.h>\n";
  os << "const char *" << kGlueModelName << " = " << cString(modelName)
     << ";\n";
  emitTable(os, kGlueInputs, ins);
  emitTable(os, kGlueOutputs, outs);
  size_t n = ins.size() + outs.size();
  os << "extern void " << kMainGraphFunc << "(";
  for (size_t i = 0; i < n; ++i)
    os << (i ? ", " : "") << "void *";
  if (n == 0)
    os << "void";
  os << ");\nvoid " << kInvokeGlue << "(void **args) {\n  (void)args;\n  "
     << kMainGraphFunc << "(";
  for (size_t i = 0; i < n; ++i)
    os << (i ? ", " : "") << "args[" << i << "]";
  os << ");\n}\n";
  return s;
}

bool generateTrainGlue(StringRef modelName, const TrainingProgramInfo &info,
                       const TrainOptions &train,
                       const std::map<std::string, std::string> &initialValues,
                       const std::string &strippedModel, StringRef blobDir,
                       std::string &glue, std::string &error) {
  llvm::SmallString<256> statePath(blobDir), modelPath(blobDir);
  llvm::sys::path::append(statePath, "state.bin");
  llvm::sys::path::append(modelPath, "model.onnx.bin");
  std::string state;
  std::vector<size_t> offsets;
  if (!buildStateBlob(info, initialValues, state, offsets, error) ||
      !writeFileAtomic(std::string(statePath), state, error) ||
      !writeFileAtomic(std::string(modelPath), strippedModel, error))
    return false;

  llvm::raw_string_ostream os(glue);
  os << "/* Generated by ddpc: training program description (TrainABI.h). */\n"
        "#include <stdint.h>\n";
  os << "__asm__(\".section .rodata\\n.balign 64\\n"
        ".global "
     << kGlueStateBlob << "\\n"
     << kGlueStateBlob << ":\\n.incbin \\\"" << statePath
     << "\\\"\\n.balign 64\\n.global " << kGlueOnnxModel << "\\n"
     << kGlueOnnxModel << ":\\n.incbin \\\"" << modelPath
     << "\\\"\\n.byte 0\\n.previous\");\n";
  os << "extern const unsigned char " << kGlueStateBlob << "[];\n";
  os << "const char *" << kGlueModelName << " = " << cString(modelName)
     << ";\n";
  os << "const int64_t " << kGlueOnnxModelSize << " = " << strippedModel.size()
     << "LL;\n";
  auto initOf = [&](size_t first) {
    return [&, first](size_t i) {
      return "(const float *)(" + kGlueStateBlob.str() + " + " +
             std::to_string(offsets[first + i]) + ")";
    };
  };
  emitTable(os, kGlueParams, info.params, initOf(0));
  emitTable(os, kGlueBuffers, info.buffers, initOf(info.params.size()));
  os << "const int32_t " << kGlueOptSlots << " = " << info.optSlots << ";\n";
  os << "const char *" << kGlueOptimizerDesc << " = "
     << cString(info.optimizerDesc) << ";\n";
  os << "const float " << kGlueDefaultLR << " = "
     << llvm::formatv("{0:e}", train.lr) << "f;\n";
  os << "const int64_t " << kGlueBatchSize << " = " << info.batchSize
     << "LL;\n";
  os << "const int32_t " << kGlueGradAccumSteps << " = " << train.gradAccumSteps
     << ";\n";
  // Data inputs: one row per input (TrainABI.h).
  emitTable(os, kGlueData, info.data);
  os << "const int32_t " << kGlueLabelDType << " = " << info.labelDType
     << ";\n";
  os << "const int32_t " << kGlueLabelRank << " = " << info.labelShape.size()
     << ";\n";
  os << "const int64_t " << kGlueLabelShape << "[] = {";
  for (int64_t d : info.labelShape)
    os << d << "LL, ";
  os << "0};\n";
  os << "const int32_t " << kGlueIsClassification << " = "
     << (info.classification ? 1 : 0) << ";\n";
  os << "const int64_t " << kGlueNumClasses << " = " << info.numClasses
     << "LL;\n";
  emitTrainForwarders(os, info);
  return true;
}

std::string generateMemoryPlanGlue(const MemoryPlan &plan, int64_t budget) {
  return "const int64_t " + kGlueMemoryPlanPeak.str() + " = " +
         std::to_string(plan.peak) + "LL;\nconst int64_t " +
         kGlueMemoryPlanCollective.str() + " = " +
         std::to_string(plan.collectiveBuffers) + "LL;\nconst int64_t " +
         kGlueMemoryPlanOptimizer.str() + " = " +
         std::to_string(plan.optimizerState) + "LL;\nconst int64_t " +
         kGlueMemoryPlanGradients.str() + " = " +
         std::to_string(plan.gradients) + "LL;\nconst int64_t " +
         kGlueMemoryPlanParameters.str() + " = " +
         std::to_string(plan.parameters) + "LL;\nconst int64_t " +
         kGlueMemoryPlanWorldSize.str() + " = " +
         std::to_string(plan.worldSize) + "LL;\nconst int64_t " +
         kGlueMemoryBudget.str() + " = " + std::to_string(budget) + "LL;\n";
}

std::string generateCUDAGlue(const CompileOptions &options) {
  return "const int32_t " + kGlueMathMode.str() + " = " +
         (options.precision == "tf32" ? "1" : "0") + ";\n";
}

bool stripTrainedInitializers(const std::string &bytes,
                              const TrainingProgramInfo &info, std::string &out,
                              std::string &error) {
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) {
    error = "cannot re-parse the model";
    return false;
  }
  llvm::StringSet<> trained;
  for (const auto &s : info.params)
    trained.insert(s.name);
  for (const auto &s : info.buffers)
    trained.insert(s.name);
  auto *inits = model.mutable_graph()->mutable_initializer();
  for (int i = inits->size() - 1; i >= 0; --i)
    if (trained.contains(inits->Get(i).name()))
      inits->DeleteSubrange(i, 1);
  out = model.SerializeAsString();
  return true;
}

} // namespace driver
} // namespace ddpc

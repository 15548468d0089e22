//===- Driver.cpp - The one compile() used by the CLI and Python ----------===//
//
// Part of ddpc. Import -> pass pipelines -> object file -> generated glue ->
// link with the runtime. Every output goes to a temporary first and is
// renamed into place only when complete.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Driver/Driver.h"
#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"

#include "ddpc/Analysis/CostModel.h"
#include "ddpc/Support/DTypes.h"
#include "ddpc/Support/OutputFile.h"
#include "ddpc/Support/RuntimeSymbols.h"
#include "ddpc/Target/CUDA/Transforms/Passes.h"
#include "ddpc/Training/Passes.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"

#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <unistd.h>

using namespace mlir;

namespace ddpc {

std::string defaultRuntimeLibDir(const char *argv0, void *mainAddr) {
  std::string exe = llvm::sys::fs::getMainExecutable(argv0, mainAddr);
  SmallString<256> dir(llvm::sys::path::parent_path(exe));
  llvm::sys::path::append(dir, "..", "lib");
  return std::string(dir);
}

namespace {

/// Writes `text` to `path` atomically (temp file + rename).
bool writeFileAtomic(const std::string &path, StringRef text,
                     std::string &error) {
  if (path == "-") {
    llvm::outs() << text;
    llvm::outs().flush();
    if (llvm::outs().has_error()) {
      error =
          "cannot write to standard output: " + llvm::outs().error().message();
      llvm::outs().clear_error(); // Reported here, not as a fatal IO error.
      return false;
    }
    return true;
  }
  runtime::OutputTarget target = runtime::resolveOutput(path);
  std::string tmp = target.temporary();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec, llvm::sys::fs::OF_None);
    if (ec) {
      error = "cannot write '" + path + "': " + ec.message() +
              " (creating the temporary '" + tmp + "')";
      return false;
    }
    os << text;
    os.close();
    if (os.has_error()) {
      error = "cannot write '" + path + "': " + os.error().message();
      os.clear_error();
      llvm::sys::fs::remove(tmp);
      return false;
    }
  }
  return runtime::commitOutput(tmp, target, error);
}

std::string printOp(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->print(os);
  return s;
}

/// The text of a --dump-ir file: with locations (`loc(#locN)`, their table
/// at the end), which carry the ONNX node names that fusion records, so
/// that `ddpc-opt` replays each stage exactly (up to the locations of
/// values that the custom syntax does not print, e.g. loop induction
/// variables, which the parser sets to the file position).
std::string printDump(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->print(os, OpPrintingFlags().enableDebugInfo(/*enable=*/true,
                                                  /*prettyForm=*/false));
  return s;
}

/// Writes the IR after every pass into DIR/NNNN_<pass-argument>.mlir, or
/// DIR/NNNN_<pass-argument>.<symbol>.mlir for a pass nested on a symbol
/// (a func.func pass runs once per function). Four digits keep the files in
/// pipeline order when listed by name. Passes over function declarations,
/// pass-manager adaptors and passes that left the module unchanged write no
/// file.
class DumpIRInstrumentation : public PassInstrumentation {
public:
  /// `counter`, `last` (the text of the last file written) and `lastFile`
  /// (its name) are shared by the pass managers of one compile.
  DumpIRInstrumentation(std::string dir, int *counter, std::string *last,
                        std::string *lastFile)
      : dir(std::move(dir)), counter(*counter), last(*last),
        lastFile(*lastFile) {}
  void runAfterPass(Pass *pass, Operation *op) override {
    if (pass->getName().contains("OpToOpPassAdaptor"))
      return;
    if (auto fn = dyn_cast<FunctionOpInterface>(op); fn && fn.isExternal())
      return;
    std::string suffix;
    if (op->getParentOp())
      if (auto sym =
              op->getAttrOfType<StringAttr>(SymbolTable::getSymbolAttrName()))
        suffix = "." + sym.str();
    // Nested passes are dumped as the whole module.
    while (op->getParentOp())
      op = op->getParentOp();
    std::string text = printDump(op);
    if (text == last)
      return;
    last = std::move(text);
    StringRef arg = pass->getArgument();
    std::string name = arg.empty() ? pass->getName().str() : arg.str();
    lastFile = llvm::formatv("{0:d4}_{1}{2}.mlir", counter++, name, suffix);
    SmallString<256> path(dir);
    llvm::sys::path::append(path, lastFile);
    std::string err;
    (void)writeFileAtomic(std::string(path), last, err);
  }

private:
  std::string dir;
  int &counter;
  std::string &last;
  std::string &lastFile;
};

struct TensorSig {
  std::string name;
  int32_t dtype;
  SmallVector<int64_t> shape;
};

/// Reads the graph signature that the importer recorded on @main_graph.
bool readSignature(ModuleOp module, std::vector<TensorSig> &ins,
                   std::vector<TensorSig> &outs) {
  auto func = module.lookupSymbol<func::FuncOp>(kMainGraphFunc);
  if (!func)
    return false;
  auto fty = func.getFunctionType();
  auto sig = [&](Type t, DictionaryAttr attrs) {
    TensorSig s;
    auto rt = cast<RankedTensorType>(t);
    s.shape.assign(rt.getShape().begin(), rt.getShape().end());
    s.name = cast<StringAttr>(attrs.get(attrs::kName)).str();
    s.dtype = cast<IntegerAttr>(attrs.get(attrs::kDType)).getInt();
    return s;
  };
  for (unsigned i = 0; i < fty.getNumInputs(); ++i)
    ins.push_back(sig(fty.getInput(i), func.getArgAttrDict(i)));
  for (unsigned i = 0; i < fty.getNumResults(); ++i)
    outs.push_back(sig(fty.getResult(i), func.getResultAttrDict(i)));
  return true;
}

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

/// The C glue that describes the model to the runtime (see
/// include/ddpc/Runtime/ModelABI.h) and forwards to @main_graph.
std::string generateGlue(StringRef modelName, const std::vector<TensorSig> &ins,
                         const std::vector<TensorSig> &outs) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "/* Generated by ddpc: model description for the runtime. */\n"
        "#include <stdint.h>\n";
  os << "const char *ddpc_model_name = " << cString(modelName) << ";\n";
  auto table = [&](StringRef prefix, const std::vector<TensorSig> &v) {
    os << "const int32_t ddpc_num_" << prefix << "s = " << v.size() << ";\n";
    for (size_t i = 0; i < v.size(); ++i) {
      os << "static const int64_t ddpc_" << prefix << "_shape_" << i
         << "[] = {";
      for (int64_t d : v[i].shape)
        os << d << "LL, ";
      os << "0};\n";
    }
    os << "const char *const ddpc_" << prefix << "_names[] = {";
    for (auto &t : v)
      os << cString(t.name) << ", ";
    os << "0};\nconst int32_t ddpc_" << prefix << "_dtypes[] = {";
    for (auto &t : v)
      os << t.dtype << ", ";
    os << "0};\nconst int32_t ddpc_" << prefix << "_ranks[] = {";
    for (auto &t : v)
      os << t.shape.size() << ", ";
    os << "0};\nconst int64_t *const ddpc_" << prefix << "_shapes[] = {";
    for (size_t i = 0; i < v.size(); ++i)
      os << "ddpc_" << prefix << "_shape_" << i << ", ";
    os << "0};\n";
  };
  table("input", ins);
  table("output", outs);
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

/// The C glue of a training program (include/ddpc/Runtime/TrainABI.h).
/// Initial parameter/buffer values and the stripped ONNX model are embedded
/// with `.incbin` from files in `blobDir`, so large models do not go
/// through the C compiler as text.
bool generateTrainGlue(StringRef modelName, const TrainingProgramInfo &info,
                       const TrainOptions &train,
                       const std::map<std::string, std::string> &initialValues,
                       const std::string &strippedModel, StringRef blobDir,
                       std::string &glue, std::string &error) {
  SmallString<256> statePath(blobDir), modelPath(blobDir);
  llvm::sys::path::append(statePath, "state.bin");
  llvm::sys::path::append(modelPath, "model.onnx.bin");
  std::string state;
  std::vector<size_t> offsets;
  auto appendState = [&](const TrainingProgramInfo::State &s) {
    while (state.size() % 64)
      state.push_back(0);
    offsets.push_back(state.size());
    auto it = initialValues.find(s.name);
    size_t bytes = 4;
    for (int64_t d : s.shape)
      bytes *= d;
    if (it == initialValues.end() || it->second.size() != bytes)
      return false;
    state += it->second;
    return true;
  };
  for (const auto &s : info.params)
    if (!appendState(s)) {
      error = "internal error: no initial value for parameter '" + s.name + "'";
      return false;
    }
  for (const auto &s : info.buffers)
    if (!appendState(s)) {
      error = "internal error: no initial value for buffer '" + s.name + "'";
      return false;
    }
  state.push_back(0);
  if (!writeFileAtomic(std::string(statePath), state, error) ||
      !writeFileAtomic(std::string(modelPath), strippedModel, error))
    return false;

  llvm::raw_string_ostream os(glue);
  os << "/* Generated by ddpc: training program description (TrainABI.h). */\n"
        "#include <stdint.h>\n";
  os << "__asm__(\".section .rodata\\n.balign 64\\n"
        ".global ddpc_state_blob\\nddpc_state_blob:\\n.incbin \\\""
     << statePath
     << "\\\"\\n.balign 64\\n.global ddpc_onnx_model\\n"
        "ddpc_onnx_model:\\n.incbin \\\""
     << modelPath << "\\\"\\n.byte 0\\n.previous\");\n";
  os << "extern const unsigned char ddpc_state_blob[];\n";
  os << "const char *ddpc_model_name = " << cString(modelName) << ";\n";
  os << "const int64_t ddpc_onnx_model_size = " << strippedModel.size()
     << "LL;\n";
  size_t next = 0;
  auto table = [&](StringRef kind,
                   const std::vector<TrainingProgramInfo::State> &v) {
    os << "const int32_t ddpc_num_" << kind << "s = " << v.size() << ";\n";
    for (size_t i = 0; i < v.size(); ++i) {
      os << "static const int64_t ddpc_" << kind << "_shape_" << i << "[] = {";
      for (int64_t d : v[i].shape)
        os << d << "LL, ";
      os << "0};\n";
    }
    os << "const char *const ddpc_" << kind << "_names[] = {";
    for (const auto &s : v)
      os << cString(s.name) << ", ";
    os << "0};\nconst int32_t ddpc_" << kind << "_ranks[] = {";
    for (const auto &s : v)
      os << s.shape.size() << ", ";
    os << "0};\nconst int64_t *const ddpc_" << kind << "_shapes[] = {";
    for (size_t i = 0; i < v.size(); ++i)
      os << "ddpc_" << kind << "_shape_" << i << ", ";
    os << "0};\nconst float *const ddpc_" << kind << "_init[] = {";
    for (size_t i = 0; i < v.size(); ++i)
      os << "(const float *)(ddpc_state_blob + " << offsets[next++] << "), ";
    os << "0};\n";
  };
  table("param", info.params);
  table("buffer", info.buffers);
  os << "const int32_t ddpc_opt_slots = " << info.optSlots << ";\n";
  os << "const char *ddpc_optimizer_desc = " << cString(info.optimizerDesc)
     << ";\n";
  os << "const float ddpc_default_lr = " << llvm::formatv("{0:e}", train.lr)
     << "f;\n";
  os << "const int64_t ddpc_batch_size = " << info.batchSize << "LL;\n";
  os << "const int32_t ddpc_grad_accum_steps = " << train.gradAccumSteps
     << ";\n";
  auto dims = [&](StringRef name, ArrayRef<int64_t> shape) {
    os << "const int32_t ddpc_" << name << "_rank = " << shape.size() << ";\n";
    os << "const int64_t ddpc_" << name << "_shape[] = {";
    for (int64_t d : shape)
      os << d << "LL, ";
    os << "0};\n";
  };
  // Data inputs: one row per input (TrainABI.h).
  os << "const int32_t ddpc_num_data_inputs = " << info.data.size() << ";\n";
  os << "const char *const ddpc_data_names[] = {";
  for (const auto &d : info.data)
    os << cString(d.name) << ", ";
  os << "0};\nconst int32_t ddpc_data_dtypes[] = {";
  for (const auto &d : info.data)
    os << d.dtype << ", ";
  os << "0};\nconst int32_t ddpc_data_ranks[] = {";
  for (const auto &d : info.data)
    os << d.shape.size() << ", ";
  os << "0};\n";
  for (const auto &[i, d] : llvm::enumerate(info.data)) {
    os << "static const int64_t ddpc_data_shape" << i << "[] = {";
    for (int64_t v : d.shape)
      os << v << "LL, ";
    os << "0};\n";
  }
  os << "const int64_t *const ddpc_data_shapes[] = {";
  for (size_t i = 0; i < info.data.size(); ++i)
    os << "ddpc_data_shape" << i << ", ";
  os << "0};\n";
  os << "const int32_t ddpc_label_dtype = " << info.labelDType << ";\n";
  dims("label", info.labelShape);
  os << "const int32_t ddpc_is_classification = "
     << (info.classification ? 1 : 0) << ";\n";
  os << "const int64_t ddpc_num_classes = " << info.numClasses << "LL;\n";
  size_t P = info.params.size(), NB = info.buffers.size(), S = info.optSlots;
  size_t D = info.data.size();
  // train_micro's last input (rng) comes after the outputs in the ABI.
  {
    size_t nin = 2 * P + NB + D + 1, nout = NB + P + 2;
    os << "extern void " << kTrainMicroFunc << "(";
    for (size_t i = 0; i < nin + nout + 1; ++i)
      os << (i ? ", " : "") << "void *";
    os << ");\nvoid " << kTrainMicroGlue << "(void **a) {\n  "
       << kTrainMicroFunc << "(";
    for (size_t i = 0; i < nin; ++i)
      os << "a[" << i << "], ";
    os << "a[" << nin + nout << "]";
    for (size_t i = nin; i < nin + nout; ++i)
      os << ", a[" << i << "]";
    os << ");\n}\n";
  }
  emitForwarder(os, kApplyGlue, kApplyFunc, (P + P * S + P + 3) + (P + P * S));
  emitForwarder(os, kEvalGlue, kEvalFunc, (P + NB + D + 1) + 2);
  emitForwarder(os, kGradNormGlue, kGradNormFunc, (P + 1) + 1);
  return true;
}

/// The model without the initializers that training replaces (parameters
/// and buffers), serialized: the runtime appends the trained ones.
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

int64_t byteSize(Type t) {
  auto st = dyn_cast<ShapedType>(t);
  return st ? staticBytes(st) : 0;
}

/// NumPy name of ONNX dtype number `dtype` ("float32"), as the programs'
/// messages give it; "onnx_dtype_N" for one programs do not carry.
std::string dtypeString(int32_t dtype) {
  const DTypeInfo *info = lookupDType(dtype);
  return info ? info->name : "onnx_dtype_" + std::to_string(dtype);
}

/// The plan as JSON (see CompileResult::reportJSON).
std::string buildReport(ModuleOp module, StringRef modelName,
                        const std::vector<TensorSig> &ins,
                        const std::vector<TensorSig> &outs,
                        const llvm::StringSet<> &trainable) {
  llvm::json::Object root;
  root["model"] = modelName.str();
  auto tensors = [](const std::vector<TensorSig> &v) {
    llvm::json::Array a;
    for (const TensorSig &t : v) {
      llvm::json::Array shape;
      for (int64_t d : t.shape)
        shape.push_back(d);
      a.push_back(llvm::json::Object{{"name", t.name},
                                     {"dtype", dtypeString(t.dtype)},
                                     {"onnx_dtype", t.dtype},
                                     {"shape", std::move(shape)}});
    }
    return a;
  };
  root["inputs"] = tensors(ins);
  root["outputs"] = tensors(outs);
  llvm::json::Array params;
  int64_t paramBytes = 0;
  if (auto inits = module->getAttrOfType<ArrayAttr>(attrs::kInitializers)) {
    for (auto d : inits.getAsRange<DictionaryAttr>()) {
      llvm::json::Array shape;
      for (int64_t v : cast<DenseI64ArrayAttr>(d.get("shape")).asArrayRef())
        shape.push_back(v);
      int64_t bytes = cast<IntegerAttr>(d.get("bytes")).getInt();
      paramBytes += bytes;
      int32_t dtype = cast<IntegerAttr>(d.get("dtype")).getInt();
      params.push_back(llvm::json::Object{
          {"name", cast<StringAttr>(d.get("name")).str()},
          {"dtype", dtypeString(dtype)},
          {"onnx_dtype", dtype},
          {"shape", std::move(shape)},
          {"bytes", bytes},
          {"trainable",
           trainable.contains(cast<StringAttr>(d.get("name")).getValue())}});
    }
  }
  root["parameters"] = std::move(params);
  root["parameter_bytes"] = paramBytes;
  // Collectives: upstream shard collectives (tensor IR: "all_reduce_sum",
  // "all_gather", ...) and ddpc runtime calls (after lowering).
  llvm::json::Array collectives;
  int64_t collectiveBytes = 0;
  module.walk([&](Operation *op) {
    std::string kind;
    Type type;
    if (isa<shard::AllReduceOp, shard::AllGatherOp, shard::ReduceScatterOp,
            shard::AllToAllOp, shard::BroadcastOp>(op)) {
      kind = op->getName().stripDialect().str();
      if (auto ar = dyn_cast<shard::AllReduceOp>(op))
        kind += "_" + shard::stringifyReductionKind(ar.getReduction()).str();
      type = op->getOperand(0).getType();
    } else if (auto call = dyn_cast<func::CallOp>(op)) {
      if (call->hasAttr(attrs::kCollective)) {
        kind = call->getAttrOfType<StringAttr>(attrs::kCollective).str();
        type = call.getOperand(0).getType();
      }
    }
    if (kind.empty())
      return;
    int64_t bytes = byteSize(type);
    if (auto b = op->getAttrOfType<IntegerAttr>(attrs::kBytes))
      bytes = b.getInt();
    collectiveBytes += bytes;
    collectives.push_back(llvm::json::Object{{"op", kind}, {"bytes", bytes}});
  });
  root["collectives"] = std::move(collectives);
  root["collective_bytes"] = collectiveBytes;
  // Fusion groups (ddpc-fuse-ops): one loop nest or kernel each.
  int64_t groups = 0;
  module.walk([&](Operation *op) {
    if (op->hasAttr(attrs::kFusionGroup))
      ++groups;
  });
  root["fusion_groups"] = groups;
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::json::Value(std::move(root));
  return s;
}

/// Parses the plan `reportJSON`, lets `edit` change its root object and
/// writes it back (left alone if it does not parse).
void editReport(std::string &reportJSON,
                llvm::function_ref<void(llvm::json::Object *)> edit) {
  auto parsed = llvm::json::parse(reportJSON);
  if (!parsed) {
    llvm::consumeError(parsed.takeError());
    return;
  }
  edit(parsed->getAsObject());
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::json::Value(std::move(*parsed));
  reportJSON = s;
}

/// Adds the gradient allreduce buckets (ddpc-bucket-gradient-allreduce) to
/// `reportJSON`: "gradient_buckets" (per bucket: index, bytes, parameter
/// names in ready order, the function and the position among its top-level
/// ops after which the bucket starts: the ops after it overlap), and each
/// bucket as an "allreduce_bucket" entry of "collectives" and
/// "collective_bytes" (bytes per optimizer step).
void addBucketReport(ModuleOp module, std::string &reportJSON) {
  editReport(reportJSON, [&](llvm::json::Object *root) {
    llvm::json::Array buckets;
    llvm::json::Array *collectives = root->getArray("collectives");
    int64_t total = root->getInteger("collective_bytes").value_or(0);
    module.walk([&](func::CallOp call) {
      auto kind = call->getAttrOfType<StringAttr>(attrs::kCollective);
      if (!kind || kind.getValue() != "allreduce_bucket")
        return;
      int64_t bytes = call->getAttrOfType<IntegerAttr>(attrs::kBytes).getInt();
      llvm::json::Array params;
      for (auto name : call->getAttrOfType<ArrayAttr>(attrs::kParams)
                           .getAsRange<StringAttr>())
        params.push_back(name.str());
      buckets.push_back(llvm::json::Object{
          {"bucket", call->getAttrOfType<IntegerAttr>(attrs::kBucket).getInt()},
          {"bytes", bytes},
          {"params", std::move(params)},
          {"function",
           call->getParentOfType<func::FuncOp>().getSymName().str()},
          {"start_op",
           call->getAttrOfType<IntegerAttr>(attrs::kStartOp).getInt()},
          {"function_ops",
           call->getAttrOfType<IntegerAttr>(attrs::kFunctionOps).getInt()}});
      if (collectives)
        collectives->push_back(
            llvm::json::Object{{"op", "allreduce_bucket"}, {"bytes", bytes}});
      total += bytes;
    });
    if (buckets.empty())
      return;
    (*root)["gradient_buckets"] = std::move(buckets);
    (*root)["collective_bytes"] = total;
  });
}

/// Adds the CUDA target's plan to `reportJSON`, from the IR after stage
/// "gpu-kernels": per step function the kernel launches, cuBLAS GEMM calls
/// (of which cuBLASLt GEMMs with a fused bias/ReLU epilogue), cuDNN
/// convolutions (of which fused convolution + bias/ReLU calls; library
/// fallbacks are not counted) and arena bytes
/// (ddpc-plan-arena), plus the architectures. `emulated` (cuda-emulate,
/// from the IR after stage "bufferized"): kernels are still the outermost
/// scf.parallel loops that the CUDA pipeline turns into launches.
void addCUDAReport(ModuleOp module, ArrayRef<std::string> archs,
                   std::string &reportJSON, bool emulated = false) {
  auto isKernel = [&](Operation *op) {
    if (emulated)
      return isa<scf::ParallelOp>(op) &&
             !op->getParentOfType<scf::ParallelOp>();
    return isa<gpu::LaunchFuncOp>(op);
  };
  editReport(reportJSON, [&](llvm::json::Object *root) {
    llvm::json::Array functions;
    int64_t kernels = 0;
    if (emulated)
      module.walk([&](scf::ParallelOp op) { kernels += isKernel(op); });
    else
      module.walk([&](gpu::GPUFuncOp) { ++kernels; });
    // Launches, GEMMs and fused-epilogue GEMMs of one call of `f`, including
    // those of the module's functions it calls (the SyncBatchNorm allreduce
    // helpers), once per call site.
    struct Counts {
      int64_t launches = 0, gemms = 0, epilogues = 0, convs = 0,
              convEpilogues = 0;
    };
    llvm::DenseMap<Operation *, Counts> counted;
    std::function<Counts(func::FuncOp)> count = [&](func::FuncOp f) -> Counts {
      if (auto it = counted.find(f); it != counted.end())
        return it->second;
      counted[f] = {}; // Recursion guard (the IR has no recursion).
      Counts c;
      // Fallbacks (ddpc.library_fallback) run only when a library declines.
      f.walk<WalkOrder::PreOrder>([&](Operation *op) {
        if (op->hasAttr(attrs::kLibraryFallback))
          return WalkResult::skip();
        if (isKernel(op)) {
          ++c.launches;
        } else if (auto call = dyn_cast<func::CallOp>(op)) {
          bool epilogue = call.getCallee() == kGemmEpilogueFn;
          c.gemms += epilogue || call.getCallee() == kGemmFn;
          c.epilogues += epilogue;
          bool convEpilogue = call.getCallee() == kConvEpilogueFn;
          c.convs += convEpilogue || call.getCallee() == kConvFn;
          c.convEpilogues += convEpilogue;
          auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
          if (callee && !callee.isExternal()) {
            Counts inner = count(callee);
            c.launches += inner.launches;
            c.gemms += inner.gemms;
            c.epilogues += inner.epilogues;
            c.convs += inner.convs;
            c.convEpilogues += inner.convEpilogues;
          }
        }
        return WalkResult::advance();
      });
      return counted[f] = c;
    };
    for (auto f : module.getOps<func::FuncOp>()) {
      if (f.isExternal() || !f.isPublic())
        continue;
      Counts c = count(f);
      int64_t arena = 0;
      if (auto a = f->getAttrOfType<IntegerAttr>(attrs::kArenaBytes))
        arena = a.getInt();
      functions.push_back(
          llvm::json::Object{{"name", f.getName().str()},
                             {"kernel_launches", c.launches},
                             {"cublas_gemms", c.gemms},
                             {"cublaslt_epilogue_gemms", c.epilogues},
                             {"cudnn_convolutions", c.convs},
                             {"cudnn_epilogue_convolutions", c.convEpilogues},
                             {"arena_bytes", arena}});
    }
    llvm::json::Array archList;
    for (const std::string &a : archs)
      archList.push_back(a);
    (*root)["cuda"] = llvm::json::Object{{"archs", std::move(archList)},
                                         {"kernels", kernels},
                                         {"emulated", emulated},
                                         {"functions", std::move(functions)}};
  });
}

int runTool(ArrayRef<std::string> argv, std::string &error) {
  auto prog = llvm::sys::findProgramByName(argv[0]);
  if (!prog) {
    error = "cannot find '" + argv[0] + "' on PATH (needed to link)";
    return 1;
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
  return rc == 0 ? 0 : 1;
}

} // namespace

int compile(const CompileOptions &options, std::string &error,
            const std::string &modelBytes, CompileResult *result) {
  if (options.target != "cpu" && options.target != "cuda" &&
      options.target != "cuda-emulate") {
    error = "unknown --target '" + options.target +
            "' (supported: cpu, cuda, cuda-emulate)";
    return kCompileError;
  }
  if (options.outputPath.empty()) {
    error = "no output file: pass -o FILE";
    return kCompileError;
  }
  if (!checkCPUTargetOptions(options.cpu, error))
    return kCompileError;
  bool textOutput =
      options.emit == EmitKind::MLIR || options.emit == EmitKind::LoweredMLIR ||
      options.emit == EmitKind::LLVMIR || options.emit == EmitKind::PTX;
  if (options.outputPath == "-" && !textOutput) {
    error = "-o - (stdout) works only with --emit=mlir, lowered-mlir, llvm "
            "or ptx";
    return kCompileError;
  }
  if (options.outputPath != "-") {
    // Fail before the (long) compile when the output folder is missing.
    SmallString<256> dir(options.outputPath);
    llvm::sys::path::remove_filename(dir);
    if (!dir.empty() && !llvm::sys::fs::is_directory(dir)) {
      error = "cannot write '" + options.outputPath + "': '" +
              std::string(dir) +
              (llvm::sys::fs::exists(dir) ? "' is not a folder"
                                          : "' does not exist");
      return kCompileError;
    }
    if (llvm::sys::fs::is_directory(options.outputPath)) {
      error = "-o '" + options.outputPath +
              "' is a folder; give the output a file name (e.g. -o " +
              options.outputPath + "/prog)";
      return kCompileError;
    }
    // The temporary goes beside the output (or its symlink's target).
    runtime::OutputTarget target = runtime::resolveOutput(options.outputPath);
    SmallString<256> tmpDir(target.temporary());
    llvm::sys::path::remove_filename(tmpDir);
    if (tmpDir.empty())
      tmpDir = ".";
    if (::access(tmpDir.c_str(), W_OK) != 0) {
      error = "cannot write '" + options.outputPath + "': folder '" +
              std::string(tmpDir) + "' is not writable (" +
              std::strerror(errno) + ")";
      return kCompileError;
    }
  }
  std::string bytes = modelBytes;
  ImportOptions importOptions = options.import;
  if (bytes.empty()) {
    auto buf = llvm::MemoryBuffer::getFile(options.inputPath, /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
    if (!buf) {
      error = "cannot read '" + options.inputPath +
              "': " + buf.getError().message();
      return kCompileError;
    }
    bytes = (*buf)->getBuffer().str();
    if (importOptions.modelDir.empty()) {
      SmallString<256> dir(options.inputPath);
      llvm::sys::path::remove_filename(dir);
      if (dir.empty())
        dir = ".";
      importOptions.modelDir = std::string(dir);
    }
  }

  const bool cuda = options.target == "cuda";
  if (!cuda && options.emit == EmitKind::PTX) {
    error = "--emit=ptx needs --target cuda";
    return kCompileError;
  }
  if (cuda && options.emit == EmitKind::SharedLibrary) {
    error = "--emit=shared is not supported with --target cuda (build an "
            "executable, or use --target cpu for in-process use)";
    return kCompileError;
  }
  if (options.vjp && options.train.enabled) {
    error = "--vjp and --train are different programs (a gradient check, a "
            "training program); give one";
    return kCompileError;
  }
  if (cuda && options.vjp) {
    error = "--vjp is not supported with --target cuda";
    return kCompileError;
  }
  if (options.train.enabled) {
    error = options.train.validate();
    if (!error.empty())
      return kCompileError;
  }
  std::string cudaRoot;
  if (cuda) {
    cudaRoot = findCUDAToolkit(options.cudaRoot, error);
    if (cudaRoot.empty())
      return kCompileError;
  }

  registerAllDDPCPasses();
  DialectRegistry registry;
  registerAllDDPCDialects(registry);
  registerCPUTranslations(registry);
  MLIRContext context(registry, MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();

  if (options.verbose)
    llvm::errs() << "ddpc: importing " << options.inputPath << "\n";
  ImportError importError;
  std::map<std::string, std::string> initialValues;
  const bool training = options.train.enabled;
  if (training) {
    // One initializer in roles that need different storage (a BatchNorm
    // scale merged with a running variance): one copy per role, in the
    // model that is imported and in the one --save writes.
    std::vector<std::string> retied;
    std::vector<std::string> copies =
        separateInitializerRoles(bytes, options.train.freeze, &retied);
    for (const std::string &r : retied)
      llvm::errs() << "ddpc: note: " << r
                   << " is an exporter-folded transpose of a weight also used "
                      "elsewhere (a tied output head): it trains as that "
                      "weight\n";
    if (!copies.empty()) {
      std::string names;
      for (size_t i = 0; i < copies.size() && i < 4; ++i)
        names += (i ? ", " : "") + copies[i];
      llvm::errs() << "ddpc: note: " << copies.size()
                   << " initializer(s) written as Identity copies of another "
                      "(torch.onnx.export merges equal-valued parameters in "
                      "eval mode) become initializers of their own: "
                   << names << (copies.size() > 4 ? ", ..." : "") << "\n";
    }
    importOptions.parameterize = true;
    importOptions.trainingMode = true;
    importOptions.funcName = kForwardTrainFunc.str();
    importOptions.frozen = options.train.freeze;
    importOptions.initialValues = &initialValues;
    importOptions.syncBatchNorm = options.train.syncBatchNorm;
  }
  OwningOpRef<ModuleOp> module =
      importONNXModel(context, bytes, importOptions, importError);
  if (module && training) {
    // The same graph in inference mode, for the evaluation function.
    ImportOptions evalOptions = importOptions;
    evalOptions.trainingMode = false;
    evalOptions.evalMode = true;
    evalOptions.funcName = kForwardEvalFunc.str();
    evalOptions.initialValues = nullptr;
    OwningOpRef<ModuleOp> evalModule =
        importONNXModel(context, bytes, evalOptions, importError);
    if (!evalModule) {
      module = nullptr;
    } else {
      // forward_eval and what it refers to that the training import lacks
      // (helpers and strings of run-time checks are named by content, so
      // the ones both imports made are the same).
      SymbolTable table(*module);
      for (Operation &op : *evalModule->getBody()) {
        auto sym =
            op.getAttrOfType<StringAttr>(SymbolTable::getSymbolAttrName());
        if (sym && !table.lookup(sym))
          table.insert(op.clone());
      }
    }
  }
  if (!module) {
    error = importError.message;
    // Name the file: "invalid model 'x.onnx': ...".
    StringRef prefix = "invalid model:";
    if (!options.inputPath.empty() && StringRef(error).starts_with(prefix))
      error = "invalid model '" + options.inputPath +
              "':" + error.substr(prefix.size());
    return importError.kind == ImportErrorKind::Unsupported
               ? kCompileUnsupported
               : kCompileError;
  }
  std::string lastDump;     // --dump-ir: the text of the last file written,
  std::string lastDumpFile; // its name,
  std::string stagesText;   // and DIR/stages.txt: how to replay each stage.
  if (!options.dumpIRDir.empty()) {
    if (llvm::sys::fs::exists(options.dumpIRDir) &&
        !llvm::sys::fs::is_directory(options.dumpIRDir)) {
      error = "--dump-ir '" + options.dumpIRDir +
              "' is a file; --dump-ir takes a folder";
      return kCompileError;
    }
    if (auto ec = llvm::sys::fs::create_directories(options.dumpIRDir)) {
      error = "cannot create --dump-ir folder '" + options.dumpIRDir +
              "': " + ec.message();
      return kCompileError;
    }
    // Dumps of an earlier compile would mix with this one's.
    std::error_code ec;
    for (llvm::sys::fs::directory_iterator it(options.dumpIRDir, ec), end;
         it != end && !ec; it.increment(ec)) {
      StringRef file = llvm::sys::path::filename(it->path());
      if ((file.ends_with(".mlir") && file.size() > 5 &&
           llvm::all_of(file.take_front(4), llvm::isDigit) && file[4] == '_') ||
          file == "stages.txt")
        (void)llvm::sys::fs::remove(it->path());
    }
    SmallString<256> p(options.dumpIRDir);
    lastDumpFile = "0000_import.mlir";
    llvm::sys::path::append(p, lastDumpFile);
    lastDump = printDump(*module);
    if (!writeFileAtomic(std::string(p), lastDump, error))
      return kCompileError;
  }
  if (options.emit == EmitKind::MLIR && !training && !options.vjp)
    return writeFileAtomic(options.outputPath, printOp(*module), error)
               ? kCompileOk
               : kCompileError;

  std::string modelName = "model";
  if (auto n = (*module)->getAttrOfType<StringAttr>(attrs::kGraphName))
    modelName = n.str();

  // Pass phases; each ends a named stage that --dump-ir, captureStages and
  // the Python API can show. With --dump-ir, DIR/stages.txt gives each
  // stage's input and output files and its pipeline as text, which
  // `ddpc-opt INPUT --pass-pipeline=PIPELINE` replays. A failing pass of a
  // `userErrors` phase (the training step, the VJP) reports the user's
  // problem; in any other it is an internal error.
  int dumpCounter = 1;
  auto runPhase = [&](StringRef stage,
                      llvm::function_ref<void(OpPassManager &)> build,
                      bool userErrors = false) {
    if (options.verbose)
      llvm::errs() << "ddpc: " << stage << "\n";
    PassManager pm(&context, ModuleOp::getOperationName());
    std::string input = lastDumpFile;
    if (!options.dumpIRDir.empty())
      pm.addInstrumentation(std::make_unique<DumpIRInstrumentation>(
          options.dumpIRDir, &dumpCounter, &lastDump, &lastDumpFile));
    if (options.printIRAfterAll)
      pm.enableIRPrinting([](Pass *, Operation *) { return false; },
                          [](Pass *, Operation *) { return true; },
                          /*printModuleScope=*/true,
                          /*printAfterOnlyOnChange=*/false);
    build(pm);
    std::string diag;
    llvm::raw_string_ostream diagOS(diag);
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
      if (d.getSeverity() == DiagnosticSeverity::Error)
        diagOS << d.str() << "\n";
      return success();
    });
    if (failed(pm.run(*module))) {
      std::string first = StringRef(diag).split('\n').first.str();
      error = userErrors ? first
                         : "internal error: stage '" + stage.str() +
                               "' failed: " + first;
      return false;
    }
    if (!options.dumpIRDir.empty()) {
      if (stagesText.empty())
        stagesText = "# ddpc --dump-ir: each stage replays as\n"
                     "#   ddpc-opt INPUT --pass-pipeline='PIPELINE'\n"
                     "# which prints what `ddpc-opt OUTPUT` prints\n"
                     "# stage\tinput\toutput\tpipeline\n";
      std::string text;
      llvm::raw_string_ostream os(text);
      pm.printAsTextualPipeline(os);
      stagesText +=
          stage.str() + "\t" + input + "\t" + lastDumpFile + "\t" + text + "\n";
      SmallString<256> path(options.dumpIRDir);
      llvm::sys::path::append(path, "stages.txt");
      if (!writeFileAtomic(std::string(path), stagesText, error))
        return false;
    }
    if (result && options.captureStages)
      result->stages.emplace_back(stage.str(), printOp(*module));
    return true;
  };
  if (result && options.captureStages)
    result->stages.emplace_back("import", printOp(*module));

  if (options.vjp &&
      !runPhase(
          "vjp", [&](OpPassManager &pm) { pm.addPass(createMakeVJPPass()); },
          /*userErrors=*/true))
    return StringRef(error).starts_with("internal") ? kCompileError
                                                    : kCompileUnsupported;
  std::vector<TensorSig> ins, outs;
  if (!training && !readSignature(*module, ins, outs)) {
    error = "internal error: imported module has no @main_graph";
    return kCompileError;
  }

  TrainingProgramInfo trainInfo;
  if (training) {
    if (options.verbose)
      llvm::errs() << "ddpc: synthesizing the training step\n";
    if (!runPhase(
            "training",
            [&](OpPassManager &pm) {
              pm.addPass(createBuildTrainingStepPass(
                  toBuildTrainingStepPassOptions(options.train), &trainInfo));
              pm.addPass(createCanonicalizerPass());
            },
            /*userErrors=*/true))
      return StringRef(error).starts_with("no VJP rule") ? kCompileUnsupported
                                                         : kCompileError;
    for (const std::string &note : trainInfo.notes)
      llvm::errs() << "ddpc: note: " << note << "\n";
    // The plan's inputs: what one rank reads per micro-batch from --data
    // (float32 or integer token ids, one file per data input) and --labels.
    ins.clear();
    for (const auto &d : trainInfo.data)
      ins.push_back({trainInfo.data.size() == 1 ? "data" : "data." + d.name,
                     d.dtype, d.shape});
    ins.push_back({"labels", trainInfo.labelDType, trainInfo.labelShape});
  }
  auto makeReport = [&] {
    llvm::StringSet<> trainable;
    for (const auto &p : trainInfo.params)
      trainable.insert(p.name);
    result->reportJSON = buildReport(*module, modelName, ins, outs, trainable);
  };
  // --emit=mlir: the graph-level IR (with --train/--vjp, after synthesis);
  // its plan has no gradient buckets (they are placed after bufferization).
  if (options.emit == EmitKind::MLIR) {
    if (result) {
      makeReport();
      editReport(result->reportJSON, [](llvm::json::Object *root) {
        (*root)["partial"] = "--emit=mlir stops at the graph-level IR: no "
                             "gradient buckets or CUDA plan yet";
      });
    }
    return writeFileAtomic(options.outputPath, printOp(*module), error)
               ? kCompileOk
               : kCompileError;
  }
  CPUPipelineOptions pipeline = options.pipeline;
  if (training)
    pipeline.bucketCapMB = options.train.bucketCapMB;
  if (!runPhase("fused", [&](OpPassManager &pm) {
        buildGraphOptimizationPipeline(pm, pipeline);
      }))
    return kCompileError;
  if (result)
    makeReport();
  if (cuda) {
    CUDAPipelineOptions cudaOptions;
    cudaOptions.chips = options.cudaArchs;
    SmallString<256> libdevice(cudaRoot);
    llvm::sys::path::append(libdevice, "nvvm", "libdevice", "libdevice.10.bc");
    if (llvm::sys::fs::exists(libdevice))
      cudaOptions.libdevice = std::string(libdevice);
    if (!runPhase("gpu-kernels", [&](OpPassManager &pm) {
          buildBufferizationPipeline(pm, pipeline);
          buildGPUKernelPipeline(pm, cudaOptions);
        }))
      return kCompileError;
    if (result) {
      addBucketReport(*module, result->reportJSON);
      addCUDAReport(*module, options.cudaArchs, result->reportJSON);
    }
    std::string ptx;
    if (options.verbose)
      llvm::errs() << "ddpc: assembling kernels for "
                   << llvm::join(options.cudaArchs, ",") << "\n";
    if (!runPhase(
            "nvvm",
            [&](OpPassManager &pm) {
              buildNVVMPipeline(pm, cudaOptions);
              GPUAssembleFatBinariesPassOptions fatbin;
              fatbin.cudaPath = cudaRoot;
              pm.addPass(createGPUAssembleFatBinariesPass(
                  fatbin, options.emit == EmitKind::PTX ? &ptx : nullptr));
            },
            /*userErrors=*/true))
      return kCompileError;
    if (options.emit == EmitKind::PTX)
      return writeFileAtomic(options.outputPath, ptx, error) ? kCompileOk
                                                             : kCompileError;
    if (!runPhase("lowered", [&](OpPassManager &pm) {
          buildCUDAHostLoweringPipeline(pm, cudaOptions);
        }))
      return kCompileError;
  } else {
    if (!runPhase("bufferized", [&](OpPassManager &pm) {
          buildBufferizationPipeline(pm, pipeline);
          // cuda-emulate: the CUDA kernel IR, run serially on the CPU.
          if (options.target == "cuda-emulate")
            buildGPULoopPipeline(pm);
        }))
      return kCompileError;
    if (result) {
      addBucketReport(*module, result->reportJSON);
      if (options.target == "cuda-emulate")
        addCUDAReport(*module, {}, result->reportJSON, /*emulated=*/true);
    }
    if (!runPhase("lowered", [&](OpPassManager &pm) {
          buildLowerToLLVMPipeline(pm, pipeline);
        }))
      return kCompileError;
  }
  if (options.emit == EmitKind::LoweredMLIR)
    return writeFileAtomic(options.outputPath, printOp(*module), error)
               ? kCompileOk
               : kCompileError;

  if (options.verbose)
    llvm::errs() << "ddpc: generating native code\n";
  std::string objPath, irPath;
  SmallString<128> tmpDir;
  if (auto ec = llvm::sys::fs::createUniqueDirectory("ddpc", tmpDir)) {
    error = "cannot create a temporary folder: " + ec.message();
    return kCompileError;
  }
  llvm::scope_exit cleanup([&] { llvm::sys::fs::remove_directories(tmpDir); });
  if (options.emit == EmitKind::LLVMIR) {
    SmallString<256> p(tmpDir);
    llvm::sys::path::append(p, "model.ll");
    irPath = std::string(p);
  }
  if (options.emit == EmitKind::Object) {
    objPath = options.outputPath;
  } else {
    SmallString<256> p(tmpDir);
    llvm::sys::path::append(p, "model.o");
    objPath = std::string(p);
  }
  if (!emitObjectFile(*module, options.cpu, objPath, error, irPath))
    return kCompileError;
  if (options.emit == EmitKind::LLVMIR) {
    auto buf = llvm::MemoryBuffer::getFile(irPath);
    if (!buf) {
      error = "cannot read back LLVM IR";
      return kCompileError;
    }
    return writeFileAtomic(options.outputPath, (*buf)->getBuffer(), error)
               ? kCompileOk
               : kCompileError;
  }
  std::string glue;
  if (training) {
    // --save writes the trained model in inference form (as an export of
    // model.eval() would be), without the initializers training replaces.
    std::string inferenceForm = bytes, stripped;
    for (const std::string &line : toInferenceForm(inferenceForm))
      llvm::errs() << "ddpc: warning: " << line << "\n";
    if (!stripTrainedInitializers(inferenceForm, trainInfo, stripped, error) ||
        !generateTrainGlue(modelName, trainInfo, options.train, initialValues,
                           stripped, tmpDir, glue, error))
      return kCompileError;
  } else {
    glue = generateGlue(modelName, ins, outs);
  }
  if (options.emit == EmitKind::Object) {
    // The glue goes next to the object: <out>.glue.c.
    return writeFileAtomic(options.outputPath + ".glue.c", glue, error)
               ? kCompileOk
               : kCompileError;
  }

  // Link: c++ model.o glue.c libddpc_runtime.a -lm
  SmallString<256> gluePath(tmpDir);
  llvm::sys::path::append(gluePath, "glue.c");
  if (!writeFileAtomic(std::string(gluePath), glue, error))
    return kCompileError;
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
    return kCompileError;
  }
  runtime::OutputTarget target = runtime::resolveOutput(options.outputPath);
  std::string tmpOut = target.temporary();
  const char *cxx = std::getenv("DDPC_CXX");
  std::vector<std::string> argv = {cxx ? cxx : "c++", "-O2"};
  if (options.emit == EmitKind::SharedLibrary)
    argv.push_back("-shared");
  argv.insert(argv.end(),
              {"-o", tmpOut, "-x", "c", std::string(gluePath), "-x", "none",
               objPath, std::string(rtLib), "-lm", "-lpthread"});
  if (training || cuda) {
    // Link flags recorded by the runtime's CMake configuration: MPI for CPU
    // training programs; CUDA, cuBLAS and NCCL for CUDA programs.
    SmallString<256> linkFile(options.runtimeLibDir);
    llvm::sys::path::append(linkFile, cuda ? "ddpc_cuda_runtime.link"
                                           : "ddpc_train_runtime.link");
    auto buf = llvm::MemoryBuffer::getFile(linkFile);
    if (!buf) {
      error = "cannot read '" + std::string(linkFile) +
              "' (link flags of the runtime)";
      return kCompileError;
    }
    SmallVector<StringRef> flags;
    (*buf)->getBuffer().trim().split(flags, ' ', -1, false);
    for (StringRef f : flags)
      argv.push_back(f.str());
  }
  if (options.verbose)
    llvm::errs() << "ddpc: linking " << options.outputPath << "\n";
  if (runTool(argv, error) != 0) {
    llvm::sys::fs::remove(tmpOut);
    return kCompileError;
  }
  if (!runtime::commitOutput(tmpOut, target, error))
    return kCompileError;
  return kCompileOk;
}

} // namespace ddpc

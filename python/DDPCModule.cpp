//===- DDPCModule.cpp - nanobind module `ddpc._ddpc` over lib/Driver ------===//
//
// Part of ddpc. A thin binding of ddpc::compile() and its option structs; the
// user-facing API (ddpc.compile, Program, TrainConfig) is the pure-Python
// package next to this file. Nothing here knows about numpy or ctypes.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Driver/Driver.h"
#include "ddpc/Runtime/ProgramOptions.h"
#include "ddpc/Support/RuntimeSymbols.h"
#include "ddpc/Target/CUDA/FatBinary.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#ifndef DDPC_DEFAULT_RUNTIME_LIB_DIR
#define DDPC_DEFAULT_RUNTIME_LIB_DIR ""
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace {

/// A graph input fixed at compile time, as Python passes it:
/// (ONNX dtype number, shape, raw little-endian bytes).
using BoundInput = std::tuple<int32_t, std::vector<int64_t>, nb::bytes>;

/// Runs ddpc::compile with the GIL released. Returns (status, error, stages,
/// report JSON); status is one of the CompileStatus values.
std::tuple<int, std::string, std::vector<std::pair<std::string, std::string>>,
           std::string>
compileModel(const std::string &outputPath, ddpc::EmitKind emit,
             const std::string &inputPath, std::optional<nb::bytes> modelBytes,
             const std::string &modelDir, const std::string &target,
             const std::map<std::string, int64_t> &dims,
             std::optional<int64_t> batchSize,
             const std::map<std::string, BoundInput> &boundInputs,
             std::optional<ddpc::TrainOptions> train,
             const std::string &runtimeLibDir, bool captureStages,
             const std::string &cpu, unsigned optLevel, bool fuseElementwise,
             bool runChecker, const std::string &dumpIRDir, bool verbose,
             bool vjp, const std::string &cudaArch, bool runtimeChecks,
             const std::string &precision, const std::string &memoryBudget,
             const std::string &zeroStage, const std::string &remat,
             int64_t worldSize) {
  ddpc::CompileOptions options;
  options.inputPath = inputPath;
  options.outputPath = outputPath;
  options.target = target;
  options.emit = emit;
  options.import.dims = dims;
  options.import.batchSize = batchSize;
  options.import.modelDir = modelDir;
  options.import.runChecker = runChecker;
  options.import.runtimeChecks = runtimeChecks;
  for (const auto &[name, value] : boundInputs) {
    ddpc::ImportOptions::BoundTensor bt;
    bt.dtype = std::get<0>(value);
    bt.shape = std::get<1>(value);
    const nb::bytes &data = std::get<2>(value);
    bt.data.assign(data.c_str(), data.size());
    options.import.boundInputs[name] = std::move(bt);
  }
  if (train)
    options.train = *train;
  options.runtimeLibDir = runtimeLibDir.empty()
                              ? std::string(DDPC_DEFAULT_RUNTIME_LIB_DIR)
                              : runtimeLibDir;
  options.captureStages = captureStages;
  options.cpu.cpu = cpu;
  options.cpu.optLevel = optLevel;
  options.pipeline.fuseElementwise = fuseElementwise;
  options.dumpIRDir = dumpIRDir;
  options.verbose = verbose;
  options.vjp = vjp;
  options.precision = precision;
  options.memoryBudget = memoryBudget;
  options.zeroStage = zeroStage;
  options.remat = remat;
  options.worldSize = worldSize;
  if (!cudaArch.empty()) {
    std::string error;
    if (target != "cuda") {
      return {static_cast<int>(ddpc::kCompileError),
              "cuda_arch applies to target='cuda' only (this is target='" +
                  target + "')",
              {},
              ""};
    }
    if (!ddpc::parseCUDAArchs(cudaArch, options.cudaArchs, error))
      return {static_cast<int>(ddpc::kCompileError), error, {}, ""};
  }

  // Copy the model out of the Python object before releasing the GIL.
  std::string bytes;
  if (modelBytes)
    bytes.assign(modelBytes->c_str(), modelBytes->size());

  std::string error;
  ddpc::CompileResult result;
  int status;
  {
    nb::gil_scoped_release release;
    status = ddpc::compile(options, error, bytes, &result);
  }
  return {status, error, std::move(result.stages),
          std::move(result.reportJSON)};
}

} // namespace

NB_MODULE(_ddpc, m) {
  m.doc() = "ddpc native module: ddpc::compile() and its options. Use the "
            "`ddpc` package instead of this module.";

  m.attr("DEFAULT_RUNTIME_LIB_DIR") = DDPC_DEFAULT_RUNTIME_LIB_DIR;
  m.attr("VERSION") = DDPC_VERSION;
  m.attr("COMPILE_OK") = int(ddpc::kCompileOk);
  m.attr("COMPILE_ERROR") = int(ddpc::kCompileError);
  m.attr("COMPILE_UNSUPPORTED") = int(ddpc::kCompileUnsupported);

  // The symbols a shared library (EmitKind.SharedLibrary) exports, from
  // RuntimeSymbols.h: Python reads the model tables with ctypes by these
  // names.
  auto table = [](const ddpc::GlueTable &t) {
    nb::dict d;
    d["count"] = t.count.str();
    d["names"] = t.names.str();
    d["dtypes"] = t.dtypes.str();
    d["ranks"] = t.ranks.str();
    d["shapes"] = t.shapes.str();
    return d;
  };
  nb::dict glue;
  glue["model_name"] = ddpc::kGlueModelName.str();
  glue["invoke"] = ddpc::kInvokeGlue.str();
  glue["take_error"] = ddpc::kTakeErrorFn.str();
  glue["input"] = table(ddpc::kGlueInputs);
  glue["output"] = table(ddpc::kGlueOutputs);
  m.attr("GLUE_SYMBOLS") = glue;

  nb::enum_<ddpc::EmitKind>(m, "EmitKind")
      .value("MLIR", ddpc::EmitKind::MLIR)
      .value("LOWERED_MLIR", ddpc::EmitKind::LoweredMLIR)
      .value("LLVM_IR", ddpc::EmitKind::LLVMIR)
      .value("OBJECT", ddpc::EmitKind::Object)
      .value("EXECUTABLE", ddpc::EmitKind::Executable)
      .value("SHARED_LIBRARY", ddpc::EmitKind::SharedLibrary);

  nb::class_<ddpc::TrainOptions>(m, "TrainOptions",
                                 "ddpc::TrainOptions (see TrainOptions.h).")
      .def(nb::init<>())
      .def_rw("enabled", &ddpc::TrainOptions::enabled)
      .def_rw("loss", &ddpc::TrainOptions::loss)
      .def_rw("label_input", &ddpc::TrainOptions::labelInput)
      .def_rw("optimizer", &ddpc::TrainOptions::optimizer)
      .def_rw("lr", &ddpc::TrainOptions::lr)
      .def_rw("momentum", &ddpc::TrainOptions::momentum)
      .def_rw("dampening", &ddpc::TrainOptions::dampening)
      .def_rw("nesterov", &ddpc::TrainOptions::nesterov)
      .def_rw("weight_decay", &ddpc::TrainOptions::weightDecay)
      .def_rw("beta1", &ddpc::TrainOptions::beta1)
      .def_rw("beta2", &ddpc::TrainOptions::beta2)
      .def_rw("eps", &ddpc::TrainOptions::eps)
      .def_rw("grad_accum_steps", &ddpc::TrainOptions::gradAccumSteps)
      .def_rw("freeze", &ddpc::TrainOptions::freeze)
      .def_rw("sync_batchnorm", &ddpc::TrainOptions::syncBatchNorm)
      .def_rw("bucket_cap_mb", &ddpc::TrainOptions::bucketCapMB)
      .def_rw("bucket_cap_given", &ddpc::TrainOptions::bucketCapGiven)
      .def("validate", &ddpc::TrainOptions::validate,
           "'' or the one-line error of TrainOptions::validate().");

  m.def(
      "train_program_options",
      [] {
        std::vector<std::tuple<std::string, std::string, std::string>> out;
        for (const ddpc::runtime::OptionSpec &spec :
             ddpc::runtime::trainProgramOptions())
          out.emplace_back(spec.name, ddpc::runtime::optionKindName(spec.kind),
                           spec.help);
        return out;
      },
      "The training programs' options (the table their --help prints), in "
      "--help order: (name, kind, help) with kind 'flag', 'int', 'double', "
      "'string' or 'list'.");
  m.def("supported_ops", &ddpc::supportedONNXOpTypes,
        "The ONNX op types (default domain) the importer registers, sorted.");
  m.def(
      "compile", &compileModel, "output_path"_a, "emit"_a, "input_path"_a = "",
      "model_bytes"_a = nb::none(), "model_dir"_a = "", "target"_a = "cpu",
      "dims"_a = std::map<std::string, int64_t>(), "batch_size"_a = nb::none(),
      "bound_inputs"_a = std::map<std::string, BoundInput>(),
      "train"_a = nb::none(), "runtime_lib_dir"_a = "",
      "capture_stages"_a = false, "cpu"_a = "native", "opt_level"_a = 3,
      "fuse_elementwise"_a = true, "run_checker"_a = true, "dump_ir_dir"_a = "",
      "verbose"_a = false, "vjp"_a = false, "cuda_arch"_a = "",
      "runtime_checks"_a = true, "precision"_a = "fp32", "memory_budget"_a = "",
      "zero_stage"_a = "", "remat"_a = "", "world_size"_a = 0,
      "Runs ddpc::compile(). Reads the model from `model_bytes` when given, "
      "else from `input_path`. Returns (status, error, stages, report_json) "
      "where status is 0 (ok), 1 (error) or 2 (unsupported) and `error` is "
      "the one-line message. An empty `runtime_lib_dir` means the build's "
      "DEFAULT_RUNTIME_LIB_DIR.");
}

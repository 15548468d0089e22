//===- Driver.cpp - The one compile() used by the CLI and Python ----------===//
//
// Part of ddpc. Import -> pass pipelines -> object file -> generated glue ->
// link with the runtime, one stage after the other (DriverInternal.h names
// the file of each piece). Every output goes to a temporary first and is
// renamed into place only when complete.
//
//===----------------------------------------------------------------------===//

#include "DriverInternal.h"

#include "ddpc/Analysis/CostModel.h"
#include "ddpc/Analysis/RematGraph.h"
#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"
#include "ddpc/Support/RuntimeSymbols.h"
#include "ddpc/Support/ZeroLayout.h"
#include "ddpc/Target/CUDA/Transforms/Passes.h"
#include "ddpc/Training/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

using namespace mlir;

namespace ddpc {

std::string defaultRuntimeLibDir(const char *argv0, void *mainAddr) {
  std::string exe = llvm::sys::fs::getMainExecutable(argv0, mainAddr);
  SmallString<256> dir(llvm::sys::path::parent_path(exe));
  llvm::sys::path::append(dir, "..", "lib");
  return std::string(dir);
}

namespace {
using namespace driver;

/// A status of Compilation's steps: go on with the next one.
constexpr int kContinue = -1;

/// One compile: the options, the context and module, and what the stages
/// hand to each other. Each step returns a CompileStatus, or kContinue.
class Compilation {
public:
  Compilation(const CompileOptions &options, std::string &error,
              CompileResult *result)
      : options(options), error(error), result(result),
        training(options.train.enabled), cuda(options.target == "cuda") {
    if (options.timing != TimingDisplay::Off) {
      timingManager.setEnabled(true);
      timingManager.setDisplayMode(
          options.timing == TimingDisplay::List
              ? DefaultTimingManager::DisplayMode::List
              : DefaultTimingManager::DisplayMode::Tree);
    }
    rootTiming = timingManager.getRootScope();
  }

  int run(const std::string &modelBytes);

  /// `--zero-stage auto` past stages 0 and 1: their peaks (bytes) when
  /// neither fits the budget on the CPU target with N > 1 ranks, so that
  /// compile() tries stage 2, whose @train_micro differs (an out-param);
  /// as input, the stage-2 try's reasons.
  /// Past stage 2 too (stage2 > 0), compile() tries stage 3.
  struct AutoPeaks {
    int64_t stage0 = 0, stage1 = 0, stage2 = 0;
  };
  std::optional<AutoPeaks> autoNeedsStage2, autoTriedStage2;

  /// --remat auto's choice for this compile: the saved activations that
  /// backward recomputes (from an earlier compile's plan), their forward
  /// FLOPs, and the peak (bytes) that plan had without them.
  struct RematChoice {
    std::vector<SavedActivation> recomputed;
    std::vector<int64_t> flops;
    int64_t peakWithout = 0;
    bool stageWasAuto = false; // the user's --zero-stage was auto
    /// How it was chosen: "MILP (GLPK), optimal", ...
    std::string method;
  };
  std::optional<RematChoice> remat;
  /// FLOPs of each forward ONNX node in @train_micro (iterations of its
  /// linalg ops times their scalar ops), filled after synthesis.
  std::map<std::string, int64_t> nodeFlops;
  /// @train_micro's forward pass after fusion (RematGraph.h), for --remat
  /// auto's solver; filled by a compile without a remat choice.
  RematGraph rematGraph;
  bool overBudget() const {
    return memoryPlan && memoryBudget && memoryPlan->peak > memoryBudget;
  }
  const std::optional<MemoryPlan> &plan() const { return memoryPlan; }
  int64_t budget() const { return memoryBudget; }
  int64_t stage() const { return zeroStage; }
  /// Whether this compile planned a peak below both of `p` (0: no plan).
  bool autoPeakBelow(const AutoPeaks &p) const {
    return memoryPlan && memoryPlan->peak < std::min(p.stage0, p.stage1);
  }
  bool hasPlan() const { return memoryPlan.has_value(); }
  /// ZeRO stage 3: the all-gathers of each parameter in @train_micro.
  std::map<std::string, int> gathers;
  /// Each parameter's name and float32 bytes (after synthesis).
  std::vector<std::pair<std::string, int64_t>> paramBytes() const {
    std::vector<std::pair<std::string, int64_t>> out;
    for (const auto &p : trainInfo.params) {
      int64_t n = 4;
      for (int64_t d : p.shape)
        n *= d;
      out.push_back({p.name, n});
    }
    return out;
  }
  /// The planned peak, formatted.
  std::string plannedPeak() const { return formatBytes(memoryPlan->peak); }
  /// CompileResult::reportJSON: the plan as far as the stages got.
  void writeReport() {
    if (result && report.hasGraph)
      result->reportJSON = report.toJSON();
  }

private:
  void createContext();
  int importModel();
  bool runPhase(StringRef stage,
                llvm::function_ref<void(OpPassManager &)> build,
                bool userErrors = false);
  int synthesize();
  void fillGraphReport();
  int lowerForCUDA();
  int lowerForCPU();
  int planMemory();
  int emitNative();
  /// Writes `text` to the output: kCompileOk, or kCompileError.
  int writeOutput(StringRef text) {
    return writeFileAtomic(options.outputPath, text, error) ? kCompileOk
                                                            : kCompileError;
  }

  const CompileOptions &options;
  std::string &error;
  CompileResult *result;
  const bool training, cuda;
  // --mlir-timing: the manager prints its report when the compilation is
  // destroyed, after the root scope (declared after it) has stopped.
  DefaultTimingManager timingManager;
  TimingScope rootTiming;

  std::string bytes; // The model as read.
  ImportOptions importOptions;
  std::string cudaRoot;
  std::unique_ptr<MLIRContext> context;
  OwningOpRef<ModuleOp> module;
  std::map<std::string, std::string> initialValues; // Training state.
  std::optional<IRDumper> dumper;
  std::string modelName = "model";
  std::vector<TensorSig> ins, outs; // The plan's inputs and outputs.
  TrainingProgramInfo trainInfo;
  CPUPipelineOptions pipeline;
  CompileReport report;
  int64_t memoryBudget = 0; // --memory-budget in bytes; 0: unlimited.
  int64_t zeroStage = 0;    // --zero-stage, checked (kZeroStageAuto).
  std::string zeroChoice;   // Why auto picked its stage.
  std::optional<MemoryPlan> memoryPlan;
};

int Compilation::run(const std::string &modelBytes) {
  importOptions = options.import;
  if (!checkOutputOptions(options, error) ||
      !readModel(options, modelBytes, bytes, importOptions, error) ||
      !checkProgramOptions(options, error))
    return kCompileError;
  if (int rc = checkPrecision(options, error); rc != kCompileOk)
    return rc;
  if (!checkMemoryBudget(options, memoryBudget, error))
    return kCompileError;
  if (int rc = checkMemoryStrategy(options, zeroStage, error); rc != kCompileOk)
    return rc;
  if (cuda) {
    cudaRoot = findCUDAToolkit(options.cudaRoot, error);
    if (cudaRoot.empty())
      return kCompileError;
  }
  createContext();
  if (int rc = importModel(); rc != kContinue)
    return rc;
  if (!options.dumpIRDir.empty()) {
    dumper.emplace(options.dumpIRDir);
    if (!dumper->start(*module, error))
      return kCompileError;
  }
  if (options.emit == EmitKind::MLIR && !training && !options.vjp)
    return writeOutput(printOp(*module));
  if (auto n = (*module)->getAttrOfType<StringAttr>(attrs::kGraphName))
    modelName = n.str();
  if (result && options.captureStages)
    result->stages.emplace_back("import", printOp(*module));

  if (int rc = synthesize(); rc != kContinue)
    return rc;
  // --emit=mlir: the graph-level IR (with --train/--vjp, after synthesis);
  // its plan has no gradient buckets (they are placed after bufferization).
  if (options.emit == EmitKind::MLIR) {
    if (result) {
      fillGraphReport();
      report.partial = "--emit=mlir stops at the graph-level IR: no "
                       "gradient buckets or CUDA plan yet";
    }
    return writeOutput(printOp(*module));
  }
  pipeline = options.pipeline;
  if (training) {
    for (const std::string &n : options.rematNodes)
      for (StringRef part : llvm::split(n, '+'))
        pipeline.rematNodes.push_back(part.str());
    if (remat)
      for (const SavedActivation &a : remat->recomputed)
        for (StringRef part : llvm::split(a.producer, '+'))
          pipeline.rematNodes.push_back(part.str());
    pipeline.bucketCapMB =
        zeroStage >= 2 && !options.train.bucketCapGiven
            ? std::min(kZeroStage2BucketCapMB, options.train.bucketCapMB)
            : options.train.bucketCapMB;
    pipeline.shardGradients = zeroStage == 2 || zeroStage == 3;
    pipeline.gatherParameters = zeroStage == 3;
    pipeline.keepGathered = options.keepGathered;
  }
  if (!runPhase("fused", [&](OpPassManager &pm) {
        buildGraphOptimizationPipeline(pm, pipeline);
      }))
    return kCompileError;
  if (training && !remat && options.rematNodes.empty())
    if (auto micro = module->lookupSymbol<func::FuncOp>(kTrainMicroFunc))
      rematGraph = buildRematGraph(micro);
  if (result)
    fillGraphReport();
  if (int rc = cuda ? lowerForCUDA() : lowerForCPU(); rc != kContinue)
    return rc;
  if (options.emit == EmitKind::LoweredMLIR)
    return writeOutput(printOp(*module));
  return emitNative();
}

void Compilation::createContext() {
  registerAllDDPCPasses();
  DialectRegistry registry;
  registerAllDDPCDialects(registry);
  registerCPUTranslations(registry);
  context =
      std::make_unique<MLIRContext>(registry, MLIRContext::Threading::DISABLED);
  context->loadAllAvailableDialects();
}

/// Imports the model: for training twice (@forward_train, and
/// @forward_eval in inference mode), merged into one module.
int Compilation::importModel() {
  if (options.verbose)
    llvm::errs() << "ddpc: importing " << options.inputPath << "\n";
  ImportError importError;
  TimingScope timing = rootTiming.nest("ONNX import");
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
  module = importONNXModel(*context, bytes, importOptions, importError);
  if (module && training) {
    // The same graph in inference mode, for the evaluation function.
    ImportOptions evalOptions = importOptions;
    evalOptions.trainingMode = false;
    evalOptions.evalMode = true;
    evalOptions.funcName = kForwardEvalFunc.str();
    evalOptions.initialValues = nullptr;
    OwningOpRef<ModuleOp> evalModule =
        importONNXModel(*context, bytes, evalOptions, importError);
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
  if (module)
    return kContinue;
  error = importError.message;
  // Name the file: "invalid model 'x.onnx': ...".
  StringRef prefix = "invalid model:";
  if (!options.inputPath.empty() && StringRef(error).starts_with(prefix))
    error = "invalid model '" + options.inputPath +
            "':" + error.substr(prefix.size());
  return importError.kind == ImportErrorKind::Unsupported ? kCompileUnsupported
                                                          : kCompileError;
}

// Pass phases; each ends a named stage that --dump-ir, captureStages and
// the Python API can show. With --dump-ir, DIR/stages.txt gives each
// stage's input and output files and its pipeline as text, which
// `ddpc-opt INPUT --pass-pipeline=PIPELINE` replays. A failing pass of a
// `userErrors` phase (the training step, the VJP) reports the user's
// problem; in any other it is an internal error.
bool Compilation::runPhase(StringRef stage,
                           llvm::function_ref<void(OpPassManager &)> build,
                           bool userErrors) {
  if (options.verbose)
    llvm::errs() << "ddpc: " << stage << "\n";
  PassManager pm(context.get(), ModuleOp::getOperationName());
  std::string input = dumper ? dumper->lastFile() : "";
  if (dumper)
    dumper->instrument(pm);
  if (options.printIRAfterAll)
    pm.enableIRPrinting([](Pass *, Operation *) { return false; },
                        [](Pass *, Operation *) { return true; },
                        /*printModuleScope=*/true,
                        /*printAfterOnlyOnChange=*/false);
  // After the other instrumentations, so that their time is not counted
  // as the passes'.
  TimingScope timing = rootTiming.nest(("stage '" + stage + "'").str());
  pm.enableTiming(timing);
  build(pm);
  std::string diag;
  llvm::raw_string_ostream diagOS(diag);
  ScopedDiagnosticHandler handler(context.get(), [&](Diagnostic &d) {
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
  if (dumper && !dumper->recordStage(stage, input, pm, error))
    return false;
  if (result && options.captureStages)
    result->stages.emplace_back(stage.str(), printOp(*module));
  return true;
}

/// The VJP (--vjp) or the training step (--train); the signature of the
/// plan (an inference program's graph inputs and outputs, or what one rank
/// reads per micro-batch).
int Compilation::synthesize() {
  if (options.vjp &&
      !runPhase(
          "vjp", [&](OpPassManager &pm) { pm.addPass(createMakeVJPPass()); },
          /*userErrors=*/true))
    return StringRef(error).starts_with("internal") ? kCompileError
                                                    : kCompileUnsupported;
  if (!training) {
    if (!readSignature(*module, ins, outs)) {
      error = "internal error: imported module has no @" + kMainGraphFunc.str();
      return kCompileError;
    }
    return kContinue;
  }
  if (options.verbose)
    llvm::errs() << "ddpc: synthesizing the training step\n";
  if (!runPhase(
          "training",
          [&](OpPassManager &pm) {
            TrainOptions train = options.train;
            // auto: @apply_shard is built so that the plan may pick 1.
            train.zeroStage =
                zeroStage == kZeroStageAuto ? (cuda ? 0 : 1) : zeroStage;
            pm.addPass(createBuildTrainingStepPass(
                toBuildTrainingStepPassOptions(train), &trainInfo));
            pm.addPass(createCanonicalizerPass());
          },
          /*userErrors=*/true))
    return StringRef(error).starts_with("no VJP rule") ? kCompileUnsupported
                                                       : kCompileError;
  // A retry (auto's stage 2, a remat round) printed its notes already.
  if (!autoTriedStage2 && !remat)
    for (const std::string &note : trainInfo.notes)
      llvm::errs() << "ddpc: note: " << note << "\n";
  if (auto micro = module->lookupSymbol<func::FuncOp>(kTrainMicroFunc))
    for (Operation &op : micro.getBody().front())
      if (auto names = nodeNamesOf(op.getLoc()); !names.empty())
        for (StringRef part : llvm::split(names, '+'))
          nodeFlops[part.str()] += estimatedFlops(&op);
  // --remat-nodes: names of the forward pass (a fused group's "a+b" too).
  for (const std::string &n : options.rematNodes)
    for (StringRef part : llvm::split(n, '+'))
      if (!nodeFlops.count(part.str())) {
        error =
            "--remat-nodes: no node '" + part.str() +
            "' that computes in the forward pass of the training step (give "
            "ONNX node names, as --report lists the saved activations' "
            "producers; constants compute nothing)";
        return kCompileError;
      }
  // The plan's inputs: what one rank reads per micro-batch from --data
  // (float32 or integer token ids, one file per data input) and --labels.
  for (const auto &d : trainInfo.data)
    ins.push_back({trainInfo.data.size() == 1 ? "data" : "data." + d.name,
                   d.dtype, d.shape});
  ins.push_back({"labels", trainInfo.labelDType, trainInfo.labelShape});
  return kContinue;
}

void Compilation::fillGraphReport() {
  llvm::StringSet<> trainable;
  for (const auto &p : trainInfo.params)
    trainable.insert(p.name);
  report.fillGraph(*module, modelName, ins, outs, trainable);
  report.precision = options.precision;
  if (options.precision == "fp32")
    report.precisionMeaning = "float32 tensors and math";
  else if (cuda)
    report.precisionMeaning =
        "float32 tensors; cuBLAS GEMMs and cuDNN convolutions may use TF32 "
        "tensor-core math (10-bit mantissa products, float32 accumulation)";
  else
    report.precisionMeaning = "float32 tensors and math (tf32 applies to "
                              "--target cuda only; no effect here)";
}

/// Stages "gpu-kernels", "nvvm" (ending with the fatbin; --emit=ptx stops
/// there) and "lowered".
int Compilation::lowerForCUDA() {
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
    report.fillBuckets(*module);
    report.fillCUDA(*module, options.cudaArchs, /*emulated=*/false);
  }
  if (int rc = planMemory(); rc != kContinue)
    return rc;
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
    return writeOutput(ptx);
  if (!runPhase("lowered", [&](OpPassManager &pm) {
        buildCUDAHostLoweringPipeline(pm, cudaOptions);
      }))
    return kCompileError;
  return kContinue;
}

/// Stages "bufferized" (cuda-emulate: with the CUDA kernel IR, run
/// serially on the CPU) and "lowered".
int Compilation::lowerForCPU() {
  const bool emulate = options.target == "cuda-emulate";
  if (!runPhase("bufferized", [&](OpPassManager &pm) {
        buildBufferizationPipeline(pm, pipeline);
        if (emulate)
          buildGPULoopPipeline(pm);
        else
          buildCPULibraryCallPipeline(pm);
      }))
    return kCompileError;
  if (result) {
    report.fillBuckets(*module);
    if (emulate)
      report.fillCUDA(*module, {}, /*emulated=*/true);
  }
  if (int rc = planMemory(); rc != kContinue)
    return rc;
  if (!runPhase("lowered", [&](OpPassManager &pm) {
        buildLowerToLLVMPipeline(pm, pipeline);
      }))
    return kCompileError;
  return kContinue;
}

/// The memory plan of a training program (after bufferization: the
/// compiled code's temporaries are allocations with live ranges, or the
/// arena of ddpc-plan-arena) and the --memory-budget check.
int Compilation::planMemory() {
  if (!training)
    return kContinue;
  auto numel = [](llvm::ArrayRef<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  };
  // ONNX dtypes of data and labels: INT64 (7) 8 bytes, FLOAT and INT32 4.
  auto elementBytes = [](int32_t dtype) { return dtype == 7 ? 8 : 4; };
  RuntimeFootprint rt;
  for (const auto &p : trainInfo.params)
    rt.paramBytes.push_back(4 * numel(p.shape));
  for (const auto &b : trainInfo.buffers)
    rt.bufferBytes.push_back(4 * numel(b.shape));
  rt.optSlots = trainInfo.optSlots;
  for (const auto &d : trainInfo.data)
    rt.batchBytes.push_back(elementBytes(d.dtype) * numel(d.shape));
  rt.batchBytes.push_back(elementBytes(trainInfo.labelDType) *
                          numel(trainInfo.labelShape));
  rt.batchSize = std::max<int64_t>(trainInfo.batchSize, 1);
  if (cuda) { // CudaMemory.cpp's pool; NCCL sums the buckets in place.
    rt.allocGranule = 256;
    rt.bucketStaging = false;
  }
  rt.worldSize = options.worldSize;
  rt.zeroChunk = trainInfo.zeroChunk;
  if (zeroStage == 2 || zeroStage == 3) {
    // The buckets the step hands its gradients over in (parameter indices).
    std::map<std::string, int32_t> index;
    for (auto [i, p] : llvm::enumerate(trainInfo.params))
      index[p.name] = static_cast<int32_t>(i);
    std::map<int64_t, std::vector<int32_t>> buckets;
    module->walk([&](func::CallOp call) {
      auto kind = call->getAttrOfType<StringAttr>(attrs::kCollective);
      if (!kind || kind.getValue() != "reduce_scatter_bucket")
        return;
      auto &members =
          buckets[call->getAttrOfType<IntegerAttr>(attrs::kBucket).getInt()];
      for (auto name : call->getAttrOfType<ArrayAttr>(attrs::kParams)
                           .getAsRange<StringAttr>())
        members.push_back(index.at(name.str()));
    });
    // ZeRO stage 3: how often @train_micro gathers each parameter.
    module->walk([&](func::CallOp call) {
      auto kind = call->getAttrOfType<StringAttr>(attrs::kCollective);
      auto names = call->getAttrOfType<ArrayAttr>(attrs::kParams);
      if (kind && names && kind.getValue() == "all_gather_param" &&
          call->getParentOfType<func::FuncOp>().getSymName() == kTrainMicroFunc)
        for (auto name : names.getAsRange<StringAttr>())
          ++gathers[name.str()];
    });
    trainInfo.zeroBuckets.clear();
    for (auto &[b, members] : buckets)
      trainInfo.zeroBuckets.push_back(std::move(members));
    rt.zeroBuckets = trainInfo.zeroBuckets;
  }
  auto planAt = [&](int64_t stage) {
    rt.zeroStage = stage;
    return computeMemoryPlan(*module, rt);
  };
  const int64_t N = options.worldSize;
  auto fits = [&](const MemoryPlan &p) {
    return !memoryBudget || p.peak <= memoryBudget;
  };
  // "12.3 MiB", with the bytes when two sizes would print alike.
  auto size = [](int64_t bytes, int64_t other) {
    std::string s = formatBytes(bytes);
    if (s == formatBytes(other))
      s += " (" + std::to_string(bytes) + " bytes)";
    return s;
  };
  std::string stage1Larger; // auto: why stage 1 did not help
  if (zeroStage != kZeroStageAuto) {
    memoryPlan = planAt(zeroStage);
    if (autoTriedStage2 && zeroStage == 3 && fits(*memoryPlan)) {
      const AutoPeaks &a = *autoTriedStage2;
      MemoryPlan p2 = planAt(2);
      rt.zeroStage = 3;
      zeroChoice =
          "stage 3: stage 0 needs " + size(a.stage0, memoryBudget) +
          ", stage 1 " + size(a.stage1, memoryBudget) + " and stage 2 " +
          size(a.stage2, memoryBudget) + " > --memory-budget " +
          size(memoryBudget, memoryPlan->peak) + "; stage 3 needs " +
          size(memoryPlan->peak, memoryBudget) + " on " + std::to_string(N) +
          " ranks (parameters " + formatBytes(p2.parameters) + " -> " +
          formatBytes(memoryPlan->parameters) +
          ", each gathered whole only while forward or backward reads it), "
          "1.5x stage 0's bytes on the wire (a reduce-scatter of the "
          "gradients, an all-gather of each parameter in forward and again "
          "in backward)";
    } else if (autoTriedStage2 && fits(*memoryPlan)) {
      const AutoPeaks &a = *autoTriedStage2;
      MemoryPlan p1 = planAt(1);
      rt.zeroStage = 2;
      zeroChoice =
          "stage 2: stage 0 needs " + size(a.stage0, memoryBudget) +
          " and stage 1 " + size(a.stage1, memoryBudget) +
          " > --memory-budget " + size(memoryBudget, memoryPlan->peak) +
          "; stage 2 needs " + size(memoryPlan->peak, memoryBudget) + " on " +
          std::to_string(N) + " ranks (gradients and buckets " +
          formatBytes(p1.gradients + p1.collectiveBuffers) + " -> " +
          formatBytes(memoryPlan->gradients + memoryPlan->collectiveBuffers) +
          "), the same bytes on the wire as stage 0 (a reduce-scatter of the "
          "gradients and an all-gather of the parameters" +
          (options.train.gradAccumSteps > 1
               ? ", the reduce-scatter once per micro-batch"
               : "") +
          ")";
    }
  } else {
    // --zero-stage auto (issue 20): the lowest implemented stage whose plan
    // fits; stage 1 adds an all-gather of the parameters every step.
    MemoryPlan p0 = planAt(0);
    zeroStage = 0;
    if (!memoryBudget)
      zeroChoice = "stage 0: no --memory-budget";
    else if (fits(p0))
      zeroChoice = "stage 0: its peak " + size(p0.peak, memoryBudget) +
                   " fits --memory-budget " + size(memoryBudget, p0.peak);
    memoryPlan = p0;
    if (!fits(p0) && trainInfo.zeroStage == 1 && N > 1) {
      MemoryPlan p1 = planAt(1);
      if (fits(p1)) {
        zeroStage = 1;
        zeroChoice = "stage 1: stage 0 needs " + size(p0.peak, memoryBudget) +
                     " > --memory-budget " + size(memoryBudget, p0.peak) +
                     "; stage 1 needs " + size(p1.peak, memoryBudget) + " on " +
                     std::to_string(N) + " ranks (optimizer state " +
                     formatBytes(p0.optimizerState) + " -> " +
                     formatBytes(p1.optimizerState) + ")";
      }
      if (!fits(p1) && !cuda)
        autoNeedsStage2 = AutoPeaks{p0.peak, p1.peak};
      // Neither fits: the error names the smaller of the two.
      if (zeroStage == 1 || p1.peak < p0.peak)
        memoryPlan = p1;
      else
        stage1Larger = "; ZeRO stage 1 on " + std::to_string(N) +
                       " ranks needs more, " + formatBytes(p1.peak) +
                       " (its 4096-float chunks and gather buffers outweigh "
                       "the state)";
    }
  }
  if (zeroStage == 1 && options.zeroStage == "1" && trainInfo.optSlots == 0)
    llvm::errs() << "ddpc: note: --zero-stage 1 with an optimizer that keeps "
                    "no state (sgd without momentum) shards nothing and only "
                    "adds an all-gather of the parameters each step; "
                    "--zero-stage 0 is smaller and faster\n";
  if (zeroStage == 2 && !autoTriedStage2 && !remat) {
    // The slice's chunk rounding and the two bucket buffer pairs in flight
    // can outweigh what sharding the gradients saves (a small model, one
    // dominant parameter, or a large cap on many ranks).
    const int64_t w = std::max<int64_t>(N, 1);
    rt.worldSize = w;
    MemoryPlan p1 = planAt(1), p2 = planAt(2);
    rt.worldSize = N;
    if (p1.peak < p2.peak)
      llvm::errs() << "ddpc: note: --zero-stage 2 plans "
                   << formatBytes(p2.peak) << " per rank on " << w
                   << (w > 1 ? " ranks" : " rank") << ", more than stage 1's "
                   << formatBytes(p1.peak) << " (gradient slice "
                   << formatBytes(p2.gradients) << " and two bucket buffer "
                   << "pairs " << formatBytes(p2.collectiveBuffers)
                   << ", against stage 1's gradients "
                   << formatBytes(p1.gradients + p1.collectiveBuffers)
                   << "): --zero-stage 1"
                   << (p2.collectiveBuffers > p2.gradients
                           ? ", or a smaller --bucket-cap-mb,"
                           : "")
                   << " is smaller\n";
  }
  if (!remat && !options.rematNodes.empty()) {
    report.rematChoice = "--remat-nodes: backward recomputes the "
                         "activations of the forward nodes named (those that "
                         "depend on the random state, as Dropout's, are kept)";
    for (const std::string &n : pipeline.rematNodes)
      report.recomputed.push_back(
          {n, 0, nodeFlops.count(n) ? nodeFlops[n] : 0});
  }
  if (remat) {
    int64_t bytes = 0, flops = 0;
    for (auto [a, f] : llvm::zip(remat->recomputed, remat->flops)) {
      report.recomputed.push_back({a.producer, a.bytes, f});
      bytes += a.bytes;
      flops += f;
    }
    report.rematChoice =
        "ZeRO stage " + std::to_string(zeroStage) + " plans " +
        size(remat->peakWithout, memoryBudget) + " > --memory-budget " +
        size(memoryBudget, remat->peakWithout) +
        " with every activation "
        "kept; recomputing " +
        std::to_string(remat->recomputed.size()) + " in backward (" +
        remat->method + "; " + formatBytes(bytes) + " no longer kept, " +
        std::to_string(flops) + " FLOPs per micro-batch again) plans " +
        size(memoryPlan->peak, memoryBudget) +
        (N || cuda ? ""
                   : "; --world-size N lets --zero-stage auto consider "
                     "stages 1 to 3 first");
    if (zeroChoice.empty() && remat->stageWasAuto)
      zeroChoice = "stage " + std::to_string(zeroStage) +
                   ": the smallest plan with every activation kept, still "
                   "above --memory-budget, so --remat auto recomputes "
                   "activations at this stage";
  }
  if (zeroStage == 3 && !options.keepGathered.empty()) {
    int64_t bytes = 0;
    for (const auto &[name, b] : paramBytes())
      if (llvm::is_contained(options.keepGathered, name))
        bytes += b;
    size_t n = options.keepGathered.size();
    zeroChoice += (zeroChoice.empty() ? "stage 3" : "") + std::string("; ") +
                  std::to_string(n) +
                  (n == 1 ? " parameter (" : " parameters (") +
                  formatBytes(bytes) + (n == 1 ? ") stays" : ") stay") +
                  " gathered from forward into backward within the budget, "
                  "so backward all-gathers " +
                  formatBytes(bytes) + " less per micro-batch";
    report.keptGathered = options.keepGathered;
  }
  trainInfo.zeroStage = zeroStage; // the glue's ddpc_zero_stage
  report.memory = memoryPlan;
  report.zeroStage = zeroStage;
  report.zeroChoice = zeroChoice;
  if (fits(*memoryPlan))
    return kContinue;
  const MemoryPlan &plan = *memoryPlan;
  std::string where = " (" + plan.largestCategories(4) + "; peak in " +
                      plan.peakFunction + " at " + plan.peakOp + ")";
  std::string at = plan.zeroStage >= 1 && N
                       ? " at ZeRO stage " + std::to_string(plan.zeroStage) +
                             " on " + std::to_string(N) +
                             (N == 1 ? " rank" : " ranks")
                       : "";
  // What would make it fit, the implemented options first.
  std::string hint;
  if (!stage1Larger.empty())
    hint = stage1Larger;
  else if (plan.zeroStage == 0 && plan.optimizerState && !cuda && N != 1 &&
           [&] {
             // Only where it helps: its slices are whole chunks of 4096
             // floats with buffers, more than a small model's state.
             rt.worldSize = std::max<int64_t>(N, 2);
             bool smaller = planAt(1).peak < plan.peak;
             rt.worldSize = N;
             return smaller;
           }())
    hint = "; ZeRO stage 1 shards the " + formatBytes(plan.optimizerState) +
           " of optimizer state over the ranks: " +
           (options.zeroStage == "auto" || options.zeroStage.empty()
                ? std::string("give --world-size N so that --zero-stage auto "
                              "considers it")
                : "add --zero-stage 1 (or auto)" +
                      std::string(N ? "" : " with --world-size N"));
  else if (plan.zeroStage >= 1 && !N) {
    // Only where more ranks shrink it: for a small model the slices' chunk
    // and gather buffers outweigh the state.
    rt.worldSize = 2;
    if (planAt(plan.zeroStage).peak < plan.peak)
      hint = "; give --world-size N so that the plan counts each rank's "
             "1/N of the optimizer state" +
             std::string(plan.zeroStage >= 3   ? ", gradients and parameters"
                         : plan.zeroStage >= 2 ? " and gradients"
                                               : "");
    else
      hint = "; more ranks do not shrink it (each rank's slice is at least "
             "one chunk of 4096 floats, with its buffers)";
  }
  // Stage 3 helps only where one slice and the largest parameter gathered
  // whole weigh less than the parameters' two halves.
  std::string stage3Hint;
  if (plan.zeroStage < 3 && options.target == "cpu" &&
      options.zeroStage != "auto" && !options.zeroStage.empty()) {
    std::vector<int64_t> numels;
    int64_t largest = 0;
    for (const auto &[name, bytes] : paramBytes()) {
      numels.push_back(bytes / 4);
      largest = std::max(largest, bytes);
    }
    if (zeroStage3ParameterBytes(numels, rt.zeroChunk, std::max<int64_t>(N, 2),
                                 rt.bufferAlignment) +
            largest <
        plan.parameters)
      stage3Hint = "; --zero-stage 3 shards the parameters too";
  }
  std::string rematDone =
      remat ? " with " + std::to_string(remat->recomputed.size()) +
                  " activations recomputed in backward (--remat auto)"
            : "";
  std::string rematHint =
      options.remat == "off" && !plan.saved.empty()
          ? "; --remat auto recomputes activations in backward"
          : "";
  error = "--memory-budget " + size(memoryBudget, plan.peak) +
          " is below the predicted peak of " + size(plan.peak, memoryBudget) +
          " per rank" + at + rematDone + where + hint + rematHint + stage3Hint +
          "; use a smaller --batch-size or a --memory-budget of at least " +
          std::to_string(plan.peak) + " bytes (" + formatBytes(plan.peak) + ")";
  return kCompileError;
}

/// The object file (or LLVM IR), the glue, and the link.
int Compilation::emitNative() {
  if (options.verbose)
    llvm::errs() << "ddpc: generating native code\n";
  std::string objPath, irPath;
  SmallString<128> tmpDir;
  if (auto ec = llvm::sys::fs::createUniqueDirectory("ddpc", tmpDir)) {
    error = "cannot create a temporary folder: " + ec.message();
    return kCompileError;
  }
  llvm::scope_exit cleanup([&] { llvm::sys::fs::remove_directories(tmpDir); });
  auto inTmp = [&](StringRef file) {
    SmallString<256> p(tmpDir);
    llvm::sys::path::append(p, file);
    return std::string(p);
  };
  if (options.emit == EmitKind::LLVMIR)
    irPath = inTmp("model.ll");
  objPath =
      options.emit == EmitKind::Object ? options.outputPath : inTmp("model.o");
  if (!emitObjectFile(*module, options.cpu, objPath, error, irPath,
                      &rootTiming))
    return kCompileError;
  if (options.emit == EmitKind::LLVMIR) {
    auto buf = llvm::MemoryBuffer::getFile(irPath);
    if (!buf) {
      error = "cannot read back LLVM IR";
      return kCompileError;
    }
    return writeOutput((*buf)->getBuffer());
  }
  TimingScope glueTiming = rootTiming.nest("glue");
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
  if (memoryPlan)
    glue += generateMemoryPlanGlue(*memoryPlan, memoryBudget);
  if (cuda)
    glue += generateCUDAGlue(options);
  if (options.emit == EmitKind::Object) // The glue goes next to the object.
    return writeFileAtomic(options.outputPath + ".glue.c", glue, error)
               ? kCompileOk
               : kCompileError;
  std::string gluePath = inTmp("glue.c");
  if (!writeFileAtomic(gluePath, glue, error))
    return kCompileError;
  glueTiming.stop();
  TimingScope linkTiming = rootTiming.nest("link");
  if (!linkProgram(options, training, objPath, gluePath, error))
    return kCompileError;
  return kCompileOk;
}

} // namespace

namespace {

/// What one compile (with auto's stage-2 retry) left: its status, error and
/// result, and its plan's numbers for --remat auto.
struct Attempt {
  int status = kCompileError;
  std::string error;
  CompileResult result;
  bool hasPlan = false, overBudget = false;
  int64_t peak = 0, budget = 0, stage = 0;
  std::vector<SavedActivation> saved;
  std::map<std::string, int64_t> nodeFlops;
  RematGraph graph;
  std::vector<std::pair<std::string, int64_t>> params; // name, bytes
  std::optional<Compilation::AutoPeaks> autoPeaks;     // auto's stage 3
  std::map<std::string, int> gathers;                  // stage 3: per parameter
};

void keep(Attempt &a, const Compilation &c, std::string error, int status,
          CompileResult result) {
  a.status = status;
  a.error = std::move(error);
  a.result = std::move(result);
  a.hasPlan = c.plan().has_value();
  a.overBudget = c.overBudget();
  a.budget = c.budget();
  a.stage = c.stage();
  a.nodeFlops = c.nodeFlops;
  a.graph = c.rematGraph;
  a.params = c.paramBytes();
  a.autoPeaks = c.autoTriedStage2;
  a.gathers = c.gathers;
  if (a.hasPlan) {
    a.peak = c.plan()->peak;
    a.saved = c.plan()->saved;
  }
}

/// The compile at ZeRO stage `stage` that --zero-stage auto tries when the
/// stages below it missed the budget with `peaks` (it builds a different
/// @train_micro); run and reported on construction.
struct StageRetry {
  CompileOptions options;
  std::string error;
  CompileResult result;
  Compilation compilation;
  int status;
  StageRetry(const CompileOptions &base, const char *stage,
             const Compilation::AutoPeaks &peaks,
             const std::optional<Compilation::RematChoice> &remat,
             const std::string &modelBytes)
      : options(base), compilation(options, error, &result) {
    options.zeroStage = stage;
    if (options.verbose)
      llvm::errs() << "ddpc: the ZeRO stages below " << stage
                   << " exceed --memory-budget; compiling again at stage "
                   << stage << "\n";
    compilation.autoTriedStage2 = peaks;
    compilation.remat = remat;
    status = compilation.run(modelBytes);
    compilation.writeReport();
  }
  bool ok() const { return status == kCompileOk; }
};

/// One compile; under --zero-stage auto, a second at stage 2 when stages 0
/// and 1 miss the budget, and a third at stage 3 (the CPU target) when
/// stage 2 misses too.
Attempt compileOnce(const CompileOptions &options,
                    const std::string &modelBytes,
                    const std::optional<Compilation::RematChoice> &remat) {
  Attempt a;
  std::string error;
  CompileResult result;
  Compilation compilation(options, error, &result);
  compilation.remat = remat;
  int status = compilation.run(modelBytes);
  if (status == kCompileOk || !compilation.autoNeedsStage2) {
    compilation.writeReport();
    keep(a, compilation, error, status, std::move(result));
    return a;
  }
  Compilation::AutoPeaks peaks = *compilation.autoNeedsStage2;
  StageRetry second(options, "2", peaks, remat, modelBytes);
  if (!second.ok() && !second.compilation.hasPlan()) {
    compilation.writeReport(); // stage 2 failed before its plan
    keep(a, compilation, error, status, std::move(result));
    return a;
  }
  if (!second.ok() && options.target == "cpu" && options.worldSize > 1) {
    Compilation::AutoPeaks peaks3 = peaks;
    peaks3.stage2 = second.compilation.plan()->peak;
    StageRetry third(options, "3", peaks3, remat, modelBytes);
    if (third.compilation.hasPlan() &&
        (third.ok() ||
         third.compilation.plan()->peak <
             std::min({peaks.stage0, peaks.stage1, peaks3.stage2}))) {
      if (!third.ok())
        third.error += "; ZeRO stages 0, 1 and 2 need more, " +
                       formatBytes(peaks.stage0) + ", " +
                       formatBytes(peaks.stage1) + " and " +
                       formatBytes(peaks3.stage2);
      keep(a, third.compilation, third.error, third.status,
           std::move(third.result));
      return a;
    }
  }
  if (second.ok() || second.compilation.autoPeakBelow(peaks)) {
    if (!second.ok())
      second.error += "; ZeRO stages 0 and 1 need more, " +
                      formatBytes(peaks.stage0) + " and " +
                      formatBytes(peaks.stage1);
    keep(a, second.compilation, second.error, second.status,
         std::move(second.result));
    return a;
  }
  // Stage 2 is no smaller: the first compile's error, with stage 2's peak.
  error += "; ZeRO stage 2 needs more, " + second.compilation.plannedPeak();
  compilation.writeReport();
  keep(a, compilation, error, status, std::move(result));
  return a;
}

} // namespace

int compile(const CompileOptions &options, std::string &error,
            const std::string &modelBytes, CompileResult *result) {
  if (options.remat == "auto" && options.memoryBudget.empty())
    llvm::errs() << "ddpc: note: --remat auto recomputes activations only "
                    "to fit --memory-budget; without one every activation is "
                    "kept\n";
  Attempt a = compileOnce(options, modelBytes, std::nullopt);
  auto finish = [&](Attempt &done) {
    error = done.error;
    if (result)
      *result = std::move(done.result);
    return done.status;
  };
  // ZeRO stage 3 under a budget: the plan's headroom keeps the largest
  // parameters whole from forward into backward, each sparing backward its
  // all-gather (DeepCompile's selective unsharding, decided here once).
  if (a.status == kCompileOk && a.stage == 3 && a.budget > 0 &&
      a.peak < a.budget && options.keepGathered.empty()) {
    auto params = a.params;
    llvm::stable_sort(params, [](const auto &x, const auto &y) {
      return x.second > y.second;
    });
    CompileOptions kept = options;
    kept.zeroStage = "3";
    int64_t room = a.budget - a.peak;
    // Only a parameter that backward gathers again gains.
    for (const auto &[name, bytes] : params)
      if (bytes > 0 && bytes <= room && a.gathers[name] > 1) {
        kept.keepGathered.push_back(name);
        room -= bytes;
      }
    if (!kept.keepGathered.empty()) {
      if (options.verbose)
        llvm::errs() << "ddpc: ZeRO stage 3: compiling again with "
                     << kept.keepGathered.size()
                     << " parameters kept gathered into backward\n";
      std::string keptError;
      CompileResult keptResult;
      Compilation c(kept, keptError, &keptResult);
      if (a.autoPeaks)
        c.autoTriedStage2 = a.autoPeaks;
      int status = c.run(modelBytes);
      c.writeReport();
      // A plan the estimate pushed over the budget keeps the first program.
      if (status == kCompileOk) {
        Attempt k;
        keep(k, c, keptError, status, std::move(keptResult));
        return finish(k);
      }
    }
  }
  bool rematAuto = options.remat == "auto" ||
                   (options.remat.empty() && !options.memoryBudget.empty());
  if (a.status == kCompileOk || !rematAuto || !a.overBudget ||
      a.saved.empty() || !options.rematNodes.empty())
    return finish(a);

  Compilation::RematChoice choice;
  choice.peakWithout = a.peak;
  choice.stageWasAuto =
      options.zeroStage == "auto" ||
      (options.zeroStage.empty() && !options.memoryBudget.empty());
  CompileOptions atStage = options;
  atStage.zeroStage = std::to_string(a.stage);
  RematGraph graph = std::move(a.graph);
  std::map<std::string, int64_t> nodeFlops = a.nodeFlops;
  std::vector<SavedActivation> saved = a.saved;
  Attempt best = std::move(a);

  // --remat auto: the cheapest recompute set whose kept bytes (the
  // solver's model, RematSolver.h) fit under the budget less the rest of
  // the plan; each round compiles the choice, and a plan that still misses
  // the budget lowers the bound by what it missed.
  if (!graph.nodes.empty()) {
    size_t n = graph.nodes.size();
    bool exact = n <= kRematExactMaxNodes;
    std::vector<bool> none(n, false), all(n, false);
    for (size_t i = 0; i < n; ++i)
      all[i] = graph.nodes[i].recomputable;
    int64_t keptAll = rematKeptBytes(graph, none);
    // Recomputing everything recomputable keeps the least (a node's
    // recompute can only add inputs that are not recomputable).
    int64_t keptLeast = rematKeptBytes(graph, all);
    int64_t bound = keptAll - (best.peak - best.budget);
    std::vector<bool> last;
    constexpr int kSolverRounds = 6;
    for (int round = 0; round < kSolverRounds; ++round) {
      bool lastTry = bound < keptLeast;
      RematSolution sol =
          exact ? solveRematExact(graph, std::max(bound, keptLeast))
                : solveRematHeuristic(graph, std::max(bound, keptLeast));
      if (!sol.feasible || sol.recompute == last)
        break;
      last = sol.recompute;
      choice.recomputed.clear();
      choice.flops.clear();
      for (size_t i = 0; i < n; ++i)
        if (sol.recompute[i]) {
          const RematGraph::Node &node = graph.nodes[i];
          choice.recomputed.push_back({node.name, node.bytes, 1});
          choice.flops.push_back(node.flops);
        }
      choice.method = sol.method +
                      (exact ? (sol.optimal ? ", optimal"
                                            : ", best found in the time limit")
                             : "") +
                      ", over " + std::to_string(n) + " forward nodes";
      if (options.verbose)
        llvm::errs() << "ddpc: --remat auto: " << sol.method << " recomputes "
                     << choice.recomputed.size() << " of " << n
                     << " forward nodes, keeping " << formatBytes(sol.keptBytes)
                     << " of " << formatBytes(keptAll) << "\n";
      Attempt b = compileOnce(atStage, modelBytes, choice);
      if (b.status == kCompileOk || !b.hasPlan)
        return finish(b);
      // A plan that missed lowers the bound by what it missed; one whose
      // peak did not drop (the peak lies where the activations kept do not
      // matter) by a step that doubles each round, 1/64 of the kept bytes
      // recomputation can free at first; the last round keeps the least.
      int64_t missed = std::max<int64_t>(b.peak - b.budget, 1);
      bool dropped = b.peak < best.peak;
      if (dropped)
        best = std::move(b);
      if (lastTry)
        break;
      int64_t step = (keptAll - keptLeast) >> (kSolverRounds - round);
      bound =
          std::min(bound, sol.keptBytes) - std::max(missed, dropped ? 0 : step);
      if (round == kSolverRounds - 2)
        bound = std::min(bound, keptLeast);
    }
    if (best.peak >= choice.peakWithout)
      best.error += "; recomputing activations in backward (--remat auto) "
                    "did not lower the peak";
    else if (!last.empty())
      best.error += "; the smallest peak --remat auto found recomputes " +
                    std::to_string(llvm::count(last, true)) + " of " +
                    std::to_string(n) + " forward nodes";
    return finish(best);
  }

  // No forward graph (a module the solver cannot read): the greedy of
  // Chen et al. 2016's spirit, the saved activations in the order of the
  // fewest forward FLOPs per byte, and backward recomputes prefixes of
  // doubling length (1, 2, 4, ...; the last round all of them) at the
  // stage the first compile chose, until one's plan fits.
  struct Candidate {
    SavedActivation activation;
    int64_t flops = 0;
  };
  std::vector<Candidate> candidates;
  for (const SavedActivation &s : saved) {
    Candidate c{s, 0};
    for (StringRef part : llvm::split(s.producer, '+'))
      c.flops += nodeFlops.count(part.str()) ? nodeFlops[part.str()] : 0;
    candidates.push_back(c);
  }
  llvm::stable_sort(candidates, [](const Candidate &x, const Candidate &y) {
    // bytes / (flops + 1), descending, without division.
    return static_cast<double>(x.activation.bytes) * (y.flops + 1) >
           static_cast<double>(y.activation.bytes) * (x.flops + 1);
  });
  choice.method = "the cheapest FLOPs per byte first";
  constexpr int kRounds = 7;
  size_t take = 1;
  for (int round = 0; round < kRounds; ++round, take *= 2) {
    if (round == kRounds - 1)
      take = candidates.size();
    take = std::min(take, candidates.size());
    while (choice.recomputed.size() < take) {
      const Candidate &c = candidates[choice.recomputed.size()];
      choice.recomputed.push_back(c.activation);
      choice.flops.push_back(c.flops);
    }
    if (options.verbose)
      llvm::errs() << "ddpc: --remat auto: recomputing " << take << " of "
                   << candidates.size() << " saved activations in backward\n";
    Attempt b = compileOnce(atStage, modelBytes, choice);
    if (b.status == kCompileOk || !b.hasPlan)
      return finish(b);
    if (b.peak < best.peak)
      best = std::move(b);
    if (take == candidates.size())
      break;
  }
  if (best.peak >= choice.peakWithout)
    best.error += "; recomputing up to all " +
                  std::to_string(candidates.size()) +
                  " saved activations in backward (--remat auto) did not "
                  "lower the peak";
  return finish(best);
}

} // namespace ddpc

//===- Report.cpp - The compiler's plan, filled stage by stage ------------===//
//
// Part of ddpc. CompileReport (DriverInternal.h) gathers what each stage
// decided; toJSON writes CompileResult::reportJSON, which `--report` prints
// and the Python API returns.
//
//===----------------------------------------------------------------------===//

#include "DriverInternal.h"

#include "ddpc/Analysis/CostModel.h"
#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"
#include "ddpc/Support/DTypes.h"
#include "ddpc/Support/RuntimeSymbols.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>

using namespace mlir;

namespace ddpc {
namespace driver {
namespace {

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

llvm::json::Array shapeJSON(ArrayRef<int64_t> shape) {
  llvm::json::Array a;
  for (int64_t d : shape)
    a.push_back(d);
  return a;
}

llvm::json::Object tensorJSON(const TensorSig &t) {
  return llvm::json::Object{{"name", t.name},
                            {"dtype", dtypeString(t.dtype)},
                            {"onnx_dtype", t.dtype},
                            {"shape", shapeJSON(t.shape)}};
}

/// What one call of a step function launches (CompileReport::CUDAFunction
/// without name and arena).
struct LaunchCounts {
  int64_t launches = 0, gemms = 0, epilogues = 0, convs = 0, convEpilogues = 0;
  void add(const LaunchCounts &o) {
    launches += o.launches, gemms += o.gemms, epilogues += o.epilogues;
    convs += o.convs, convEpilogues += o.convEpilogues;
  }
};

} // namespace

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

void CompileReport::fillGraph(ModuleOp module, StringRef modelName,
                              const std::vector<TensorSig> &ins,
                              const std::vector<TensorSig> &outs,
                              const llvm::StringSet<> &trainable) {
  hasGraph = true;
  model = modelName.str();
  inputs = ins;
  outputs = outs;
  parameters.clear();
  if (auto inits = module->getAttrOfType<ArrayAttr>(attrs::kInitializers)) {
    for (auto d : inits.getAsRange<DictionaryAttr>()) {
      Parameter p;
      p.tensor.name = cast<StringAttr>(d.get("name")).str();
      p.tensor.dtype = cast<IntegerAttr>(d.get("dtype")).getInt();
      auto shape = cast<DenseI64ArrayAttr>(d.get("shape")).asArrayRef();
      p.tensor.shape.assign(shape.begin(), shape.end());
      p.bytes = cast<IntegerAttr>(d.get("bytes")).getInt();
      p.trainable = trainable.contains(p.tensor.name);
      parameters.push_back(std::move(p));
    }
  }
  // Collectives: upstream shard collectives (tensor IR: "all_reduce_sum",
  // "all_gather", ...) and ddpc runtime calls (after lowering).
  collectives.clear();
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
    collectives.push_back({kind, bytes});
  });
  // Fusion groups (ddpc-fuse-ops): one loop nest or kernel each.
  fusionGroups = 0;
  module.walk([&](Operation *op) {
    if (op->hasAttr(attrs::kFusionGroup))
      ++fusionGroups;
  });
}

void CompileReport::fillBuckets(ModuleOp module) {
  buckets.clear();
  module.walk([&](func::CallOp call) {
    auto kind = call->getAttrOfType<StringAttr>(attrs::kCollective);
    // ZeRO stage 3's parameter all-gathers (ddpc-gather-parameters), one
    // per gathered segment of @train_micro (per micro-batch).
    if (kind && kind.getValue() == "all_gather_param") {
      if (call->getParentOfType<func::FuncOp>().getSymName() == kTrainMicroFunc)
        collectives.push_back(
            {kind.str(),
             call->getAttrOfType<IntegerAttr>(attrs::kBytes).getInt()});
      return;
    }
    if (!kind || (kind.getValue() != "allreduce_bucket" &&
                  kind.getValue() != "reduce_scatter_bucket"))
      return;
    Bucket b;
    b.op = kind.str();
    b.index = call->getAttrOfType<IntegerAttr>(attrs::kBucket).getInt();
    b.bytes = call->getAttrOfType<IntegerAttr>(attrs::kBytes).getInt();
    for (auto name : call->getAttrOfType<ArrayAttr>(attrs::kParams)
                         .getAsRange<StringAttr>())
      b.params.push_back(name.str());
    b.function = call->getParentOfType<func::FuncOp>().getSymName().str();
    b.startOp = call->getAttrOfType<IntegerAttr>(attrs::kStartOp).getInt();
    b.functionOps =
        call->getAttrOfType<IntegerAttr>(attrs::kFunctionOps).getInt();
    buckets.push_back(std::move(b));
  });
}

void CompileReport::fillCUDA(ModuleOp module, ArrayRef<std::string> archs,
                             bool emulated) {
  auto isKernel = [&](Operation *op) {
    if (emulated)
      return isa<scf::ParallelOp>(op) &&
             !op->getParentOfType<scf::ParallelOp>();
    return isa<gpu::LaunchFuncOp>(op);
  };
  CUDAPlan plan;
  plan.archs.assign(archs.begin(), archs.end());
  plan.emulated = emulated;
  if (emulated)
    module.walk([&](scf::ParallelOp op) { plan.kernels += isKernel(op); });
  else
    module.walk([&](gpu::GPUFuncOp) { ++plan.kernels; });
  // What one call of `f` launches, including the module's functions it
  // calls (the SyncBatchNorm allreduce helpers), once per call site.
  llvm::DenseMap<Operation *, LaunchCounts> counted;
  std::function<LaunchCounts(func::FuncOp)> count =
      [&](func::FuncOp f) -> LaunchCounts {
    if (auto it = counted.find(f); it != counted.end())
      return it->second;
    counted[f] = {}; // Recursion guard (the IR has no recursion).
    LaunchCounts c;
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
        if (callee && !callee.isExternal())
          c.add(count(callee));
      }
      return WalkResult::advance();
    });
    return counted[f] = c;
  };
  for (auto f : module.getOps<func::FuncOp>()) {
    if (f.isExternal() || !f.isPublic())
      continue;
    LaunchCounts c = count(f);
    CUDAFunction fn;
    fn.name = f.getName().str();
    fn.launches = c.launches, fn.gemms = c.gemms;
    fn.epilogueGemms = c.epilogues, fn.convs = c.convs;
    fn.epilogueConvs = c.convEpilogues;
    if (auto a = f->getAttrOfType<IntegerAttr>(attrs::kArenaBytes))
      fn.arenaBytes = a.getInt();
    plan.functions.push_back(std::move(fn));
  }
  cuda = std::move(plan);
}

std::string CompileReport::toJSON() const {
  llvm::json::Object root;
  root["model"] = model;
  llvm::json::Array ins, outs, params, colls;
  for (const TensorSig &t : inputs)
    ins.push_back(tensorJSON(t));
  for (const TensorSig &t : outputs)
    outs.push_back(tensorJSON(t));
  root["inputs"] = std::move(ins);
  root["outputs"] = std::move(outs);
  int64_t paramBytes = 0;
  for (const Parameter &p : parameters) {
    llvm::json::Object o = tensorJSON(p.tensor);
    o["bytes"] = p.bytes;
    o["trainable"] = p.trainable;
    params.push_back(std::move(o));
    paramBytes += p.bytes;
  }
  root["parameters"] = std::move(params);
  root["parameter_bytes"] = paramBytes;
  // collective_bytes: per optimizer step, the buckets included.
  int64_t collectiveBytes = 0;
  for (const Collective &c : collectives) {
    colls.push_back(llvm::json::Object{{"op", c.op}, {"bytes", c.bytes}});
    collectiveBytes += c.bytes;
  }
  if (!buckets.empty()) {
    llvm::json::Array bs;
    for (const Bucket &b : buckets) {
      llvm::json::Array names;
      for (const std::string &n : b.params)
        names.push_back(n);
      bs.push_back(llvm::json::Object{{"bucket", b.index},
                                      {"op", b.op},
                                      {"bytes", b.bytes},
                                      {"params", std::move(names)},
                                      {"function", b.function},
                                      {"start_op", b.startOp},
                                      {"function_ops", b.functionOps}});
      colls.push_back(llvm::json::Object{{"op", b.op}, {"bytes", b.bytes}});
      collectiveBytes += b.bytes;
    }
    root["gradient_buckets"] = std::move(bs);
  }
  root["collectives"] = std::move(colls);
  root["collective_bytes"] = collectiveBytes;
  root["fusion_groups"] = fusionGroups;
  if (!precision.empty())
    root["precision"] =
        llvm::json::Object{{"mode", precision}, {"meaning", precisionMeaning}};
  if (cuda) {
    llvm::json::Array functions, archList;
    for (const CUDAFunction &f : cuda->functions)
      functions.push_back(
          llvm::json::Object{{"name", f.name},
                             {"kernel_launches", f.launches},
                             {"cublas_gemms", f.gemms},
                             {"cublaslt_epilogue_gemms", f.epilogueGemms},
                             {"cudnn_convolutions", f.convs},
                             {"cudnn_epilogue_convolutions", f.epilogueConvs},
                             {"arena_bytes", f.arenaBytes}});
    for (const std::string &a : cuda->archs)
      archList.push_back(a);
    root["cuda"] = llvm::json::Object{{"archs", std::move(archList)},
                                      {"kernels", cuda->kernels},
                                      {"emulated", cuda->emulated},
                                      {"functions", std::move(functions)}};
  }
  if (memory) {
    llvm::json::Array cats, fns, saved;
    for (const auto &[name, bytes] : memory->categories())
      cats.push_back(llvm::json::Object{{"category", name}, {"bytes", bytes}});
    for (const FunctionMemory &f : memory->functions)
      fns.push_back(llvm::json::Object{{"name", f.function},
                                       {"peak_bytes", f.peakBytes},
                                       {"peak_op", f.peakOp},
                                       {"arena_bytes", f.arenaBytes}});
    for (const SavedActivation &a : memory->saved)
      saved.push_back(llvm::json::Object{{"producer", a.producer},
                                         {"bytes", a.bytes},
                                         {"buffers", a.buffers}});
    root["memory_plan"] = llvm::json::Object{
        {"peak_bytes", memory->peak},  {"peak_function", memory->peakFunction},
        {"peak_op", memory->peakOp},   {"categories", std::move(cats)},
        {"functions", std::move(fns)}, {"saved_activations", std::move(saved)}};
    llvm::json::Object &plan = *root["memory_plan"].getAsObject();
    plan["zero_stage"] = zeroStage;
    plan["world_size"] = memory->worldSize;
    if (!zeroChoice.empty())
      plan["zero_choice"] = zeroChoice;
    if (!keptGathered.empty()) {
      llvm::json::Array names;
      for (const std::string &n : keptGathered)
        names.push_back(n);
      plan["kept_gathered"] = std::move(names);
    }
    if (!rematChoice.empty() || !recomputed.empty()) {
      llvm::json::Array list;
      for (const Recomputed &r : recomputed)
        list.push_back(llvm::json::Object{
            {"producer", r.producer}, {"bytes", r.bytes}, {"flops", r.flops}});
      plan["remat"] = llvm::json::Object{{"choice", rematChoice},
                                         {"recomputed", std::move(list)}};
    }
    if (zeroStage == 1)
      plan["zero_note"] =
          memory->worldSize
              ? "ZeRO stage 1 on " + std::to_string(memory->worldSize) +
                    " ranks: the optimizer state above is one rank's slice "
                    "(1/N of the state, rounded up to chunks of 4096 "
                    "floats) and its gather buffers"
              : "ZeRO stage 1: the optimizer state above is one rank's "
                "whole state (two halves); at N ranks each rank holds one "
                "copy of 1/N of it (rounded up to chunks of 4096 floats) and "
                "gather buffers (1 MiB + 1 MiB / N up to 64 ranks, (N + 1) x "
                "16 KiB beyond), which the plan "
                "the program prints at exit (memory_plan_bytes in "
                "--log-json) includes; --world-size N plans for N";
    if (zeroStage >= 2)
      plan["zero_note"] =
          "ZeRO stage " + std::to_string(zeroStage) +
          (memory->worldSize
               ? " on " + std::to_string(memory->worldSize) + " ranks"
               : std::string(" (planned for 1 rank; --world-size N plans "
                             "for N)")) +
          ": the optimizer state and the gradients above are one rank's "
          "slice (1/N, rounded up to chunks of 4096 floats); the collective "
          "buffers are two buffer pairs, one per gradient bucket in flight "
          "(each pair: a send buffer of the largest bucket and a receive "
          "buffer of the largest part of one that a rank receives); the "
          "gradients themselves are temporaries of train_micro until their "
          "bucket is reduce-scattered" +
          std::string(zeroStage >= 3
                          ? "; the parameters above are one rank's slice too, "
                            "and each parameter is all-gathered whole before "
                            "forward reads it and again before backward does "
                            "(a temporary of train_micro and eval while read)"
                          : "");
  }
  if (!partial.empty())
    root["partial"] = partial;
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::json::Value(std::move(root));
  return s;
}

} // namespace driver
} // namespace ddpc

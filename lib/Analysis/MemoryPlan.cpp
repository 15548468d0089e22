//===- MemoryPlan.cpp - static per-rank memory plan of training -----------===//
//
// Part of ddpc. See MemoryPlan.h.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Analysis/MemoryPlan.h"

#include "ddpc/Analysis/BufferLiveness.h"
#include "ddpc/Analysis/CostModel.h"
#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"
#include "ddpc/Support/RuntimeSymbols.h"
#include "ddpc/Support/ZeroLayout.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>

using namespace mlir;

namespace ddpc {
namespace {

int64_t roundUp(int64_t bytes, int64_t alignment) {
  bytes = std::max<int64_t>(bytes, 1);
  return (bytes + alignment - 1) / alignment * alignment;
}

/// Static bytes of `type`, 0 when its shape is dynamic.
int64_t bytesOf(MemRefType type) {
  return type.hasStaticShape() ? staticBytes(type) : 0;
}

/// Whether `buffer` (or a view of it) is read by code without an ONNX node
/// location, i.e. the loss or the backward pass.
bool readByBackward(Value buffer) {
  SmallVector<Value> worklist = {buffer};
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (isa<memref::DeallocOp>(user))
        continue;
      if (isa<ViewLikeOpInterface>(user)) {
        for (Value r : user->getResults())
          worklist.push_back(r);
        continue;
      }
      Operation *top = user;
      if (nodeNamesOf(top->getLoc()).empty())
        return true;
    }
  }
  return false;
}

/// The most bytes the allocations of `block` hold at once (each from its
/// allocation to its deallocation, or to the block's end when there is
/// none in the block) together with what each op's regions hold while it
/// runs; `at` gets the op where. A region-holding op holds the largest of
/// its regions (the branches of an scf.if are alternatives, a loop body
/// frees what it allocates before the next iteration). The fallback
/// branch of a library call (ddpc.library_fallback: GEMM or convolution
/// code for when cuBLAS/cuDNN decline) is left out: it runs only then.
int64_t blockPeak(Block &block, int64_t granule, Operation **at) {
  BufferLiveness liveness(block);
  int64_t n = static_cast<int64_t>(block.getOperations().size());
  std::vector<int64_t> delta(n + 1, 0), nested(n, 0);
  int64_t index = 0;
  for (Operation &op : block) {
    if (auto alloc = dyn_cast<memref::AllocOp>(op)) {
      int64_t bytes =
          roundUp(bytesOf(alloc.getType()),
                  std::max<int64_t>(alloc.getAlignment().value_or(1), granule));
      int64_t end = n - 1;
      if (std::optional<BufferLiveRange> range = liveness.liveRange(alloc))
        end = range->end;
      delta[index] += bytes;
      delta[end + 1] -= bytes;
    } else if (op.getNumRegions() && !op.hasAttr(attrs::kLibraryFallback)) {
      for (Region &region : op.getRegions())
        for (Block &inner : region)
          nested[index] =
              std::max(nested[index], blockPeak(inner, granule, nullptr));
    }
    ++index;
  }
  int64_t live = 0, peak = 0;
  index = 0;
  for (Operation &op : block) {
    live += delta[index];
    if (live + nested[index] > peak) {
      peak = live + nested[index];
      if (at)
        *at = &op;
    }
    ++index;
  }
  return peak;
}

/// The temporaries of `func` (blockPeak of its body).
FunctionMemory functionMemory(func::FuncOp func, int64_t granule) {
  FunctionMemory fm;
  fm.function = func.getSymName().str();
  if (auto a = func->getAttrOfType<IntegerAttr>(attrs::kArenaBytes))
    fm.arenaBytes = a.getInt();
  Operation *at = nullptr;
  fm.peakBytes = blockPeak(func.getBody().front(), granule, &at);
  if (at) {
    std::string nodes = nodeNamesOf(at->getLoc());
    fm.peakOp = at->getName().getStringRef().str() +
                (nodes.empty() ? "" : " (" + nodes + ")");
  }
  return fm;
}

/// train_micro's buffers written by a forward node and read by the loss
/// or backward: allocations, or on the arena targets views of the arena.
std::vector<SavedActivation> savedActivations(func::FuncOp func) {
  std::vector<SavedActivation> out;
  func.walk([&](Operation *op) {
    bool buffer = isa<memref::AllocOp>(op);
    if (auto view = dyn_cast<memref::ViewOp>(op))
      buffer =
          isa_and_nonnull<memref::AllocOp>(view.getSource().getDefiningOp());
    if (!buffer)
      return;
    std::string producer = nodeNamesOf(op->getLoc());
    auto type = cast<MemRefType>(op->getResult(0).getType());
    if (producer.empty() || !readByBackward(op->getResult(0)))
      return;
    // The arena itself is never one activation.
    if (isa<memref::AllocOp>(op) &&
        llvm::any_of(op->getUsers(),
                     [](Operation *u) { return isa<memref::ViewOp>(u); }))
      return;
    // One entry per producer: a node that writes several buffers (an
    // output and its transposed copy) is one line of the report.
    auto it = llvm::find_if(
        out, [&](const SavedActivation &a) { return a.producer == producer; });
    if (it == out.end())
      out.push_back({producer, bytesOf(type), 1});
    else
      it->bytes += bytesOf(type), ++it->buffers;
  });
  llvm::stable_sort(out,
                    [](const SavedActivation &a, const SavedActivation &b) {
                      return a.bytes > b.bytes;
                    });
  return out;
}

} // namespace

MemoryPlan computeMemoryPlan(ModuleOp module, const RuntimeFootprint &rt) {
  MemoryPlan plan;
  auto buf = [&](int64_t bytes) { return roundUp(bytes, rt.bufferAlignment); };
  int64_t paramBytes = 0, exactGradBytes = 0, bufferBytes = 0;
  for (int64_t b : rt.paramBytes)
    paramBytes += buf(b), exactGradBytes += b;
  for (int64_t b : rt.bufferBytes)
    bufferBytes += buf(b);
  plan.parameters = rt.stateCopies * paramBytes;
  plan.gradients = rt.stateCopies * paramBytes;
  plan.optimizerState = rt.stateCopies * rt.optSlots * paramBytes;
  plan.worldSize = rt.worldSize;
  plan.zeroStage = rt.zeroStage;
  std::vector<int64_t> numels;
  for (int64_t b : rt.paramBytes)
    numels.push_back(b / 4);
  // Stage 1 without a world size counts the whole state (the program
  // replaces it by its slice); stage 2 plans for 1 rank then, state and
  // gradients alike.
  if ((rt.zeroStage >= 1 && rt.worldSize > 0) || rt.zeroStage >= 2)
    plan.optimizerState =
        zeroStage1Bytes(numels, rt.optSlots, rt.zeroChunk,
                        std::max<int64_t>(rt.worldSize, 1), rt.bufferAlignment);
  plan.buffers = rt.stateCopies * bufferBytes;
  // The gradient buckets' staging memory covers every gradient once (with
  // more than one rank).
  plan.collectiveBuffers =
      rt.bucketStaging && rt.worldSize != 1 ? exactGradBytes : 0;
  if (rt.zeroStage >= 2) {
    // One gradient slice, and the buckets in flight (also at one rank).
    int64_t world = std::max<int64_t>(rt.worldSize, 1);
    int64_t all = zeroStage2GradientBytes(numels, rt.zeroBuckets, rt.zeroChunk,
                                          world, rt.bufferAlignment);
    plan.gradients = zeroStage2GradientBytes(numels, {}, rt.zeroChunk, world,
                                             rt.bufferAlignment);
    plan.collectiveBuffers = all - plan.gradients;
    if (rt.zeroStage >= 3)
      plan.parameters = zeroStage3ParameterBytes(numels, rt.zeroChunk, world,
                                                 rt.bufferAlignment);
  }
  for (int64_t b : rt.batchBytes) {
    plan.dataBatches += buf(b);
    plan.stagingBuffers += rt.stagingSlots * buf(b);
  }
  // Host-shared scalars (loss, correct, lr, step, grad_scale, rng,
  // grad_norm) and the per-sample loss and correct flags of evaluation.
  plan.stagingBuffers +=
      7 * buf(1) + buf(4 * rt.batchSize) + buf(8 * rt.batchSize);

  func::FuncOp peakFunc;
  for (StringRef name :
       {kTrainMicroFunc, kApplyFunc, kEvalFunc, kGradNormFunc}) {
    auto func = module.lookupSymbol<func::FuncOp>(name);
    if (!func || func.isExternal() || !func.getBody().hasOneBlock())
      continue;
    plan.functions.push_back(functionMemory(func, rt.allocGranule));
    if (!peakFunc ||
        plan.functions.back().peakBytes >
            llvm::find_if(plan.functions, [&](const FunctionMemory &f) {
              return f.function == peakFunc.getSymName();
            })->peakBytes)
      peakFunc = func;
  }
  if (auto micro = module.lookupSymbol<func::FuncOp>(kTrainMicroFunc))
    if (!micro.isExternal())
      plan.saved = savedActivations(micro);
  if (peakFunc) {
    const FunctionMemory &fm =
        *llvm::find_if(plan.functions, [&](const FunctionMemory &f) {
          return f.function == peakFunc.getSymName();
        });
    plan.peakFunction = fm.function;
    plan.peakOp = fm.peakOp;
    plan.temporaries = fm.peakBytes;
    if (fm.function == kTrainMicroFunc) {
      for (const SavedActivation &s : plan.saved)
        plan.savedActivations += s.bytes;
      plan.savedActivations = std::min(plan.savedActivations, plan.temporaries);
      plan.temporaries -= plan.savedActivations;
    }
  }
  for (auto &[name, bytes] : plan.categories())
    plan.peak += bytes;
  return plan;
}

std::vector<std::pair<std::string, int64_t>> MemoryPlan::categories() const {
  return {{"parameters", parameters},
          {"gradients", gradients},
          {"optimizer state", optimizerState},
          {"buffers", buffers},
          {"saved activations", savedActivations},
          {"temporaries", temporaries},
          {"collective buffers", collectiveBuffers},
          {"staging buffers", stagingBuffers},
          {"data batches", dataBatches}};
}

std::string MemoryPlan::largestCategories(size_t n) const {
  auto cats = categories();
  llvm::stable_sort(
      cats, [](const auto &a, const auto &b) { return a.second > b.second; });
  std::string out;
  for (size_t i = 0; i < cats.size() && i < n; ++i) {
    if (cats[i].second == 0)
      break;
    out += (i ? ", " : "") + cats[i].first + " " + formatBytes(cats[i].second);
  }
  return out;
}

std::optional<int64_t> parseByteSize(llvm::StringRef text) {
  text = text.trim();
  size_t digits = 0;
  while (digits < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits])) ||
          text[digits] == '.'))
    ++digits;
  llvm::StringRef number = text.take_front(digits),
                  unit = text.drop_front(digits).trim();
  double value;
  if (number.empty() || number.getAsDouble(value))
    return std::nullopt;
  struct Unit {
    const char *name;
    double scale;
  };
  static const Unit units[] = {{"", 1},
                               {"B", 1},
                               {"KiB", 1024.0},
                               {"MiB", 1048576.0},
                               {"GiB", 1073741824.0},
                               {"TiB", 1099511627776.0},
                               {"KB", 1e3},
                               {"MB", 1e6},
                               {"GB", 1e9},
                               {"TB", 1e12}};
  for (const Unit &u : units) {
    if (!unit.equals_insensitive(u.name))
      continue;
    double bytes = std::floor(value * u.scale);
    if (!(bytes >= 1) || bytes > 9.0e18)
      return std::nullopt;
    return static_cast<int64_t>(bytes);
  }
  return std::nullopt;
}

} // namespace ddpc

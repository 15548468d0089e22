//===- Parameters.cpp - Which initializers a training program trains ------===//
//
// Part of ddpc. For training imports: which float initializers become
// parameter arguments (trained), which buffer arguments (BatchNorm running
// statistics, updated by the forward pass), and which stay constants
// (configuration inputs, frozen, unreachable from the loss, or holding
// inf/nan); and the slot predicates InitializerRoles.cpp shares.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <cmath>

using namespace mlir;

namespace ddpc::onnx_import {

/// Whether node `n` has only integer or boolean results (Shape, comparisons,
/// ArgMax, a Cast to an integer type): it passes no gradient back.
static bool hasIntegerResults(const onnx::NodeProto &n) {
  StringRef op = n.op_type();
  if (op == "Cast" || op == "CastLike")
    for (const auto &a : n.attribute())
      if (a.name() == "to")
        return !isFloatDType(a.i());
  return llvm::is_contained({"Shape", "Size", "Equal", "Less", "LessOrEqual",
                             "Greater", "GreaterOrEqual", "Not", "And", "Or",
                             "Xor", "IsNaN", "IsInf", "ArgMax", "ArgMin",
                             "NonZero"},
                            op);
}

/// Index and shape operands (Gather's indices, Where's condition,
/// Reshape's shape, ...): they receive no gradient.
static bool isIndexSlot(const onnx::NodeProto &n, int i) {
  StringRef op = n.op_type();
  if (op == "Where")
    return i == 0;
  if (op == "RotaryEmbedding")
    return i == 3;
  if (op == "Attention")
    return i == 6;
  // Pad's constant_value (input 2) is configuration, as PyTorch's pad value
  // (a Python float) is.
  return i >= 1 && llvm::is_contained({"Gather",
                                       "GatherElements",
                                       "GatherND",
                                       "Reshape",
                                       "Expand",
                                       "Slice",
                                       "Tile",
                                       "Squeeze",
                                       "Unsqueeze",
                                       "ReduceSum",
                                       "ReduceMean",
                                       "ReduceMax",
                                       "ReduceMin",
                                       "ReduceProd",
                                       "ReduceSumSquare",
                                       "ReduceL1",
                                       "ReduceL2",
                                       "ReduceLogSum",
                                       "ReduceLogSumExp",
                                       "TopK",
                                       "OneHot",
                                       "Split",
                                       "Pad",
                                       "Trilu",
                                       "CumSum",
                                       "CumProd",
                                       "Resize",
                                       "Upsample"},
                                      op);
}

llvm::StringSet<> lossDependencies(const onnx::GraphProto &graph) {
  // The nodes are in topological order (ONNX IR spec, "Graphs"), so one
  // reverse sweep from the first output finds them, through float values
  // only.
  llvm::StringSet<> deps;
  if (graph.output_size() > 0)
    deps.insert(graph.output(0).name());
  for (int n = graph.node_size() - 1; n >= 0; --n) {
    const auto &node = graph.node(n);
    if (!reachesLoss(node, deps))
      continue;
    for (int i = 0; i < node.input_size(); ++i)
      if (isTrainableSlot(node, i))
        deps.insert(node.input(i));
  }
  return deps;
}

bool reachesLoss(const onnx::NodeProto &node, const llvm::StringSet<> &deps) {
  return !hasIntegerResults(node) &&
         llvm::any_of(node.output(),
                      [&](const std::string &o) { return deps.contains(o); });
}

bool isTrainableSlot(const onnx::NodeProto &node, int i) {
  return !isConfigurationSlot(node, i) && !isIndexSlot(node, i);
}

/// Whether a float tensor holds an inf or a nan.
static bool holdsNonFinite(DenseElementsAttr attr) {
  if (!attr || !isa<FloatType>(attr.getElementType()))
    return false;
  if (attr.getElementType().isF32())
    return llvm::any_of(attr.getValues<float>(),
                        [](float v) { return !std::isfinite(v); });
  return llvm::any_of(attr.getValues<APFloat>(),
                      [](const APFloat &v) { return !v.isFinite(); });
}

FailureOr<SmallVector<std::pair<std::string, StringRef>>>
selectStateArguments(GraphImporter &gi, const onnx::GraphProto &graph,
                     const ImportOptions &options,
                     const llvm::StringSet<> &initNames) {
  SmallVector<std::pair<std::string, StringRef>> stateArgs;
  llvm::StringSet<> frozen;
  for (const auto &f : options.frozen)
    frozen.insert(f);
  for (const auto &node : graph.node())
    for (int i = 0; i < node.input_size(); ++i)
      if (isRunningStatisticSlot(node, i))
        gi.bufferNames.insert(node.input(i));
  // Initializers read only at non-differentiable inputs (Dropout's ratio,
  // Clip's bounds, Pow's exponent) stay constants: they configure ops.
  // (separateInitializerRoles has given an initializer used in several
  // roles one copy per role.)
  auto configSlot = isConfigurationSlot;
  llvm::StringSet<> differentiableUse;
  for (const auto &node : graph.node())
    for (int i = 0; i < node.input_size(); ++i)
      if (!configSlot(node, i))
        differentiableUse.insert(node.input(i));
  // Values the first graph output (the loss, or what the loss is computed
  // from) depends on, through differentiable inputs: the nodes are in
  // topological order (ONNX IR spec, "Graphs"), so one reverse sweep
  // finds them. An initializer outside this set gets no gradient; like
  // PyTorch, which skips parameters whose .grad is None (no update, no
  // weight decay), it stays a constant. Nodes with subgraphs (If, Loop,
  // Scan) may read outer values implicitly: then every initializer counts.
  bool implicitReads = false;
  for (const auto &node : graph.node())
    for (const auto &attr : node.attribute())
      implicitReads |= attr.has_g() || attr.graphs_size() > 0;
  llvm::StringSet<> lossDeps = lossDependencies(graph);
  for (const auto &t : graph.initializer()) {
    if (!isFloatDType(t.data_type()) || frozen.contains(t.name()) ||
        !differentiableUse.contains(t.name()))
      continue;
    bool isBuffer = gi.bufferNames.contains(t.name());
    if (!isBuffer && !implicitReads && !lossDeps.contains(t.name()))
      continue;
    // No parameter holds inf or nan: such an initializer is a constant
    // an exporter folded (torch.onnx.export's causal mask, -inf above
    // the diagonal).
    if (holdsNonFinite(gi.constants[t.name()].first)) {
      if (!isBuffer)
        continue;
      (void)gi.fail(ImportErrorKind::Invalid,
                    "initializer '" + t.name() +
                        "' (a BatchNormalization running statistic) "
                        "holds inf or nan; training would carry it into "
                        "every step: give it finite values");
      return failure();
    }
    stateArgs.push_back({t.name(), isBuffer ? "buffer" : "param"});
  }
  // Parameters first, then buffers.
  std::stable_sort(stateArgs.begin(), stateArgs.end(),
                   [](const auto &a, const auto &b) {
                     return a.second == "param" && b.second == "buffer";
                   });
  if (llvm::is_contained(options.frozen, "")) {
    (void)gi.fail(ImportErrorKind::Invalid,
                  "--freeze: empty initializer name; give a "
                  "comma-separated list such as --freeze=w1,b1");
    return failure();
  }
  for (const auto &f : options.frozen)
    if (!initNames.contains(f)) {
      (void)gi.fail(ImportErrorKind::Invalid,
                    "--freeze " + f +
                        ": the model has no initializer of "
                        "that name");
      return failure();
    }
  return stateArgs;
}

} // namespace ddpc::onnx_import

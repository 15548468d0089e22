//===- InitializerRoles.cpp - one initializer copy per training role ------===//
//
// Part of ddpc. See separateInitializerRoles in Importer.h.
//
// A training program keeps each float initializer in one storage role: a
// trainable parameter, a buffer (BatchNormalization's running statistics,
// updated by every step), or a constant (configuration inputs: Dropout's
// ratio, Clip's bounds, Pow's exponent). Tools that merge initializers of
// equal contents (onnxoptimizer's eliminate_duplicate_initializer, onnx-
// simplifier) make one name serve several roles: BatchNorm's scale and its
// running variance are both all ones, its bias and running mean all zeros.
// Kept as one tensor, the scale would never be trained and the running
// statistics would flow into it. So the model is rewritten first: the
// trainable uses (those through which the loss depends on it) keep the
// name, each running-statistics slot gets a copy of its own (two
// BatchNorms never share a buffer) and the configuration slots one
// constant copy. (A model that reads a running statistic in a trained
// computation could mean one tensor; merging tools make two far more often.
// `--freeze NAME` freezes the trainable uses; the buffer copy still
// updates, as a frozen module's buffers do in PyTorch.)
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

namespace ddpc {

using namespace onnx_import;

namespace {

struct Use {
  int node;
  int input;
};

std::string nodeLabel(const onnx::NodeProto &n, int index) {
  return n.name().empty() ? n.op_type() + "_" + std::to_string(index)
                          : n.name();
}

} // namespace

static void separateRoles(onnx::ModelProto &model, bool &changed) {
  onnx::GraphProto *graph = model.mutable_graph();
  llvm::StringSet<> taken;
  for (const auto &t : graph->initializer())
    taken.insert(t.name());
  for (const auto &vi : graph->input())
    taken.insert(vi.name());
  for (const auto &n : graph->node())
    for (const auto &o : n.output())
      taken.insert(o);
  auto freshName = [&](const std::string &base) {
    std::string name = base;
    for (int k = 2; taken.contains(name); ++k)
      name = base + "_" + std::to_string(k);
    taken.insert(name);
    return name;
  };
  llvm::StringSet<> lossDeps = lossDependencies(*graph);

  int numInits = graph->initializer_size();
  for (int t = 0; t < numInits; ++t) {
    const onnx::TensorProto init = graph->initializer(t);
    if (!isFloatDType(init.data_type()))
      continue;
    const std::string &name = init.name();
    // Trainable: a use through which the loss depends on it (the
    // parameter selection of Importer.cpp); other uses (a second head's
    // input, an output nothing trains) read whatever the tensor holds.
    llvm::SmallVector<Use> buffers, configs, trainable;
    for (int n = 0; n < graph->node_size(); ++n) {
      const onnx::NodeProto &node = graph->node(n);
      for (int i = 0; i < node.input_size(); ++i) {
        if (node.input(i) != name)
          continue;
        if (isRunningStatisticSlot(node, i))
          buffers.push_back({n, i});
        else if (isConfigurationSlot(node, i))
          configs.push_back({n, i});
        else if (isTrainableSlot(node, i) && reachesLoss(node, lossDeps))
          trainable.push_back({n, i});
      }
    }
    int roles = !buffers.empty() + !configs.empty() + !trainable.empty();
    if (roles <= 1 && buffers.size() <= 1)
      continue;
    // Trainable uses keep the name; else the first buffer use does.
    size_t firstBufferCopy = trainable.empty() ? 1 : 0;
    auto addCopy = [&](const std::string &copyName) {
      onnx::TensorProto *copy = graph->add_initializer();
      *copy = init;
      copy->set_name(copyName);
      changed = true;
      // IR < 4 lists initializers among the graph inputs.
      for (int i = 0, e = graph->input_size(); i < e; ++i)
        if (graph->input(i).name() == name) {
          onnx::ValueInfoProto *vi = graph->add_input();
          *vi = graph->input(i);
          vi->set_name(copyName);
          break;
        }
    };
    for (size_t k = firstBufferCopy; k < buffers.size(); ++k) {
      onnx::NodeProto *node = graph->mutable_node(buffers[k].node);
      std::string copyName =
          freshName(name + "." + nodeLabel(*node, buffers[k].node) +
                    (buffers[k].input == 3 ? ".running_mean" : ".running_var"));
      addCopy(copyName);
      node->set_input(buffers[k].input, copyName);
    }
    if (!configs.empty() && (!trainable.empty() || !buffers.empty())) {
      std::string copyName = freshName(name + ".constant");
      addCopy(copyName);
      for (const Use &u : configs)
        graph->mutable_node(u.node)->set_input(u.input, copyName);
    }
  }
}

void separateInitializerRoles(std::string &modelBytes) {
  onnx::ModelProto model;
  if (!model.ParseFromString(modelBytes))
    return; // The importer reports it.
  bool changed = false;
  separateRoles(model, changed);
  if (changed)
    modelBytes = model.SerializeAsString();
}

} // namespace ddpc

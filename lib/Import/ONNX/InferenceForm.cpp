//===- InferenceForm.cpp - a training-mode export as model.eval() writes it
//===//
//
// Part of ddpc. See toInferenceForm in Importer.h.
//
// torch.onnx.export(training=TRAINING) flags nodes for training:
// BatchNormalization gets training_mode=1 (opset 14+) or the four training
// outputs of opsets 9-13, Dropout a training_mode=true input. Inference
// engines honour the flags (batch statistics, random masks), so the trained
// model a training program writes (--save) is rewritten into the form an
// eval-mode export has: the flags cleared and the training outputs dropped.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Import/ONNX/Importer.h"

#include "llvm/ADT/StringSet.h"

#include <onnx/onnx_pb.h>

#include <tuple>

namespace ddpc {

std::vector<std::string> toInferenceForm(std::string &modelBytes) {
  std::vector<std::string> kept;
  onnx::ModelProto model;
  if (!model.ParseFromString(modelBytes))
    return kept;
  onnx::GraphProto &graph = *model.mutable_graph();
  // Names something reads: a node input or a graph output.
  llvm::StringSet<> read;
  for (const auto &n : graph.node())
    for (const auto &in : n.input())
      read.insert(in);
  for (const auto &out : graph.output())
    read.insert(out.name());
  bool changed = false;
  llvm::StringSet<> dropped; // Dropout training_mode inputs removed
  // Identity nodes that stand in for the running-statistic outputs that
  // something reads, inserted after their node once the loop is done:
  // (node index, from, to).
  std::vector<std::tuple<int, std::string, std::string>> bridges;
  for (int index = 0; index < graph.node_size(); ++index) {
    onnx::NodeProto &n = *graph.mutable_node(index);
    if (!n.domain().empty() && n.domain() != "ai.onnx")
      continue;
    if (n.op_type() == "BatchNormalization") {
      // saved_mean/saved_var (outputs 3, 4 of opsets 9-13) are statistics
      // of a batch: an inference model has none, so a node whose saved
      // statistics are read keeps its training form.
      bool savedRead = false;
      for (int i = 3; i < n.output_size(); ++i)
        savedRead |= !n.output(i).empty() && read.contains(n.output(i));
      if (savedRead) {
        kept.push_back("BatchNormalization node '" + n.name() +
                       "': its saved mean/variance outputs are read, so the "
                       "saved model keeps its training form (onnxruntime "
                       "then uses batch statistics)");
        continue;
      }
      // In eval mode the running statistics do not change: a reader of an
      // updated running mean (variance) reads the trained input 3 (4).
      for (int i = 1; i < 3 && i < n.output_size(); ++i)
        if (!n.output(i).empty() && read.contains(n.output(i)) &&
            n.input_size() > i + 2)
          bridges.emplace_back(index, n.input(i + 2), n.output(i));
      if (n.output_size() > 1) {
        n.mutable_output()->DeleteSubrange(1, n.output_size() - 1);
        changed = true;
      }
      auto *attrs = n.mutable_attribute();
      for (int i = attrs->size() - 1; i >= 0; --i)
        if (attrs->Get(i).name() == "training_mode") {
          attrs->DeleteSubrange(i, 1);
          changed = true;
        }
    } else if (n.op_type() == "Dropout" && n.input_size() > 2 &&
               !n.input(2).empty()) {
      // training_mode absent means false; the mask is then all true.
      dropped.insert(n.input(2));
      n.mutable_input()->DeleteSubrange(2, n.input_size() - 2);
      changed = true;
    }
  }
  if (!bridges.empty()) {
    // Nodes stay in topological order: each Identity reads an input of
    // the node it follows and is read only after that node.
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    size_t next = 0;
    for (int index = 0; index < graph.node_size(); ++index) {
      *nodes.Add() = graph.node(index);
      for (; next < bridges.size() && std::get<0>(bridges[next]) == index;
           ++next) {
        onnx::NodeProto *id = nodes.Add();
        id->set_op_type("Identity");
        id->set_name(std::get<2>(bridges[next]) + "/eval");
        id->add_input(std::get<1>(bridges[next]));
        id->add_output(std::get<2>(bridges[next]));
      }
    }
    graph.mutable_node()->Swap(&nodes);
  }
  // The flag values nothing reads any more: their initializers and
  // Constant nodes go too.
  read.clear();
  for (const auto &n : graph.node())
    for (const auto &in : n.input())
      read.insert(in);
  for (const auto &out : graph.output())
    read.insert(out.name());
  auto unread = [&](const std::string &name) {
    return dropped.contains(name) && !read.contains(name);
  };
  auto *inits = graph.mutable_initializer();
  for (int i = inits->size() - 1; i >= 0; --i)
    if (unread(inits->Get(i).name()))
      inits->DeleteSubrange(i, 1);
  auto *nodes = graph.mutable_node();
  for (int i = nodes->size() - 1; i >= 0; --i)
    if (nodes->Get(i).op_type() == "Constant" &&
        nodes->Get(i).output_size() == 1 && unread(nodes->Get(i).output(0)))
      nodes->DeleteSubrange(i, 1);
  if (changed)
    modelBytes = model.SerializeAsString();
  return kept;
}

} // namespace ddpc

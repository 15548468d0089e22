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

namespace ddpc {

void toInferenceForm(std::string &modelBytes) {
  onnx::ModelProto model;
  if (!model.ParseFromString(modelBytes))
    return;
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
  for (auto &n : *graph.mutable_node()) {
    if (!n.domain().empty() && n.domain() != "ai.onnx")
      continue;
    if (n.op_type() == "BatchNormalization") {
      // A training output that something reads keeps the node as it is.
      bool extraRead = false;
      for (int i = 1; i < n.output_size(); ++i)
        extraRead |= !n.output(i).empty() && read.contains(n.output(i));
      if (extraRead)
        continue;
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
}

} // namespace ddpc

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

#include <algorithm>
#include <cstring>

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

/// torch.onnx.export in eval mode merges initializers of equal values and
/// writes each merged one as an Identity of the one it kept: the five
/// LayerNorm scales of a fresh model (all ones) become Identity copies of
/// one. Trained as written they would be one parameter, so each Identity of
/// a float initializer (in the main graph, not a graph output) becomes an
/// initializer of its own with the same values, as in the exported module.
/// Returns the names of the copies.
static std::vector<std::string> splitIdentityCopies(onnx::ModelProto &model,
                                                    bool &changed) {
  onnx::GraphProto *graph = model.mutable_graph();
  llvm::StringMap<int> floatInits;
  for (int t = 0; t < graph->initializer_size(); ++t)
    if (isFloatDType(graph->initializer(t).data_type()))
      floatInits[graph->initializer(t).name()] = t;
  llvm::StringSet<> graphOutputs, graphInputs;
  for (const auto &o : graph->output())
    graphOutputs.insert(o.name());
  for (const auto &i : graph->input())
    graphInputs.insert(i.name());
  std::vector<std::string> copies, sources;
  auto *nodes = graph->mutable_node();
  for (int n = nodes->size() - 1; n >= 0; --n) {
    const onnx::NodeProto &node = nodes->Get(n);
    if (node.op_type() != "Identity" ||
        (!node.domain().empty() && node.domain() != "ai.onnx") ||
        node.input_size() != 1 || node.output_size() != 1)
      continue;
    auto it = floatInits.find(node.input(0));
    const std::string &out = node.output(0);
    // An initializer that is also a graph input (IR < 4) may be fed at
    // run time: its copies stay Identity nodes.
    if (it == floatInits.end() || graphOutputs.contains(out) ||
        graphInputs.contains(node.input(0)) || floatInits.count(out))
      continue;
    onnx::TensorProto copy = graph->initializer(it->second);
    copy.set_name(out);
    *graph->add_initializer() = std::move(copy);
    copies.push_back(out);
    sources.push_back(node.input(0));
    nodes->DeleteSubrange(n, 1);
    changed = true;
  }
  std::reverse(copies.begin(), copies.end());
  // A source that only its copies read is read by nothing now.
  if (!copies.empty()) {
    llvm::StringSet<> read;
    for (const auto &n : graph->node())
      for (const auto &in : n.input())
        read.insert(in);
    for (const auto &o : graph->output())
      read.insert(o.name());
    auto *inits = graph->mutable_initializer();
    for (int i = inits->size() - 1; i >= 0; --i) {
      const std::string &name = inits->Get(i).name();
      if (!read.contains(name) && !graphInputs.contains(name) &&
          llvm::is_contained(sources, name))
        inits->DeleteSubrange(i, 1);
    }
  }
  return copies;
}

/// The bytes of a float32 initializer's `count` values (raw_data or
/// float_data), or null for external data or a size that does not match.
static const char *floatBytes(const onnx::TensorProto &t, int64_t count) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return nullptr;
  if (t.has_raw_data())
    return t.raw_data().size() == static_cast<size_t>(count) * sizeof(float)
               ? t.raw_data().data()
               : nullptr;
  return t.float_data_size() == count
             ? reinterpret_cast<const char *>(t.float_data().data())
             : nullptr;
}

/// torch.onnx.export's constant folding turns `x @ W.t()` into a MatMul
/// with a folded initializer `onnx::MatMul_<n>` holding W^T. When W is
/// also read elsewhere (GPT-2's output head tied to the token embedding),
/// the file holds two independent tensors and the tie is lost. An
/// `onnx::`-named float32 matrix that equals another initializer's
/// transpose bit for bit becomes a Transpose node of it again, so both
/// uses train one parameter as in the exported module. Returns the names
/// of the re-tied initializers.
static std::vector<std::string>
retieFoldedTransposes(onnx::ModelProto &model,
                      const std::vector<std::string> &frozen, bool &changed) {
  onnx::GraphProto *graph = model.mutable_graph();
  std::vector<std::string> retied;
  llvm::StringSet<> graphInputs;
  for (const auto &i : graph->input())
    graphInputs.insert(i.name());
  llvm::StringSet<> frozenNames;
  for (const auto &f : frozen)
    frozenNames.insert(f);
  auto isMatrix = [&](const onnx::TensorProto &t) {
    return t.data_type() == onnx::TensorProto::FLOAT && t.dims_size() == 2 &&
           !graphInputs.contains(t.name()) && !frozenNames.contains(t.name());
  };
  auto isFolded = [](const onnx::TensorProto &t) {
    return llvm::StringRef(t.name()).starts_with("onnx::");
  };
  // Element (r, c) of a row-major float32 matrix with `cols` columns.
  auto at = [](const char *m, int64_t cols, int64_t r, int64_t c) {
    return m + (r * cols + c) * sizeof(float);
  };
  auto same = [](const char *x, const char *y) {
    return std::memcmp(x, y, sizeof(float)) == 0;
  };
  // Values that match their transpose by construction, not by folding:
  // constant matrices (zeros, ones) and symmetric ones (an identity).
  auto degenerate = [&](const char *m, int64_t rows, int64_t cols) {
    bool constant = true;
    for (int64_t i = 1; constant && i < rows * cols; ++i)
      constant = same(m, m + i * sizeof(float));
    if (constant)
      return true;
    if (rows != cols)
      return false;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = r + 1; c < cols; ++c)
        if (!same(at(m, cols, r, c), at(m, cols, c, r)))
          return false;
    return true;
  };
  std::vector<std::pair<std::string, std::string>> pairs; // (folded, source)
  for (const auto &b : graph->initializer()) {
    if (!isMatrix(b) || !isFolded(b))
      continue;
    for (const auto &a : graph->initializer()) {
      // The source is a weight the module names (never another folded
      // tensor, which could pair both ways).
      if (&a == &b || !isMatrix(a) || isFolded(a) || a.dims(0) != b.dims(1) ||
          a.dims(1) != b.dims(0))
        continue;
      int64_t rows = a.dims(0), cols = a.dims(1);
      const char *av = floatBytes(a, rows * cols);
      const char *bv = floatBytes(b, rows * cols);
      if (!av || !bv || rows * cols == 0)
        continue;
      // Compared in place, stopping at the first difference.
      bool transposed = true;
      for (int64_t r = 0; transposed && r < rows; ++r)
        for (int64_t c = 0; transposed && c < cols; ++c)
          transposed = same(at(av, cols, r, c), at(bv, rows, c, r));
      if (transposed && !degenerate(av, rows, cols)) {
        pairs.push_back({b.name(), a.name()});
        break;
      }
    }
  }
  if (pairs.empty())
    return retied;
  llvm::StringSet<> folded;
  for (const auto &[b, a] : pairs)
    folded.insert(b);
  auto *inits = graph->mutable_initializer();
  for (int i = inits->size() - 1; i >= 0; --i)
    if (folded.contains(inits->Get(i).name()))
      inits->DeleteSubrange(i, 1);
  // The Transpose nodes come first: they read initializers only.
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (const auto &[b, a] : pairs) {
    onnx::NodeProto *t = nodes.Add();
    t->set_op_type("Transpose");
    t->set_name(b + "/retied");
    t->add_input(a);
    t->add_output(b);
    onnx::AttributeProto *perm = t->add_attribute();
    perm->set_name("perm");
    perm->set_type(onnx::AttributeProto::INTS);
    perm->add_ints(1);
    perm->add_ints(0);
    retied.push_back(b + " = " + a + "^T");
  }
  for (const auto &n : graph->node())
    *nodes.Add() = n;
  graph->mutable_node()->Swap(&nodes);
  changed = true;
  return retied;
}

std::vector<std::string>
separateInitializerRoles(std::string &modelBytes,
                         const std::vector<std::string> &frozen,
                         std::vector<std::string> *retied) {
  onnx::ModelProto model;
  if (!model.ParseFromString(modelBytes))
    return {}; // The importer reports it.
  bool changed = false;
  std::vector<std::string> copies = splitIdentityCopies(model, changed);
  std::vector<std::string> ties = retieFoldedTransposes(model, frozen, changed);
  if (retied)
    *retied = ties;
  separateRoles(model, changed);
  if (changed)
    modelBytes = model.SerializeAsString();
  return copies;
}

} // namespace ddpc

//===- RematGraph.cpp - the forward pass as the remat solver sees it ------===//
//
// Part of ddpc. See include/ddpc/Analysis/RematGraph.h.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Analysis/RematGraph.h"
#include "ddpc/Analysis/CostModel.h"
#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"

#include "llvm/ADT/EquivalenceClasses.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;

namespace ddpc {

namespace {

/// Operands of `op` and the values its regions use from above.
llvm::SetVector<Value> usedValues(Operation *op) {
  llvm::SetVector<Value> used;
  used.insert(op->getOperands().begin(), op->getOperands().end());
  for (Region &r : op->getRegions())
    getUsedValuesDefinedAbove(r, used);
  return used;
}

} // namespace

Operation *forwardBoundary(Block &body) {
  for (Operation &op : body)
    if (nodeNamesOf(op.getLoc()).empty() && isa<linalg::LinalgOp>(op) &&
        !isa<linalg::FillOp>(op))
      return &op;
  return nullptr;
}

llvm::DenseSet<Value> randomValues(func::FuncOp f) {
  llvm::DenseSet<Value> random;
  Block &body = f.getBody().front();
  for (BlockArgument arg : body.getArguments())
    if (auto n =
            f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attrs::kName);
        n && n.getValue() == "rng")
      random.insert(arg);
  for (Operation &op : body)
    if (llvm::any_of(usedValues(&op),
                     [&](Value v) { return random.contains(v); }))
      random.insert(op.getResults().begin(), op.getResults().end());
  return random;
}

bool isFreeToRecompute(Operation *op) {
  return isa<tensor::EmptyOp, linalg::FillOp, tensor::ExpandShapeOp,
             tensor::CollapseShapeOp>(op) &&
         isMemoryEffectFree(op);
}

RematGraph buildRematGraph(func::FuncOp micro) {
  RematGraph graph;
  if (micro.isExternal())
    return graph;
  Block &body = micro.getBody().front();
  Operation *boundary = forwardBoundary(body);
  if (!boundary)
    return graph;
  llvm::DenseSet<Value> random = randomValues(micro);

  // Forward ops sharing a node name form one node.
  SmallVector<Operation *> forward;
  llvm::EquivalenceClasses<Operation *> classes;
  llvm::StringMap<Operation *> byName;
  for (Operation &op : body) {
    if (&op == boundary)
      break;
    std::string names = nodeNamesOf(op.getLoc());
    if (names.empty())
      continue;
    forward.push_back(&op);
    classes.insert(&op);
    for (StringRef part : llvm::split(names, '+')) {
      auto [it, fresh] = byName.try_emplace(part, &op);
      if (!fresh)
        classes.unionSets(it->second, &op);
    }
  }
  llvm::DenseMap<Operation *, int> nodeOf;
  llvm::DenseMap<Operation *, int> leaderNode;
  for (Operation *op : forward) {
    Operation *leader = classes.getLeaderValue(op);
    auto [it, fresh] =
        leaderNode.try_emplace(leader, static_cast<int>(graph.nodes.size()));
    if (fresh)
      graph.nodes.push_back({});
    nodeOf[op] = it->second;
  }
  // Names in program order, each once.
  std::vector<llvm::StringSet<llvm::MallocAllocator>> seen(graph.nodes.size());
  for (Operation *op : forward) {
    RematGraph::Node &node = graph.nodes[nodeOf[op]];
    std::string names = nodeNamesOf(op->getLoc());
    for (StringRef part : llvm::split(names, '+'))
      if (seen[nodeOf[op]].insert(part).second)
        node.name += (node.name.empty() ? "" : "+") + part.str();
  }
  for (RematGraph::Node &node : graph.nodes)
    node.recomputable = true;

  // The nodes `v` reads: its producer's, through free ops.
  std::function<void(Value, SmallVectorImpl<int> &)> producers =
      [&](Value v, SmallVectorImpl<int> &out) {
        Operation *def = v.getDefiningOp();
        if (!def || def->getBlock() != &body)
          return;
        if (auto it = nodeOf.find(def); it != nodeOf.end()) {
          out.push_back(it->second);
          return;
        }
        if (isFreeToRecompute(def))
          for (Value operand : def->getOperands())
            producers(operand, out);
      };
  auto isBackward = [&](Operation *user) {
    Operation *top = body.findAncestorOpInBlock(*user);
    return top && !top->isBeforeInBlock(boundary) && !isa<func::ReturnOp>(top);
  };
  for (Operation *op : forward) {
    int id = nodeOf[op];
    RematGraph::Node &node = graph.nodes[id];
    node.flops += estimatedFlops(op);
    if (!isMemoryEffectFree(op) || llvm::any_of(op->getResults(), [&](Value v) {
          return random.contains(v);
        }))
      node.recomputable = false;
    for (Value r : op->getResults()) {
      bool outside = false;
      for (Operation *user : r.getUsers()) {
        Operation *top = body.findAncestorOpInBlock(*user);
        if (!top || (nodeOf.count(top) && nodeOf[top] == id))
          continue;
        outside = true;
        if (isBackward(user))
          node.saved = true;
      }
      if (outside)
        if (auto t = dyn_cast<RankedTensorType>(r.getType()))
          node.bytes += staticBytes(t);
    }
    SmallVector<int> in;
    for (Value v : usedValues(op))
      producers(v, in);
    for (int j : in)
      if (j != id && !llvm::is_contained(node.inputs, j))
        node.inputs.push_back(j);
  }
  // Backward reading a node through an unnamed forward op (a reshape the
  // pass does not copy) keeps it whatever the choice.
  for (Operation &op : body) {
    if (&op == boundary)
      break;
    if (nodeOf.count(&op))
      continue;
    bool read = llvm::any_of(op.getUsers(), isBackward);
    if (!read)
      continue;
    SmallVector<int> in;
    for (Value v : usedValues(&op))
      producers(v, in);
    for (int j : in)
      graph.nodes[j].saved = true, graph.nodes[j].recomputable = false;
  }
  return graph;
}

} // namespace ddpc

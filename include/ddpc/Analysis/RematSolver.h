//===- RematSolver.h - which activations backward recomputes ----*- C++ -*-===//
//
// Part of ddpc. --remat auto's choice on a model of the forward pass: the
// nodes (ONNX nodes, or fused groups of them) of @train_micro before the
// loss, the bytes each writes, the FLOPs it costs and the earlier nodes it
// reads. Backward reads some nodes' outputs (`saved`); each of those is
// either kept from forward to backward or recomputed in backward, and a
// recomputed node needs each input kept or recomputed too. The choice
// minimizes the recomputed FLOPs with the kept bytes under a bound.
//
// This is the rematerialization MILP of Checkmate (Jain et al., MLSys 2020,
// section 4) collapsed to the one point that matters for the peak of a
// training step, the start of backward: S (kept) and R (recomputed) become
// one column each, and a node is recomputed at most once (ddpc-rematerialize
// puts one copy before backward's first read). The driver compiles the
// choice and tightens the bound by what its memory plan misses.
//
// Exact: a mixed-integer program solved by GLPK (glp_intopt), binary x_i
// (recompute), continuous k_i in [0, 1] (kept; integral at the optimum):
//   min  sum_i (flops_i + 1) x_i
//   s.t. k_i + x_i >= 1             for each saved node i
//        k_j + x_j - x_i >= 0       for each recomputable i, input j of i
//        sum_i bytes_i k_i <= bound
//        x_i = 0                    for nodes that may not be recomputed
// (+1 prefers fewer recomputed nodes among zero-FLOP ones). Beyond
// kRematExactMaxNodes, the heuristic: the LP relaxation's optimum rounded
// at several thresholds (Checkmate's section 5 rounds it too), and from
// each rounding and from nothing a greedy that flips one node at a time,
// the most kept bytes freed per FLOP added, until the bound holds, then
// undoes the costliest flips the bound does not need; the cheapest result
// wins. Its gap to the exact optimum on small graphs is measured in
// unittests/Analysis/RematSolverTest.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_ANALYSIS_REMATSOLVER_H
#define DDPC_ANALYSIS_REMATSOLVER_H

#include <cstdint>
#include <string>
#include <vector>

namespace ddpc {

/// The forward pass as the solver sees it; nodes in program order.
struct RematGraph {
  struct Node {
    std::string name;          ///< "Conv_3", "Add_7+Relu_8"
    int64_t bytes = 0;         ///< outputs read outside the node
    int64_t flops = 0;         ///< to compute it once (estimatedFlops)
    bool saved = false;        ///< backward reads an output
    bool recomputable = false; ///< pure and not random (no Dropout)
    std::vector<int> inputs;   ///< earlier nodes whose outputs it reads
  };
  std::vector<Node> nodes;
};

/// One choice: which nodes backward recomputes.
struct RematSolution {
  std::vector<bool> recompute; ///< per node of the graph
  int64_t flops = 0;           ///< recomputed FLOPs, sum over `recompute`
  int64_t keptBytes = 0;       ///< kept from forward to backward
  bool feasible = false;       ///< keptBytes <= the bound
  bool optimal = false;        ///< proven optimal (the MILP finished)
  std::string method;          ///< "MILP (GLPK)" or the heuristic's
};

/// Bytes kept from forward to backward when backward recomputes
/// `recompute`: saved nodes not recomputed, and inputs of recomputed nodes
/// not recomputed themselves.
int64_t rematKeptBytes(const RematGraph &graph,
                       const std::vector<bool> &recompute);

/// Sum of the recomputed nodes' FLOPs.
int64_t rematFlops(const RematGraph &graph, const std::vector<bool> &recompute);

/// The cheapest choice with rematKeptBytes <= `bound`, by the MILP above;
/// GLPK stops after `timeLimitSeconds` with its best choice so far
/// (`optimal` false). Infeasible: `feasible` false, nothing recomputed.
RematSolution solveRematExact(const RematGraph &graph, int64_t bound,
                              double timeLimitSeconds = 20);

/// The heuristic above (an LP and O(n^2) flips per start); `feasible`
/// false when none of its starts reaches `bound`.
RematSolution solveRematHeuristic(const RematGraph &graph, int64_t bound);

/// Graphs up to this many nodes get the MILP; larger ones the heuristic.
constexpr size_t kRematExactMaxNodes = 600;

} // namespace ddpc

#endif // DDPC_ANALYSIS_REMATSOLVER_H

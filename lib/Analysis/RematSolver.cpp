//===- RematSolver.cpp - which activations backward recomputes ------------===//
//
// Part of ddpc. See include/ddpc/Analysis/RematSolver.h.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Analysis/RematSolver.h"

#include <glpk.h>

#include <algorithm>
#include <numeric>

namespace ddpc {

namespace {

/// Each node's inputs without repeats (a node may read two outputs of one
/// producer).
std::vector<std::vector<int>> distinctInputs(const RematGraph &graph) {
  std::vector<std::vector<int>> inputs;
  for (const RematGraph::Node &n : graph.nodes) {
    std::vector<int> in = n.inputs;
    std::sort(in.begin(), in.end());
    in.erase(std::unique(in.begin(), in.end()), in.end());
    inputs.push_back(std::move(in));
  }
  return inputs;
}

RematSolution finish(const RematGraph &graph, std::vector<bool> recompute,
                     int64_t bound, const char *method) {
  RematSolution s;
  s.flops = rematFlops(graph, recompute);
  s.keptBytes = rematKeptBytes(graph, recompute);
  s.feasible = s.keptBytes <= bound;
  s.recompute = std::move(recompute);
  s.method = method;
  return s;
}

} // namespace

int64_t rematKeptBytes(const RematGraph &graph,
                       const std::vector<bool> &recompute) {
  size_t n = graph.nodes.size();
  std::vector<bool> kept(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (recompute[i]) {
      for (int j : graph.nodes[i].inputs)
        if (!recompute[j])
          kept[j] = true;
    } else if (graph.nodes[i].saved) {
      kept[i] = true;
    }
  }
  int64_t bytes = 0;
  for (size_t i = 0; i < n; ++i)
    if (kept[i])
      bytes += graph.nodes[i].bytes;
  return bytes;
}

int64_t rematFlops(const RematGraph &graph,
                   const std::vector<bool> &recompute) {
  int64_t flops = 0;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (recompute[i])
      flops += graph.nodes[i].flops;
  return flops;
}

namespace {

/// The MILP of RematSolver.h; with `integer` false its LP relaxation.
glp_prob *buildProblem(const RematGraph &graph,
                       const std::vector<std::vector<int>> &inputs,
                       int64_t bound, bool integer) {
  int n = static_cast<int>(graph.nodes.size());
  glp_term_out(GLP_OFF);
  glp_prob *lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  // Columns 1..n: x_i (recompute); n+1..2n: k_i (kept).
  glp_add_cols(lp, 2 * n);
  for (int i = 0; i < n; ++i) {
    const RematGraph::Node &node = graph.nodes[i];
    int x = i + 1, k = n + i + 1;
    if (integer)
      glp_set_col_kind(lp, x, GLP_BV);
    glp_set_col_bnds(lp, x, node.recomputable ? GLP_DB : GLP_FX, 0,
                     node.recomputable ? 1 : 0);
    glp_set_obj_coef(lp, x, static_cast<double>(node.flops) + 1);
    glp_set_col_bnds(lp, k, GLP_DB, 0, 1);
  }
  std::vector<int> ind(2 * n + 2);
  std::vector<double> val(2 * n + 2);
  auto addRow = [&](std::vector<std::pair<int, double>> terms, int type,
                    double lo, double hi) {
    int row = glp_add_rows(lp, 1);
    for (size_t t = 0; t < terms.size(); ++t) {
      ind[t + 1] = terms[t].first;
      val[t + 1] = terms[t].second;
    }
    glp_set_mat_row(lp, row, static_cast<int>(terms.size()), ind.data(),
                    val.data());
    glp_set_row_bnds(lp, row, type, lo, hi);
  };
  for (int i = 0; i < n; ++i) {
    if (graph.nodes[i].saved)
      addRow({{n + i + 1, 1.0}, {i + 1, 1.0}}, GLP_LO, 1, 0);
    if (graph.nodes[i].recomputable)
      for (int j : inputs[i])
        addRow({{n + j + 1, 1.0}, {j + 1, 1.0}, {i + 1, -1.0}}, GLP_LO, 0, 0);
  }
  std::vector<std::pair<int, double>> memory;
  for (int i = 0; i < n; ++i)
    if (graph.nodes[i].bytes > 0)
      memory.push_back({n + i + 1, static_cast<double>(graph.nodes[i].bytes)});
  if (!memory.empty())
    addRow(memory, GLP_UP, 0, static_cast<double>(bound));

  return lp;
}

} // namespace

RematSolution solveRematExact(const RematGraph &graph, int64_t bound,
                              double timeLimitSeconds) {
  int n = static_cast<int>(graph.nodes.size());
  std::vector<std::vector<int>> inputs = distinctInputs(graph);
  // A binary within GLPK's integrality tolerance of 0 still frees bytes in
  // the memory row (1e-5 of a 10 MB activation is 100 bytes), so the
  // tolerance is tight, each result is recounted exactly, and a result the
  // recount rejects tightens the row by what it missed.
  int64_t row = bound;
  for (int attempt = 0; attempt < 4; ++attempt) {
    glp_prob *lp = buildProblem(graph, inputs, row, true);
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.presolve = GLP_ON;
    parm.msg_lev = GLP_MSG_OFF;
    parm.tol_int = 1e-9;
    parm.tm_lim = static_cast<int>(timeLimitSeconds * 1000);
    int rc = glp_intopt(lp, &parm);
    int status = glp_mip_status(lp);
    bool found = (rc == 0 || rc == GLP_ETMLIM) &&
                 (status == GLP_OPT || status == GLP_FEAS);
    std::vector<bool> recompute(n, false);
    if (found)
      for (int i = 0; i < n; ++i)
        recompute[i] = glp_mip_col_val(lp, i + 1) > 0.5;
    glp_delete_prob(lp);
    if (!found)
      break;
    RematSolution s = finish(graph, std::move(recompute), bound, "MILP (GLPK)");
    if (s.feasible) {
      s.optimal = status == GLP_OPT && rc == 0 && row == bound;
      return s;
    }
    row -= std::max<int64_t>(s.keptBytes - row, 1);
  }
  RematSolution none =
      finish(graph, std::vector<bool>(n, false), bound, "MILP (GLPK)");
  none.feasible = false;
  return none;
}

namespace {

/// From `x`: flips nodes to recomputed, the most kept bytes freed per FLOP
/// first (failing that, the cheapest flip that frees nothing yet but lets
/// a flip of an input free bytes), until the bound holds; then undoes the
/// costliest flips the bound does not need.
std::vector<bool> improve(const RematGraph &graph,
                          const std::vector<std::vector<int>> &inputs,
                          int64_t bound, std::vector<bool> x) {
  size_t n = graph.nodes.size();
  // needed[j]: recomputed nodes that read j. Node j is kept when it is not
  // recomputed and saved or needed.
  std::vector<int> needed(n, 0);
  for (size_t i = 0; i < n; ++i)
    if (x[i])
      for (int j : inputs[i])
        ++needed[j];
  auto keptNow = [&](size_t j) {
    return !x[j] && (graph.nodes[j].saved || needed[j] > 0);
  };
  // Kept bytes that flipping i to recomputed adds (negative: frees).
  auto deltaOn = [&](size_t i) {
    int64_t d = keptNow(i) ? -graph.nodes[i].bytes : 0;
    for (int j : inputs[i])
      if (!x[j] && !graph.nodes[j].saved && needed[j] == 0)
        d += graph.nodes[j].bytes;
    return d;
  };
  int64_t kept = rematKeptBytes(graph, x);
  while (kept > bound) {
    long best = -1;
    double bestScore = 0;
    int64_t bestDelta = 0;
    bool bestFrees = false;
    for (size_t i = 0; i < n; ++i) {
      if (x[i] || !graph.nodes[i].recomputable)
        continue;
      int64_t d = deltaOn(i);
      double cost = static_cast<double>(graph.nodes[i].flops) + 1;
      if (d < 0) {
        double score = static_cast<double>(-d) / cost;
        if (!bestFrees || score > bestScore)
          best = static_cast<long>(i), bestScore = score, bestDelta = d,
          bestFrees = true;
      } else if (!bestFrees && d == 0 && keptNow(i)) {
        if (best < 0 || cost < bestScore)
          best = static_cast<long>(i), bestScore = cost, bestDelta = d;
      }
    }
    if (best < 0)
      break;
    x[best] = true;
    for (int j : inputs[best])
      ++needed[j];
    kept += bestDelta;
  }
  if (kept > bound)
    return x;
  std::vector<size_t> order;
  for (size_t i = 0; i < n; ++i)
    if (x[i])
      order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return graph.nodes[a].flops > graph.nodes[b].flops;
  });
  for (size_t i : order) {
    x[i] = false;
    if (rematKeptBytes(graph, x) > bound)
      x[i] = true;
  }
  return x;
}

/// The optimal x of the LP relaxation; empty when GLPK finds none.
std::vector<double> relaxedOptimum(const RematGraph &graph,
                                   const std::vector<std::vector<int>> &inputs,
                                   int64_t bound) {
  glp_prob *lp = buildProblem(graph, inputs, bound, false);
  glp_smcp parm;
  glp_init_smcp(&parm);
  parm.presolve = GLP_ON;
  parm.msg_lev = GLP_MSG_OFF;
  std::vector<double> x;
  if (glp_simplex(lp, &parm) == 0 && glp_get_status(lp) == GLP_OPT)
    for (size_t i = 0; i < graph.nodes.size(); ++i)
      x.push_back(glp_get_col_prim(lp, static_cast<int>(i) + 1));
  glp_delete_prob(lp);
  return x;
}

} // namespace

RematSolution solveRematHeuristic(const RematGraph &graph, int64_t bound) {
  size_t n = graph.nodes.size();
  std::vector<std::vector<int>> inputs = distinctInputs(graph);
  std::vector<std::vector<bool>> starts = {std::vector<bool>(n, false)};
  std::vector<double> relaxed = relaxedOptimum(graph, inputs, bound);
  if (!relaxed.empty())
    for (double t : {0.999, 0.5, 0.25, 0.1, 1e-3}) {
      std::vector<bool> x(n);
      for (size_t i = 0; i < n; ++i)
        x[i] = graph.nodes[i].recomputable && relaxed[i] >= t;
      starts.push_back(std::move(x));
    }
  RematSolution best;
  for (std::vector<bool> &x : starts) {
    RematSolution s = finish(graph, improve(graph, inputs, bound, x), bound,
                             "LP rounding (GLPK) and greedy");
    if (!best.feasible || (s.feasible && s.flops < best.flops) ||
        (s.feasible == best.feasible && best.recompute.empty()))
      best = std::move(s);
  }
  if (!best.feasible)
    best = finish(graph, std::vector<bool>(n, false), bound,
                  "LP rounding (GLPK) and greedy");
  return best;
}

} // namespace ddpc

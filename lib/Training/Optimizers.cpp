//===- Optimizers.cpp - The optimizers of a training step -----------------===//
//
// Part of ddpc. One row per optimizer of @apply: torch.optim.SGD
// (momentum, dampening, nesterov, L2 weight decay) and torch.optim.AdamW
// (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019;
// bias-corrected moments as in Kingma & Ba, "Adam", ICLR 2015, Alg. 1).
//
//===----------------------------------------------------------------------===//

#include "TrainingInternal.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <cstdio>
#include <cstdlib>

using namespace mlir;

namespace ddpc::training {
namespace {

/// Shortest round-trippable text of a hyper-parameter (%.17g trimmed).
std::string fmtNum(double v) {
  char buf[64];
  for (int prec = 6; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v)
      break;
  }
  return buf;
}

int sgdSlots(const TrainOptions &opts) { return opts.momentum != 0.0 ? 1 : 0; }

std::string describeSGD(const TrainOptions &opts) {
  return "sgd lr=" + fmtNum(opts.lr) + " momentum=" + fmtNum(opts.momentum) +
         " dampening=" + fmtNum(opts.dampening) +
         " nesterov=" + (opts.nesterov ? "1" : "0") +
         " weight_decay=" + fmtNum(opts.weightDecay);
}

Value updateSGD(OpBuilder &fb, Location loc, const TrainOptions &opts, Value p,
                Value g, ValueRange state, Value lr, Value step,
                SmallVectorImpl<Value> &newState) {
  auto shape = ttype(p).getShape();
  Type f32 = fb.getF32Type();
  double wd = opts.weightDecay, mom = opts.momentum, damp = opts.dampening;
  bool nesterov = opts.nesterov;
  if (wd != 0.0)
    g = ew(fb, loc, ValueRange{g, p}, shape, f32,
           [wd](OpBuilder &nb, Location l, ValueRange a) -> Value {
             Value w = scalarConst(nb, l, a[0].getType(), wd);
             return arith::AddFOp::create(
                 nb, l, a[0], arith::MulFOp::create(nb, l, w, a[1]));
           });
  Value update = g;
  if (!state.empty()) {
    Value buf = state[0];
    // torch: buf = g on the first step, else mom*buf + (1-damp)*g.
    Value nbuf =
        ew(fb, loc, ValueRange{buf, g, step}, shape, f32,
           [mom, damp](OpBuilder &nb, Location l, ValueRange a) -> Value {
             Type t = a[0].getType();
             Value later = arith::AddFOp::create(
                 nb, l,
                 arith::MulFOp::create(nb, l, scalarConst(nb, l, t, mom), a[0]),
                 arith::MulFOp::create(nb, l, scalarConst(nb, l, t, 1.0 - damp),
                                       a[1]));
             Value first = arith::CmpIOp::create(
                 nb, l, arith::CmpIPredicate::sle, a[2],
                 arith::ConstantIntOp::create(nb, l, a[2].getType(), 1));
             return arith::SelectOp::create(nb, l, first, a[1], later);
           });
    newState.push_back(nbuf);
    update = nesterov
                 ? ew(fb, loc, ValueRange{g, nbuf}, shape, f32,
                      [mom](OpBuilder &nb, Location l, ValueRange a) -> Value {
                        return arith::AddFOp::create(
                            nb, l, a[0],
                            arith::MulFOp::create(
                                nb, l, scalarConst(nb, l, a[0].getType(), mom),
                                a[1]));
                      })
                 : nbuf;
  }
  return ew(fb, loc, ValueRange{p, update, lr}, shape, f32,
            [](OpBuilder &nb, Location l, ValueRange a) -> Value {
              return arith::SubFOp::create(
                  nb, l, a[0], arith::MulFOp::create(nb, l, a[2], a[1]));
            });
}

int adamwSlots(const TrainOptions &) { return 2; }

std::string describeAdamW(const TrainOptions &opts) {
  return "adamw lr=" + fmtNum(opts.lr) + " betas=(" + fmtNum(opts.beta1) + "," +
         fmtNum(opts.beta2) + ") eps=" + fmtNum(opts.eps) +
         " weight_decay=" + fmtNum(opts.weightDecay);
}

Value updateAdamW(OpBuilder &fb, Location loc, const TrainOptions &opts,
                  Value p, Value g, ValueRange state, Value lr, Value step,
                  SmallVectorImpl<Value> &newState) {
  auto shape = ttype(p).getShape();
  Type f32 = fb.getF32Type();
  double wd = opts.weightDecay, b1 = opts.beta1, b2 = opts.beta2,
         eps = opts.eps;
  Value m = state[0], v = state[1];
  Value nm =
      ew(fb, loc, ValueRange{m, g}, shape, f32,
         [b1](OpBuilder &nb, Location l, ValueRange a) -> Value {
           Type t = a[0].getType();
           return arith::AddFOp::create(
               nb, l,
               arith::MulFOp::create(nb, l, scalarConst(nb, l, t, b1), a[0]),
               arith::MulFOp::create(nb, l, scalarConst(nb, l, t, 1.0 - b1),
                                     a[1]));
         });
  Value nv = ew(
      fb, loc, ValueRange{v, g}, shape, f32,
      [b2](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Type t = a[0].getType();
        Value g2 = arith::MulFOp::create(nb, l, a[1], a[1]);
        return arith::AddFOp::create(
            nb, l,
            arith::MulFOp::create(nb, l, scalarConst(nb, l, t, b2), a[0]),
            arith::MulFOp::create(nb, l, scalarConst(nb, l, t, 1.0 - b2), g2));
      });
  Value np =
      ew(fb, loc, ValueRange{p, nm, nv, lr, step}, shape, f32,
         [b1, b2, eps, wd](OpBuilder &nb, Location l, ValueRange a) -> Value {
           Type t = a[0].getType();
           auto c = [&](double x) { return scalarConst(nb, l, t, x); };
           Value lrv = a[3];
           Value stepF = arith::SIToFPOp::create(nb, l, t, a[4]);
           Value bc1 = arith::SubFOp::create(
               nb, l, c(1.0), math::PowFOp::create(nb, l, c(b1), stepF));
           Value bc2 = arith::SubFOp::create(
               nb, l, c(1.0), math::PowFOp::create(nb, l, c(b2), stepF));
           // p * (1 - lr*wd)
           Value decayed = arith::MulFOp::create(
               nb, l, a[0],
               arith::SubFOp::create(nb, l, c(1.0),
                                     arith::MulFOp::create(nb, l, lrv, c(wd))));
           Value denom = arith::AddFOp::create(
               nb, l,
               arith::DivFOp::create(nb, l, math::SqrtOp::create(nb, l, a[2]),
                                     math::SqrtOp::create(nb, l, bc2)),
               c(eps));
           Value stepSize = arith::DivFOp::create(nb, l, lrv, bc1);
           return arith::SubFOp::create(
               nb, l, decayed,
               arith::MulFOp::create(
                   nb, l, stepSize, arith::DivFOp::create(nb, l, a[1], denom)));
         });
  newState.push_back(nm);
  newState.push_back(nv);
  return np;
}

const Optimizer kOptimizers[] = {
    {"sgd", sgdSlots, {"momentum_buffer.", nullptr}, describeSGD, updateSGD},
    {"adamw",
     adamwSlots,
     {"exp_avg.", "exp_avg_sq."},
     describeAdamW,
     updateAdamW},
};

} // namespace

ArrayRef<Optimizer> optimizers() { return kOptimizers; }

const Optimizer *findOptimizer(StringRef name) {
  for (const Optimizer &o : kOptimizers)
    if (o.name == name)
      return &o;
  return nullptr;
}

std::string optimizerNames(StringRef separator) {
  return llvm::join(
      llvm::map_range(kOptimizers,
                      [](const Optimizer &o) { return StringRef(o.name); }),
      separator);
}

} // namespace ddpc::training

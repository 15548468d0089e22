//===- Passes.td - ddpc Training passes --------------------*- tablegen -*-===//
//
// Part of ddpc. Training-step synthesis and the gradient-check form, on the
// imported tensor IR; implemented in lib/Training (TrainingStep.h).
// mlir-tblgen generates their base classes, options, create functions and
// registration (Passes.h.inc).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_TRAINING_PASSES_TD
#define DDPC_TRAINING_PASSES_TD

include "mlir/Pass/PassBase.td"

def BuildTrainingStepPass : Pass<"ddpc-build-training-step", "mlir::ModuleOp"> {
  let summary = "Synthesize the training step (loss, VJP, optimizer) from the imported forward functions";
  let description = [{
    `ddpc-build-training-step` (module; imported tensor IR, both targets).
    Stage "training" of `ddpc compile --train`. The module holds
    `@forward_train` (training-mode ops, BatchNorm buffer updates, an `rng`
    argument when the graph has Dropout) and `@forward_eval` (inference
    mode), whose arguments carry `ddpc.role = "param" | "buffer" | "rng"`
    or are data inputs. The pass replaces them with `@train_micro` (loss
    and gradients of one micro-batch, accumulated; accumulator results
    carry `ddpc.role = "new_grad_acc"` for the gradient buckets), `@apply`
    (the optimizer update) and `@eval` (per-sample loss and correctness),
    with the signatures of include/ddpc/Runtime/TrainABI.h.

    The loss is softmax cross-entropy over logits [B, C] with int64 labels
    [B] (mean over B), mean squared error, or the model's own scalar output
    (`loss=output`); the backward pass is reverse-mode autodiff of the loss
    (Autodiff.h). The optimizers follow torch.optim.SGD and torch.optim.AdamW
    (Loshchilov & Hutter, ICLR 2019) with the same defaults as `ddpc compile`.
    The learning rate is an argument of @apply, so `lr` only sets what the
    driver reports. With `zero-stage=1` it also builds `@apply_shard`, the
    same update on one flat chunk of parameters, gradients and state
    (ZeRO stage 1: the runtime updates only its rank's slice). Fails with one error on the module naming what is
    missing or unsupported (e.g. "no VJP rule for 'x' (node 'n')").
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect",
    "mlir::func::FuncDialect",
    "mlir::linalg::LinalgDialect",
    "mlir::math::MathDialect",
    "mlir::tensor::TensorDialect"
  ];
  let options = [
    Option<"loss", "loss", "std::string", /*default=*/"\"cross-entropy\"",
           "cross-entropy (logits [B, C], int64 labels [B]), mse, or output (the first output is the loss)">,
    Option<"labelInput", "label-input", "std::string", /*default=*/"\"\"",
           "Graph input holding the labels; empty: a new input 'labels'">,
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"sgd\"",
           "sgd or adamw">,
    Option<"lr", "lr", "double", /*default=*/"0.01", "Learning rate">,
    Option<"momentum", "momentum", "double", /*default=*/"0.0",
           "SGD momentum">,
    Option<"dampening", "dampening", "double", /*default=*/"0.0",
           "SGD dampening">,
    Option<"nesterov", "nesterov", "bool", /*default=*/"false",
           "SGD Nesterov momentum">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.0",
           "Weight decay (L2 for SGD, decoupled for AdamW)">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"zeroStage", "zero-stage", "int64_t", /*default=*/"0",
           "ZeRO stage: 0; 1 (also build @apply_shard, the optimizer on one flat chunk of a rank's slice); 2 (also no gradient accumulators in @train_micro: its gradients leave through the buckets); 3 (as 2; the parameters are gathered by ddpc-gather-parameters)">
  ];
}

def MakeVJPPass : Pass<"ddpc-make-vjp", "mlir::ModuleOp"> {
  let summary = "Rewrite the imported graph into its vector-Jacobian product (gradient checks)";
  let description = [{
    `ddpc-make-vjp` (module; imported tensor IR). Stage "vjp" of `ddpc
    compile --vjp`: `@main_graph(inputs) -> outputs` becomes
    `(inputs..., d_<output> for every float output) -> (outputs...,
    d_<input> for every float input)`, for tests against finite
    differences. Fails naming the first op without a VJP rule.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect",
    "mlir::linalg::LinalgDialect",
    "mlir::tensor::TensorDialect"
  ];
}

#endif // DDPC_TRAINING_PASSES_TD

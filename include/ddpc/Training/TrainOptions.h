//===- TrainOptions.h - Options of training-step synthesis ------*- C++ -*-===//
//
// Part of ddpc. What `ddpc compile --train` and `ddpc.TrainConfig` set.
// Optimizer semantics follow torch.optim.SGD and torch.optim.AdamW.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_TRAINING_TRAINOPTIONS_H
#define DDPC_TRAINING_TRAINOPTIONS_H

#include <cstdint>
#include <string>
#include <vector>

namespace ddpc {

/// The default gradient bucket cap in MiB at ZeRO stage 2 (ResNet-18 at 2
/// ranks: a 239 MiB peak at 4 MiB against 327 MiB at 25; bench/zero.py).
constexpr double kZeroStage2BucketCapMB = 4.0;

struct TrainOptions {
  /// Synthesize a training program instead of an inference program.
  bool enabled = false;
  /// "cross-entropy" (logits [B, C], int64 labels [B]), "mse" (float labels
  /// shaped like the output), or "output" (the first output already is the
  /// scalar loss).
  std::string loss = "cross-entropy";
  /// Name of the graph input holding labels; empty: a new input "labels".
  std::string labelInput;
  /// "sgd" or "adamw".
  std::string optimizer = "sgd";
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  double weightDecay = 0.0;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  /// Micro-batches accumulated per optimizer step.
  int64_t gradAccumSteps = 1;
  /// Initializers that stay fixed.
  std::vector<std::string> freeze;
  /// BatchNormalization statistics over the global batch (allreduced).
  bool syncBatchNorm = false;
  /// Gradient allreduce bucket cap in MiB (PyTorch DDP's bucket_cap_mb;
  /// ddpc-bucket-gradient-allreduce). Must be > 0.
  double bucketCapMB = 25.0;
  /// Whether the user gave the cap (--bucket-cap-mb, bucket_cap_mb=). If
  /// not, ZeRO stage 2 uses kZeroStage2BucketCapMB instead: its two buckets
  /// in flight and the gradients alive until their bucket starts grow with
  /// the cap.
  bool bucketCapGiven = false;
  /// ZeRO stage (Rajbhandari et al., "ZeRO: Memory Optimizations Toward
  /// Training Trillion Parameter Models", SC'20, sec. 5.1): 0, every rank
  /// keeps the whole optimizer state; 1, the step also gets @apply_shard
  /// and each rank keeps and updates a 1/world-size slice of the state,
  /// then all-gathers the parameters (TrainABI.h ddpc_apply_shard); 2
  /// (sec. 5.2), also the gradients: @train_micro has no accumulators and
  /// each rank receives the sum of its slice only (reduce-scatter).
  int64_t zeroStage = 0;

  /// Checks the values, as torch.optim does plus finiteness (the numbers
  /// become float32 constants): the loss and optimizer names; no SGD
  /// option (momentum, dampening, nesterov) with AdamW and no AdamW option
  /// (betas, eps other than their defaults) with SGD; lr, momentum,
  /// weight decay and eps finite float32 >= 0; dampening finite; nesterov
  /// with momentum > 0 and dampening 0; betas in [0, 1); at least one
  /// micro-batch per step; a positive finite bucket cap; ZeRO stage 0-2.
  /// Returns "" or one line naming the CLI flag and the TrainConfig field, e.g.
  /// "--lr (TrainConfig.lr) must be a finite float32 >= 0, got inf". The CLI,
  /// the driver, ddpc-build-training-step and Python's TrainConfig all call it.
  std::string validate() const;
};

} // namespace ddpc

#endif // DDPC_TRAINING_TRAINOPTIONS_H

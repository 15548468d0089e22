//===- TrainProgramOptions.cpp - The command line of training programs ----===//
//
// The one table of `train`'s options (ProgramOptions.h): TrainMain parses
// with it and prints its --help from it; the Python package
// (ddpc._ddpc.train_program_options) builds Program.train's command line
// from it. Table order is --help order.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/ProgramOptions.h"

namespace ddpc::runtime {

const std::vector<OptionSpec> &trainProgramOptions() {
  using K = OptionKind;
  static const std::vector<OptionSpec> table = {
      {"--data", K::List, "X.npy",
       "samples [N, ...] (the model input's dtype: float32,\n"
       "or int64/int32 token ids). A model with several data\n"
       "inputs takes one --data per input, in input order,\n"
       "or --data NAME=X.npy by input name (this one: {inputs});\n"
       "they are sharded together, row by row"},
      {"--labels", K::String, "Y.npy",
       "labels [N, ...] (int64/int32/uint8 class ids or float)"},
      {"--epochs", K::Int, "E", "number of passes over the data", 0},
      {"--val-data", K::List, "X.npy",
       "validation samples (with --val-labels, as --data);\nevaluated"},
      {"--val-labels", K::String, "Y.npy", "after every epoch"},
      {"--shuffle-seed", K::Int, "S",
       "sampler seed (default 0); epoch e uses seed S+e", 0},
      {"--no-shuffle", K::Flag, "", "visit samples in file order"},
      {"--sample-assignment",
       K::String,
       "A",
       "contiguous (default: rank r takes the r-th slice of\n"
       "each global batch) or strided (rows r, r + world, ...,\n"
       "as torch's DistributedSampler deals them)",
       0,
       {"contiguous", "strided"}},
      {"--buffer-sync",
       K::String,
       "S",
       "BatchNorm running statistics after each step: average\n"
       "(default: their mean over ranks) or broadcast (rank\n"
       "0's, as DDP's broadcast_buffers)",
       0,
       {"average", "broadcast"}},
      {"--lr", K::Double, "LR",
       "learning rate (default {lr}); the base rate of\n"
       "--lr-schedule"},
      {"--lr-schedule",
       K::String,
       "S",
       "the rate of optimizer step t (0-based, across\n"
       "resumes), as torch.optim.lr_scheduler stepped once\n"
       "per step: constant (default), step (StepLR: LR *\n"
       "gamma^floor(t / step size)), cosine\n"
       "(CosineAnnealingLR: from LR to --lr-min over\n"
       "--lr-decay-steps) or linear (LinearLR: from LR to 0\n"
       "over --lr-decay-steps)",
       0,
       {"constant", "step", "cosine", "linear"}},
      {"--warmup-steps", K::Int, "W",
       "first W steps: LinearLR(start_factor=F,\n"
       "total_iters=W), LR * (F + (1 - F) * t / W), then\n"
       "the schedule from its start (SequentialLR with\n"
       "milestones=[W]); default 0",
       0},
      {"--warmup-factor", K::Double, "F",
       "warm-up start factor, 0 < F <= 1 (default\n"
       "1 / (W + 1): LR / (W + 1), 2 LR / (W + 1), ...)"},
      {"--lr-step-size", K::Int, "N",
       "step: decay every N steps after warm-up (required)", 1},
      {"--lr-gamma", K::Double, "G", "step: decay factor (default 0.1)"},
      {"--lr-min", K::Double, "LR", "cosine: the final rate (default 0)"},
      {"--lr-decay-steps", K::Int, "N",
       "cosine, linear: steps of decay after warm-up\n"
       "(default: the rest of the run, epochs x steps per\n"
       "epoch - W, whatever --stop-after-steps says); the\n"
       "rate then stays at its end value",
       1},
      {"--clip-grad-norm", K::Double, "MAX",
       "scale the averaged gradient (after the allreduce,\n"
       "so identically on every rank) by min(1, MAX /\n"
       "(norm + 1e-6)), its global L2 norm over all\n"
       "parameters, as torch.nn.utils.clip_grad_norm_"},
      {"--save", K::String, "FILE.onnx",
       "write the trained model at the end (rank 0)"},
      {"--checkpoint", K::String, "FILE",
       "write a checkpoint every --checkpoint-every steps and"},
      {"--checkpoint-every", K::Int, "N", "at the end", 1},
      {"--resume", K::String, "FILE", "continue from a checkpoint"},
      {"--stop-after-steps", K::Int, "N",
       "stop once N optimizer steps (counted from the start\n"
       "of training, across resumes) are done",
       0},
      {"--log-json", K::String, "FILE",
       "append one JSON object per optimizer step (rank 0)"},
      {"--nan-policy",
       K::String,
       "P",
       "a non-finite loss (any rank) or gradient norm: stop\n"
       "(default: end the run, nothing written), skip (drop\n"
       "the step on every rank) or ignore (apply it); no\n"
       "checkpoint or --save is ever written with non-finite\n"
       "weights",
       0,
       {"stop", "skip", "ignore"}},
      {"--threads", K::Int, "N",
       "CPU threads of this rank's library calls (GEMM,\n"
       "convolution); default: the cores the rank may use,\n"
       "all of them for a plain run, its share under\n"
       "mpirun/srun, or OPENBLAS_NUM_THREADS when set",
       1},
      {"--timeout", K::Double, "SECONDS",
       "abort when a collective takes longer (default 30)"},
      {"--quiet", K::Flag, "",
       "no banner or progress lines (epoch lines stay)"},
      {"--help", K::Flag, "", "print this message", 0, {}, "-h"},
  };
  return table;
}

} // namespace ddpc::runtime

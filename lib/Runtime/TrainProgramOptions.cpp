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
      {"--lr", K::Double, "LR", "learning rate (default {lr})"},
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
      {"--timeout", K::Double, "SECONDS",
       "abort when a collective takes longer (default 30)"},
      {"--quiet", K::Flag, "",
       "no banner or progress lines (epoch lines stay)"},
      {"--help", K::Flag, "", "print this message", 0, {}, "-h"},
  };
  return table;
}

} // namespace ddpc::runtime

//===- TrainDefaults.cpp - Weak defaults of optional TrainABI tables ------===//
//
// Part of ddpc. Defaults for TrainABI.h tables that older or hand-written
// glue may omit. In their own translation unit so that no user of a table
// can constant-fold the default.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/TrainABI.h"

extern "C" __attribute__((weak)) const int64_t ddpc_num_classes = 0;

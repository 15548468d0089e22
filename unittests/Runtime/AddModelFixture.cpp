//===- AddModelFixture.cpp - Hand-written model behind the ABI ------------===//
//
// Stands in for the object file + generated glue of a compiled model so the
// inference main() can be tested without the compiler:
//   inputs:  x: float32[2,3], y: float32[2,3]
//   outputs: "sum:0" = x + y (float32[2,3]), "count" = 6 (int64, 0-d),
//            "empty" (int32[0,4]), "y/copy" = y (float32[2,3])
//
//===----------------------------------------------------------------------===//

// Declarations first: they give the const tables below external linkage.
#include "ddpc/Runtime/ModelABI.h"

#include <cstring>

namespace {
const int64_t kShape23[] = {2, 3};
const int64_t kShape04[] = {0, 4};
const int64_t kShapeScalar[] = {0}; // Dummy: rank 0 reads no entry.
} // namespace

extern "C" {
const char *ddpc_model_name = "add_fixture";
const int32_t ddpc_num_inputs = 2;
const char *const ddpc_input_names[] = {"x", "y"};
const int32_t ddpc_input_dtypes[] = {DDPC_DTYPE_FLOAT, DDPC_DTYPE_FLOAT};
const int32_t ddpc_input_ranks[] = {2, 2};
const int64_t *const ddpc_input_shapes[] = {kShape23, kShape23};
const int32_t ddpc_num_outputs = 4;
const char *const ddpc_output_names[] = {"sum:0", "count", "empty", "y/copy"};
const int32_t ddpc_output_dtypes[] = {DDPC_DTYPE_FLOAT, DDPC_DTYPE_INT64,
                                      DDPC_DTYPE_INT32, DDPC_DTYPE_FLOAT};
const int32_t ddpc_output_ranks[] = {2, 0, 2, 2};
const int64_t *const ddpc_output_shapes[] = {kShape23, kShapeScalar, kShape04,
                                             kShape23};

void ddpc_invoke(void **args) {
  const float *x = static_cast<const float *>(args[0]);
  const float *y = static_cast<const float *>(args[1]);
  float *sum = static_cast<float *>(args[2]);
  for (int i = 0; i < 6; ++i)
    sum[i] = x[i] + y[i];
  int64_t count = 6;
  std::memcpy(args[3], &count, sizeof(count));
  // args[4] is the zero-size output: a valid, untouched 1-byte buffer.
  std::memcpy(args[5], y, 6 * sizeof(float));
}
} // extern "C"

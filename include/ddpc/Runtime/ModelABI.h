//===- ModelABI.h - C ABI between compiled models and the runtime -*- C -*-===//
//
// For every model, `ddpc compile` emits an object file plus a small generated
// C file (the "glue") that defines the symbols declared here. The runtime
// (lib/Runtime) is linked against them to form an inference program.
//
// This header is valid C and C++; it must stay free of MLIR/LLVM headers.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_RUNTIME_MODELABI_H
#define DDPC_RUNTIME_MODELABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Tensor element types use ONNX TensorProto.DataType numbers. BOOL is stored
/// as one byte per element (0 or 1). Only these types may appear in the ABI
/// tables of a compiled model.
enum DdpcDType {
  DDPC_DTYPE_FLOAT = 1,
  DDPC_DTYPE_UINT8 = 2,
  DDPC_DTYPE_INT8 = 3,
  DDPC_DTYPE_UINT16 = 4,
  DDPC_DTYPE_INT16 = 5,
  DDPC_DTYPE_INT32 = 6,
  DDPC_DTYPE_INT64 = 7,
  DDPC_DTYPE_BOOL = 9,
  DDPC_DTYPE_FLOAT16 = 10,
  DDPC_DTYPE_DOUBLE = 11,
  DDPC_DTYPE_UINT32 = 12,
  DDPC_DTYPE_UINT64 = 13,
  DDPC_DTYPE_BFLOAT16 = 16,
};

/// Human-readable model name (the ONNX graph name, or the file stem).
extern const char *ddpc_model_name;

/// Number of graph inputs (initializers excluded), in graph-input order.
extern const int32_t ddpc_num_inputs;
extern const char *const ddpc_input_names[];
/// ONNX dtype number of each input.
extern const int32_t ddpc_input_dtypes[];
/// Rank of each input; ddpc_input_shapes[i] has ddpc_input_ranks[i] entries.
extern const int32_t ddpc_input_ranks[];
extern const int64_t *const ddpc_input_shapes[];

/// Number of graph outputs, in graph-output order; tables as for inputs.
extern const int32_t ddpc_num_outputs;
extern const char *const ddpc_output_names[];
extern const int32_t ddpc_output_dtypes[];
extern const int32_t ddpc_output_ranks[];
extern const int64_t *const ddpc_output_shapes[];

// Note: when a model has zero inputs (or outputs), the generated glue still
// defines each table with one dummy element, because C forbids zero-sized
// arrays. Consumers must only index below ddpc_num_inputs/ddpc_num_outputs.

/// Runs the model once.
///
/// args[0 .. num_inputs) are the input buffers: dense, row-major, read-only.
/// args[num_inputs .. num_inputs + num_outputs) are output buffers allocated
/// by the caller with room for the full static shape. The runtime passes
/// 64-byte aligned buffers of at least one byte each (also for zero-size
/// tensors); no output buffer overlaps another argument (compiled code
/// relies on it, see ddpc-gemm-epilogues). The function must not throw or
/// call exit.
void ddpc_invoke(void **args);

/// Run-time checks of compiled code (RuntimeChecks.h), in every runtime.
///
/// Called by compiled code for each index input (Gather's indices, ...):
/// `min` and `max` point at the smallest and largest index (int64 scalars
/// in the step's memory: device memory on the CUDA target), which must lie
/// in [-bound, bound); `what` names the node, the indices and the indexed
/// axis. Records the first violation and returns; the CPU runtimes read the
/// values at once, the CUDA runtime copies them on the compute stream and
/// checks them at the next host synchronization.
void ddpc_rt_check_indices(const int64_t *min, const int64_t *max,
                           int64_t bound, const char *what);

/// Called by compiled code for a check that counts bad elements (an
/// integer division by zero): `count` points at an int64 scalar in the
/// step's memory; a nonzero count is recorded with `what` (the node and
/// the problem), read and reported like ddpc_rt_check_indices.
void ddpc_rt_check_count(const int64_t *count, const char *what);

/// The message of the first failed check since the last call (a pointer
/// valid until the next call), or NULL; clears it. Program.run calls it
/// after ddpc_invoke and raises IndexError.
const char *ddpc_rt_take_error(void);

#ifdef __cplusplus
} // extern "C"
#endif

#endif // DDPC_RUNTIME_MODELABI_H

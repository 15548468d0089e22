//===- TrainABI.h - C ABI between compiled training steps and runtime -*- C
//-*-===//
//
// `ddpc compile --train` emits an object file with the step functions below
// plus generated C glue that defines the tables. The training runtime
// (lib/Runtime/Train*.cpp, libddpc_train_runtime.a) provides main(), the data
// loader, the process group (MPI), checkpoints and ONNX export, and the
// collective entry points that compiled code calls.
//
// All tensors are dense, row-major, 64-byte aligned, and each argument of a
// step function is its own allocation (no two overlap; compiled code relies
// on it). Parameters, buffers, optimizer state and gradients are float32.
// Valid C and C++; no MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_RUNTIME_TRAINABI_H
#define DDPC_RUNTIME_TRAINABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

//===----------------------------------------------------------------------===//
// Tables defined by the generated glue
//===----------------------------------------------------------------------===//

extern const char *ddpc_model_name;

/// Trainable parameters (float32), in a fixed order. Names are the ONNX
/// initializer names; `ddpc_param_init[i]` holds the initial values from the
/// ONNX file (numel(shape) floats).
extern const int32_t ddpc_num_params;
extern const char *const ddpc_param_names[];
extern const int32_t ddpc_param_ranks[];
extern const int64_t *const ddpc_param_shapes[];
extern const float *const ddpc_param_init[];

/// Buffers: float32 state that the step updates but that is not trained
/// (BatchNormalization running mean/var). Same tables as parameters.
extern const int32_t ddpc_num_buffers;
extern const char *const ddpc_buffer_names[];
extern const int32_t ddpc_buffer_ranks[];
extern const int64_t *const ddpc_buffer_shapes[];
extern const float *const ddpc_buffer_init[];

/// Optimizer state slots per parameter (0: SGD, 1: SGD with momentum,
/// 2: AdamW), each with the parameter's shape, zero-initialized.
extern const int32_t ddpc_opt_slots;
/// One line describing the optimizer and hyper-parameters, e.g.
/// "adamw lr=0.001 betas=(0.9,0.999) eps=1e-08 weight_decay=0.01"; stored in
/// checkpoints and checked on --resume.
extern const char *ddpc_optimizer_desc;
/// Learning rate the model was compiled with (the runtime may override it).
extern const float ddpc_default_lr;

/// Per-rank micro-batch size B (the leading dim of data and labels).
extern const int64_t ddpc_batch_size;
/// Micro-batches accumulated per optimizer step (K >= 1).
extern const int32_t ddpc_grad_accum_steps;
/// Data inputs (D = ddpc_num_data_inputs >= 1: every graph input but the
/// labels, in graph-input order, e.g. token ids and an attention mask), each
/// read from its own --data file and sharded along its leading dimension:
/// ONNX input name, dtype (FLOAT, INT64 or INT32), rank and shape including
/// B.
extern const int32_t ddpc_num_data_inputs;
extern const char *const ddpc_data_names[];
extern const int32_t ddpc_data_dtypes[];
extern const int32_t ddpc_data_ranks[];
extern const int64_t *const ddpc_data_shapes[];
/// Labels: dtype (INT64 for cross-entropy, FLOAT for mse), rank, shape
/// including B.
extern const int32_t ddpc_label_dtype;
extern const int32_t ddpc_label_rank;
extern const int64_t ddpc_label_shape[];
/// 1 when the loss is a classification loss (the runtime then reports
/// accuracy from the `correct` outputs), 0 otherwise.
extern const int32_t ddpc_is_classification;
/// Number of classes for cross-entropy (labels must lie in [0, C)); 0 when
/// unknown. The runtime provides a weak default of 0.
extern const int64_t ddpc_num_classes;

/// The original ONNX model with the initializers of all parameters and
/// buffers removed (a serialized ModelProto). The runtime writes trained
/// models as these bytes followed by one more `graph` field (field 7)
/// holding the trained initializers: protobuf merges repeated fields, so
/// the result is the original graph with the new weights.
extern const unsigned char ddpc_onnx_model[];
extern const int64_t ddpc_onnx_model_size;

//===----------------------------------------------------------------------===//
// Step functions defined by the compiled object
//===----------------------------------------------------------------------===//
// P = ddpc_num_params, Bf = ddpc_num_buffers, S = ddpc_opt_slots,
// D = ddpc_num_data_inputs.

/// One micro-batch: forward, loss, backward; adds the gradient of the
/// micro-batch's mean loss to the gradient accumulators and returns the
/// updated buffers (BatchNorm running statistics, training mode).
///   args = [params(P), buffers(Bf), grad_acc(P), data(D), labels,
///           /*outputs*/ new_buffers(Bf), new_grad_acc(P),
///           loss (f32 scalar, mean over B), correct (i64 scalar),
///           rng (i64[2] input: {seed of this micro-batch, rank})]
/// `rng` comes last so that older steps that ignore it keep their layout.
/// At ZeRO stage 2 (ddpc_zero_stage == 2) there are neither grad_acc nor
/// new_grad_acc: args = [params, buffers, data, labels, new_buffers, loss,
/// correct, rng], and the gradients reach the runtime only through the
/// buckets below (reduce-scattered into each rank's slice).
/// Dropout masks are a hash of the seed and the element's position in the
/// global batch, so they do not depend on how the batch is split.
void ddpc_train_micro(void **args);

/// One optimizer step: multiplies grad_acc (already summed over ranks by the
/// last micro-batch's gradient buckets) by grad_scale (= 1 / (world size *
/// K)) and applies the optimizer (torch.optim.SGD / AdamW semantics).
///   args = [params(P), opt_state(P*S, ordered p0s0, p0s1, p1s0, ...),
///           grad_acc(P), lr (f32 scalar), step (i64 scalar, 1 for the first
///           optimizer step), grad_scale (f32 scalar),
///           /*outputs*/ new_params(P), new_opt_state(P*S)]
void ddpc_apply(void **args);

/// Evaluation (inference-mode ops: BatchNorm uses the running statistics,
/// Dropout is the identity) on one batch of B samples.
///   args = [params(P), buffers(Bf), data(D), labels,
///           /*outputs*/ sample_loss (f32[B]), sample_correct (i64[B])]
void ddpc_eval(void **args);

/// The L2 norm over all parameters of the averaged gradient, grad_acc *
/// grad_scale (torch.nn.utils.clip_grad_norm_'s total norm), in float32:
/// the runtime's non-finite check (--nan-policy) reads it after the last
/// micro-batch, before ddpc_apply.
///   args = [grad_acc(P), grad_scale (f32 scalar),
///           /*outputs*/ grad_norm (f32 scalar)]
void ddpc_grad_norm(void **args);

//===----------------------------------------------------------------------===//
// Collectives provided by the runtime, called by compiled code
//===----------------------------------------------------------------------===//

/// In-place sum over all ranks of `count` floats. A no-op when the world
/// size is 1. Never returns on failure: the runtime prints the rank and the
/// reason and ends the job.
void ddpc_rt_allreduce_sum_f32(float *data, int64_t count);

/// Gradient buckets (ddpc-bucket-gradient-allreduce). During backward,
/// ddpc_train_micro calls, for each bucket as soon as its gradients are
/// final, ddpc_rt_bucket_add_f32 once per gradient accumulator of the bucket
/// (device memory on the CUDA target; `count` floats) and then
/// ddpc_rt_bucket_allreduce_start(bucket index); before it returns,
/// ddpc_rt_bucket_allreduce_wait(). The runtime sums every bucket in place
/// over all ranks while backward goes on (CUDA: grouped NCCL allreduces on
/// the communication stream, after an event on the compute stream; CPU: one
/// MPI_Iallreduce of a host staging copy per bucket, on a communication
/// thread unless DDPC_COMM_THREAD=0 or MPI lacks MPI_THREAD_SERIALIZED), and
/// `wait` orders the results before what follows (CUDA: the compute stream
/// waits for the communication stream; CPU: waits, with the collective
/// watchdog, and copies back). All three are no-ops unless the runtime marked
/// this call as the synchronizing micro-batch of a multi-rank optimizer step
/// (its last), as PyTorch DDP's no_sync() does for the others. Never return on
/// failure.
void ddpc_rt_bucket_add_f32(float *data, int64_t count);
void ddpc_rt_bucket_allreduce_start(int64_t bucket);
void ddpc_rt_bucket_allreduce_wait(void);

/// ZeRO stage 3 (ddpc-gather-parameters): ddpc_train_micro and ddpc_eval
/// receive no parameter buffers; before the step reads parameter `index`
/// (TrainABI order) in forward, and again in backward, it calls this to
/// fill `data` (the parameter's numel floats) from every rank's slice.
/// Collective (every rank makes the same calls); CPU runtime only. Never
/// returns on failure.
void ddpc_rt_param_gather_f32(float *data, int64_t index);

#ifdef __cplusplus
} // extern "C"
#endif

#endif // DDPC_RUNTIME_TRAINABI_H

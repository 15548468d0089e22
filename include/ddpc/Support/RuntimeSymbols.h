//===- RuntimeSymbols.h - names shared by compiler and runtime --*- C++ -*-===//
//
// Part of ddpc. Every symbol name the compiler emits and a runtime (or the
// generated glue) resolves, spelled once: the runtime's C entry points that
// passes insert calls to (defined in lib/Runtime, declared in TrainABI.h,
// ModelABI.h and Runtime/Gemm.h), the MLIR functions the importer and the
// training-step builder create and the glue forwards to, and the helper
// functions the importer outlines. A rename here and in the runtime's
// definition is the whole change.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_SUPPORT_RUNTIMESYMBOLS_H
#define DDPC_SUPPORT_RUNTIMESYMBOLS_H

#include "llvm/ADT/StringRef.h"

namespace ddpc {

//===----------------------------------------------------------------------===//
// Runtime entry points (C ABI, buffers passed as i64 aligned base addresses)
//===----------------------------------------------------------------------===//

/// Library calls (Runtime/Gemm.h): the GEMM (ddpc-gemm-to-library-call),
/// the GEMM with a bias/ReLU epilogue (ddpc-gemm-epilogues), convolutions
/// (ddpc-conv-to-library-call) and convolutions with a bias/ReLU epilogue
/// (ddpc-conv-epilogues). They enqueue work on the compute stream.
constexpr llvm::StringLiteral kGemmFn = "ddpc_gemm_f32";
constexpr llvm::StringLiteral kGemmEpilogueFn = "ddpc_gemm_bias_act_f32";
constexpr llvm::StringLiteral kConvFn = "ddpc_conv2d_f32";
constexpr llvm::StringLiteral kConvEpilogueFn = "ddpc_conv2d_bias_act_f32";

/// The in-place allreduce (sum) of one f32 buffer over all ranks
/// (TrainABI.h): (i64 base address, i64 element count).
constexpr llvm::StringLiteral kAllReduceFn = "ddpc_rt_allreduce_sum_f32";

/// Waits for the device's pending work (ddpc-gpu-host-sync).
constexpr llvm::StringLiteral kSyncFn = "ddpc_gpu_host_sync";

/// Run-time index checks (ModelABI.h): stream-ordered on the CUDA target
/// (the runtime copies the checked values on the compute stream), so they
/// need no host synchronization before them.
constexpr llvm::StringLiteral kIndexCheckFn = "ddpc_rt_check_indices";
constexpr llvm::StringLiteral kCountCheckFn = "ddpc_rt_check_count";

/// Gradient buckets (ddpc-bucket-gradient-allreduce, TrainABI.h): NCCL on
/// the communication stream on the GPU, ordered with events against the
/// compute stream.
constexpr llvm::StringLiteral kBucketAddFn = "ddpc_rt_bucket_add_f32";
constexpr llvm::StringLiteral kBucketStartFn = "ddpc_rt_bucket_allreduce_start";
constexpr llvm::StringLiteral kBucketWaitFn = "ddpc_rt_bucket_allreduce_wait";
constexpr llvm::StringLiteral kBucketFns[] = {kBucketAddFn, kBucketStartFn,
                                              kBucketWaitFn};

/// ZeRO stage 3 (ddpc-gather-parameters, TrainABI.h): all-gathers parameter
/// `index` (i64, TrainABI order) from the ranks' slices into the float32
/// buffer at `ptr` (its numel elements). Collective; CPU runtime only.
constexpr llvm::StringLiteral kParamGatherFn = "ddpc_rt_param_gather_f32";

/// Copies the device-constant table to the GPU (ddpc-device-constants).
constexpr llvm::StringLiteral kDeviceConstantsFn = "ddpc_device_constants";

//===----------------------------------------------------------------------===//
// Helper functions the importer outlines (private, one per shape)
//===----------------------------------------------------------------------===//

/// Prefix of the memref-level allreduce wrappers, `<prefix><elements>`.
constexpr llvm::StringLiteral kAllReduceHelperPrefix =
    "ddpc_allreduce_sum_f32_";
/// Tensor-level wrappers of kIndexCheckFn and kCountCheckFn.
constexpr llvm::StringLiteral kIndexCheckHelper = "ddpc_check_indices";
constexpr llvm::StringLiteral kCountCheckHelper = "ddpc_check_count";

//===----------------------------------------------------------------------===//
// Program functions: created by the importer and the training-step builder,
// called by the runtime through the generated glue (ModelABI.h, TrainABI.h)
//===----------------------------------------------------------------------===//

/// The imported forward graph, and the glue forwarder the inference
/// runtime calls.
constexpr llvm::StringLiteral kMainGraphFunc = "main_graph";
constexpr llvm::StringLiteral kInvokeGlue = "ddpc_invoke";
/// The run-time checks' first failure (ModelABI.h ddpc_rt_take_error).
constexpr llvm::StringLiteral kTakeErrorFn = "ddpc_rt_take_error";
/// The forward graph imported twice for training (training and inference
/// mode), which ddpc-build-training-step replaces with the step's functions.
constexpr llvm::StringLiteral kForwardTrainFunc = "forward_train";
constexpr llvm::StringLiteral kForwardEvalFunc = "forward_eval";
/// The training step's functions (MLIR names) and the glue's C forwarders
/// the training runtime calls (void fn(void **args)).
constexpr llvm::StringLiteral kTrainMicroFunc = "train_micro";
constexpr llvm::StringLiteral kApplyFunc = "apply";
constexpr llvm::StringLiteral kEvalFunc = "eval";
constexpr llvm::StringLiteral kGradNormFunc = "grad_norm";
/// ZeRO stage 1: the optimizer on one flat chunk of a rank's slice.
constexpr llvm::StringLiteral kApplyShardFunc = "apply_shard";
constexpr llvm::StringLiteral kTrainMicroGlue = "ddpc_train_micro";
constexpr llvm::StringLiteral kApplyGlue = "ddpc_apply";
constexpr llvm::StringLiteral kEvalGlue = "ddpc_eval";
constexpr llvm::StringLiteral kGradNormGlue = "ddpc_grad_norm";
constexpr llvm::StringLiteral kApplyShardGlue = "ddpc_apply_shard";

//===----------------------------------------------------------------------===//
// Glue data: the tables the generated C glue defines (lib/Driver/Glue.cpp)
// and the runtimes declare (ModelABI.h, TrainABI.h)
//===----------------------------------------------------------------------===//

/// A table of tensors, one row per tensor: the count (int32_t), and arrays
/// of names, ONNX dtypes (int32_t), ranks (int32_t), shapes (const int64_t
/// *) and initial values (const float *). An empty name: the table has no
/// such array.
struct GlueTable {
  llvm::StringLiteral count, names, dtypes, ranks, shapes, init;
};
/// Inference programs: the graph's inputs and outputs.
constexpr GlueTable kGlueInputs{"ddpc_num_inputs",   "ddpc_input_names",
                                "ddpc_input_dtypes", "ddpc_input_ranks",
                                "ddpc_input_shapes", ""};
constexpr GlueTable kGlueOutputs{"ddpc_num_outputs",   "ddpc_output_names",
                                 "ddpc_output_dtypes", "ddpc_output_ranks",
                                 "ddpc_output_shapes", ""};
/// Training programs: trainable parameters and buffers (f32, with initial
/// values), and the data inputs one micro-batch reads.
constexpr GlueTable kGlueParams{
    "ddpc_num_params",  "ddpc_param_names",  "",
    "ddpc_param_ranks", "ddpc_param_shapes", "ddpc_param_init"};
constexpr GlueTable kGlueBuffers{
    "ddpc_num_buffers",  "ddpc_buffer_names",  "",
    "ddpc_buffer_ranks", "ddpc_buffer_shapes", "ddpc_buffer_init"};
constexpr GlueTable kGlueData{"ddpc_num_data_inputs", "ddpc_data_names",
                              "ddpc_data_dtypes",     "ddpc_data_ranks",
                              "ddpc_data_shapes",     ""};
/// The model's name (const char *), both kinds of program.
constexpr llvm::StringLiteral kGlueModelName = "ddpc_model_name";
/// Every program: the initial parameters and buffers, one blob laid out as
/// the state tables say (unsigned char[], 64-byte aligned).
constexpr llvm::StringLiteral kGlueStateBlob = "ddpc_state_blob";
/// Training programs: the ONNX model without trained initializers
/// (unsigned char[], int64_t bytes), the optimizer (state slots per
/// parameter, int32_t; description, const char *), the compiled defaults
/// (learning rate, float; per-rank batch, int64_t; micro-batches per step,
/// int32_t) and the labels (dtype, rank, shape; classification flag and
/// class count).
constexpr llvm::StringLiteral kGlueOnnxModel = "ddpc_onnx_model";
constexpr llvm::StringLiteral kGlueOnnxModelSize = "ddpc_onnx_model_size";
constexpr llvm::StringLiteral kGlueOptSlots = "ddpc_opt_slots";
constexpr llvm::StringLiteral kGlueOptimizerDesc = "ddpc_optimizer_desc";
constexpr llvm::StringLiteral kGlueDefaultLR = "ddpc_default_lr";
constexpr llvm::StringLiteral kGlueBatchSize = "ddpc_batch_size";
constexpr llvm::StringLiteral kGlueGradAccumSteps = "ddpc_grad_accum_steps";
constexpr llvm::StringLiteral kGlueLabelDType = "ddpc_label_dtype";
constexpr llvm::StringLiteral kGlueLabelRank = "ddpc_label_rank";
constexpr llvm::StringLiteral kGlueLabelShape = "ddpc_label_shape";
constexpr llvm::StringLiteral kGlueIsClassification = "ddpc_is_classification";
constexpr llvm::StringLiteral kGlueNumClasses = "ddpc_num_classes";
/// ZeRO (TrainABI.h): the stage (int32_t) and, at stage 1, the float32
/// elements of one ddpc_apply_shard chunk (int64_t).
constexpr llvm::StringLiteral kGlueZeroStage = "ddpc_zero_stage";
constexpr llvm::StringLiteral kGlueZeroChunk = "ddpc_zero_chunk";
/// ZeRO stage 2: the gradient buckets (TrainABI.h): their count (int32_t),
/// members per bucket (int32_t[]) and the members' parameter indices, bucket
/// after bucket (int32_t[]).
constexpr llvm::StringLiteral kGlueZeroNumBuckets = "ddpc_zero_num_buckets";
constexpr llvm::StringLiteral kGlueZeroBucketSizes = "ddpc_zero_bucket_sizes";
constexpr llvm::StringLiteral kGlueZeroBucketParams = "ddpc_zero_bucket_params";

/// Training programs: the memory plan's predicted per-rank peak in bytes,
/// and the part of it that is gradient-bucket staging memory, which the CPU
/// runtime allocates only with more than one rank (const int64_t each;
/// Analysis/MemoryPlan.h). The runtimes read them weakly (absent: 0) and
/// print them beside the measured high-water mark.
constexpr llvm::StringLiteral kGlueMemoryPlanPeak = "ddpc_memory_plan_peak";
constexpr llvm::StringLiteral kGlueMemoryPlanCollective =
    "ddpc_memory_plan_collective";
/// The plan's optimizer-state bytes at one rank: at ZeRO stage 1 the
/// runtime replaces them with its slice at the world size it runs at.
constexpr llvm::StringLiteral kGlueMemoryPlanOptimizer =
    "ddpc_memory_plan_optimizer";
/// The plan's gradient bytes: at ZeRO stage 2 the runtime replaces them
/// and the collective buffers with its own at the world size it runs at.
constexpr llvm::StringLiteral kGlueMemoryPlanGradients =
    "ddpc_memory_plan_gradients";
/// The plan's parameter bytes: at ZeRO stage 3 the runtime replaces them
/// with its parameter slice at the world size it runs at.
constexpr llvm::StringLiteral kGlueMemoryPlanParameters =
    "ddpc_memory_plan_parameters";
/// Training programs: the world size the memory plan is for (const int64_t,
/// `--world-size`; 0: any). The runtime refuses to run on another.
constexpr llvm::StringLiteral kGlueMemoryPlanWorldSize =
    "ddpc_memory_plan_world_size";
/// Training programs: --memory-budget in bytes (const int64_t; 0: none).
/// At ZeRO stage 1 without --world-size the runtime checks it against the
/// plan at the world size it runs at.
constexpr llvm::StringLiteral kGlueMemoryBudget = "ddpc_memory_budget";

/// CUDA programs: the contractions' math (const int32_t): 0 = float32
/// (--precision fp32), 1 = TF32 tensor-core math allowed (--precision
/// tf32). The CUDA runtime reads it weakly (absent: 0).
constexpr llvm::StringLiteral kGlueMathMode = "ddpc_math_mode";

/// The 1-D device grid of all ranks that collectives reduce over
/// (`shard.grid`, size = world size, dynamic).
constexpr llvm::StringLiteral kWorldGrid = "ddpc_world";

/// The merged GPU module of a CUDA program (ddpc-gpu-merge-modules).
constexpr llvm::StringLiteral kKernelModule = "ddpc_kernels";

} // namespace ddpc

#endif // DDPC_SUPPORT_RUNTIMESYMBOLS_H

//===- FakeTrainModel.cpp - Hand-written training step behind TrainABI ----===//
//
// Stands in for the object file + generated glue of `ddpc compile --train`
// so the training runtime can be tested without the compiler:
//
//   model     softmax regression: probs = softmax(x W + b), x: float32[B,4],
//             W: [4,3], b: [3]; cross-entropy loss, int64 labels in [0,3)
//   buffer    running_mean [4]: running_mean = 0.9 running_mean
//             + 0.1 mean_batch(x) per micro-batch (exercises buffers; not
//             used by the forward pass)
//   optimizer torch.optim.SGD(momentum=0.9, weight_decay=1e-4), one slot
//
// Compile-time knobs: -DBATCH=<B> (default 4), -DACCUM=<K> (default 1).
// Environment knobs (tests only):
//   DDPC_FIXTURE_SLEEP_MS=n       sleep n ms in every micro-batch
//   DDPC_FIXTURE_PERTURB_INIT=1   ranks other than 0 (OMPI_COMM_WORLD_RANK)
//                                 start from different initial parameters, to
//                                 show that the runtime broadcasts rank 0's
//
// ddpc_onnx_model is the ModelProto written by this script (onnx 1.22), i.e.
// the model without the initializers W, b and running_mean:
//   g = helper.make_graph([
//     helper.make_node("Gemm", ["x", "W", "b"], ["logits"]),
//     helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
//     helper.make_node("Identity", ["running_mean"], ["mean_out"])],
//     "fake_train", [helper.make_tensor_value_info("x", FLOAT, ["N", 4])],
//     [helper.make_tensor_value_info("probs", FLOAT, ["N", 3]),
//      helper.make_tensor_value_info("mean_out", FLOAT, [4])])
//   helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)],
//                     ir_version=8, producer_name="ddpc-fixture")
//
//===----------------------------------------------------------------------===//

// Declarations first: they give the const tables below external linkage.
#include "ddpc/Runtime/TrainABI.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#ifndef BATCH
#define BATCH 4
#endif
#ifndef ACCUM
#define ACCUM 1
#endif

namespace {
constexpr int kF = 4;
constexpr int kC = 3;
constexpr int kB = BATCH;
constexpr float kMomentum = 0.9f;
constexpr float kWeightDecay = 1e-4f;
constexpr float kBufferMomentum = 0.1f;

float initW[kF * kC];
float initB[kC];
const float initMean[kF] = {0, 0, 0, 0};

/// Fills the initial parameters before main() runs.
struct InitParams {
  InitParams() {
    for (int i = 0; i < kF * kC; ++i)
      initW[i] = 0.05f * static_cast<float>((i * 7) % 11 - 5);
    for (int c = 0; c < kC; ++c)
      initB[c] = 0.01f * static_cast<float>(c);
    const char *perturb = std::getenv("DDPC_FIXTURE_PERTURB_INIT");
    const char *rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (perturb && *perturb == '1' && rank && std::atoi(rank) != 0)
      for (int i = 0; i < kF * kC; ++i)
        initW[i] += 0.5f;
  }
} initParams;

const int64_t kShapeW[] = {kF, kC};
const int64_t kShapeB[] = {kC};
const int64_t kShapeMean[] = {kF};

int sleepMillis() {
  static int ms = [] {
    const char *v = std::getenv("DDPC_FIXTURE_SLEEP_MS");
    return v ? std::atoi(v) : 0;
  }();
  return ms;
}

/// logits[i] = x[i] W + b for one sample; returns the argmax.
int forward(const float *W, const float *b, const float *x, float *logits) {
  int best = 0;
  for (int c = 0; c < kC; ++c) {
    float acc = b[c];
    for (int f = 0; f < kF; ++f)
      acc += x[f] * W[f * kC + c];
    logits[c] = acc;
    if (acc > logits[best])
      best = c;
  }
  return best;
}

/// Softmax in place; returns log-sum-exp of the logits.
float softmax(float *v) {
  float m = v[0];
  for (int c = 1; c < kC; ++c)
    m = std::fmax(m, v[c]);
  float sum = 0;
  for (int c = 0; c < kC; ++c)
    sum += std::exp(v[c] - m);
  float lse = m + std::log(sum);
  for (int c = 0; c < kC; ++c)
    v[c] = std::exp(v[c] - lse);
  return lse;
}

} // namespace

extern "C" {
const char *ddpc_model_name = "fake_train";

const int32_t ddpc_num_params = 2;
const char *const ddpc_param_names[] = {"W", "b"};
const int32_t ddpc_param_ranks[] = {2, 1};
const int64_t *const ddpc_param_shapes[] = {kShapeW, kShapeB};
const float *const ddpc_param_init[] = {initW, initB};

const int32_t ddpc_num_buffers = 1;
const char *const ddpc_buffer_names[] = {"running_mean"};
const int32_t ddpc_buffer_ranks[] = {1};
const int64_t *const ddpc_buffer_shapes[] = {kShapeMean};
const float *const ddpc_buffer_init[] = {initMean};

const int32_t ddpc_opt_slots = 1;
const char *ddpc_optimizer_desc =
    "sgd lr=0.1 momentum=0.9 dampening=0 weight_decay=0.0001 nesterov=False";
const float ddpc_default_lr = 0.1f;

const int64_t ddpc_batch_size = kB;
const int32_t ddpc_grad_accum_steps = ACCUM;
const int32_t ddpc_num_data_inputs = 1;
const char *const ddpc_data_names[] = {"x"};
const int32_t ddpc_data_dtypes[] = {1};
const int32_t ddpc_data_ranks[] = {2};
static const int64_t kShapeX[] = {kB, kF};
const int64_t *const ddpc_data_shapes[] = {kShapeX};
const int32_t ddpc_label_dtype = 7;
const int32_t ddpc_label_rank = 1;
const int64_t ddpc_label_shape[] = {kB};
const int32_t ddpc_is_classification = 1;

const unsigned char ddpc_onnx_model[] = {
    0x08, 0x08, 0x12, 0x0c, 0x64, 0x64, 0x70, 0x63, 0x2d, 0x66, 0x69, 0x78,
    0x74, 0x75, 0x72, 0x65, 0x3a, 0xb8, 0x01, 0x0a, 0x17, 0x0a, 0x01, 0x78,
    0x0a, 0x01, 0x57, 0x0a, 0x01, 0x62, 0x12, 0x06, 0x6c, 0x6f, 0x67, 0x69,
    0x74, 0x73, 0x22, 0x04, 0x47, 0x65, 0x6d, 0x6d, 0x0a, 0x25, 0x0a, 0x06,
    0x6c, 0x6f, 0x67, 0x69, 0x74, 0x73, 0x12, 0x05, 0x70, 0x72, 0x6f, 0x62,
    0x73, 0x22, 0x07, 0x53, 0x6f, 0x66, 0x74, 0x6d, 0x61, 0x78, 0x2a, 0x0b,
    0x0a, 0x04, 0x61, 0x78, 0x69, 0x73, 0x18, 0x01, 0xa0, 0x01, 0x02, 0x0a,
    0x22, 0x0a, 0x0c, 0x72, 0x75, 0x6e, 0x6e, 0x69, 0x6e, 0x67, 0x5f, 0x6d,
    0x65, 0x61, 0x6e, 0x12, 0x08, 0x6d, 0x65, 0x61, 0x6e, 0x5f, 0x6f, 0x75,
    0x74, 0x22, 0x08, 0x49, 0x64, 0x65, 0x6e, 0x74, 0x69, 0x74, 0x79, 0x12,
    0x0a, 0x66, 0x61, 0x6b, 0x65, 0x5f, 0x74, 0x72, 0x61, 0x69, 0x6e, 0x5a,
    0x14, 0x0a, 0x01, 0x78, 0x12, 0x0f, 0x0a, 0x0d, 0x08, 0x01, 0x12, 0x09,
    0x0a, 0x03, 0x12, 0x01, 0x4e, 0x0a, 0x02, 0x08, 0x04, 0x62, 0x18, 0x0a,
    0x05, 0x70, 0x72, 0x6f, 0x62, 0x73, 0x12, 0x0f, 0x0a, 0x0d, 0x08, 0x01,
    0x12, 0x09, 0x0a, 0x03, 0x12, 0x01, 0x4e, 0x0a, 0x02, 0x08, 0x03, 0x62,
    0x16, 0x0a, 0x08, 0x6d, 0x65, 0x61, 0x6e, 0x5f, 0x6f, 0x75, 0x74, 0x12,
    0x0a, 0x0a, 0x08, 0x08, 0x01, 0x12, 0x04, 0x0a, 0x02, 0x08, 0x04, 0x42,
    0x04, 0x0a, 0x00, 0x10, 0x0d,
};
const int64_t ddpc_onnx_model_size = sizeof(ddpc_onnx_model);

void ddpc_train_micro(void **args) {
  const float *W = static_cast<const float *>(args[0]);
  const float *b = static_cast<const float *>(args[1]);
  const float *mean = static_cast<const float *>(args[2]);
  const float *gW = static_cast<const float *>(args[3]);
  const float *gb = static_cast<const float *>(args[4]);
  const float *x = static_cast<const float *>(args[5]);
  const int64_t *y = static_cast<const int64_t *>(args[6]);
  float *newMean = static_cast<float *>(args[7]);
  float *newGW = static_cast<float *>(args[8]);
  float *newGb = static_cast<float *>(args[9]);
  float *loss = static_cast<float *>(args[10]);
  int64_t *correct = static_cast<int64_t *>(args[11]);

  if (int ms = sleepMillis())
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  std::memcpy(newGW, gW, sizeof(float) * kF * kC);
  std::memcpy(newGb, gb, sizeof(float) * kC);
  float lossSum = 0;
  int64_t hits = 0;
  for (int i = 0; i < kB; ++i) {
    const float *xi = x + i * kF;
    float p[kC];
    int best = forward(W, b, xi, p);
    hits += best == y[i];
    float logitY = p[y[i]];
    float lse = softmax(p);
    lossSum += lse - logitY;
    for (int c = 0; c < kC; ++c) {
      float d = (p[c] - (c == y[i] ? 1.0f : 0.0f)) / kB;
      newGb[c] += d;
      for (int f = 0; f < kF; ++f)
        newGW[f * kC + c] += xi[f] * d;
    }
  }
  for (int f = 0; f < kF; ++f) {
    float m = 0;
    for (int i = 0; i < kB; ++i)
      m += x[i * kF + f];
    newMean[f] = (1 - kBufferMomentum) * mean[f] + kBufferMomentum * (m / kB);
  }
  *loss = lossSum / kB;
  *correct = hits;
}

void ddpc_apply(void **args) {
  const float *params[2] = {static_cast<const float *>(args[0]),
                            static_cast<const float *>(args[1])};
  const float *state[2] = {static_cast<const float *>(args[2]),
                           static_cast<const float *>(args[3])};
  const float *grads[2] = {static_cast<const float *>(args[4]),
                           static_cast<const float *>(args[5])};
  float lr = *static_cast<const float *>(args[6]);
  // args[7] (step) is unused by SGD.
  float scale = *static_cast<const float *>(args[8]);
  float *newParams[2] = {static_cast<float *>(args[9]),
                         static_cast<float *>(args[10])};
  float *newState[2] = {static_cast<float *>(args[11]),
                        static_cast<float *>(args[12])};
  const int sizes[2] = {kF * kC, kC};

  // One allreduce over both gradients, on a copy: inputs stay untouched.
  std::vector<float> g(sizes[0] + sizes[1]);
  std::memcpy(g.data(), grads[0], sizeof(float) * sizes[0]);
  std::memcpy(g.data() + sizes[0], grads[1], sizeof(float) * sizes[1]);
  ddpc_rt_allreduce_sum_f32(g.data(), static_cast<int64_t>(g.size()));
  const float *gp = g.data();
  for (int t = 0; t < 2; ++t) {
    for (int i = 0; i < sizes[t]; ++i) {
      float gi = gp[i] * scale + kWeightDecay * params[t][i];
      float m = kMomentum * state[t][i] + gi;
      newState[t][i] = m;
      newParams[t][i] = params[t][i] - lr * m;
    }
    gp += sizes[t];
  }
}

void ddpc_grad_norm(void **args) {
  const float *gW = static_cast<const float *>(args[0]);
  const float *gb = static_cast<const float *>(args[1]);
  float scale = *static_cast<const float *>(args[2]);
  double sum = 0;
  for (int i = 0; i < kF * kC; ++i)
    sum += double(gW[i]) * gW[i];
  for (int i = 0; i < kC; ++i)
    sum += double(gb[i]) * gb[i];
  *static_cast<float *>(args[3]) = static_cast<float>(std::sqrt(sum)) * scale;
}

void ddpc_eval(void **args) {
  const float *W = static_cast<const float *>(args[0]);
  const float *b = static_cast<const float *>(args[1]);
  const float *x = static_cast<const float *>(args[3]);
  const int64_t *y = static_cast<const int64_t *>(args[4]);
  float *sampleLoss = static_cast<float *>(args[5]);
  int64_t *sampleCorrect = static_cast<int64_t *>(args[6]);
  for (int i = 0; i < kB; ++i) {
    float p[kC];
    int best = forward(W, b, x + i * kF, p);
    float logitY = p[y[i]];
    float lse = softmax(p);
    sampleLoss[i] = lse - logitY;
    sampleCorrect[i] = best == y[i];
  }
}
} // extern "C"

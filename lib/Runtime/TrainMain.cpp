//===- TrainMain.cpp - main() of compiled training programs ---------------===//
//
// Linked with a compiled training step (object file + generated glue
// defining the tables of TrainABI.h) to form `train`: a data-parallel
// training program that runs plain (one rank) or under `mpirun -np N`.
//
// Data loading: every rank reads the whole data and label files (readNpy)
// and gathers its own micro-batch rows from memory. That costs N * row bytes
// per rank; datasets that do not fit in memory once per rank need a
// different loader.
//
// Buffers (BatchNorm running statistics) are updated by each rank from its
// own micro-batches; after every optimizer step they are averaged over ranks
// (one allreduce), so all ranks, checkpoints and the saved model agree. For
// statistics that are linear in the batch mean this equals what one rank with
// the global batch computes.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/Checkpoint.h"
#include "ddpc/Runtime/Collectives.h"
#include "ddpc/Runtime/LrSchedule.h"
#include "ddpc/Runtime/Memory.h"
#include "ddpc/Runtime/ModelABI.h"
#include "ddpc/Runtime/Npy.h"

#include "ZeroShard.h"
#include "ddpc/Runtime/Gemm.h"
#include "ddpc/Runtime/OnnxWriter.h"
#include "ddpc/Runtime/ProgramOptions.h"
#include "ddpc/Runtime/Sampler.h"
#include "ddpc/Runtime/TrainABI.h"
#include "ddpc/Support/ByteSize.h"
#include "ddpc/Support/ZeroLayout.h"
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace ddpc::runtime;
using ddpc::formatBytes;

/// The memory plan's predicted per-rank peak and its gradient-bucket
/// staging part (RuntimeSymbols.h kGlueMemoryPlanPeak): weak references, so
/// that programs linked from an older glue run (then no plan is shown).
extern "C" __attribute__((weak)) const int64_t ddpc_memory_plan_peak;
extern "C" __attribute__((weak)) const int64_t ddpc_memory_plan_collective;
extern "C" __attribute__((weak)) const int64_t ddpc_memory_plan_optimizer;
extern "C" __attribute__((weak)) const int64_t ddpc_memory_plan_world_size;
extern "C" __attribute__((weak)) const int64_t ddpc_memory_budget;
/// ZeRO stage 1 (TrainABI.h): absent in programs compiled at stage 0.
extern "C" __attribute__((weak)) const int32_t ddpc_zero_stage;
extern "C" __attribute__((weak)) const int64_t ddpc_zero_chunk;
extern "C" __attribute__((weak)) void ddpc_apply_shard(void **args);
/// ZeRO stage 2: the gradient buckets' members (Support/RuntimeSymbols.h).
extern "C" __attribute__((weak)) const int32_t ddpc_zero_num_buckets;
extern "C" __attribute__((weak)) const int32_t ddpc_zero_bucket_sizes[];
extern "C" __attribute__((weak)) const int32_t ddpc_zero_bucket_params[];
extern "C" __attribute__((weak)) const int64_t ddpc_memory_plan_gradients;
/// ZeRO stage 3: the plan's parameter bytes (one rank's slice at its world
/// size; Support/RuntimeSymbols.h).
extern "C" __attribute__((weak)) const int64_t ddpc_memory_plan_parameters;

namespace {

constexpr int32_t kOnnxFloat = 1;

/// Whether the program shards the optimizer state (ZeRO stage 1 or 2).
bool zeroStage1() {
  return &ddpc_zero_stage && ddpc_zero_stage >= 1 && &ddpc_zero_chunk &&
         ddpc_zero_chunk > 0 && ddpc_apply_shard;
}

/// Whether the program also shards the gradients (ZeRO stage 2): its
/// ddpc_train_micro has no gradient accumulators (TrainABI.h).
bool zeroStage2() {
  return zeroStage1() && ddpc_zero_stage >= 2 && &ddpc_zero_num_buckets &&
         &ddpc_zero_bucket_sizes && &ddpc_zero_bucket_params;
}

/// Whether the program also shards the parameters (ZeRO stage 3): its
/// ddpc_train_micro and ddpc_eval gather them (ddpc_rt_param_gather_f32)
/// and receive no parameter buffers.
bool zeroStage3() { return zeroStage2() && ddpc_zero_stage == 3; }

/// ZeRO stage 3: the bytes of this rank's parameter slice (initState).
int64_t gParamSliceBytes = 0;

/// ZeRO stage 2's buckets from the glue's tables.
std::vector<std::vector<int32_t>> zeroBuckets() {
  std::vector<std::vector<int32_t>> out;
  if (!zeroStage2())
    return out;
  const int32_t *p = ddpc_zero_bucket_params;
  for (int32_t b = 0; b < ddpc_zero_num_buckets; ++b) {
    out.emplace_back(p, p + ddpc_zero_bucket_sizes[b]);
    p += ddpc_zero_bucket_sizes[b];
  }
  return out;
}

/// The plan's peak for `world` ranks (the CPU runtime stages gradient
/// buckets only with more than one; at ZeRO stage 1 the optimizer state is
/// `zeroBytes`, this rank's slice and buffers, in place of the plan's
/// whole state; at stage 2 the gradients and collective buffers are
/// `gradBytes`, ZeroGradients' at this world size); 0 without a plan.
int64_t plannedPeak(int world, int64_t zeroBytes, int64_t gradBytes) {
  if (!&ddpc_memory_plan_peak)
    return 0;
  int64_t collective =
      &ddpc_memory_plan_collective ? ddpc_memory_plan_collective : 0;
  if (zeroStage2()) {
    if (!&ddpc_memory_plan_gradients)
      return 0;
    int64_t params = 0;
    if (zeroStage3() && &ddpc_memory_plan_parameters)
      params = gParamSliceBytes - ddpc_memory_plan_parameters;
    return ddpc_memory_plan_peak + zeroBytes - ddpc_memory_plan_optimizer +
           gradBytes - ddpc_memory_plan_gradients - collective + params;
  }
  int64_t peak = ddpc_memory_plan_peak - (world > 1 ? 0 : collective);
  if (zeroStage1() && &ddpc_memory_plan_optimizer)
    peak += zeroBytes - ddpc_memory_plan_optimizer;
  return peak;
}

constexpr int32_t kOnnxInt32 = 6;
constexpr int32_t kOnnxInt64 = 7;

/// Where an Aligned buffer lives (Memory.h): with the compiled code's
/// tensors, or host-shared (a per-step scalar the host reads or writes).
enum class Placement { Device, HostShared };

/// A zero-initialized, 64-byte aligned runtime buffer (at least 64 bytes).
class Aligned {
public:
  Aligned() = default;
  explicit Aligned(size_t bytes, Placement where = Placement::Device)
      : where(where) {
    allocate(bytes);
  }
  Aligned(Aligned &&other) noexcept
      : ptr(other.ptr), size(other.size), where(other.where) {
    other.ptr = nullptr;
  }
  Aligned &operator=(Aligned &&other) noexcept {
    std::swap(ptr, other.ptr);
    std::swap(size, other.size);
    std::swap(where, other.where);
    return *this;
  }
  Aligned(const Aligned &) = delete;
  Aligned &operator=(const Aligned &) = delete;
  ~Aligned() {
    if (where == Placement::HostShared)
      freeHostShared(ptr);
    else
      freeBuffer(ptr);
  }

  void allocate(size_t bytes) {
    ptr = where == Placement::HostShared ? allocateHostShared(bytes)
                                         : allocateBuffer(bytes);
    if (!ptr)
      fatalError("out of memory allocating " + std::to_string(bytes) +
                 " bytes");
    size = bytes;
  }
  float *f() const { return static_cast<float *>(ptr); }
  void *ptr = nullptr;
  size_t size = 0;
  Placement where = Placement::Device;
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 1;
};

std::vector<TensorInfo> readTable(int32_t count, const char *const *names,
                                  const int32_t *ranks,
                                  const int64_t *const *shapes) {
  std::vector<TensorInfo> out;
  for (int32_t i = 0; i < count; ++i) {
    TensorInfo t;
    t.name = names[i] ? names[i] : "";
    for (int32_t d = 0; d < ranks[i]; ++d) {
      t.shape.push_back(shapes[i][d]);
      t.numel *= shapes[i][d];
    }
    out.push_back(std::move(t));
  }
  return out;
}

/// A set of float32 tensors in one table order, each its own aligned
/// allocation.
struct TensorSet {
  std::vector<Aligned> tensors;
  void allocate(const std::vector<TensorInfo> &infos) {
    for (const TensorInfo &t : infos)
      tensors.emplace_back(static_cast<size_t>(t.numel) * sizeof(float));
  }
};

struct Options {
  /// --data / --val-data arguments as given: FILE or NAME=FILE, one per
  /// data input (dataFiles resolves them).
  std::vector<std::string> data, valData;
  std::string labels, valLabels, save, checkpoint, resume, logJson;
  int64_t epochs = -1;
  uint64_t seed = 0;
  bool seedGiven = false;
  bool shuffle = true;
  bool shuffleGiven = false;
  float lr = 0;
  bool lrGiven = false;
  /// --lr-schedule and its parameters (LrSchedule.h); baseLr is unset.
  LrSchedule schedule;
  bool gammaGiven = false, minGiven = false, startFactorGiven = false;
  /// --clip-grad-norm MAX; 0: no clipping.
  double clipGradNorm = 0;
  int64_t checkpointEvery = 0;
  int64_t stopAfter = -1;
  /// What a non-finite loss or gradient norm does (--nan-policy).
  enum class NanPolicy { Stop, Skip, Ignore } nanPolicy = NanPolicy::Stop;
  /// --sample-assignment strided: rank r takes rows r, r + world, ... of
  /// each global batch (torch's DistributedSampler) instead of a slice.
  bool strided = false;
  bool stridedGiven = false;
  /// --buffer-sync broadcast: after each step every rank takes rank 0's
  /// buffers (DDP's broadcast_buffers) instead of their mean over ranks.
  bool broadcastBuffers = false;
  bool bufferSyncGiven = false;
  double timeout = 30;
  int64_t threads = 0; // --threads; 0: the default (Gemm.h).
  bool quiet = false;
  bool help = false;
};

/// The data inputs' names, comma-separated, in input order.
std::string dataInputList() {
  std::string s;
  for (int32_t i = 0; i < ddpc_num_data_inputs; ++i)
    s += (i ? ", " : "") + std::string(ddpc_data_names[i]);
  return s;
}

/// Replaces every `key` in `text` by `value`.
std::string fill(std::string text, const std::string &key,
                 const std::string &value) {
  for (size_t at = text.find(key); at != std::string::npos;
       at = text.find(key, at + value.size()))
    text.replace(at, key.size(), value);
  return text;
}

void printUsage(const char *prog) {
  char lr[32];
  std::snprintf(lr, sizeof(lr), "%g", static_cast<double>(ddpc_default_lr));
  std::string options = fill(fill(formatOptionHelp(trainProgramOptions(), 22),
                                  "{inputs}", dataInputList()),
                             "{lr}", lr);
  int64_t world =
      &ddpc_memory_plan_world_size ? ddpc_memory_plan_world_size : 0;
  std::string launch =
      world > 0 ? "Compiled with --world-size " + std::to_string(world) +
                      ": run it under `mpirun -np " + std::to_string(world) +
                      "`" + (world == 1 ? " or plain" : "") +
                      " (other world sizes are refused)."
                : "Run it plain for one process or\nunder `mpirun -np N` for "
                  "data-parallel training.";
  std::string zero =
      zeroStage3()   ? "\nZeRO stage 3: each rank keeps 1/N of the parameters, "
                       "of the optimizer state and\nof the summed gradients; "
                       "each parameter is all-gathered before forward\nand "
                       "backward read it and freed after.\n"
      : zeroStage2() ? "\nZeRO stage 2: each rank keeps 1/N of the optimizer "
                       "state and of the summed\ngradients; the buckets are "
                       "reduce-scattered into them.\n"
      : zeroStage1() ? "\nZeRO stage 1: each rank keeps and updates 1/N of "
                       "the optimizer state, then\nthe parameters are "
                       "all-gathered.\n"
                     : "";
  std::printf(
      "usage: %s --data X.npy --labels Y.npy --epochs E [options]\n\n"
      "Trains the compiled model '%s' (optimizer: %s). %s\n\n"
      "%s\n"
      "Per-rank batch %lld, %d micro-batch(es) per optimizer step; the global "
      "batch is\n%lld x world size. Gradients are summed over ranks in "
      "buckets that start\nduring the backward pass of the last "
      "micro-batch (DDPC_COMM_THREAD=0: without\nthe CPU runtime's "
      "communication thread) and the update uses their mean over\nthe "
      "global batch, as DistributedDataParallel. Exit status: 0 on success, "
      "1 on\nany error.\n%s",
      prog, ddpc_model_name ? ddpc_model_name : "",
      ddpc_optimizer_desc ? ddpc_optimizer_desc : "", launch.c_str(),
      options.c_str(), static_cast<long long>(ddpc_batch_size),
      ddpc_grad_accum_steps, static_cast<long long>(ddpc_batch_size),
      zero.c_str());
}

/// The parameters of another schedule are refused (torch's schedulers take
/// no such argument; taking them silently would run another schedule).
void checkScheduleOptions(const Options &o) {
  const LrSchedule &s = o.schedule;
  const std::string kind = lrScheduleName(s.kind);
  auto only = [&](bool given, const char *flag, const char *kinds) {
    if (given)
      fatalError(std::string(flag) + " applies to --lr-schedule " + kinds +
                 " only (this run: --lr-schedule " + kind + ")");
  };
  bool step = s.kind == LrSchedule::Kind::Step;
  bool cosine = s.kind == LrSchedule::Kind::Cosine;
  bool linear = s.kind == LrSchedule::Kind::Linear;
  only(!step && s.stepSize > 0, "--lr-step-size", "step");
  only(!step && o.gammaGiven, "--lr-gamma", "step");
  only(!cosine && o.minGiven, "--lr-min", "cosine");
  only(!cosine && !linear && s.decaySteps > 0, "--lr-decay-steps",
       "cosine and linear");
  if (step && s.stepSize < 1)
    fatalError("--lr-schedule step needs --lr-step-size N (StepLR's "
               "step_size)");
  if (o.startFactorGiven && s.warmupSteps == 0)
    fatalError("--warmup-factor needs --warmup-steps W > 0");
}

/// Options from the command line (trainProgramOptions), in command-line
/// order, so that the first error on the line is the one reported.
Options parseOptions(int argc, char **argv) {
  const std::vector<OptionSpec> &table = trainProgramOptions();
  ParseResult parsed = parseProgramOptions(table, ParserSettings{}, argc, argv);
  Options o;
  for (const ParsedArg &arg : parsed.args) {
    const std::string name = table[arg.spec].name;
    const std::string &v = arg.value;
    if (name == "--help")
      o.help = true;
    else if (name == "--quiet")
      o.quiet = true;
    else if (name == "--no-shuffle")
      o.shuffle = false, o.shuffleGiven = true;
    else if (name == "--data")
      o.data.push_back(v);
    else if (name == "--labels")
      o.labels = v;
    else if (name == "--val-data")
      o.valData.push_back(v);
    else if (name == "--val-labels")
      o.valLabels = v;
    else if (name == "--epochs")
      o.epochs = arg.intValue;
    else if (name == "--shuffle-seed")
      o.seed = static_cast<uint64_t>(arg.intValue), o.seedGiven = true;
    else if (name == "--lr") {
      o.lr = static_cast<float>(arg.doubleValue), o.lrGiven = true;
      if (!(std::isfinite(o.lr) && o.lr >= 0))
        fatalError("--lr must be a finite number >= 0, got '" + v + "'");
    } else if (name == "--lr-schedule")
      o.schedule.kind = v == "step"     ? LrSchedule::Kind::Step
                        : v == "cosine" ? LrSchedule::Kind::Cosine
                        : v == "linear" ? LrSchedule::Kind::Linear
                                        : LrSchedule::Kind::Constant;
    else if (name == "--warmup-steps")
      o.schedule.warmupSteps = arg.intValue;
    else if (name == "--warmup-factor") {
      o.schedule.warmupStartFactor = arg.doubleValue, o.startFactorGiven = true;
      if (!(arg.doubleValue > 0 && arg.doubleValue <= 1))
        fatalError("--warmup-factor must be in (0, 1], got '" + v + "'");
    } else if (name == "--lr-step-size")
      o.schedule.stepSize = arg.intValue;
    else if (name == "--lr-gamma") {
      o.schedule.gamma = arg.doubleValue, o.gammaGiven = true;
      if (!(arg.doubleValue >= 0))
        fatalError("--lr-gamma must be a number >= 0, got '" + v + "'");
    } else if (name == "--lr-min") {
      o.schedule.minLr = arg.doubleValue, o.minGiven = true;
      if (!(arg.doubleValue >= 0))
        fatalError("--lr-min must be a number >= 0, got '" + v + "'");
    } else if (name == "--lr-decay-steps")
      o.schedule.decaySteps = arg.intValue;
    else if (name == "--clip-grad-norm") {
      o.clipGradNorm = arg.doubleValue;
      if (!(arg.doubleValue > 0))
        fatalError("--clip-grad-norm must be a number > 0, got '" + v + "'");
    } else if (name == "--save")
      o.save = v;
    else if (name == "--checkpoint-every")
      o.checkpointEvery = arg.intValue;
    else if (name == "--checkpoint")
      o.checkpoint = v;
    else if (name == "--resume")
      o.resume = v;
    else if (name == "--stop-after-steps")
      o.stopAfter = arg.intValue;
    else if (name == "--log-json")
      o.logJson = v;
    else if (name == "--nan-policy")
      o.nanPolicy = v == "skip"     ? Options::NanPolicy::Skip
                    : v == "ignore" ? Options::NanPolicy::Ignore
                                    : Options::NanPolicy::Stop;
    else if (name == "--sample-assignment")
      o.strided = v == "strided", o.stridedGiven = true;
    else if (name == "--buffer-sync")
      o.broadcastBuffers = v == "broadcast", o.bufferSyncGiven = true;
    else if (name == "--threads")
      o.threads = arg.intValue;
    else if (name == "--timeout") {
      o.timeout = arg.doubleValue;
      if (o.timeout <= 0)
        fatalError("--timeout must be positive");
    }
  }
  if (!parsed.error.empty())
    fatalError(parsed.error);
  if (o.help)
    return o;
  if (o.data.empty() || o.labels.empty())
    fatalError("--data and --labels are required (see --help)");
  if (o.epochs < 0)
    fatalError("--epochs is required (see --help)");
  if (o.valData.empty() != o.valLabels.empty())
    fatalError("--val-data and --val-labels go together");
  if (o.checkpointEvery > 0 && o.checkpoint.empty())
    fatalError("--checkpoint-every needs --checkpoint");
  if (o.seedGiven && o.shuffleGiven)
    fatalError("--shuffle-seed and --no-shuffle exclude each other");
  checkScheduleOptions(o);
  // Output folders must exist before hours of training, not after.
  for (const auto &[flag, path] :
       {std::pair<const char *, const std::string *>{"--save", &o.save},
        {"--checkpoint", &o.checkpoint},
        {"--log-json", &o.logJson}}) {
    if (path->empty())
      continue;
    std::string dir = ".";
    size_t slash = path->find_last_of('/');
    if (slash != std::string::npos)
      dir = slash == 0 ? "/" : path->substr(0, slash);
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      fatalError(std::string(flag) + " " + *path + ": '" + dir +
                 (::stat(dir.c_str(), &st) == 0 ? "' is not a folder"
                                                : "' does not exist"));
    if (::stat(path->c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      fatalError(std::string(flag) + " " + *path +
                 " is a folder; give a file name");
  }
  return o;
}

/// One tensor of a dataset in the step's layout: `n` rows of `rowElems`
/// elements of `item` bytes (a data input's dtype, or the labels').
struct Column {
  std::string file;
  int64_t rowElems = 1;
  size_t item = 4;
  std::vector<uint8_t> bytes;
  size_t rowBytes() const { return static_cast<size_t>(rowElems) * item; }
};

/// A dataset: one column per data input (TrainABI.h order), then the
/// labels; row i of every column is sample i.
struct Dataset {
  int64_t n = 0;
  std::vector<Column> columns;
  const Column &labels() const { return columns.back(); }
};

std::vector<int64_t> tail(const int64_t *shape, int32_t rank) {
  return std::vector<int64_t>(shape + 1, shape + rank);
}

std::string withN(const std::vector<int64_t> &rest, const char *n) {
  std::string s = std::string("[") + n;
  for (int64_t d : rest)
    s += "," + std::to_string(d);
  return s + "]";
}

template <typename T> T loadAs(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

/// Integer element `i` of an integer .npy array (ONNX dtype `dtype`).
/// `ok` is false for a uint64 above INT64_MAX.
int64_t integerAt(const uint8_t *src, int32_t dtype, int64_t i, bool &ok) {
  ok = true;
  switch (dtype) {
  case 2:
    return loadAs<uint8_t>(src + i);
  case 9: // bool: 0 or 1 (an attention mask)
    return loadAs<uint8_t>(src + i) != 0;
  case 3:
    return loadAs<int8_t>(src + i);
  case 4:
    return loadAs<uint16_t>(src + 2 * i);
  case 5:
    return loadAs<int16_t>(src + 2 * i);
  case 6:
    return loadAs<int32_t>(src + 4 * i);
  case 12:
    return loadAs<uint32_t>(src + 4 * i);
  case 13: {
    uint64_t v = loadAs<uint64_t>(src + 8 * i);
    ok = v <= static_cast<uint64_t>(INT64_MAX);
    return static_cast<int64_t>(v);
  }
  default:
    return loadAs<int64_t>(src + 8 * i);
  }
}

bool isIntegerNpy(int32_t dtype) {
  return dtype == 2 || dtype == 3 || dtype == 4 || dtype == 5 || dtype == 6 ||
         dtype == 7 || dtype == 9 || dtype == 12 || dtype == 13;
}

/// What a file may hold for a tensor of ONNX dtype `want`.
const char *acceptedDTypes(int32_t want) {
  return want == kOnnxFloat ? "float32 (or float64, an integer dtype or bool)"
         : want == kOnnxInt32
             ? "int32 (or another integer dtype or bool, values in int32's "
               "range)"
             : "int64 (or int32/int16/int8/uint8/uint16/uint32/uint64/bool)";
}

/// Converts `a` (count elements) to the step's dtype `want` (float32: from
/// float32/float64; int64 and int32: from any integer dtype) into `out`.
/// Returns false with `why` for another dtype or a value out of range.
/// `check(v, i)`, for integers, may refuse element i (labels: a class id).
bool convertElements(const NpyArray &a, int64_t count, int32_t want,
                     std::vector<uint8_t> &out, std::string &why,
                     const std::function<bool(int64_t, int64_t)> &check = {}) {
  const uint8_t *src = a.data.data();
  if (want == kOnnxFloat) {
    if (isIntegerNpy(a.dtype)) {
      // A mask (bool, int64) for a float input; refused past 2^24, where
      // float32 would round it.
      out.resize(static_cast<size_t>(count) * 4);
      for (int64_t i = 0; i < count; ++i) {
        bool ok;
        int64_t v = integerAt(src, a.dtype, i, ok);
        if (!ok || v > (1 << 24) || v < -(1 << 24)) {
          why = "element " + std::to_string(i) +
                " is not exact in float32 (|value| > 2^24)";
          return false;
        }
        float f = static_cast<float>(v);
        std::memcpy(out.data() + 4 * i, &f, 4);
      }
      return true;
    }
    if (a.dtype != kOnnxFloat && a.dtype != 11)
      return false;
    out.resize(static_cast<size_t>(count) * 4);
    if (a.dtype == kOnnxFloat) {
      std::memcpy(out.data(), src, out.size());
      return true;
    }
    for (int64_t i = 0; i < count; ++i) {
      float v = static_cast<float>(loadAs<double>(src + 8 * i));
      std::memcpy(out.data() + 4 * i, &v, 4);
    }
    return true;
  }
  if (!isIntegerNpy(a.dtype))
    return false;
  size_t item = want == kOnnxInt32 ? 4 : 8;
  out.resize(static_cast<size_t>(count) * item);
  for (int64_t i = 0; i < count; ++i) {
    bool ok;
    int64_t v = integerAt(src, a.dtype, i, ok);
    if (!ok || (item == 4 && (v < INT32_MIN || v > INT32_MAX))) {
      why = "element " + std::to_string(i) + " (" +
            (ok ? std::to_string(v)
                : std::to_string(loadAs<uint64_t>(src + 8 * i))) +
            ") does not fit in " + (item == 4 ? "int32" : "int64");
      return false;
    }
    if (check && !check(v, i))
      return false;
    if (item == 4) {
      int32_t w = static_cast<int32_t>(v);
      std::memcpy(out.data() + 4 * i, &w, 4);
    } else {
      std::memcpy(out.data() + 8 * i, &v, 8);
    }
  }
  return true;
}

/// The --data (--val-data) files, one per data input in TrainABI.h order,
/// from `args`: NAME=FILE by input name, FILE in input order for the
/// inputs not named. Refuses a count that does not match, with the names.
std::vector<std::string> dataFiles(const std::vector<std::string> &args,
                                   const char *flag) {
  const int32_t D = ddpc_num_data_inputs;
  std::vector<std::string> files(D);
  std::vector<std::string> positional;
  for (const std::string &a : args) {
    // NAME=FILE: the longest input name followed by '=' (a name may hold
    // '=' itself).
    int32_t named = -1;
    size_t nameLen = 0;
    for (int32_t i = 0; i < D; ++i) {
      size_t len = std::strlen(ddpc_data_names[i]);
      if (len >= nameLen && a.size() > len && a[len] == '=' &&
          a.compare(0, len, ddpc_data_names[i]) == 0)
        named = i, nameLen = len;
    }
    if (named < 0) {
      // NAME=FILE with a name the model lacks, unless it is a file.
      size_t eq = a.find('=');
      struct stat st;
      if (eq != std::string::npos && eq > 0 && a.find('/') > eq &&
          ::stat(a.c_str(), &st) != 0)
        fatalError(std::string(flag) + " " + a +
                   ": the model has no data input '" + a.substr(0, eq) +
                   "' (its data inputs: " + dataInputList() + ")");
      positional.push_back(a);
      continue;
    }
    if (!files[named].empty())
      fatalError(std::string(flag) + " names the data input '" +
                 ddpc_data_names[named] + "' twice");
    files[named] = a.substr(nameLen + 1);
    if (files[named].empty())
      fatalError(std::string(flag) + " " + a + ": no file name after '='");
  }
  size_t next = 0;
  for (int32_t i = 0; i < D; ++i)
    if (files[i].empty() && next < positional.size())
      files[i] = positional[next++];
  bool missing = std::any_of(files.begin(), files.end(),
                             [](const std::string &f) { return f.empty(); });
  if (missing || next != positional.size())
    fatalError(
        std::string(flag) + ": the model has " + std::to_string(D) +
        " data input(s) (" + dataInputList() + ") and " +
        std::to_string(args.size()) + " " + flag +
        " file(s) were given; give one per input, in this order, or as " +
        flag + " NAME=FILE");
  for (const std::string &f : files) {
    struct stat st;
    if (::stat(f.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      fatalError(std::string(flag) + " " + f +
                 " is a folder; give a file name");
  }
  return files;
}

/// The files of `files`, comma-separated.
std::string fileList(const std::vector<std::string> &files) {
  std::string s;
  for (const std::string &f : files)
    s += (s.empty() ? "" : ", ") + f;
  return s;
}

/// Reads and checks the data files (one per data input) and the labels;
/// converts their dtypes to the step's.
Dataset loadDataset(const std::vector<std::string> &dataPaths,
                    const std::string &labelPath) {
  Dataset ds;
  std::string err;
  const int32_t D = ddpc_num_data_inputs;
  for (int32_t c = 0; c < D; ++c) {
    const std::string &path = dataPaths[c];
    const int32_t dtype = ddpc_data_dtypes[c];
    NpyArray x;
    if (!readNpy(path, x, err))
      fatalError(err);
    std::vector<int64_t> rowShape =
        tail(ddpc_data_shapes[c], ddpc_data_ranks[c]);
    std::vector<int64_t> gotRest(
        x.shape.empty() ? x.shape.begin() : x.shape.begin() + 1, x.shape.end());
    std::string what =
        D == 1 ? std::string("data")
               : "data for input '" + std::string(ddpc_data_names[c]) + "'";
    auto badData = [&](const std::string &why) {
      fatalError(path + ": expected " + what + " of shape " +
                 withN(rowShape, "N") + " with dtype " + acceptedDTypes(dtype) +
                 ", got " + dtypeName(x.dtype) + formatShape(x.shape) +
                 (why.empty() ? "" : ": " + why));
    };
    if (x.shape.empty() || gotRest != rowShape)
      badData("");
    if (c == 0)
      ds.n = x.shape[0];
    else if (x.shape[0] != ds.n)
      fatalError(path + ": " + std::to_string(x.shape[0]) + " samples for '" +
                 ddpc_data_names[c] + "', but " + dataPaths[0] + " has " +
                 std::to_string(ds.n) + " for '" + ddpc_data_names[0] +
                 "'; row i of every --data file is sample i");
    Column col;
    col.file = path;
    for (int64_t d : rowShape)
      col.rowElems *= d;
    col.item = dtype == kOnnxInt64 ? 8 : 4;
    if (!convertElements(x, ds.n * col.rowElems, dtype, col.bytes, err))
      badData(err);
    ds.columns.push_back(std::move(col));
  }

  NpyArray y;
  if (!readNpy(labelPath, y, err))
    fatalError(err);
  std::vector<int64_t> labelRest = tail(ddpc_label_shape, ddpc_label_rank);
  std::vector<int64_t> expect = labelRest;
  expect.insert(expect.begin(), ds.n);
  bool isInt = ddpc_label_dtype == kOnnxInt64;
  Column lab;
  lab.file = labelPath;
  for (int64_t d : labelRest)
    lab.rowElems *= d;
  lab.item = isInt ? 8 : 4;
  auto badLabels = [&](const std::string &why) {
    fatalError(labelPath + ": expected labels of shape " + formatShape(expect) +
               " (N = " + std::to_string(ds.n) + " samples in " + dataPaths[0] +
               ") with dtype " + acceptedDTypes(ddpc_label_dtype) + ", got " +
               dtypeName(y.dtype) + formatShape(y.shape) +
               (why.empty() ? "" : ": " + why));
  };
  if (y.shape != expect)
    badLabels("");
  auto classId = [&](int64_t v, int64_t i) {
    if (v < 0)
      fatalError(labelPath + ": label " + std::to_string(v) + " of sample " +
                 std::to_string(i / lab.rowElems) + " is negative");
    if (ddpc_num_classes > 0 && v >= ddpc_num_classes)
      fatalError(labelPath + ": label " + std::to_string(v) + " of sample " +
                 std::to_string(i / lab.rowElems) +
                 " is out of range: the model has " +
                 std::to_string(ddpc_num_classes) + " classes (0.." +
                 std::to_string(ddpc_num_classes - 1) + ")");
    return true;
  };
  err.clear();
  if (!convertElements(y, ds.n * lab.rowElems, ddpc_label_dtype, lab.bytes, err,
                       classId))
    badLabels(err);
  ds.columns.push_back(std::move(lab));
  return ds;
}

/// Copies sample `idx` of `ds` into row `row` of the batch buffers, one per
/// column.
void gatherRow(const Dataset &ds, int64_t idx, int64_t row, void *const *dst) {
  for (size_t c = 0; c < ds.columns.size(); ++c) {
    const Column &col = ds.columns[c];
    size_t rb = col.rowBytes();
    std::memcpy(static_cast<uint8_t *>(dst[c]) + row * rb,
                col.bytes.data() + idx * rb, rb);
  }
}

/// Gathers the training micro-batches into staging memory (Memory.h) on a
/// background thread, in exactly the order the training loop consumes
/// them (epochs from `epoch`, steps from `step`, micro-batches k < K of
/// this rank, epochOrder/sliceBegin of Sampler.h), `kSlots` micro-batches
/// ahead, so that gathering overlaps the compiled step. Staging memory is
/// page-locked on CUDA, where the loop copies it to the device
/// asynchronously.
class BatchPrefetcher {
public:
  static constexpr int kSlots = 2;

  BatchPrefetcher(const Dataset &ds, int64_t B, int64_t K, int rank, int world,
                  int64_t stepsPerEpoch, uint64_t seed, bool shuffle,
                  bool strided, int64_t epoch, int64_t step)
      : ds(ds), B(B), K(K), rank(rank), world(world),
        stepsPerEpoch(stepsPerEpoch), seed(seed), shuffle(shuffle),
        strided(strided), epoch(epoch), step(step) {
    size_t total = 0;
    for (const Column &col : ds.columns) {
      bytes.push_back(static_cast<size_t>(B) * col.rowBytes());
      total += bytes.back();
    }
    for (Slot &slot : slots)
      for (size_t c = 0; c < ds.columns.size(); ++c) {
        slot.ptrs.push_back(allocateStaging(bytes[c]));
        if (!slot.ptrs.back())
          fatalError("out of memory allocating " + std::to_string(total) +
                     " bytes of staging memory for input batches");
      }
    worker = std::thread([this] { run(); });
  }

  ~BatchPrefetcher() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    changed.notify_all();
    worker.join();
    for (Slot &slot : slots)
      for (void *p : slot.ptrs)
        freeStaging(p);
  }

  /// Copies the next micro-batch into `dst` (one buffer from
  /// allocateBuffer per column), ordered before compiled code called
  /// afterwards, and hands its staging slot back once the copies have read
  /// it.
  void next(void *const *dst) {
    Slot &slot = slots[consumed % kSlots];
    {
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] { return produced > consumed; });
    }
    std::vector<uint64_t> tickets;
    for (size_t c = 0; c < bytes.size(); ++c)
      tickets.push_back(copyFromStaging(dst[c], slot.ptrs[c], bytes[c]));
    for (uint64_t t : tickets)
      waitStagingCopy(t);
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++consumed;
    }
    changed.notify_all();
  }

private:
  struct Slot {
    std::vector<void *> ptrs; // one per column
  };

  void run() {
    std::vector<int64_t> order;
    int64_t orderEpoch = -1;
    for (;;) {
      if (orderEpoch != epoch) {
        order = epochOrder(ds.n, seed, epoch, shuffle);
        orderEpoch = epoch;
      }
      for (int64_t k = 0; k < K; ++k) {
        {
          std::unique_lock<std::mutex> lock(mutex);
          changed.wait(
              lock, [&] { return stopping || produced - consumed < kSlots; });
          if (stopping)
            return;
        }
        Slot &slot = slots[produced % kSlots];
        for (int64_t j = 0; j < B; ++j)
          gatherRow(
              ds, order[samplePosition(step, k, rank, j, B, world, K, strided)],
              j, slot.ptrs.data());
        {
          std::lock_guard<std::mutex> lock(mutex);
          ++produced;
        }
        changed.notify_all();
      }
      if (++step == stepsPerEpoch) {
        step = 0;
        ++epoch;
      }
    }
  }

  const Dataset &ds;
  const int64_t B, K;
  const int rank, world;
  const int64_t stepsPerEpoch;
  const uint64_t seed;
  const bool shuffle, strided;
  int64_t epoch, step;       // the producer's position
  std::vector<size_t> bytes; // per column, one micro-batch
  Slot slots[kSlots];
  std::mutex mutex;
  std::condition_variable changed;
  uint64_t produced = 0, consumed = 0;
  bool stopping = false;
  std::thread worker;
};

/// A loss for the progress lines: 4 decimals, or nan/inf (printf's "%f"
/// writes "-nan" for some NaNs).
std::string formatLoss(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.4f", v);
  return buf;
}

std::string jsonNumber(double v) {
  if (!std::isfinite(v))
    return "null";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

/// One number that every rank must agree on before training starts, and
/// how to show it in the refusal.
struct StartupField {
  const char *label;
  double value;
  std::string (*show)(double);
};

std::string showCount(double v) { return std::to_string(int64_t(v)); }
std::string showSamples(double v) {
  return v < 0 ? "none" : std::to_string(int64_t(v)) + " samples";
}
std::string showHex(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%08llx", static_cast<unsigned long long>(v));
  return buf;
}
std::string showNumber(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}
std::string showPolicy(double v) {
  return v == 0 ? "stop" : v == 1 ? "skip" : "ignore";
}
std::string showSeed(double v) {
  return v < 0 ? "none (--no-shuffle)" : showNumber(v);
}
std::string showAssignment(double v) {
  return v < 0 ? "not given" : v > 0 ? "strided" : "contiguous";
}
std::string showBufferSync(double v) {
  return v < 0 ? "not given" : v > 0 ? "broadcast" : "average";
}
std::string showSchedule(double v) {
  return lrScheduleName(static_cast<LrSchedule::Kind>(static_cast<int>(v)));
}
std::string showSteps(double v) {
  return v < 0 ? "unlimited" : std::to_string(int64_t(v));
}

/// A 32-bit FNV-1a hash of what makes a compiled training program (model,
/// optimizer, parameters, data and label layout): exact in a double.
double programDigest() {
  uint32_t h = 2166136261u;
  auto mix = [&](const void *p, size_t n) {
    for (size_t i = 0; i < n; ++i)
      h = (h ^ static_cast<const uint8_t *>(p)[i]) * 16777619u;
  };
  auto mixStr = [&](const char *text) {
    if (text)
      mix(text, std::strlen(text) + 1);
  };
  mixStr(ddpc_model_name);
  mixStr(ddpc_optimizer_desc);
  for (int32_t i = 0; i < ddpc_num_params; ++i) {
    mixStr(ddpc_param_names[i]);
    mix(ddpc_param_shapes[i], sizeof(int64_t) * ddpc_param_ranks[i]);
  }
  for (int32_t i = 0; i < ddpc_num_data_inputs; ++i) {
    mixStr(ddpc_data_names[i]);
    mix(&ddpc_data_dtypes[i], sizeof(int32_t));
    mix(ddpc_data_shapes[i], sizeof(int64_t) * ddpc_data_ranks[i]);
  }
  mix(&ddpc_label_dtype, sizeof(ddpc_label_dtype));
  mix(ddpc_label_shape, sizeof(int64_t) * ddpc_label_rank);
  return h;
}

/// Before the first collective of training, every rank must run the same
/// program (model, optimizer, parameter and data layout) with the same
/// step-defining options on data of the same size: otherwise the ranks run
/// collectives that do not pair up (MPI_ERR_TRUNCATE, a hang until the
/// watchdog) or silently train different things. One allreduce of each
/// rank's numbers; on a mismatch rank 0 names the fields, the values and
/// the ranks, and every rank ends with status 1. (Launching ranks with
/// different --data files, MPMD, is the usual way to get here.)
void requireSameRunOnAllRanks(int world, int rank,
                              const std::vector<StartupField> &fields) {
  if (world == 1)
    return;
  const size_t kFields = fields.size();
  std::vector<double> all(kFields * world, 0.0);
  for (size_t f = 0; f < kFields; ++f)
    all[kFields * rank + f] = fields[f].value;
  allreduceSum(all.data(), static_cast<int64_t>(all.size()),
               "allreduce of the ranks' start-up check");
  std::string diffs;
  for (size_t f = 0; f < kFields; ++f) {
    // Ranks grouped by value, in rank order of first appearance.
    std::vector<std::pair<double, std::vector<int>>> groups;
    for (int r = 0; r < world; ++r) {
      double v = all[kFields * r + f];
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const auto &g) { return g.first == v; });
      if (it == groups.end())
        groups.push_back({v, {r}});
      else
        it->second.push_back(r);
    }
    if (groups.size() < 2)
      continue;
    std::string line = std::string(fields[f].label) + ":";
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::vector<int> &ranks = groups[g].second;
      std::string who = ranks.size() == 1 ? "rank" : "ranks";
      for (size_t i = 0; i < ranks.size(); ++i)
        who += (i ? ", " : " ") + std::to_string(ranks[i]);
      line += (g ? ", " : " ") + fields[f].show(groups[g].first) + " on " + who;
    }
    diffs += (diffs.empty() ? "" : "; ") + line;
  }
  if (diffs.empty())
    return;
  if (rank == 0)
    std::fprintf(stderr,
                 "error: the ranks were given different data or programs: %s; "
                 "every rank must run the same program with the same options "
                 "on the same --data, --labels and --val-data files\n",
                 diffs.c_str());
  std::fflush(stderr);
  barrier("barrier before exit");
  collectivesFinalize();
  std::exit(1);
}

/// Position and running epoch totals; restored by --resume and broadcast
/// from rank 0 as bytes.
struct Position {
  int64_t epoch = 0, stepInEpoch = 0, globalStep = 0;
  // Steps applied: globalStep minus those --nan-policy skip dropped
  // (AdamW's step count).
  int64_t optimizerSteps = 0;
  double epochLossSum = 0;
  int64_t epochCorrect = 0, epochSamples = 0, epochSteps = 0;
  uint64_t seed = 0;
  int64_t shuffle = 1;
  int64_t strided = 0, broadcastBuffers = 0;
};

/// One training run: the tables, data, double-buffered state and per-step
/// buffers that run() walks through step by step.
struct TrainRun {
  explicit TrainRun(const Options &opt) : opt(opt) {}

  const Options &opt;
  const int rank = worldRank();
  const int world = worldSize();
  const int64_t B = ddpc_batch_size;
  const int64_t K = ddpc_grad_accum_steps;
  const int32_t P = ddpc_num_params, Bf = ddpc_num_buffers, S = ddpc_opt_slots;
  const int32_t D = ddpc_num_data_inputs;
  std::vector<TensorInfo> params, buffers, slots;
  std::vector<std::string> trainFiles;
  Dataset train, val;
  bool haveVal = false;
  int64_t globalBatch = 0, stepsPerEp = 0;
  // State, double-buffered: the step functions write outputs into the other
  // half, then the halves swap; cp, cb, cg, co are the current halves.
  TensorSet paramSets[2], bufferSets[2], gradSets[2], optSets[2];
  int cp = 0, cb = 0, cg = 0, co = 0;
  // ZeRO stage 1: this rank's slice of the optimizer state (optSets stay
  // empty), its allocated bytes, and a checkpoint's whole state (rank 0,
  // --resume) until it is scattered.
  std::unique_ptr<ZeroStage1> zero;
  int64_t zeroBytes = 0;
  // ZeRO stage 2: this rank's gradient slice and bucket buffers (gradSets
  // stay empty) and their bytes.
  std::unique_ptr<ZeroGradients> zeroGrads;
  int64_t gradBytes = 0;
  std::vector<std::vector<float>> resumedState;
  // ZeRO stage 3: a checkpoint's whole parameters (rank 0) until scattered.
  std::vector<std::vector<float>> resumedParams;
  Position pos;
  const bool resumed = !opt.resume.empty();
  // The step's learning rate (--lr-schedule at the step's index) and the
  // schedule with the run's base rate; the schedule spans totalSteps.
  float lr = 0;
  LrSchedule schedule;
  int64_t totalSteps = 0;
  // The step's --clip-grad-norm factor min(1, MAX / (norm + 1e-6)); 1
  // without clipping.
  float clipCoef = 1;
  // The validation metrics of the epoch that the step in progress ends.
  double valLoss = NAN, valAcc = NAN;
  bool valDone = false;
  int64_t stopAt = INT64_MAX;
  bool tty = false;
  std::FILE *logFile = nullptr;
  // Micro-batch buffers, one per column (data inputs, then labels), and
  // the step functions' argument vectors and scalars.
  std::vector<Aligned> batch;
  std::vector<void *> batchPtrs;
  Aligned lossOut, correctOut, sampleLoss, sampleCorrect, lrArg, stepArg,
      scaleArg, rngArg, gradNormOut;
  std::vector<void *> microArgs, applyArgs, evalArgs, normArgs;
  // Steps applied under --nan-policy ignore whose loss or gradient norm
  // was not finite.
  int64_t appliedNonFinite = 0;
  int64_t lastCkptStep = -1;
  // The epoch in progress: its start, the samples this process ran.
  float gradScale = 1;
  int64_t progressEvery = 1;
  Clock::time_point epochStart;
  int64_t epochSamplesHere = 0;
  // The step in progress: its start, the buffers' half at its start (a
  // skipped step returns to them), this rank's loss sum and correct count
  // (global after decideStep), whether a loss was nan or inf, the gradient
  // norm and whether the update is skipped.
  Clock::time_point stepStart;
  int cbAtStart = 0;
  double local[2] = {0, 0};
  bool lossNaN = false, lossInf = false;
  float gradNorm = NAN;
  bool skipped = false;

  /// The tables must describe something this runtime can drive.
  void checkTables() {
    bool dataOk = ddpc_num_data_inputs >= 1;
    for (int32_t i = 0; dataOk && i < ddpc_num_data_inputs; ++i)
      dataOk = ddpc_data_ranks[i] >= 1 && ddpc_data_shapes[i][0] == B &&
               (ddpc_data_dtypes[i] == kOnnxFloat ||
                ddpc_data_dtypes[i] == kOnnxInt64 ||
                ddpc_data_dtypes[i] == kOnnxInt32);
    if (B < 1 || K < 1 || !dataOk || ddpc_label_rank < 1 ||
        ddpc_label_shape[0] != B ||
        (ddpc_label_dtype != kOnnxInt64 && ddpc_label_dtype != kOnnxFloat) ||
        ddpc_opt_slots < 0)
      fatalError("the compiled model's training tables are inconsistent "
                 "(batch size, data/label shapes or dtypes)");
  }

  /// Parameters, buffers and optimizer slots from TrainABI.h.
  void readTables() {
    params = readTable(ddpc_num_params, ddpc_param_names, ddpc_param_ranks,
                       ddpc_param_shapes);
    buffers = readTable(ddpc_num_buffers, ddpc_buffer_names, ddpc_buffer_ranks,
                        ddpc_buffer_shapes);
    for (const TensorInfo &p : params)
      for (int32_t s = 0; s < S; ++s)
        slots.push_back(
            {p.name + "/slot" + std::to_string(s), p.shape, p.numel});
  }

  /// --data/--labels and --val-data/--val-labels, whole, on every rank.
  void loadData() {
    trainFiles = dataFiles(opt.data, "--data");
    train = loadDataset(trainFiles, opt.labels);
    haveVal = !opt.valData.empty();
    if (haveVal)
      val = loadDataset(dataFiles(opt.valData, "--val-data"), opt.valLabels);
  }

  /// Every rank must run the same program on the same data and options.
  void checkSameRunOnAllRanks() {
    requireSameRunOnAllRanks(
        world, rank,
        {{"program", programDigest(), showHex},
         {"--data", double(train.n), showSamples},
         {"--val-data", haveVal ? double(val.n) : -1.0, showSamples},
         {"per-rank batch", double(B), showCount},
         {"micro-batches per step", double(K), showCount},
         {"--epochs", double(opt.epochs), showCount},
         {"--stop-after-steps", double(opt.stopAfter), showSteps},
         {"--nan-policy", double(static_cast<int>(opt.nanPolicy)), showPolicy},
         {"--lr", opt.lrGiven ? double(opt.lr) : double(ddpc_default_lr),
          showNumber},
         {"--lr-schedule", double(static_cast<int>(opt.schedule.kind)),
          showSchedule},
         {"--warmup-steps", double(opt.schedule.warmupSteps), showCount},
         {"--clip-grad-norm", opt.clipGradNorm, showNumber},
         {"--shuffle-seed",
          opt.shuffle ? double(opt.seed & ((1ull << 52) - 1)) : -1.0, showSeed},
         {"--sample-assignment", opt.stridedGiven ? double(opt.strided) : -1.0,
          showAssignment},
         {"--buffer-sync",
          opt.bufferSyncGiven ? double(opt.broadcastBuffers) : -1.0,
          showBufferSync}});
  }

  /// Optimizer steps per epoch; at least one. A program compiled with
  /// --world-size runs on that many ranks only (its memory plan and budget
  /// check assumed them).
  void countSteps() {
    if (&ddpc_memory_plan_world_size && ddpc_memory_plan_world_size > 0 &&
        ddpc_memory_plan_world_size != world)
      fatalError("this program was compiled with --world-size " +
                 std::to_string(ddpc_memory_plan_world_size) +
                 " (its memory plan assumes that many ranks) but runs on " +
                 std::to_string(world) + ": launch it with mpirun -np " +
                 std::to_string(ddpc_memory_plan_world_size) +
                 ", or recompile with --world-size " + std::to_string(world) +
                 " (or without it)");
    globalBatch = B * world;
    stepsPerEp = stepsPerEpoch(train.n, B, world, K);
    if (stepsPerEp == 0)
      fatalError(trainFiles[0] + ": " + std::to_string(train.n) +
                 " samples are fewer than one optimizer step needs (" +
                 std::to_string(globalBatch * K) + " = batch " +
                 std::to_string(B) + " x " + std::to_string(world) +
                 " ranks x " + std::to_string(K) + " micro-batches)");
  }

  /// Half 0 of the state from the compiled initial values.
  void initState() {
    for (int h = 0; h < 2; ++h) {
      if (!zeroStage3())
        paramSets[h].allocate(params);
      bufferSets[h].allocate(buffers);
      if (!zeroStage2())
        gradSets[h].allocate(params);
      if (!zeroStage1())
        optSets[h].allocate(slots);
    }
    if (zeroStage1()) {
      std::vector<int64_t> numels;
      for (const TensorInfo &t : params)
        numels.push_back(t.numel);
      zeroBytes = ZeroStage1::allocatedBytes(numels, S, ddpc_zero_chunk, world,
                                             kBufferAlignment);
      if (zeroStage2())
        gradBytes = ZeroGradients::allocatedBytes(
            numels, zeroBuckets(), ddpc_zero_chunk, world, kBufferAlignment);
      if (zeroStage3())
        gParamSliceBytes = ddpc::zeroStage3ParameterBytes(
            numels, ddpc_zero_chunk, world, kBufferAlignment);
      // Compiled without --world-size, the budget check counted the whole
      // state; the slice at this world size is known only now.
      int64_t plan = plannedPeak(world, zeroBytes, gradBytes);
      if (&ddpc_memory_budget && ddpc_memory_budget > 0 &&
          plan > ddpc_memory_budget)
        fatalError(
            "the memory plan at ZeRO stage " + std::to_string(ddpc_zero_stage) +
            " on " + std::to_string(world) + " ranks is " +
            std::to_string(plan) + " bytes, above --memory-budget " +
            std::to_string(ddpc_memory_budget) +
            " bytes: recompile with --world-size " + std::to_string(world) +
            " (the compile then checks the budget and picks the "
            "stage with --zero-stage auto) or a larger budget");
      zero =
          std::make_unique<ZeroStage1>(numels, S, ddpc_zero_chunk, world, rank);
      if (zeroStage2()) {
        zeroGrads = std::make_unique<ZeroGradients>(
            numels, zeroBuckets(), ddpc_zero_chunk, world, rank);
        setGradientShard(zeroGrads.get());
      }
      if (zeroStage3()) {
        zero->enableParameterSlice();
        std::vector<const float *> init(ddpc_param_init, ddpc_param_init + P);
        zero->setParameters(init);
        setParameterShard(zero.get());
      }
    }
    if (!zeroStage3())
      for (int32_t i = 0; i < P; ++i)
        std::memcpy(paramSets[0].tensors[i].ptr, ddpc_param_init[i],
                    params[i].numel * sizeof(float));
    for (int32_t i = 0; i < Bf; ++i)
      std::memcpy(bufferSets[0].tensors[i].ptr, ddpc_buffer_init[i],
                  buffers[i].numel * sizeof(float));
  }

  /// The sampler settings, and (--resume, on rank 0) the state and position
  /// of a checkpoint that must match this program.
  void resumeFromCheckpoint() {
    pos.seed = opt.seed;
    pos.shuffle = opt.shuffle ? 1 : 0;
    pos.strided = opt.strided ? 1 : 0;
    pos.broadcastBuffers = opt.broadcastBuffers ? 1 : 0;
    if (!resumed || rank != 0)
      return;
    Checkpoint c;
    std::string err;
    if (!readCheckpoint(opt.resume, c, err))
      fatalError(err);
    auto mismatch = [&](const std::string &what) {
      fatalError(opt.resume +
                 ": checkpoint does not match this program: " + what);
    };
    if (c.modelName != (ddpc_model_name ? ddpc_model_name : ""))
      mismatch("model '" + c.modelName + "', program model '" +
               ddpc_model_name + "'");
    if (c.optimizerDesc != (ddpc_optimizer_desc ? ddpc_optimizer_desc : ""))
      mismatch("optimizer '" + c.optimizerDesc + "', program optimizer '" +
               ddpc_optimizer_desc + "'");
    if (c.batchSize * c.worldSize * c.accumSteps != globalBatch * K)
      mismatch("samples per optimizer step " +
               std::to_string(c.batchSize * c.worldSize * c.accumSteps) +
               " (batch " + std::to_string(c.batchSize) + " x " +
               std::to_string(c.worldSize) + " ranks x " +
               std::to_string(c.accumSteps) + "), this run " +
               std::to_string(globalBatch * K));
    if (opt.seedGiven && c.shuffle && c.seed != opt.seed)
      mismatch("shuffle seed " + std::to_string(c.seed) + ", --shuffle-seed " +
               std::to_string(opt.seed));
    if (opt.shuffleGiven && c.shuffle)
      mismatch("it was written by a shuffled run, this run has --no-shuffle");
    // A resumed run keeps the checkpoint's sampler and buffer semantics;
    // naming others would silently change the run.
    auto keep = [&](const char *flag, bool given, bool saved, bool now,
                    std::string (*show)(double)) {
      if (given && saved != now)
        mismatch(std::string("it was written with ") + flag + " " +
                 show(saved) + ", this run has " + flag + " " + show(now) +
                 " (leave the option out to keep the checkpoint's)");
    };
    keep("--sample-assignment", opt.stridedGiven, c.strided, opt.strided,
         showAssignment);
    keep("--buffer-sync", opt.bufferSyncGiven, c.broadcastBuffers,
         opt.broadcastBuffers, showBufferSync);
    auto checkSection =
        [&](const char *kind, const std::vector<CheckpointTensor> &got,
            const std::vector<TensorInfo> &want, TensorSet &dst) {
          if (got.size() != want.size())
            mismatch(std::to_string(got.size()) + " " + kind + ", expected " +
                     std::to_string(want.size()));
          for (size_t i = 0; i < want.size(); ++i) {
            if (got[i].name != want[i].name || got[i].shape != want[i].shape)
              mismatch(std::string(kind) + " #" + std::to_string(i) + " is '" +
                       got[i].name + "' " + formatShape(got[i].shape) +
                       ", expected '" + want[i].name + "' " +
                       formatShape(want[i].shape));
            if (!dst.tensors.empty())
              std::memcpy(dst.tensors[i].ptr, got[i].values.data(),
                          want[i].numel * sizeof(float));
          }
        };
    checkSection("parameters", c.params, params, paramSets[0]);
    checkSection("buffers", c.buffers, buffers, bufferSets[0]);
    checkSection("optimizer state tensors", c.optState, slots, optSets[0]);
    if (zero)
      for (CheckpointTensor &t : c.optState)
        resumedState.push_back(std::move(t.values));
    if (zeroStage3())
      for (CheckpointTensor &t : c.params)
        resumedParams.push_back(std::move(t.values));
    if (c.stepInEpoch < 0 || c.stepInEpoch >= stepsPerEp || c.epoch < 0)
      mismatch("position epoch " + std::to_string(c.epoch) + " step " +
               std::to_string(c.stepInEpoch) + " is outside this data set (" +
               std::to_string(stepsPerEp) + " steps per epoch)");
    pos.epoch = c.epoch;
    pos.stepInEpoch = c.stepInEpoch;
    pos.globalStep = c.globalStep;
    pos.optimizerSteps = c.optimizerSteps;
    pos.epochLossSum = c.epochLossSum;
    pos.epochCorrect = c.epochCorrect;
    pos.epochSamples = c.epochSamples;
    pos.epochSteps = c.epochSteps;
    pos.seed = c.seed;
    pos.shuffle = c.shuffle ? 1 : 0;
    pos.strided = c.strided ? 1 : 0;
    pos.broadcastBuffers = c.broadcastBuffers ? 1 : 0;
  }

  /// Rank 0's state is everyone's state.
  void shareRankZeroState() {
    broadcastBytes(&pos, sizeof(pos), "broadcast of the training position");
    if (zeroStage3()) {
      // Every rank built its slice from the compiled initial values.
      if (resumed)
        zero->scatterParameters(resumedParams);
      resumedParams.clear();
    } else {
      for (int32_t i = 0; i < P; ++i)
        broadcastBytes(paramSets[0].tensors[i].ptr,
                       params[i].numel * sizeof(float),
                       "broadcast of the initial parameters");
    }
    for (int32_t i = 0; i < Bf; ++i)
      broadcastBytes(bufferSets[0].tensors[i].ptr,
                     buffers[i].numel * sizeof(float),
                     "broadcast of the initial buffers");
    if (resumed && zero) {
      zero->scatterState(resumedState);
      resumedState.clear();
    } else if (resumed) {
      for (size_t i = 0; i < slots.size(); ++i)
        broadcastBytes(optSets[0].tensors[i].ptr,
                       slots[i].numel * sizeof(float),
                       "broadcast of the optimizer state");
    }
  }

  /// The run's settings, the banner and the --log-json file.
  void startRun() {
    lr = opt.lrGiven ? opt.lr : ddpc_default_lr;
    schedule = opt.schedule;
    schedule.baseLr = lr;
    totalSteps = opt.epochs * stepsPerEp;
    stopAt = opt.stopAfter >= 0 ? opt.stopAfter : INT64_MAX;
    // \r-updated progress only on an interactive terminal of a single process:
    // mpirun hands its ranks a pty even when its own output is a file.
    tty = ::isatty(fileno(stdout)) && world == 1 &&
          !std::getenv("OMPI_COMM_WORLD_SIZE");
    if (rank == 0 && !opt.quiet) {
      std::printf("training '%s': %lld samples, %d rank(s) x batch %lld x %lld "
                  "micro-batch(es) = %lld samples/step, %lld steps/epoch, "
                  "lr %g",
                  ddpc_model_name, static_cast<long long>(train.n), world,
                  static_cast<long long>(B), static_cast<long long>(K),
                  static_cast<long long>(globalBatch * K),
                  static_cast<long long>(stepsPerEp), static_cast<double>(lr));
      if (ddpc_cpu_threads)
        std::printf(", %d CPU thread(s) per rank", ddpc_cpu_threads());
      std::printf("\n");
      if (schedule.kind != LrSchedule::Kind::Constant ||
          schedule.warmupSteps > 0 || opt.clipGradNorm > 0) {
        std::printf("lr schedule %s", lrScheduleName(schedule.kind));
        if (schedule.warmupSteps > 0)
          std::printf(" after %lld warm-up steps",
                      static_cast<long long>(schedule.warmupSteps));
        if (opt.clipGradNorm > 0)
          std::printf(", gradients clipped to norm %g", opt.clipGradNorm);
        std::printf("\n");
      }
      if (resumed)
        std::printf("resumed from %s at epoch %lld step %lld (global step "
                    "%lld)\n",
                    opt.resume.c_str(), static_cast<long long>(pos.epoch + 1),
                    static_cast<long long>(pos.stepInEpoch),
                    static_cast<long long>(pos.globalStep));
      std::fflush(stdout);
    }
    if (rank == 0 && !opt.logJson.empty()) {
      logFile = std::fopen(opt.logJson.c_str(), "a");
      if (!logFile)
        fatalError("cannot open '" + opt.logJson +
                   "' for appending: " + std::strerror(errno));
    }
  }

  /// Micro-batch buffers and the step functions' arguments.
  void allocateStepBuffers() {
    batch.reserve(train.columns.size());
    for (const Column &col : train.columns) {
      batch.emplace_back(static_cast<size_t>(B) * col.rowBytes());
      batchPtrs.push_back(batch.back().ptr);
    }
    // Per-step scalars the host reads or writes: host-shared (Memory.h).
    constexpr Placement kHost = Placement::HostShared;
    lossOut = Aligned(sizeof(float), kHost);
    correctOut = Aligned(sizeof(int64_t), kHost);
    sampleLoss = Aligned(static_cast<size_t>(B) * sizeof(float), kHost);
    sampleCorrect = Aligned(static_cast<size_t>(B) * sizeof(int64_t), kHost);
    lrArg = Aligned(sizeof(float), kHost);
    stepArg = Aligned(sizeof(int64_t), kHost);
    scaleArg = Aligned(sizeof(float), kHost);

    microArgs.resize(3 * P + 2 * Bf + D + 4);
    // Random-number input of every micro-batch (TrainABI.h): {seed, rank}.
    rngArg = Aligned(2 * sizeof(int64_t), kHost);
    applyArgs.resize(3 * P + 2 * P * S + 3);
    evalArgs.resize(P + Bf + D + 3);
    normArgs.resize(P + 2);
    gradNormOut = Aligned(sizeof(float), kHost);
  }

  /// Checkpoints and --save never hold non-finite weights, whatever
  /// --nan-policy says: the job ends instead, naming the tensor.
  /// `zeroState`: at ZeRO stage 1 the whole optimizer state (gatherState),
  /// else unused.
  /// `whole`: the parameters whole (WholeParameters).
  void requireFiniteWeights(
      const std::string &what, const TensorSet &whole,
      const std::vector<std::vector<float>> *zeroState = nullptr) {
    auto scan = [&](const char *kind, const std::vector<TensorInfo> &infos,
                    const TensorSet &set) {
      for (size_t i = 0; i < infos.size(); ++i) {
        const float *v = set.tensors[i].f();
        for (int64_t e = 0; e < infos[i].numel; ++e)
          if (!std::isfinite(v[e]))
            fatalError(
                std::string(kind) + " '" + infos[i].name + "' holds " +
                (std::isnan(v[e]) ? "nan" : "inf") + " after step " +
                std::to_string(pos.globalStep) + ", so " + what +
                " is not written (" +
                (appliedNonFinite > 0
                     ? std::to_string(appliedNonFinite) +
                           " step(s) with a non-finite loss or gradient "
                           "were applied under --nan-policy ignore: check "
                           "the data for nan/inf, or use --nan-policy skip"
                 : std::string(kind) == "buffer"
                     ? std::string("a running statistic overflowed with a "
                                   "finite loss: a sample far outside "
                                   "the others' range?")
                     : std::string("the update overflowed with a finite "
                                   "loss and gradient: try a lower --lr")) +
                ")");
      }
    };
    scan("parameter", params, whole);
    scan("buffer", buffers, bufferSets[cb]);
    if (!zero) {
      scan("optimizer state", slots, optSets[co]);
    } else if (zeroState) {
      TensorSet view; // non-owning: released below
      for (const std::vector<float> &v : *zeroState)
        view.tensors.emplace_back().ptr = const_cast<float *>(v.data());
      scan("optimizer state", slots, view);
      for (Aligned &t : view.tensors)
        t.ptr = nullptr;
    }
  }

  /// The current parameters whole: paramSets[cp], or at ZeRO stage 3
  /// gathered from every rank's slice (collective: every rank constructs
  /// one) into host vectors outside the counted memory.
  struct WholeParameters {
    std::vector<std::vector<float>> store;
    TensorSet view; // non-owning at stage 3
    const TensorSet *whole;
    explicit WholeParameters(TrainRun &run) : whole(&run.paramSets[run.cp]) {
      if (!zeroStage3())
        return;
      run.zero->gatherParameters(store);
      for (std::vector<float> &v : store)
        view.tensors.emplace_back().ptr = v.data();
      whole = &view;
    }
    ~WholeParameters() {
      for (Aligned &t : view.tensors)
        t.ptr = nullptr;
    }
    const TensorSet &set() const { return *whole; }
  };

  /// --checkpoint, written by rank 0.
  void writeCheckpointFile() {
    // ZeRO stage 1: the whole state on rank 0, from every rank's slice.
    std::vector<std::vector<float>> zeroState;
    if (zero)
      zero->gatherState(zeroState);
    WholeParameters whole(*this);
    if (rank != 0)
      return;
    requireFiniteWeights("the checkpoint", whole.set(), &zeroState);
    Checkpoint c;
    c.modelName = ddpc_model_name ? ddpc_model_name : "";
    c.optimizerDesc = ddpc_optimizer_desc ? ddpc_optimizer_desc : "";
    c.worldSize = world;
    c.batchSize = B;
    c.accumSteps = static_cast<int32_t>(K);
    c.seed = pos.seed;
    c.shuffle = pos.shuffle != 0;
    c.strided = pos.strided != 0;
    c.broadcastBuffers = pos.broadcastBuffers != 0;
    c.epoch = pos.epoch;
    c.stepInEpoch = pos.stepInEpoch;
    c.globalStep = pos.globalStep;
    c.optimizerSteps = pos.optimizerSteps;
    c.epochLossSum = pos.epochLossSum;
    c.epochCorrect = pos.epochCorrect;
    c.epochSamples = pos.epochSamples;
    c.epochSteps = pos.epochSteps;
    auto add = [](std::vector<CheckpointTensor> &dst,
                  const std::vector<TensorInfo> &infos, const TensorSet &set) {
      for (size_t i = 0; i < infos.size(); ++i)
        dst.push_back({infos[i].name, infos[i].shape, set.tensors[i].f(), {}});
    };
    add(c.params, params, whole.set());
    add(c.buffers, buffers, bufferSets[cb]);
    if (zero)
      for (size_t i = 0; i < slots.size(); ++i)
        c.optState.push_back(
            {slots[i].name, slots[i].shape, zeroState[i].data(), {}});
    else
      add(c.optState, slots, optSets[co]);
    std::string err;
    if (!writeCheckpoint(opt.checkpoint, c, err))
      fatalError(err);
  }

  /// Mean loss and accuracy over the validation set, all ranks.
  void validate(double &lossOutV, double &accOut) {
    double sums[3] = {0, 0, 0}; // loss, correct, count
    std::vector<int64_t> mine;
    for (int64_t i = rank; i < val.n; i += world)
      mine.push_back(i);
    // ZeRO stage 3: ddpc_eval all-gathers the parameters, so every rank
    // makes as many calls as rank 0 (the most rows); a call past a rank's
    // rows runs on row 0 and counts nothing.
    int64_t perRank = (val.n + world - 1) / world;
    size_t calls = zeroStage3() ? static_cast<size_t>((perRank + B - 1) / B) * B
                                : mine.size();
    for (size_t start = 0; start < calls; start += B) {
      int64_t valid = std::clamp<int64_t>(static_cast<int64_t>(mine.size()) -
                                              static_cast<int64_t>(start),
                                          0, B);
      for (int64_t j = 0; j < B; ++j)
        gatherRow(val, valid ? mine[start + std::min(j, valid - 1)] : 0, j,
                  batchPtrs.data());
      size_t a = 0;
      // ZeRO stage 3: ddpc_eval gathers its parameters itself.
      for (int32_t i = 0; i < P; ++i)
        evalArgs[a++] = zeroStage3() ? nullptr : paramSets[cp].tensors[i].ptr;
      for (int32_t i = 0; i < Bf; ++i)
        evalArgs[a++] = bufferSets[cb].tensors[i].ptr;
      for (void *p : batchPtrs)
        evalArgs[a++] = p;
      evalArgs[a++] = sampleLoss.ptr;
      evalArgs[a++] = sampleCorrect.ptr;
      ddpc_eval(evalArgs.data());
      if (const char *msg = ddpc_rt_take_error())
        fatalError(std::string("validation: ") + msg);
      const int64_t *corr = static_cast<const int64_t *>(sampleCorrect.ptr);
      for (int64_t j = 0; j < valid; ++j) {
        sums[0] += sampleLoss.f()[j];
        sums[1] += static_cast<double>(corr[j]);
        sums[2] += 1;
      }
    }
    allreduceSum(sums, 3, "allreduce of validation metrics");
    lossOutV = sums[2] > 0 ? sums[0] / sums[2] : NAN;
    accOut = sums[2] > 0 ? sums[1] / sums[2] : NAN;
  }

  /// The K micro-batches of one optimizer step: gradients summed into
  /// gradSets[cg] (over ranks by the last one), this rank's loss sum and
  /// correct count in `local`.
  void runMicroBatches(BatchPrefetcher &prefetcher) {
    if (zeroGrads)
      zeroGrads->zeroSlice();
    else
      for (int32_t i = 0; i < P; ++i)
        zeroBuffer(gradSets[cg].tensors[i].ptr,
                   params[i].numel * sizeof(float));
    lossNaN = lossInf = false;
    local[0] = local[1] = 0;
    for (int64_t k = 0; k < K; ++k) {
      prefetcher.next(batchPtrs.data());
      size_t a = 0;
      for (int32_t i = 0; i < P; ++i)
        microArgs[a++] = zeroStage3() ? nullptr : paramSets[cp].tensors[i].ptr;
      for (int32_t i = 0; i < Bf; ++i)
        microArgs[a++] = bufferSets[cb].tensors[i].ptr;
      // ZeRO stage 2: no gradient accumulators (TrainABI.h).
      if (!zeroGrads)
        for (int32_t i = 0; i < P; ++i)
          microArgs[a++] = gradSets[cg].tensors[i].ptr;
      for (void *p : batchPtrs)
        microArgs[a++] = p;
      for (int32_t i = 0; i < Bf; ++i)
        microArgs[a++] = bufferSets[1 - cb].tensors[i].ptr;
      if (!zeroGrads)
        for (int32_t i = 0; i < P; ++i)
          microArgs[a++] = gradSets[1 - cg].tensors[i].ptr;
      microArgs[a++] = lossOut.ptr;
      microArgs[a++] = correctOut.ptr;
      // The seed depends on the sampler seed and the global micro-batch
      // index only, so it is the same on every rank and across resumes;
      // compiled Dropout hashes it with the sample's position in the
      // global batch (rank * B + row).
      auto *rng = static_cast<int64_t *>(rngArg.ptr);
      rng[0] = static_cast<int64_t>(
          pos.seed * 0x9E3779B97F4A7C15ULL +
          static_cast<uint64_t>(pos.globalStep * K + k + 1) *
              0xD1B54A32D192ED03ULL);
      rng[1] = rank;
      microArgs[a++] = rngArg.ptr;
      // The last micro-batch sums the accumulated gradients over ranks, in
      // buckets that start during its backward (PyTorch DDP's no_sync()
      // for the others). At ZeRO stage 2 every micro-batch reduce-scatters
      // its gradients into the slice (no rank keeps them whole), as
      // DeepSpeed's stage 2 does under gradient accumulation.
      setGradientSync(zeroGrads || k == K - 1);
      ddpc_train_micro(microArgs.data());
      // A failed run-time check (an index out of range in this rank's
      // micro-batch) ends the job before the step is applied, naming the
      // micro-batch's samples (the sampler's order, Sampler.h).
      if (const char *msg = ddpc_rt_take_error()) {
        std::vector<int64_t> order =
            epochOrder(train.n, pos.seed, pos.epoch, pos.shuffle != 0);
        std::string rows;
        for (int64_t j = 0; j < B && j < 16; ++j)
          rows +=
              (j ? ", " : "") +
              std::to_string(order[samplePosition(
                  pos.stepInEpoch, k, rank, j, B, world, K, pos.strided != 0)]);
        fatalError("step " + std::to_string(pos.globalStep + 1) + ": " + msg +
                   "; the micro-batch holds samples " + rows +
                   (B > 16 ? ", ..." : "") + " of " + fileList(trainFiles));
      }
      cb = 1 - cb;
      cg = 1 - cg;
      float microLoss = lossOut.f()[0];
      lossNaN |= std::isnan(microLoss);
      lossInf |= std::isinf(microLoss);
      local[0] += microLoss;
      local[1] += static_cast<double>(*static_cast<int64_t *>(correctOut.ptr));
    }
  }

  /// The averaged gradient's norm (gradNorm).
  void computeGradientNorm() {
    gradNorm = NAN;
    *scaleArg.f() = gradScale;
    if (zeroGrads) {
      // The slices' squares summed over ranks, as @grad_norm's float32
      // norm of the whole gradient (here in float64).
      double sq = zeroGrads->sumOfSquares();
      allreduceSum(&sq, 1, "allreduce of the gradient norm (ZeRO stage 2)");
      gradNorm = static_cast<float>(std::sqrt(sq)) * gradScale;
      return;
    }
    {
      size_t a = 0;
      for (int32_t i = 0; i < P; ++i)
        normArgs[a++] = gradSets[cg].tensors[i].ptr;
      normArgs[a++] = scaleArg.ptr;
      normArgs[a++] = gradNormOut.ptr;
      ddpc_grad_norm(normArgs.data());
      gradNorm = *gradNormOut.f();
    }
  }

  /// The step's global loss and the --nan-policy decision: false when the
  /// run stops (--nan-policy stop), else `skipped` says whether the update
  /// is dropped.
  bool decideStep() {
    const bool checkFinite = opt.nanPolicy != Options::NanPolicy::Ignore;
    // One allreduce decides for all ranks: loss sum, correct count, a
    // non-finite gradient norm, and which ranks' losses were nan (1) or
    // inf (2), to name them.
    // The last entry is the gradient norm's mean over ranks: the norm of
    // the same allreduced gradients, so each rank's own value (a float32
    // summed n times and divided by n is exact in double), and one number
    // on every rank for clipping.
    std::vector<double> stats(4 + world, 0.0);
    stats[0] = local[0];
    stats[1] = local[1];
    stats[2] = !std::isfinite(gradNorm) ? 1 : 0;
    stats[3 + rank] = lossNaN ? 1 : lossInf ? 2 : 0;
    stats[3 + world] = std::isfinite(gradNorm) ? gradNorm : 0;
    allreduceSum(stats.data(), static_cast<int64_t>(stats.size()),
                 "allreduce of the step loss");
    local[0] = stats[0];
    local[1] = stats[1];
    if (stats[2] == 0)
      gradNorm = static_cast<float>(stats[3 + world] / world);
    // torch.nn.utils.clip_grad_norm_: grads *= min(1, MAX / (norm + 1e-6)),
    // in float32. A non-finite norm is not clipped (--nan-policy decides).
    clipCoef = 1;
    if (opt.clipGradNorm > 0 && std::isfinite(gradNorm))
      clipCoef = std::min(1.0f, static_cast<float>(opt.clipGradNorm) /
                                    (gradNorm + 1e-6f));
    ++pos.globalStep;
    skipped = false;
    if (!checkFinite && (stats[2] > 0 || !std::isfinite(stats[0])))
      ++appliedNonFinite; // --nan-policy ignore
    if (checkFinite) {
      std::vector<int> nanRanks, infRanks;
      for (int r = 0; r < world; ++r)
        if (stats[3 + r] != 0)
          (stats[3 + r] == 1 ? nanRanks : infRanks).push_back(r);
      auto onRanks = [](const std::vector<int> &ranks) {
        std::string s = ranks.size() == 1 ? " on rank" : " on ranks";
        for (size_t i = 0; i < ranks.size(); ++i)
          s += (i ? ", " : " ") + std::to_string(ranks[i]);
        return s;
      };
      std::string why;
      if (!nanRanks.empty())
        why = "the loss is nan" + onRanks(nanRanks);
      if (!infRanks.empty())
        why += (why.empty() ? "the loss is inf" : ", inf") + onRanks(infRanks);
      if (stats[2] > 0)
        why += std::string(why.empty() ? "" : "; ") + "the gradient norm is " +
               (std::isnan(gradNorm) ? "nan" : "inf");
      if (!why.empty() && opt.nanPolicy == Options::NanPolicy::Stop) {
        if (rank == 0) {
          if (tty && !opt.quiet)
            std::printf("\n");
          std::fflush(stdout);
          std::fprintf(stderr,
                       "error: step %lld: %s; stopping, with nothing "
                       "written (--nan-policy stop; --nan-policy skip drops "
                       "such steps on every rank)\n",
                       static_cast<long long>(pos.globalStep), why.c_str());
        }
        if (logFile)
          std::fclose(logFile);
        return false; // Every rank: the same decision, no hang.
      }
      if (!why.empty()) {
        // --nan-policy skip: no update; the buffers go back to the step's
        // start, the data it read stays consumed.
        skipped = true;
        cb = cbAtStart;
        if (rank == 0)
          std::fprintf(stderr,
                       "warning: step %lld skipped: %s (--nan-policy skip)\n",
                       static_cast<long long>(pos.globalStep), why.c_str());
      }
    }
    return true;
  }

  /// The optimizer update into the other half of params and slots.
  void applyUpdate() {
    ++pos.optimizerSteps;
    *lrArg.f() = lr;
    // Clipping scales the averaged gradient: one factor more in grad_scale.
    *scaleArg.f() = gradScale * clipCoef;
    *static_cast<int64_t *>(stepArg.ptr) = pos.optimizerSteps;
    if (zero) {
      std::vector<float *> p, g, np;
      for (int32_t i = 0; i < P && !zeroStage3(); ++i) {
        p.push_back(paramSets[cp].tensors[i].f());
        if (!zeroGrads)
          g.push_back(gradSets[cg].tensors[i].f());
        np.push_back(paramSets[1 - cp].tensors[i].f());
      }
      zero->step(p, g, np, lrArg.ptr, stepArg.ptr, scaleArg.ptr,
                 ddpc_apply_shard, zeroGrads ? zeroGrads->slice() : nullptr);
      cp = 1 - cp;
      return;
    }
    size_t a = 0;
    for (int32_t i = 0; i < P; ++i)
      applyArgs[a++] = paramSets[cp].tensors[i].ptr;
    for (size_t i = 0; i < slots.size(); ++i)
      applyArgs[a++] = optSets[co].tensors[i].ptr;
    for (int32_t i = 0; i < P; ++i)
      applyArgs[a++] = gradSets[cg].tensors[i].ptr;
    applyArgs[a++] = lrArg.ptr;
    applyArgs[a++] = stepArg.ptr;
    applyArgs[a++] = scaleArg.ptr;
    for (int32_t i = 0; i < P; ++i)
      applyArgs[a++] = paramSets[1 - cp].tensors[i].ptr;
    for (size_t i = 0; i < slots.size(); ++i)
      applyArgs[a++] = optSets[1 - co].tensors[i].ptr;
    ddpc_apply(applyArgs.data());
    cp = 1 - cp;
    co = 1 - co;
  }

  /// Buffers after the step: mean over ranks, or rank 0's (--buffer-sync).
  void syncBuffers() {
    for (int32_t i = 0; i < Bf; ++i) {
      float *b = bufferSets[cb].tensors[i].f();
      if (pos.broadcastBuffers) {
        broadcastBytes(b, buffers[i].numel * sizeof(float),
                       "broadcast of buffers");
        continue;
      }
      allreduceSum(b, buffers[i].numel, "allreduce of buffers");
      for (int64_t e = 0; e < buffers[i].numel; ++e)
        b[e] /= static_cast<float>(world);
    }
  }

  /// Epoch totals, the --log-json line and the progress line.
  void recordStep() {
    double stepLoss = local[0] / static_cast<double>(world * K);
    int64_t stepSamples = globalBatch * K;
    if (!skipped) { // A skipped step's loss is not part of the epoch's.
      pos.epochLossSum += stepLoss;
      pos.epochCorrect += static_cast<int64_t>(local[1]);
      pos.epochSamples += stepSamples;
      pos.epochSteps += 1;
    }
    pos.stepInEpoch += 1;
    epochSamplesHere += stepSamples;
    double stepSecs = secondsSince(stepStart);
    // The record of an epoch's last step carries its validation metrics.
    valDone = haveVal && pos.stepInEpoch == stepsPerEp;
    if (valDone)
      validate(valLoss, valAcc);
    std::string extra;
    if (opt.clipGradNorm > 0)
      extra += ",\"clip_coef\":" + jsonNumber(clipCoef);
    if (valDone) {
      extra += ",\"val_loss\":" + jsonNumber(valLoss);
      if (ddpc_is_classification)
        extra += ",\"val_acc\":" + jsonNumber(valAcc);
    }

    if (rank == 0) {
      if (logFile) {
        std::fprintf(
            logFile,
            "{\"step\":%lld,\"epoch\":%lld,\"loss\":%s,"
            "\"samples_per_s\":%s,\"lr\":%s%s%s%s%s,"
            "\"peak_memory_bytes\":%lld,\"memory_plan_bytes\":%lld}\n",
            static_cast<long long>(pos.globalStep),
            static_cast<long long>(pos.epoch + 1), jsonNumber(stepLoss).c_str(),
            jsonNumber(stepSecs > 0 ? stepSamples / stepSecs : 0).c_str(),
            jsonNumber(lr).c_str(),
            ",\"grad_norm\":", jsonNumber(gradNorm).c_str(), extra.c_str(),
            skipped ? ",\"skipped\":true" : "",
            static_cast<long long>(peakAllocatedBytes()),
            static_cast<long long>(plannedPeak(world, zeroBytes, gradBytes)));
        std::fflush(logFile);
      }
      bool show = !opt.quiet && (tty || pos.stepInEpoch % progressEvery == 0) &&
                  pos.stepInEpoch != stepsPerEp;
      if (show) {
        std::printf(
            "%sepoch %lld/%lld  step %lld/%lld  loss %s  lr %.4g%s",
            tty ? "\r" : "", static_cast<long long>(pos.epoch + 1),
            static_cast<long long>(opt.epochs),
            static_cast<long long>(pos.stepInEpoch),
            static_cast<long long>(stepsPerEp),
            formatLoss(pos.epochSteps ? pos.epochLossSum / pos.epochSteps : NAN)
                .c_str(),
            static_cast<double>(lr), tty ? "" : "\n");
        std::fflush(stdout);
      }
    }
  }

  /// At the end of an epoch: the epoch line (with validation) and fresh totals.
  void endEpochIfDone() {
    if (pos.stepInEpoch != stepsPerEp)
      return;
    double secs = secondsSince(epochStart);
    std::string line = "epoch " + std::to_string(pos.epoch + 1) + "/" +
                       std::to_string(opt.epochs);
    char buf[128];
    // An epoch whose steps were all skipped has no loss.
    line +=
        "  loss " +
        formatLoss(pos.epochSteps ? pos.epochLossSum / pos.epochSteps : NAN);
    if (ddpc_is_classification) {
      std::snprintf(buf, sizeof(buf), "  train-acc %.3f",
                    static_cast<double>(pos.epochCorrect) /
                        std::max<int64_t>(1, pos.epochSamples));
      line += buf;
    }
    if (valDone) {
      line += "  val-loss " + formatLoss(valLoss);
      if (ddpc_is_classification) {
        std::snprintf(buf, sizeof(buf), "  val-acc %.3f", valAcc);
        line += buf;
      }
    }
    std::snprintf(buf, sizeof(buf), "  %.0f samples/s",
                  secs > 0 ? epochSamplesHere / secs : 0.0);
    line += buf;
    if (rank == 0) {
      std::printf("%s%s\n", tty && !opt.quiet ? "\r\033[K" : "", line.c_str());
      std::fflush(stdout);
    }
    pos.epoch += 1;
    pos.stepInEpoch = 0;
    pos.epochLossSum = 0;
    pos.epochCorrect = pos.epochSamples = pos.epochSteps = 0;
    epochSamplesHere = 0;
    epochStart = Clock::now();
  }

  /// The epoch loop up to --epochs or --stop-after-steps: 0, or 1 when
  /// --nan-policy stop ended the run (every rank decides the same).
  int trainLoop() {
    gradScale = 1.0f / static_cast<float>(world * K);
    lastCkptStep = resumed ? pos.globalStep : -1;
    progressEvery = std::max<int64_t>(1, (stepsPerEp + 9) / 10);
    epochStart = Clock::now();
    epochSamplesHere = 0;

    BatchPrefetcher prefetcher(train, B, K, rank, world, stepsPerEp, pos.seed,
                               pos.shuffle != 0, pos.strided != 0, pos.epoch,
                               pos.stepInEpoch);
    while (pos.epoch < opt.epochs && pos.globalStep < stopAt) {
      stepStart = Clock::now();
      cbAtStart = cb; // buffers to return to if the step is skipped
      lr =
          static_cast<float>(scheduledLr(schedule, pos.globalStep, totalSteps));
      runMicroBatches(prefetcher);
      computeGradientNorm();
      if (!decideStep())
        return 1;
      if (!skipped)
        applyUpdate();
      if (world > 1 && !skipped)
        syncBuffers();
      recordStep();
      endEpochIfDone();
      if (!opt.checkpoint.empty() && opt.checkpointEvery > 0 &&
          pos.globalStep % opt.checkpointEvery == 0) {
        writeCheckpointFile();
        lastCkptStep = pos.globalStep;
      }
    }
    return 0;
  }

  /// The summary, the last checkpoint, --save and the final barrier.
  void finish() {
    if (rank == 0 && tty && !opt.quiet && pos.stepInEpoch != 0)
      std::printf("\n");
    if (rank == 0 && appliedNonFinite > 0)
      std::fprintf(stderr,
                   "warning: %lld step(s) with a non-finite loss or gradient "
                   "norm were applied (--nan-policy ignore)\n",
                   static_cast<long long>(appliedNonFinite));
    if (rank == 0 && !opt.quiet && pos.globalStep >= stopAt &&
        pos.epoch < opt.epochs)
      std::printf("stopped after %lld steps (epoch %lld, step %lld of %lld)\n",
                  static_cast<long long>(pos.globalStep),
                  static_cast<long long>(pos.epoch + 1),
                  static_cast<long long>(pos.stepInEpoch),
                  static_cast<long long>(stepsPerEp));
    if (rank == 0 && !opt.quiet) {
      int64_t plan = plannedPeak(world, zeroBytes, gradBytes);
      std::printf("peak memory %s on rank 0%s\n",
                  formatBytes(peakAllocatedBytes()).c_str(),
                  plan ? (" (plan " + formatBytes(plan) + ")").c_str() : "");
    }
    if (!opt.checkpoint.empty() && lastCkptStep != pos.globalStep)
      writeCheckpointFile();
    std::optional<WholeParameters> whole; // collective at ZeRO stage 3
    if (!opt.save.empty())
      whole.emplace(*this);
    if (rank == 0 && !opt.save.empty()) {
      requireFiniteWeights("--save " + opt.save, whole->set());
      std::vector<OnnxInitializer> inits;
      for (int32_t i = 0; i < P; ++i)
        inits.push_back(
            {params[i].name, params[i].shape, whole->set().tensors[i].f()});
      for (int32_t i = 0; i < Bf; ++i)
        inits.push_back(
            {buffers[i].name, buffers[i].shape, bufferSets[cb].tensors[i].f()});
      std::string err;
      if (!writeTrainedOnnx(opt.save, ddpc_onnx_model,
                            static_cast<size_t>(ddpc_onnx_model_size), inits,
                            err))
        fatalError(err);
      if (!opt.quiet)
        std::printf("saved %s\n", opt.save.c_str());
    }
    if (logFile)
      std::fclose(logFile);
    std::fflush(stdout);
    // Nobody leaves before rank 0 has written its files (an early exit of a
    // peer would look like a failure to mpirun).
    barrier("final barrier");
  }
};

int run(int argc, char **argv) {
  Options opt = parseOptions(argc, argv);
  if (opt.help) {
    if (worldRank() == 0)
      printUsage(argc > 0 ? argv[0] : "train");
    return 0;
  }
  setCollectiveTimeout(opt.timeout);
  if (ddpc_set_cpu_threads)
    ddpc_set_cpu_threads(static_cast<int32_t>(opt.threads));
  TrainRun r(opt);
  r.checkTables();
  r.readTables();
  r.loadData();
  r.checkSameRunOnAllRanks();
  r.countSteps();
  r.initState();
  r.resumeFromCheckpoint();
  r.shareRankZeroState();
  r.startRun();
  r.allocateStepBuffers();
  if (int rc = r.trainLoop())
    return rc;
  r.finish();
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  // A reader that closes a pipe we write to is a write error, not death.
  std::signal(SIGPIPE, SIG_IGN);
  ddpc::runtime::keepFreedHostMemory();
  collectivesInit(&argc, &argv);
  int rc = 1;
  try {
    rc = run(argc, argv);
  } catch (const std::exception &e) {
    fatalError(std::string("internal error: ") + e.what());
  } catch (...) {
    fatalError("internal error: unknown exception");
  }
  collectivesFinalize();
  return rc;
}

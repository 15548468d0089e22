//===- InferenceMain.cpp - main() of compiled inference programs ----------===//
//
// Linked with a compiled model (object file + generated glue defining the
// symbols of ModelABI.h) to form a command-line program that reads inputs
// from .npy files, runs the model and writes each output to a .npy file.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/Gemm.h"
#include "ddpc/Runtime/Memory.h"
#include "ddpc/Runtime/ModelABI.h"
#include "ddpc/Runtime/Npy.h"
#include "ddpc/Runtime/ProgramOptions.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

using namespace ddpc::runtime;

namespace {

/// Static description of one model input or output, read from the ABI tables.
struct TensorSpec {
  std::string name;
  int32_t dtype;
  std::vector<int64_t> shape;

  std::string describe() const { return dtypeName(dtype) + formatShape(shape); }
};

std::vector<TensorSpec> readSpecs(int32_t count, const char *const *names,
                                  const int32_t *dtypes, const int32_t *ranks,
                                  const int64_t *const *shapes) {
  std::vector<TensorSpec> specs;
  for (int32_t i = 0; i < count; ++i) {
    TensorSpec spec{names[i] ? names[i] : "", dtypes[i], {}};
    for (int32_t d = 0; d < ranks[i]; ++d)
      spec.shape.push_back(shapes[i][d]);
    specs.push_back(std::move(spec));
  }
  return specs;
}

/// Output file stem: the name with every char outside [A-Za-z0-9._-]
/// replaced by '_'.
std::string sanitize(const std::string &name) {
  std::string out = name;
  for (char &c : out) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok)
      c = '_';
  }
  return out;
}

/// A 64-byte aligned heap buffer of at least one byte.
class AlignedBuffer {
public:
  bool allocate(size_t bytes) {
    ptr = ddpc::runtime::allocateBuffer(bytes);
    size = bytes;
    return ptr != nullptr;
  }
  ~AlignedBuffer() { ddpc::runtime::freeBuffer(ptr); }
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer &) = delete;
  AlignedBuffer &operator=(const AlignedBuffer &) = delete;

  void *ptr = nullptr;
  size_t size = 0;
};

int error(const std::string &msg) {
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  return 1;
}

/// The command line (ProgramOptions.h); table order is --help order.
const std::vector<OptionSpec> &inferenceOptions() {
  using K = OptionKind;
  static const std::vector<OptionSpec> table = {
      {"--input",
       K::List,
       "NAME=FILE",
       "read graph input NAME from the .npy file FILE",
       0,
       {},
       nullptr,
       false,
       false,
       "--input needs NAME=FILE.npy"},
      {"FILE", K::Positional, "",
       "positional .npy files fill the inputs in graph-input order\n"
       "(the k-th positional file is input #k)"},
      {"--output-dir",
       K::String,
       "DIR",
       "where outputs are written (default: .; created if missing)",
       0,
       {},
       nullptr,
       true,
       false,
       "--output-dir needs a directory",
       "--output-dir needs a directory"},
      {"--time",
       K::Int,
       "N",
       "run the model N extra times and print the median time per\n"
       "run in milliseconds to stderr",
       0,
       {},
       nullptr,
       false,
       false,
       "--time needs a non-negative integer",
       "--time needs a non-negative integer"},
      {"--threads", K::Int, "N",
       "CPU threads of the library calls (GEMM, convolution); default:\n"
       "the cores this process may use, or OPENBLAS_NUM_THREADS",
       1},
      {"--help", K::Flag, "", "print this message", 0, {}, "-h", false, true},
  };
  return table;
}

void printUsage(const char *prog, const std::vector<TensorSpec> &inputs,
                const std::vector<TensorSpec> &outputs) {
  std::printf(
      "usage: %s [--input NAME=FILE.npy ...] [FILE.npy ...] "
      "[--output-dir DIR] [--time N] [--help]\n\n"
      "Runs the compiled model '%s' once.\n\n"
      "%s\n"
      "Every input must be given exactly once with the exact dtype and shape "
      "below\n(little-endian, C order; bfloat16 as raw uint16 bits). Output "
      "NAME is written to\nDIR/<NAME'>.npy, where NAME' is NAME with every "
      "character outside [A-Za-z0-9._-]\nreplaced by '_'. Exit status: 0 on "
      "success, 1 on any error.\n",
      prog, ddpc_model_name ? ddpc_model_name : "",
      formatOptionHelp(inferenceOptions(), 18).c_str());
  std::printf("\ninputs:\n");
  if (inputs.empty())
    std::printf("  (none)\n");
  for (size_t i = 0; i < inputs.size(); ++i)
    std::printf("  #%zu %s: %s\n", i, inputs[i].name.c_str(),
                inputs[i].describe().c_str());
  std::printf("outputs:\n");
  if (outputs.empty())
    std::printf("  (none)\n");
  for (size_t i = 0; i < outputs.size(); ++i)
    std::printf("  #%zu %s: %s -> %s.npy\n", i, outputs[i].name.c_str(),
                outputs[i].describe().c_str(),
                sanitize(outputs[i].name).c_str());
}

int run(int argc, char **argv) {
  const char *prog = argc > 0 ? argv[0] : "model";
  std::vector<TensorSpec> inputs =
      readSpecs(ddpc_num_inputs, ddpc_input_names, ddpc_input_dtypes,
                ddpc_input_ranks, ddpc_input_shapes);
  std::vector<TensorSpec> outputs =
      readSpecs(ddpc_num_outputs, ddpc_output_names, ddpc_output_dtypes,
                ddpc_output_ranks, ddpc_output_shapes);

  // Command line: file given for each input (empty = missing).
  std::vector<std::string> files(inputs.size());
  std::string outputDir = ".";
  long timeRuns = 0;
  size_t nextPositional = 0;
  const std::vector<OptionSpec> &table = inferenceOptions();
  ParserSettings settings;
  settings.unknownWhat = "unknown option";
  settings.doubleDashEndsOptions = true;
  ParseResult parsed = parseProgramOptions(table, settings, argc, argv);
  for (const ParsedArg &parg : parsed.args) {
    const std::string option = table[parg.spec].name;
    const std::string &value = parg.value;
    if (option == "--help") {
      printUsage(prog, inputs, outputs);
      return 0;
    }
    if (option == "--output-dir") {
      outputDir = value;
      continue;
    }
    if (option == "--threads") {
      if (ddpc_set_cpu_threads)
        ddpc_set_cpu_threads(static_cast<int32_t>(parg.intValue));
      continue;
    }
    if (option == "--time") {
      timeRuns = static_cast<long>(parg.intValue);
      continue;
    }
    size_t index = inputs.size();
    std::string file;
    if (option == "--input") {
      size_t eq = value.rfind('=');
      if (eq == std::string::npos)
        return error("--input expects NAME=FILE.npy, got '" + value + "'");
      // Names may contain '='; the file name after the last '=' may not. Try
      // the longest name that matches an input first.
      std::string name = value.substr(0, eq);
      file = value.substr(eq + 1);
      for (size_t k = 0; k < inputs.size(); ++k) {
        if (inputs[k].name == name) {
          index = k;
          break;
        }
      }
      if (index == inputs.size()) {
        // Retry with the first '=' split, for file names containing '='.
        size_t first = value.find('=');
        std::string name2 = value.substr(0, first);
        for (size_t k = 0; k < inputs.size(); ++k) {
          if (inputs[k].name == name2) {
            index = k;
            file = value.substr(first + 1);
            break;
          }
        }
      }
      if (index == inputs.size()) {
        std::string known;
        for (const TensorSpec &in : inputs)
          known += (known.empty() ? "'" : ", '") + in.name + "'";
        return error("unknown input '" + name + "' (model inputs: " +
                     (known.empty() ? "none" : known) + ")");
      }
      if (file.empty())
        return error("--input " + value + ": empty file name");
    } else {
      file = value;
      index = nextPositional++;
      if (index >= inputs.size())
        return error("too many positional inputs: '" + value +
                     "' would be input #" + std::to_string(index) +
                     " but the model has " + std::to_string(inputs.size()));
    }
    if (!files[index].empty())
      return error("input '" + inputs[index].name + "' (#" +
                   std::to_string(index) + ") given twice: '" + files[index] +
                   "' and '" + file + "'");
    files[index] = file;
  }
  if (!parsed.error.empty())
    return error(parsed.error);
  for (size_t k = 0; k < inputs.size(); ++k)
    if (files[k].empty())
      return error("missing input '" + inputs[k].name + "' (#" +
                   std::to_string(k) + "): expected " + inputs[k].describe() +
                   " (pass --input " + inputs[k].name + "=FILE.npy)");

  // Two outputs must not map to the same file.
  for (size_t a = 0; a < outputs.size(); ++a)
    for (size_t b = a + 1; b < outputs.size(); ++b)
      if (sanitize(outputs[a].name) == sanitize(outputs[b].name))
        return error("outputs '" + outputs[a].name + "' and '" +
                     outputs[b].name + "' would both be written to '" +
                     sanitize(outputs[a].name) + ".npy'");

  // Load and check inputs.
  std::vector<AlignedBuffer> buffers(inputs.size() + outputs.size());
  std::vector<void *> args;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const TensorSpec &spec = inputs[k];
    if (dtypeItemSize(spec.dtype) == 0)
      return error("input '" + spec.name + "' has unsupported dtype " +
                   dtypeName(spec.dtype));
    NpyArray array;
    std::string err;
    if (!readNpy(files[k], array, err))
      return error("input '" + spec.name + "' (#" + std::to_string(k) +
                   "): " + err);
    // .npy has no bfloat16: accept its raw bits as uint16.
    bool dtypeOk =
        array.dtype == spec.dtype ||
        (spec.dtype == DDPC_DTYPE_BFLOAT16 && array.dtype == DDPC_DTYPE_UINT16);
    if (!dtypeOk || array.shape != spec.shape)
      return error("input '" + spec.name + "' (#" + std::to_string(k) +
                   "): expected " + spec.describe() + ", got " +
                   dtypeName(array.dtype) + formatShape(array.shape) +
                   " from '" + files[k] + "'");
    if (!buffers[k].allocate(array.data.size()))
      return error("out of memory for input '" + spec.name + "'");
    if (!array.data.empty())
      std::memcpy(buffers[k].ptr, array.data.data(), array.data.size());
    args.push_back(buffers[k].ptr);
  }
  // Allocate outputs.
  for (size_t k = 0; k < outputs.size(); ++k) {
    const TensorSpec &spec = outputs[k];
    size_t item = dtypeItemSize(spec.dtype);
    int64_t n = numElements(spec.shape);
    if (item == 0)
      return error("output '" + spec.name + "' has unsupported dtype " +
                   dtypeName(spec.dtype));
    if (n < 0)
      return error("output '" + spec.name + "' has invalid shape " +
                   formatShape(spec.shape));
    AlignedBuffer &buf = buffers[inputs.size() + k];
    if (!buf.allocate(size_t(n) * item))
      return error("out of memory for output '" + spec.name + "'");
    args.push_back(buf.ptr);
  }

  std::error_code ec;
  std::filesystem::create_directories(outputDir, ec);
  if (ec)
    return error("cannot create output directory '" + outputDir +
                 "': " + ec.message());

  void **argv2 = args.empty() ? nullptr : args.data();
  ddpc_invoke(argv2);
  // A failed run-time check (an index out of range): no output is written.
  if (const char *msg = ddpc_rt_take_error())
    return error(msg);

  if (timeRuns > 0) {
    std::vector<double> ms;
    ms.reserve(size_t(timeRuns));
    for (long r = 0; r < timeRuns; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      ddpc_invoke(argv2);
      auto t1 = std::chrono::steady_clock::now();
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    size_t mid = ms.size() / 2;
    double median = ms.size() % 2 ? ms[mid] : 0.5 * (ms[mid - 1] + ms[mid]);
    std::fprintf(stderr, "time: median %.4f ms per run over %ld runs", median,
                 timeRuns);
    if (ddpc_cpu_threads)
      std::fprintf(stderr, ", %d CPU thread(s)", ddpc_cpu_threads());
    std::fprintf(stderr, "\n");
  }

  // Write outputs.
  for (size_t k = 0; k < outputs.size(); ++k) {
    const TensorSpec &spec = outputs[k];
    const AlignedBuffer &buf = buffers[inputs.size() + k];
    NpyArray array;
    array.dtype = spec.dtype;
    array.shape = spec.shape;
    const uint8_t *bytes = static_cast<const uint8_t *>(buf.ptr);
    array.data.assign(bytes, bytes + buf.size);
    std::string path =
        (std::filesystem::path(outputDir) / (sanitize(spec.name) + ".npy"))
            .string();
    std::string err;
    if (!writeNpy(path, array, err))
      return error("output '" + spec.name + "': " + err);
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  // A reader that closes a pipe we write to is a write error, not death.
  std::signal(SIGPIPE, SIG_IGN);
  ddpc::runtime::keepFreedHostMemory();
  // No exception may escape into the C world of the compiled model.
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    return error(std::string("internal error: ") + e.what());
  } catch (...) {
    return error("internal error");
  }
}

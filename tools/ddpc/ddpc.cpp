//===- ddpc.cpp - The ddpc command-line driver ----------------------------===//
//
// Part of ddpc. A thin main over lib/Driver:
//
//   ddpc compile model.onnx --target cpu -o prog [--dim N=V] [--batch-size B]
//   ddpc ops      (the ONNX op types it imports)
//
// Exit codes: 0 success, 1 error (bad model, options, I/O), 2 unsupported
// op/attribute/dtype.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Analysis/MemoryPlan.h"
#include "ddpc/Driver/Driver.h"
#include "ddpc/Runtime/Npy.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <csignal>
#include <memory>

using namespace llvm;

static cl::SubCommand
    compileCmd("compile", "Compile an ONNX model into a native program or IR");

static cl::SubCommand
    opsCmd("ops", "List the ONNX op types ddpc imports (default domain), one "
                  "per line");

static cl::OptionCategory category("ddpc compile options");

static cl::opt<std::string> inputFile(cl::Positional, cl::Required,
                                      cl::desc("<model.onnx>"),
                                      cl::sub(compileCmd), cl::cat(category));
static cl::opt<std::string>
    outputFile("o",
               cl::desc("Output file (an executable by default; '-' "
                        "for stdout with text --emit kinds)"),
               cl::value_desc("file"), cl::sub(compileCmd), cl::cat(category));
static cl::opt<std::string> target(
    "target",
    cl::desc("Code generation target: cpu (native code, MPI; default) or "
             "cuda (generated CUDA kernels, cuBLAS/cuBLASLt GEMMs, cuDNN "
             "convolutions when libcudnn.so.9 is found at run time, NCCL "
             "allreduce; one process per GPU, same program options), or "
             "cuda-emulate (testing: the CUDA target's kernel-level IR "
             "run serially on the CPU, with reference GEMMs and "
             "convolutions in place of cuBLAS and cuDNN)"),
    cl::init("cpu"), cl::sub(compileCmd), cl::cat(category));
static cl::opt<std::string> cudaArch(
    "cuda-arch",
    cl::desc("--target cuda: GPU architectures to build kernels for, e.g. "
             "sm_80,sm_90 (default sm_80; newer GPUs JIT the PTX of the "
             "last one)"),
    cl::init("sm_80"), cl::sub(compileCmd), cl::cat(category));
static cl::opt<std::string> precision(
    "precision",
    cl::desc("Math of float32 contractions: fp32 (IEEE float32; default) or "
             "tf32 (--target cuda: cuBLAS GEMMs and cuDNN convolutions may "
             "use TF32 tensor cores, inputs rounded to a 10-bit mantissa with "
             "float32 accumulation, as PyTorch's allow_tf32; no effect on "
             "the CPU). bf16 and fp16 are not supported yet"),
    cl::init("fp32"), cl::value_desc("fp32|tf32"), cl::sub(compileCmd),
    cl::cat(category));
static cl::opt<std::string> cudaPath(
    "cuda-path",
    cl::desc("--target cuda: CUDA toolkit folder (default: $CUDA_HOME, "
             "$CUDA_PATH or /usr/local/cuda)"),
    cl::sub(compileCmd), cl::cat(category));
static cl::opt<ddpc::EmitKind>
    emit("emit", cl::desc("What to produce"),
         cl::init(ddpc::EmitKind::Executable),
         cl::values(
             clEnumValN(ddpc::EmitKind::MLIR, "mlir",
                        "the graph-level IR (linalg on tensors): the import, "
                        "plus the training step with --train or the VJP with "
                        "--vjp; -o defaults to -"),
             clEnumValN(ddpc::EmitKind::LoweredMLIR, "lowered-mlir",
                        "the IR in the LLVM dialect"),
             clEnumValN(ddpc::EmitKind::LLVMIR, "llvm", "optimized LLVM IR"),
             clEnumValN(ddpc::EmitKind::Object, "obj",
                        "an object file plus <out>.glue.c (model description)"),
             clEnumValN(ddpc::EmitKind::Executable, "exe",
                        "a native executable (default)"),
             clEnumValN(ddpc::EmitKind::SharedLibrary, "shared",
                        "a shared library exporting ddpc_invoke and the model "
                        "tables (ModelABI.h), for in-process use"),
             clEnumValN(ddpc::EmitKind::PTX, "ptx",
                        "--target cuda: the generated kernels as PTX (with "
                        "several --cuda-arch, the listings follow each other, "
                        "each after a '// ddpc: ..., sm_XX' line; give one "
                        "architecture for a file ptxas accepts)"),
             clEnumValN(ddpc::EmitKind::PTX, "cuda", "same as --emit=ptx")),
         cl::sub(compileCmd), cl::cat(category));
static cl::list<std::string>
    dims("dim",
         cl::desc("Bind a symbolic input dimension: --dim NAME=VALUE "
                  "(repeatable)"),
         cl::value_desc("NAME=VALUE"), cl::sub(compileCmd), cl::cat(category));
static cl::list<std::string> bindInputs(
    "bind-input",
    cl::desc("Fix a graph input's value at compile time from a .npy file: "
             "--bind-input NAME=FILE.npy (repeatable). Use it for inputs "
             "that hold shapes or axes; the program no longer reads them"),
    cl::value_desc("NAME=FILE.npy"), cl::sub(compileCmd), cl::cat(category));
static cl::opt<int64_t>
    batchSize("batch-size",
              cl::desc("Value for the leading dimension of every graph input "
                       "left symbolic or unknown (per-rank batch)"),
              cl::init(0), cl::sub(compileCmd), cl::cat(category));
static cl::opt<std::string>
    dumpIR("dump-ir",
           cl::desc("Write the IR after import and after every pass that "
                    "changes it to DIR/NNNN_<pass>[.<function>].mlir "
                    "(removes an earlier compile's dumps in DIR)"),
           cl::value_desc("DIR"), cl::sub(compileCmd), cl::cat(category));
static cl::opt<bool> printAfterAll("mlir-print-ir-after-all",
                                   cl::desc("Print the IR after every pass "
                                            "to stderr"),
                                   cl::sub(compileCmd), cl::cat(category));
// Upstream MLIR's timing options (mlir-opt's spellings), kept in the compile
// subcommand: the report also times the phases outside the pass manager.
static cl::opt<bool> mlirTiming(
    "mlir-timing",
    cl::desc("Print wall and user time of every pass and of the other "
             "phases (ONNX import, LLVM translation, optimization, object "
             "emission, glue, link) to stderr"),
    cl::sub(compileCmd), cl::cat(category));
static cl::opt<ddpc::TimingDisplay> mlirTimingDisplay(
    "mlir-timing-display", cl::desc("How --mlir-timing shows its report"),
    cl::values(clEnumValN(ddpc::TimingDisplay::List, "list",
                          "one line per timer name, summed, slowest first"),
               clEnumValN(ddpc::TimingDisplay::Tree, "tree",
                          "phases with their passes nested (default)")),
    cl::init(ddpc::TimingDisplay::Tree), cl::sub(compileCmd),
    cl::cat(category));
static cl::opt<std::string>
    cpu("cpu",
        cl::desc("CPU to generate code for: native (default), generic, or "
                 "an LLVM CPU name such as skylake"),
        cl::init("native"), cl::sub(compileCmd), cl::cat(category));
static cl::opt<unsigned> optLevel("O", cl::desc("LLVM optimization level"),
                                  cl::init(3), cl::Prefix, cl::sub(compileCmd),
                                  cl::cat(category));
static cl::opt<bool> noFusion("no-fusion",
                              cl::desc("Disable elementwise op fusion"),
                              cl::sub(compileCmd), cl::cat(category));
static cl::opt<bool> noFreeAtLastUse(
    "no-free-at-last-use",
    cl::desc("Free temporaries at the end of their function, not right "
             "after their last use (for comparing memory plans)"),
    cl::sub(compileCmd), cl::cat(category), cl::Hidden);
static cl::opt<bool> noChecker(
    "no-onnx-checker",
    cl::desc("Skip the ONNX library's checker (IR <= 8, opset <= 17 only)"),
    cl::sub(compileCmd), cl::cat(category));
static cl::opt<bool> noRuntimeChecks(
    "no-runtime-checks",
    cl::desc("Skip the run-time checks of compiled code: index inputs "
             "(Gather's indices; an out-of-range index then reads the "
             "nearest valid row) and integer division by zero (then "
             "divided by 1), which otherwise end the program with an error"),
    cl::sub(compileCmd), cl::cat(category));
static cl::opt<std::string>
    runtimeDir("runtime-dir",
               cl::desc("Folder holding libddpc_runtime.a (default: "
                        "<bindir>/../lib)"),
               cl::sub(compileCmd), cl::cat(category));
static cl::opt<std::string> report(
    "report", cl::ValueOptional,
    cl::desc("Print the compiler's plan (inputs, outputs, parameters, "
             "collectives) to stderr; --report=json prints JSON to stdout"),
    cl::value_desc("json"), cl::sub(compileCmd), cl::cat(category));
static cl::opt<bool>
    vjp("vjp",
        cl::desc("Compile the model's vector-Jacobian product instead: extra "
                 "inputs d_<output> (cotangents), extra outputs d_<input> "
                 "(gradients of every float input); for gradient checks"),
        cl::sub(compileCmd), cl::cat(category));
static cl::OptionCategory
    trainCategory("ddpc compile --train options (training programs)");
static cl::opt<bool> train(
    "train",
    cl::desc("Compile a data-parallel training program (forward, loss, "
             "backward, optimizer; run it with mpirun -np N ./prog --data "
             "X.npy --labels Y.npy --epochs E)"),
    cl::sub(compileCmd), cl::cat(trainCategory));
static cl::opt<std::string>
    loss("loss",
         cl::desc("cross-entropy (logits [B,C], int64 labels [B]; default), "
                  "mse (float labels shaped like the output), or output "
                  "(the first output is already the scalar loss)"),
         cl::init("cross-entropy"), cl::sub(compileCmd),
         cl::cat(trainCategory));
static cl::opt<std::string> labelInput(
    "label-input",
    cl::desc("Graph input that holds the labels (with --loss output); "
             "default: a new int64 input 'labels' of shape [batch]"),
    cl::sub(compileCmd), cl::cat(trainCategory));
static cl::opt<std::string> optimizer("optimizer",
                                      cl::desc("sgd (default) or adamw"),
                                      cl::init("sgd"), cl::sub(compileCmd),
                                      cl::cat(trainCategory));
static cl::opt<double> lr("lr",
                          cl::desc("Learning rate (default 0.01; the "
                                   "program's --lr overrides it)"),
                          cl::init(0.01), cl::sub(compileCmd),
                          cl::cat(trainCategory));
static cl::opt<double> momentum("momentum",
                                cl::desc("SGD momentum (torch.optim.SGD)"),
                                cl::init(0.0), cl::sub(compileCmd),
                                cl::cat(trainCategory));
static cl::opt<double> dampening("dampening", cl::desc("SGD dampening"),
                                 cl::init(0.0), cl::sub(compileCmd),
                                 cl::cat(trainCategory));
static cl::opt<bool> nesterov("nesterov", cl::desc("Nesterov momentum"),
                              cl::sub(compileCmd), cl::cat(trainCategory));
static cl::opt<double> weightDecay(
    "weight-decay",
    cl::desc("Weight decay (L2 for SGD, decoupled for AdamW; default 0)"),
    cl::init(0.0), cl::sub(compileCmd), cl::cat(trainCategory));
static cl::opt<std::string> betas("betas",
                                  cl::desc("AdamW betas B1,B2 (default "
                                           "0.9,0.999)"),
                                  cl::init("0.9,0.999"), cl::sub(compileCmd),
                                  cl::cat(trainCategory));
static cl::opt<double> eps("eps", cl::desc("AdamW epsilon (default 1e-8)"),
                           cl::init(1e-8), cl::sub(compileCmd),
                           cl::cat(trainCategory));
static cl::opt<int64_t> gradAccum(
    "grad-accum-steps",
    cl::desc("Micro-batches of --batch-size accumulated per optimizer step"),
    cl::init(1), cl::sub(compileCmd), cl::cat(trainCategory));
static cl::list<std::string>
    freeze("freeze", cl::desc("Initializers that stay fixed (comma list)"),
           cl::CommaSeparated, cl::sub(compileCmd), cl::cat(trainCategory));
static cl::opt<bool> syncBatchNorm(
    "sync-batchnorm",
    cl::desc("BatchNormalization statistics over the global batch"),
    cl::sub(compileCmd), cl::cat(trainCategory));
static cl::opt<double> bucketCapMB(
    "bucket-cap-mb",
    cl::desc("Gradient allreduce bucket cap in MiB (default 25, as PyTorch "
             "DDP's bucket_cap_mb, or 4 at --zero-stage 2; 1 for the first "
             "bucket). A bucket closes "
             "once its gradients reach the cap, and starts during backward "
             "as soon as they are final; --report lists the buckets"),
    cl::init(25.0), cl::sub(compileCmd), cl::cat(trainCategory));
static cl::opt<std::string> memoryBudget(
    "memory-budget",
    cl::desc("Bytes one rank may hold (4GiB, 512MiB, 100KiB or plain "
             "bytes; default unlimited). The compile fails when the memory "
             "plan's predicted peak exceeds it; --report shows the plan"),
    cl::value_desc("SIZE"), cl::sub(compileCmd), cl::cat(trainCategory));
static cl::opt<std::string> zeroStage(
    "zero-stage",
    cl::desc("ZeRO stage: 0 (every rank keeps the whole state), 1 (each "
             "rank keeps and updates 1/world-size of the optimizer state, "
             "then the parameters are all-gathered), 2 (also the "
             "gradients: each bucket is reduce-scattered and a rank keeps "
             "the sum of its slice only), 3 (also the parameters: each is "
             "all-gathered right before forward reads it and again before "
             "backward does, and freed after; cpu target only); 1 and 2 on "
             "the cpu and cuda-emulate targets; or auto (the lowest stage "
             "whose memory plan fits --memory-budget; stages 1 to 3 need "
             "--world-size, 2 not on the cuda target, 3 on cpu only). "
             "Default: auto with --memory-budget, else 0"),
    cl::sub(compileCmd), cl::cat(trainCategory));
static cl::opt<int64_t> worldSize(
    "world-size",
    cl::desc("Ranks the program will run on, for the memory plan and "
             "--memory-budget (ZeRO stage 1 then counts 1/N of the "
             "optimizer state); the program refuses another world size. "
             "Default: any, the plan counts the state whole"),
    cl::value_desc("N"), cl::init(0), cl::sub(compileCmd),
    cl::cat(trainCategory));
static cl::opt<std::string> remat(
    "remat",
    cl::desc("Rematerialization: auto (the default under --memory-budget: "
             "when no ZeRO stage fits, the backward pass recomputes the "
             "activations that are cheapest per byte, chosen from the "
             "memory plan, until the plan fits) or off (every activation "
             "the backward pass reads is kept; the default without a "
             "budget)"),
    cl::init(""), cl::sub(compileCmd), cl::cat(trainCategory));
static cl::list<std::string>
    rematNodes("remat-nodes",
               cl::desc("Recompute the activations of these ONNX nodes in "
                        "backward, whatever the budget"),
               cl::CommaSeparated, cl::sub(compileCmd), cl::cat(trainCategory),
               cl::Hidden);
static cl::opt<bool> verbose("v", cl::desc("Print progress to stderr"),
                             cl::sub(compileCmd), cl::cat(category));

/// Renders the JSON plan for people.
static void printHumanReport(StringRef jsonText, raw_ostream &os) {
  auto parsed = json::parse(jsonText);
  if (!parsed) {
    consumeError(parsed.takeError());
    return;
  }
  const json::Object *root = parsed->getAsObject();
  if (!root)
    return;
  auto shapeStr = [](const json::Array *a) {
    std::string s = "[";
    for (size_t i = 0; a && i < a->size(); ++i)
      s += (i ? "," : "") + std::to_string(*(*a)[i].getAsInteger());
    return s + "]";
  };
  os << "plan for '" << root->getString("model").value_or("") << "'\n";
  if (auto partial = root->getString("partial"))
    os << "  (partial: " << *partial << ")\n";
  for (const char *kind : {"inputs", "outputs"}) {
    if (const json::Array *a = root->getArray(kind))
      for (const json::Value &v : *a) {
        const json::Object *t = v.getAsObject();
        os << "  " << StringRef(kind).drop_back() << " "
           << t->getString("name").value_or("") << " "
           << t->getString("dtype").value_or("")
           << shapeStr(t->getArray("shape")) << "\n";
      }
  }
  int64_t n = 0;
  if (const json::Array *a = root->getArray("parameters"))
    n = a->size();
  os << "  parameters: " << n << " tensors, "
     << root->getInteger("parameter_bytes").value_or(0) << " bytes\n";
  int64_t nc = 0;
  if (const json::Array *a = root->getArray("collectives"))
    nc = a->size();
  os << "  collectives: " << nc << ", "
     << root->getInteger("collective_bytes").value_or(0) << " bytes per step\n";
  if (const json::Array *buckets = root->getArray("gradient_buckets")) {
    bool scatter = !buckets->empty() &&
                   (*buckets)[0].getAsObject()->getString("op").value_or("") ==
                       "reduce_scatter_bucket";
    os << "  gradient " << (scatter ? "reduce-scatter" : "allreduce")
       << " buckets: " << buckets->size()
       << " (in the order backward finishes them)\n";
    for (const json::Value &v : *buckets) {
      const json::Object *b = v.getAsObject();
      int64_t start = b->getInteger("start_op").value_or(0);
      int64_t total = b->getInteger("function_ops").value_or(0);
      const json::Array *params = b->getArray("params");
      size_t n = params ? params->size() : 0;
      os << "    bucket " << b->getInteger("bucket").value_or(0) << ": "
         << b->getInteger("bytes").value_or(0) << " bytes, " << n
         << (n == 1 ? " gradient (" : " gradients (");
      constexpr size_t kShown = 4;
      for (size_t i = 0; i < std::min(n, kShown); ++i)
        os << (i ? ", " : "") << (*params)[i].getAsString().value_or("");
      if (n > kShown)
        os << " and " << n - kShown << " more; --report=json lists all";
      os << "), starts after top-level op " << start << " of " << total
         << " of " << b->getString("function").value_or("") << " ("
         << total - start << " left to overlap with it)\n";
    }
  }
  os << "  fusion groups: " << root->getInteger("fusion_groups").value_or(0)
     << " (one loop nest or kernel each)\n";
  if (const json::Object *p = root->getObject("precision"))
    os << "  precision: " << p->getString("mode").value_or("") << " ("
       << p->getString("meaning").value_or("") << ")\n";
  if (const json::Object *m = root->getObject("memory_plan")) {
    int64_t peak = m->getInteger("peak_bytes").value_or(0);
    os << "  memory plan per rank: peak " << ddpc::formatBytes(peak) << " ("
       << peak << " bytes) in " << m->getString("peak_function").value_or("")
       << " at " << m->getString("peak_op").value_or("") << "\n";
    if (std::optional<llvm::StringRef> why = m->getString("zero_choice"))
      os << "    --zero-stage auto: " << *why << "\n";
    if (std::optional<llvm::StringRef> note = m->getString("zero_note"))
      os << "    " << *note << "\n";
    if (const json::Object *r = m->getObject("remat")) {
      if (std::optional<llvm::StringRef> why = r->getString("choice");
          why && !why->empty())
        os << "    --remat auto: " << *why << "\n";
      if (const json::Array *list = r->getArray("recomputed")) {
        os << "    recomputed in backward: " << list->size() << "\n";
        for (const json::Value &v : *list) {
          const json::Object *a = v.getAsObject();
          os << "      " << a->getString("producer").value_or("") << ": "
             << a->getInteger("bytes").value_or(0) << " bytes not kept, "
             << a->getInteger("flops").value_or(0) << " FLOPs again\n";
        }
      }
    }
    os << "    category             bytes        share\n";
    if (const json::Array *cats = m->getArray("categories"))
      for (const json::Value &v : *cats) {
        const json::Object *c = v.getAsObject();
        int64_t b = c->getInteger("bytes").value_or(0);
        os << llvm::formatv("    {0,-20} {1,12} {2,6:f1}%\n",
                            c->getString("category").value_or(""), b,
                            peak ? 100.0 * b / peak : 0.0);
      }
    if (const json::Array *fns = m->getArray("functions"))
      for (const json::Value &v : *fns) {
        const json::Object *f = v.getAsObject();
        os << "    temporaries of " << f->getString("name").value_or("") << ": "
           << f->getInteger("peak_bytes").value_or(0) << " bytes";
        if (int64_t a = f->getInteger("arena_bytes").value_or(0))
          os << " (arena " << a << " bytes)";
        os << "\n";
      }
    if (const json::Array *saved = m->getArray("saved_activations")) {
      constexpr size_t kShown = 5;
      os << "    activations saved for backward: " << saved->size()
         << (saved->size() > kShown ? " (largest 5; --report=json lists all)"
                                    : "")
         << "\n";
      for (size_t i = 0; i < std::min(saved->size(), kShown); ++i) {
        const json::Object *a = (*saved)[i].getAsObject();
        os << "      " << a->getString("producer").value_or("") << ": "
           << a->getInteger("bytes").value_or(0) << " bytes\n";
      }
    }
  }
  if (const json::Object *cuda = root->getObject("cuda")) {
    os << "  cuda"
       << (cuda->getBoolean("emulated").value_or(false)
               ? " (cuda-emulate: kernels run serially on the CPU)"
               : "")
       << ": " << cuda->getInteger("kernels").value_or(0)
       << " generated kernels (with those that run only when cuDNN/cuBLASLt "
          "decline a call)\n";
    if (const json::Array *fns = cuda->getArray("functions"))
      for (const json::Value &v : *fns) {
        const json::Object *f = v.getAsObject();
        auto count = [&](int64_t n, StringRef one, StringRef many) {
          os << n << " " << (n == 1 ? one : many);
        };
        os << "    " << f->getString("name").value_or("") << ": ";
        count(f->getInteger("kernel_launches").value_or(0), "kernel launch",
              "kernel launches");
        os << ", ";
        count(f->getInteger("cublas_gemms").value_or(0), "cuBLAS GEMM",
              "cuBLAS GEMMs");
        if (int64_t e = f->getInteger("cublaslt_epilogue_gemms").value_or(0))
          os << " (" << e << " with a bias/ReLU epilogue)";
        if (int64_t c = f->getInteger("cudnn_convolutions").value_or(0)) {
          os << ", ";
          count(c, "cuDNN convolution", "cuDNN convolutions");
          if (int64_t e =
                  f->getInteger("cudnn_epilogue_convolutions").value_or(0))
            os << " (" << e << " with a bias/ReLU epilogue)";
        }
        os << ", arena " << f->getInteger("arena_bytes").value_or(0)
           << " bytes\n";
      }
  }
}

static void printVersion(raw_ostream &os) {
  os << "ddpc " << DDPC_VERSION << " (MLIR/LLVM " << LLVM_VERSION_STRING
     << ")\n";
}

int main(int argc, char **argv) {
  InitLLVM initLLVM(argc, argv);
  // A reader that closes a pipe given as -o is a write error ("Broken
  // pipe", temporaries removed), not death by SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  cl::SetVersionPrinter(printVersion);
  cl::HideUnrelatedOptions({&category, &trainCategory});
  cl::ParseCommandLineOptions(
      argc, argv,
      "ddpc: an ahead-of-time compiler from ONNX models to native programs\n\n"
      "  ddpc compile model.onnx --target cpu -o prog\n"
      "  ddpc compile model.onnx --target cuda --cuda-arch sm_80,sm_90 -o "
      "prog\n"
      "  ./prog --input NAME=x.npy ... --output-dir out/\n\n"
      "Run 'ddpc compile --help' for the compile options, 'ddpc ops' for "
      "the ONNX ops it imports.\n"
      "Exit codes: 0 success, 1 error, 2 unsupported op/attribute/dtype.\n\n"
      "Environment of programs compiled with --target cuda (or "
      "cuda-emulate):\n"
      "  DDPC_CUDNN=0          convolutions as im2col + cuBLAS, not cuDNN "
      "(--target cpu: the generated im2col + GEMM or loops, not the "
      "runtime's)\n"
      "  DDPC_CONV_EPILOGUE=0  convolution and bias/ReLU kernel, not one fused "
      "cuDNN call\n"
      "  DDPC_GEMM_EPILOGUE=0  GEMM and bias/ReLU kernel, not one cuBLASLt "
      "call\n"
      "Environment of programs compiled with --target cuda only:\n"
      "  DDPC_CUDA_PROFILE=1   print device time per kernel/library call at "
      "exit\n"
      "  DDPC_CUDA_SYNC_CHECK=1  wait after every kernel and name the one "
      "that fails\n"
      "  DDPC_NCCL_SELF_TEST=1   one rank: gradient buckets through a 1-rank "
      "NCCL communicator\n"
      "Environment of training programs (--target cpu):\n"
      "  DDPC_COMM_THREAD=0    gradient buckets without the communication "
      "thread\n");

  if (opsCmd) {
    for (const std::string &op : ddpc::supportedONNXOpTypes())
      outs() << op << "\n";
    return 0;
  }
  if (!compileCmd) {
    errs() << "ddpc: no command given; try 'ddpc compile --help' (or "
              "'ddpc ops' for the supported ONNX ops)\n";
    return 1;
  }

  // A single-valued option given twice is an error, not "the last one
  // wins" (cl::opt allows repeats; cl::list options are ZeroOrMore).
  for (const auto &entry : compileCmd.OptionsMap) {
    cl::Option *o = entry.second;
    if (o->getNumOccurrencesFlag() == cl::Optional &&
        o->getNumOccurrences() > 1) {
      errs() << "error: " << (o->ArgStr.size() == 1 ? "-" : "--") << o->ArgStr
             << " is given " << o->getNumOccurrences()
             << " times; give it once\n";
      return 1;
    }
  }

  // `--memory-budget=` and the like: an empty value is never the default
  // silently (--report and --dump-ir take an optional value of their own).
  for (cl::opt<std::string> *o :
       {&outputFile, &target, &cudaArch, &precision, &cudaPath, &cpu,
        &runtimeDir, &loss, &labelInput, &optimizer, &betas, &memoryBudget,
        &zeroStage, &remat}) {
    if (o->getNumOccurrences() && o->getValue().empty()) {
      errs() << "error: " << (o->ArgStr.size() == 1 ? "-" : "--") << o->ArgStr
             << " is given an empty value; give a value or leave it out\n";
      return 1;
    }
  }

  ddpc::CompileOptions options;
  options.inputPath = inputFile;
  options.outputPath = outputFile;
  options.target = target;
  options.emit = emit;
  options.cudaRoot = cudaPath;
  options.precision = precision;
  options.memoryBudget = memoryBudget;
  options.zeroStage = zeroStage;
  options.worldSize = worldSize;
  options.remat = remat;
  options.rematNodes.assign(rematNodes.begin(), rematNodes.end());
  if ((cudaArch.getNumOccurrences() || cudaPath.getNumOccurrences()) &&
      target != "cuda") {
    errs() << "error: --cuda-arch and --cuda-path apply to --target cuda "
              "only (this is --target "
           << target << ")\n";
    return 1;
  }
  {
    std::string err;
    if (!ddpc::parseCUDAArchs(cudaArch, options.cudaArchs, err)) {
      errs() << "error: " << err << "\n";
      return 1;
    }
  }
  if (options.outputPath.empty()) {
    if (emit == ddpc::EmitKind::MLIR || emit == ddpc::EmitKind::LoweredMLIR ||
        emit == ddpc::EmitKind::LLVMIR || emit == ddpc::EmitKind::PTX) {
      options.outputPath = "-";
    } else {
      errs() << "error: no output file: pass -o FILE\n";
      return 1;
    }
  }
  for (const std::string &d : dims) {
    auto [name, value] = StringRef(d).split('=');
    int64_t v;
    // 0 is allowed: zero-size tensors are (ONNX's empty tensors).
    if (name.empty() || value.getAsInteger(10, v) || v < 0) {
      errs() << "error: --dim expects NAME=VALUE with VALUE >= 0, got '" << d
             << "'\n";
      return 1;
    }
    auto [it, inserted] = options.import.dims.try_emplace(name.str(), v);
    if (!inserted && it->second != v) {
      errs() << "error: --dim " << name << " is given twice (" << it->second
             << " and " << v << ")\n";
      return 1;
    }
  }
  for (const std::string &bi : bindInputs) {
    auto [name, file] = StringRef(bi).split('=');
    if (name.empty() || file.empty()) {
      errs() << "error: --bind-input expects NAME=FILE.npy, got '" << bi
             << "'\n";
      return 1;
    }
    ddpc::runtime::NpyArray arr;
    std::string err;
    if (!ddpc::runtime::readNpy(file.str(), arr, err)) {
      errs() << "error: --bind-input " << name << ": " << err << "\n";
      return 1;
    }
    ddpc::ImportOptions::BoundTensor bt;
    bt.dtype = arr.dtype;
    bt.shape = arr.shape;
    bt.data.assign(arr.data.begin(), arr.data.end());
    options.import.boundInputs[name.str()] = std::move(bt);
  }
  if (batchSize.getNumOccurrences()) {
    if (batchSize <= 0) {
      errs() << "error: --batch-size must be positive\n";
      return 1;
    }
    options.import.batchSize = batchSize;
  }
  options.import.runChecker = !noChecker;
  options.import.runtimeChecks = !noRuntimeChecks;
  if (dumpIR.getNumOccurrences() && dumpIR.empty()) {
    errs() << "error: --dump-ir needs a folder name\n";
    return 1;
  }
  options.dumpIRDir = dumpIR;
  options.printIRAfterAll = printAfterAll;
  if (mlirTimingDisplay.getNumOccurrences() && !mlirTiming) {
    errs() << "error: --mlir-timing-display applies with --mlir-timing "
              "only\n";
    return 1;
  }
  options.timing =
      mlirTiming ? mlirTimingDisplay.getValue() : ddpc::TimingDisplay::Off;
  options.pipeline.fuseElementwise = !noFusion;
  options.pipeline.freeAtLastUse = !noFreeAtLastUse;
  options.cpu.cpu = cpu;
  options.cpu.optLevel = optLevel;
  options.verbose = verbose;
  options.vjp = vjp;
  if (train) {
    ddpc::TrainOptions &t = options.train;
    t.enabled = true;
    t.loss = loss;
    t.labelInput = labelInput;
    t.optimizer = optimizer;
    t.lr = lr;
    t.momentum = momentum;
    t.dampening = dampening;
    t.nesterov = nesterov;
    t.weightDecay = weightDecay;
    t.eps = eps;
    auto [b1, b2] = StringRef(betas).split(',');
    if (b1.getAsDouble(t.beta1) || b2.getAsDouble(t.beta2)) {
      errs() << "error: --betas expects B1,B2, got '" << betas << "'\n";
      return 1;
    }
    t.gradAccumSteps = gradAccum;
    t.freeze.assign(freeze.begin(), freeze.end());
    t.syncBatchNorm = syncBatchNorm;
    t.bucketCapMB = bucketCapMB;
    t.bucketCapGiven = bucketCapMB.getNumOccurrences() > 0;
    if (std::string bad = t.validate(); !bad.empty()) {
      errs() << "error: " << bad << "\n";
      return 1;
    }
  } else {
    // Training options given without --train: name them.
    std::string given;
    cl::Option *const trainOptions[] = {
        &loss,          &labelInput, &optimizer, &lr,
        &momentum,      &dampening,  &nesterov,  &weightDecay,
        &betas,         &eps,        &gradAccum, std::addressof(freeze),
        &syncBatchNorm, &bucketCapMB};
    for (cl::Option *o : trainOptions)
      if (o->getNumOccurrences())
        given += (given.empty() ? "--" : ", --") + o->ArgStr.str();
    if (!given.empty()) {
      errs() << "error: " << given
             << (StringRef(given).contains(',') ? " apply" : " applies")
             << " to training programs only; add --train\n";
      return 1;
    }
  }
  if (report.getNumOccurrences() && !report.empty() && report != "json") {
    errs() << "error: --report takes no value or 'json', got '" << report
           << "'\n";
    return 1;
  }
  if (report == "json" && outputFile == "-") {
    errs() << "error: --report=json and -o - both write to stdout; write the "
              "output to a file, or use --report (text, on stderr)\n";
    return 1;
  }
  options.runtimeLibDir =
      runtimeDir.empty()
          ? ddpc::defaultRuntimeLibDir(argv[0], (void *)&printVersion)
          : std::string(runtimeDir);

  std::string error;
  ddpc::CompileResult result;
  int rc = ddpc::compile(options, error, "", &result);
  if (rc != 0) {
    errs() << "error: " << error << "\n";
    return rc;
  }
  if (report.getNumOccurrences()) {
    if (report == "json")
      outs() << result.reportJSON << "\n";
    else
      printHumanReport(result.reportJSON, errs());
  }
  return rc;
}

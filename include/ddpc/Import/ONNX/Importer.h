//===- Importer.h - ONNX model to MLIR import -------------------*- C++ -*-===//
//
// Part of ddpc. Converts an ONNX ModelProto into an MLIR module whose single
// function `@main_graph` computes the graph on statically shaped tensors using
// upstream dialects only (linalg on tensors, tensor, arith, math).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_IMPORT_ONNX_IMPORTER_H
#define DDPC_IMPORT_ONNX_IMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include "ddpc/Support/RuntimeSymbols.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
class DialectRegistry;
} // namespace mlir

namespace ddpc {

/// Options that bind what the ONNX file leaves open.
struct ImportOptions {
  /// Values for symbolic dimensions, by `dim_param` name (`--dim NAME=VALUE`).
  std::map<std::string, int64_t> dims;
  /// Value for the leading dimension of every graph input when it is
  /// symbolic or unknown (`--batch-size`).
  std::optional<int64_t> batchSize;
  /// Folder that external-data locations are resolved against. External data
  /// may not escape this folder (no `..`, no absolute paths, no symlinks out).
  std::string modelDir;
  /// Graph inputs whose values are fixed at compile time
  /// (`--bind-input NAME=FILE.npy`): they become constants, so shape, axes
  /// and similar inputs fold. `dtype` uses ONNX TensorProto numbers; `data`
  /// is dense row-major little-endian (bool: one byte per element).
  struct BoundTensor {
    int32_t dtype = 0;
    std::vector<int64_t> shape;
    std::string data;
  };
  std::map<std::string, BoundTensor> boundInputs;
  /// Name of the generated function.
  std::string funcName = kMainGraphFunc.str();
  /// Float initializers become function arguments: `ddpc.role = "param"`,
  /// or "buffer" for BatchNormalization running mean/var. Graph inputs get
  /// role "input". Initializers named in `frozen` stay constants.
  bool parameterize = false;
  std::vector<std::string> frozen;
  /// Training-mode semantics: BatchNormalization normalizes with batch
  /// statistics and the function returns the updated running statistics as
  /// extra results with `ddpc.role = "buffer_update"` (named after the
  /// buffer). Needs `parameterize`.
  bool trainingMode = false;
  /// The evaluation function of a training program (model.eval()): nodes
  /// whose flags ask for training, as torch.onnx.export(training=TRAINING)
  /// writes them (BatchNormalization's training_mode=1 or, before opset 14,
  /// its training outputs; Dropout's training_mode=true), compute as in
  /// inference, their extra outputs still defined. Without it and without
  /// trainingMode, the flags decide, as the ONNX spec says.
  bool evalMode = false;
  /// When set (with `parameterize`), receives the initial value of every
  /// parameter and buffer argument as dense little-endian bytes, by name.
  std::map<std::string, std::string> *initialValues = nullptr;
  /// Training mode: BatchNormalization statistics over the global batch
  /// (sums all-reduced over ranks, as torch.nn.SyncBatchNorm).
  bool syncBatchNorm = false;
  /// Run the ONNX library's checker and shape inference where they apply
  /// (IR version <= 8, opset <= 17).
  bool runChecker = true;
  /// Run-time checks of compiled code (RuntimeChecks.h): an index input
  /// (Gather's indices) outside [-size, size), or an integer division by
  /// zero, ends the program with an error naming the node. Off, an index
  /// is clamped to the nearest valid one (reads stay in bounds) and a zero
  /// divisor replaced by 1.
  bool runtimeChecks = true;
};

/// Why an import failed: `Unsupported` (an op, attribute or dtype that ddpc
/// does not implement; the CLI exits with code 2) or `Invalid` (a malformed
/// model or bad options; exit code 1).
enum class ImportErrorKind { None, Invalid, Unsupported };

struct ImportError {
  ImportErrorKind kind = ImportErrorKind::None;
  /// One line, naming the op type, node name, domain and opset where relevant.
  std::string message;
};

/// Registers every dialect the importer produces.
void registerImportDialects(mlir::DialectRegistry &registry);

/// Training programs: gives a float initializer that the model uses in
/// roles needing different storage one copy per role (InitializerRoles.cpp):
/// the uses through which the loss depends on it (it is trained there)
/// keep the name, each BatchNormalization running-statistics slot gets a
/// copy named `<name>.<node>.running_mean|running_var` (unless it is the
/// only role), configuration inputs (Dropout's ratio, Clip's bounds, Pow's
/// exponent) one constant copy `<name>.constant`. First, each Identity node
/// that copies a float initializer (torch.onnx.export's eval-mode merge of
/// equal-valued parameters) becomes an initializer of its own, named by
/// the Identity's output; and an `onnx::`-named float matrix equal to
/// another initializer's transpose (the exporter's folded `W.t()` of a tied
/// weight; neither `frozen`, the source not `onnx::`-named, not constant or
/// symmetric) becomes a Transpose node of it, `retied` receiving one
/// "folded = source^T" per such tensor. Rewrites `modelBytes` (a serialized
/// ModelProto) only when something changed; returns the names of the
/// Identity copies.
std::vector<std::string>
separateInitializerRoles(std::string &modelBytes,
                         const std::vector<std::string> &frozen = {},
                         std::vector<std::string> *retied = nullptr);

/// Rewrites a training-mode export (`modelBytes`, a serialized ModelProto)
/// into the form an eval-mode export has, for the trained model a training
/// program writes: BatchNormalization loses training_mode and its training
/// outputs (a reader of an updated running mean/variance reads the trained
/// statistic through an Identity node), Dropout its training_mode input
/// (InferenceForm.cpp). Unchanged when nothing is flagged. Returns one line
/// per node left in training form (its saved mean/variance are read).
std::vector<std::string> toInferenceForm(std::string &modelBytes);

/// The ONNX op types (default domain) that the importer registers, sorted.
std::vector<std::string> supportedONNXOpTypes();

/// Parses `bytes` as a serialized ONNX ModelProto and imports it.
/// On failure returns a null module and fills `error`.
mlir::OwningOpRef<mlir::ModuleOp> importONNXModel(mlir::MLIRContext &context,
                                                  const std::string &bytes,
                                                  const ImportOptions &options,
                                                  ImportError &error);

} // namespace ddpc

#endif // DDPC_IMPORT_ONNX_IMPORTER_H

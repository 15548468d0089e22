//===- GraphImporter.h - State shared by the per-op importers ---*- C++ -*-===//
//
// Part of ddpc. Internal to lib/Import/ONNX: the graph importer state and the
// helpers that the op-family files (Elementwise.cpp, MatMul.cpp, Conv.cpp, ...)
// use to build linalg-on-tensors IR with static shapes.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_LIB_IMPORT_ONNX_GRAPHIMPORTER_H
#define DDPC_LIB_IMPORT_ONNX_GRAPHIMPORTER_H

#include "ddpc/Import/ONNX/Importer.h"
#include "ddpc/Import/ONNX/TensorBuilders.h"
#include "ddpc/Support/DTypes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>

namespace ddpc::onnx_import {

// The dtype numbers (kFloat, kInt64, ...) and their table are ddpc's own
// (Support/DTypes.h); these answer the importer's questions with it.
bool isFloatDType(int32_t t);
bool isUnsignedDType(int32_t t);
bool isSignedIntDType(int32_t t);
const char *dtypeName(int32_t t);

/// A value of the ONNX graph: the MLIR tensor and the ONNX element type
/// (MLIR integers are signless, so signedness lives here).
struct TValue {
  mlir::Value value;
  int32_t dtype = kUndefined;

  mlir::RankedTensorType type() const {
    return llvm::cast<mlir::RankedTensorType>(value.getType());
  }
  llvm::ArrayRef<int64_t> shape() const { return type().getShape(); }
  int64_t rank() const { return type().getRank(); }
  mlir::Type elementType() const { return type().getElementType(); }
};

class GraphImporter;

/// What one node importer sees: the node, its inputs and attributes, and a
/// way to define its outputs or report an error.
class NodeContext {
public:
  NodeContext(GraphImporter &importer, const onnx::NodeProto &node,
              int64_t opset)
      : importer(importer), node(node), opset(opset) {}

  GraphImporter &importer;
  const onnx::NodeProto &node;
  /// Opset version of the node's domain.
  int64_t opset;
  /// float16/bfloat16 computed in float32 (promoteHalfPrecision): the
  /// half dtype of the node, kUndefined when the node is not promoted.
  int32_t halfDType = kUndefined;

  /// Ops that accumulate (sums, contractions, normalizations) compute in
  /// float32 when their inputs are float16 or bfloat16, as onnxruntime's
  /// and PyTorch's kernels do: a float16 sum of 4096 ones stopped at 2048.
  /// From here on input() casts half inputs to float32 and setOutput()
  /// casts float32 outputs back (LayerNormalization's Mean and InvStdDev
  /// stay float32, its stash_type).
  void promoteHalfPrecision(int32_t dtype) { halfDType = dtype; }

  mlir::OpBuilder &builder();
  mlir::Location loc();

  int numInputs() const { return node.input_size(); }
  int numOutputs() const { return node.output_size(); }
  /// True when input `i` exists and is not the empty name (optional input).
  bool hasInput(int i) const {
    return i < node.input_size() && !node.input(i).empty();
  }
  bool hasOutput(int i) const {
    return i < node.output_size() && !node.output(i).empty();
  }
  /// The tensor for input `i`; materializes host constants as needed.
  TValue input(int i);
  /// The host-known value of input `i`, if it is a constant at import time.
  std::optional<mlir::DenseElementsAttr> constInput(int i);
  /// Integer contents of a constant input, or failure (with an error that
  /// says the input must be constant).
  mlir::FailureOr<llvm::SmallVector<int64_t>> constIntsInput(int i);
  /// Contents of a constant float input (any float dtype) as doubles, or
  /// failure (with the same error as constIntsInput).
  mlir::FailureOr<llvm::SmallVector<double>> constFloatsInput(int i);
  /// Records the "input `i` must be `what` known at compile time" error
  /// (naming --bind-input for a graph input); returns failure().
  mlir::LogicalResult notConstant(int i, llvm::StringRef what);

  const onnx::AttributeProto *attr(llvm::StringRef name) const;
  bool hasAttr(llvm::StringRef name) const { return attr(name) != nullptr; }
  /// Typed reads; a present attribute of another type is an invalid-model
  /// error (recorded, reported after the node's import) and reads as absent.
  int64_t attrInt(llvm::StringRef name, int64_t dflt) const;
  /// A 0/1 flag attribute (keepdims, transA, ...); another value is an
  /// invalid-model error (recorded) and reads as `dflt`.
  bool attrFlag(llvm::StringRef name, bool dflt) const;
  float attrFloat(llvm::StringRef name, float dflt) const;
  std::string attrString(llvm::StringRef name, llvm::StringRef dflt) const;
  llvm::SmallVector<int64_t> attrInts(llvm::StringRef name) const;
  llvm::SmallVector<float> attrFloats(llvm::StringRef name) const;
  const onnx::AttributeProto *
  typedAttr(llvm::StringRef name,
            onnx::AttributeProto::AttributeType type) const;

  /// Defines output `i` of the node.
  void setOutput(int i, TValue v);
  /// Defines output `i` as a host constant (also usable for folding).
  mlir::LogicalResult setConstOutput(int i, mlir::DenseElementsAttr attr,
                                     int32_t dtype);

  /// Records an "unsupported" error naming this node; returns failure().
  mlir::LogicalResult unsupported(const llvm::Twine &why);
  /// Records an "invalid model" error naming this node; returns failure().
  mlir::LogicalResult invalid(const llvm::Twine &why);
  /// Fails as unsupported unless the attributes present are all in `known`.
  mlir::LogicalResult checkAttrs(std::initializer_list<llvm::StringRef> known);
  /// Describes the node for error messages: `'Op' (node 'n', domain '', opset
  /// 13)`.
  std::string describe() const;
};

using NodeImportFn = std::function<mlir::LogicalResult(NodeContext &)>;

/// Training-program roles of a node input (InitializerRoles.cpp, the
/// parameter selection in Importer.cpp).
/// Inputs that configure an op: an initializer read only there stays a
/// constant (Dropout's ratio and training_mode, Clip's bounds, Pow's
/// exponent).
inline bool isConfigurationSlot(const onnx::NodeProto &n, int i) {
  const std::string &op = n.op_type();
  return (op == "Dropout" && i >= 1) || (op == "Clip" && i >= 1) ||
         (op == "Pow" && i == 1);
}
/// BatchNormalization's running mean and variance: buffers, updated by the
/// training step and not trained.
inline bool isRunningStatisticSlot(const onnx::NodeProto &n, int i) {
  return n.op_type() == "BatchNormalization" && (i == 3 || i == 4);
}
/// An input that can carry a gradient: not a configuration input and not
/// an index or shape operand (Gather's indices, Reshape's shape, ...).
bool isTrainableSlot(const onnx::NodeProto &node, int i);
/// The values the first graph output (the loss, or what it is computed
/// from) depends on through trainable slots of float-valued nodes.
llvm::StringSet<> lossDependencies(const onnx::GraphProto &graph);
/// Whether `node` has a float result in `deps` (lossDependencies).
bool reachesLoss(const onnx::NodeProto &node, const llvm::StringSet<> &deps);
/// Training imports (ImportOptions::parameterize): the float initializers
/// that become arguments, as (name, "param" | "buffer"), parameters first,
/// in initializer order (Parameters.cpp says which and why). Fails through
/// `gi.fail` on a running statistic holding inf/nan or a bad --freeze name.
mlir::FailureOr<llvm::SmallVector<std::pair<std::string, llvm::StringRef>>>
selectStateArguments(GraphImporter &gi, const onnx::GraphProto &graph,
                     const ImportOptions &options,
                     const llvm::StringSet<> &initNames);

/// Op importers by ONNX op type (default domain).
class OpRegistry {
public:
  void add(llvm::StringRef opType, NodeImportFn fn) {
    table[opType] = std::move(fn);
  }
  const NodeImportFn *lookup(llvm::StringRef opType) const {
    auto it = table.find(opType);
    return it == table.end() ? nullptr : &it->second;
  }

  /// Registered op types, sorted.
  std::vector<std::string> opTypes() const {
    std::vector<std::string> out;
    for (const auto &kv : table)
      out.push_back(kv.getKey().str());
    std::sort(out.begin(), out.end());
    return out;
  }

private:
  llvm::StringMap<NodeImportFn> table;
};

// One registration function per op-family file.
void registerElementwiseOps(OpRegistry &registry);
void registerMatMulOps(OpRegistry &registry);
void registerConvOps(OpRegistry &registry);
void registerNormalizationOps(OpRegistry &registry);
void registerReductionOps(OpRegistry &registry);
void registerShapeOps(OpRegistry &registry);
void registerMovementOps(OpRegistry &registry);
void registerResizeOps(OpRegistry &registry);
void registerAttentionOps(OpRegistry &registry);
void registerIndexingOps(OpRegistry &registry);
void registerGridSampleOps(OpRegistry &registry);

/// Importer state for one graph.
class GraphImporter {
public:
  GraphImporter(mlir::MLIRContext &context, const ImportOptions &options,
                ImportError &error);

  mlir::MLIRContext &context;
  const ImportOptions &options;
  ImportError &error;
  mlir::OpBuilder builder;
  mlir::Location loc;
  /// Imported values by ONNX name.
  llvm::StringMap<TValue> values;
  /// Values known at import time (initializers, Constant nodes, folded
  /// shape computations), by ONNX name.
  llvm::StringMap<std::pair<mlir::DenseElementsAttr, int32_t>> constants;
  /// Training mode: new values of buffers (BatchNorm running statistics), by
  /// buffer name, in the order they were produced.
  llvm::SmallVector<std::pair<std::string, TValue>> bufferUpdates;
  /// Training mode: the {seed, rank} i64[2] argument Dropout hashes.
  mlir::Value rngArg;
  /// Names of the buffer arguments (parameterized running statistics).
  llvm::StringSet<> bufferNames;
  /// Symbolic dimensions that --batch-size bound (the leading dimension of
  /// a graph input), so that the same name elsewhere gets the same value.
  llvm::StringMap<int64_t> batchDims;

  /// MLIR element type of an ONNX dtype, or null when unsupported.
  mlir::Type elementType(int32_t dtype);
  /// Materializes a host constant as an `arith.constant` (cached per name).
  TValue materialize(llvm::StringRef name);
  /// Converts a TensorProto (raw, typed or external data) to an attribute.
  mlir::FailureOr<mlir::DenseElementsAttr>
  tensorToAttr(const onnx::TensorProto &tensor, const std::string &what);

  /// Records an error of the given kind (the first one wins).
  mlir::LogicalResult fail(ImportErrorKind kind, const llvm::Twine &message);
};

//===----------------------------------------------------------------------===//
// IR building helpers (Builders.cpp)
//===----------------------------------------------------------------------===//

// Shape-static tensor building helpers (TensorBuilders.h).
using ddpc::broadcastShapes;
using ddpc::buildElementwise;
using ddpc::buildGeneric;
using ddpc::buildPad;
using ddpc::buildReduction;
using ddpc::buildReshape;
using ddpc::highestAttr;
using ddpc::lowestAttr;
using ddpc::scalarAttr;
using ddpc::ScalarBodyFn;
using ddpc::scalarConst;

/// Converts a scalar from one ONNX dtype to another (ONNX Cast semantics).
mlir::Value castScalar(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v,
                       int32_t fromDType, int32_t toDType, mlir::Type toType);

using ddpc::broadcastsTo;
using ddpc::normalizeAxis;
using ddpc::numElements;

/// Checks the indices of input `i` against `bound` (the size of the
/// indexed axis, `axisDesc`): at import time when constant, else at run
/// time (buildIndexCheck) unless --no-runtime-checks (Shape.cpp). With
/// `numComponents` m > 1, only component `component` of the last axis (of
/// size m) is checked (GatherND's index tuples: one bound per data axis).
mlir::LogicalResult checkIndices(NodeContext &ctx, int i, int64_t bound,
                                 const std::string &axisDesc,
                                 int64_t component = 0,
                                 int64_t numComponents = 1);
/// The element index an integer index `v` reads along an axis of `dimSize`
/// elements: negative indices count from the end, clamped to [0, dimSize)
/// so that nothing reads out of bounds before the run-time report.
mlir::Value readableIndex(mlir::OpBuilder &b, mlir::Location l, mlir::Value v,
                          int64_t dimSize);

/// softmax(x) or log_softmax(x) over `axes`, the maximum subtracted first
/// (Normalization.cpp).
mlir::Value buildSoftmax(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                         llvm::ArrayRef<int64_t> axes, bool logSoftmax);
/// C[batch..., m, n] = sum_k A[batch..., m, k] * B[batch..., k, n], batch
/// dims broadcast; `transA`/`transB` read A as [.., k, m] / B as [.., n, k]
/// (MatMul.cpp). `outShape` receives C's shape.
mlir::Value buildContraction(mlir::OpBuilder &b, mlir::Location loc,
                             mlir::Value a, mlir::Value bm, bool transA,
                             bool transB, mlir::Type elem,
                             llvm::SmallVectorImpl<int64_t> &outShape);

/// `text` with every byte that is not printable UTF-8 (invalid sequences,
/// control characters) written as \xNN: messages are one line of text.
std::string printableText(llvm::StringRef text);

/// "[2,3]" (messages).
inline std::string shapeString(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

} // namespace ddpc::onnx_import

#endif // DDPC_LIB_IMPORT_ONNX_GRAPHIMPORTER_H

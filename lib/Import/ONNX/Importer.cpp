//===- Importer.cpp - ONNX ModelProto to MLIR -----------------------------===//
//
// Part of ddpc. Parses the model with the ONNX library, runs its checker and
// shape inference where they apply (the 1.12 library knows IR <= 8 and opset
// <= 17), binds symbolic dimensions, and imports the graph node by node
// through the per-op importers registered in the op-family files.
//
//===----------------------------------------------------------------------===//

#include "GraphImporter.h"
#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/ConvertUTF.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sys/stat.h>

using namespace mlir;

namespace ddpc {

void registerImportDialects(DialectRegistry &registry) {
  // Everything the op importers build: tensor-level ops, and for run-time
  // checks and collectives (buildIndexCheck, buildAllReduceSum) the
  // bufferization, memref and LLVM ops of their helper functions; and
  // ddpc's own, whose attributes every stage reads (DDPCDialect.td).
  registry.insert<DDPCDialect, arith::ArithDialect,
                  bufferization::BufferizationDialect, func::FuncDialect,
                  linalg::LinalgDialect, LLVM::LLVMDialect, math::MathDialect,
                  memref::MemRefDialect, tensor::TensorDialect>();
}

namespace onnx_import {

//===----------------------------------------------------------------------===//
// NodeContext
//===----------------------------------------------------------------------===//

OpBuilder &NodeContext::builder() { return importer.builder; }
Location NodeContext::loc() { return importer.loc; }

TValue NodeContext::input(int i) {
  if (!hasInput(i)) {
    // checkArity makes this unreachable for required inputs; an importer
    // reading an absent optional one without hasInput() gets an error and a
    // placeholder (the import fails after this node).
    (void)invalid("input #" + Twine(i) + " is missing");
    OpBuilder::InsertionGuard guard(builder());
    auto t = RankedTensorType::get({1}, builder().getF32Type());
    return {arith::ConstantOp::create(builder(), loc(),
                                      DenseElementsAttr::get(t, 0.0f)),
            kFloat};
  }
  const std::string &name = node.input(i);
  auto it = importer.values.find(name);
  TValue v =
      it != importer.values.end() ? it->second : importer.materialize(name);
  if (halfDType == kUndefined || (v.dtype != kFloat16 && v.dtype != kBFloat16))
    return v;
  Type f32 = builder().getF32Type();
  Value wide =
      buildElementwise(builder(), loc(), v.value, v.shape(), f32,
                       [&](OpBuilder &b, Location l, ValueRange a) -> Value {
                         return arith::ExtFOp::create(b, l, f32, a[0]);
                       });
  return {wide, kFloat};
}

std::optional<DenseElementsAttr> NodeContext::constInput(int i) {
  if (!hasInput(i))
    return std::nullopt;
  auto it = importer.constants.find(node.input(i));
  if (it == importer.constants.end())
    return std::nullopt;
  return it->second.first;
}

LogicalResult NodeContext::notConstant(int i, StringRef what) {
  std::string name = hasInput(i) ? node.input(i) : std::string();
  bool isGraphInput = importer.values.count(name) &&
                      isa<BlockArgument>(importer.values[name].value);
  return unsupported("input #" + Twine(i) + " ('" + name + "') must be " +
                     what + " known at compile time" +
                     (isGraphInput
                          ? "; bind graph input '" + name +
                                "' with --bind-input " + name + "=FILE.npy"
                          : std::string()));
}

FailureOr<SmallVector<int64_t>> NodeContext::constIntsInput(int i) {
  auto c = constInput(i);
  if (!c || !isa<IntegerType>(c->getElementType())) {
    (void)notConstant(i, "an integer constant");
    return failure();
  }
  SmallVector<int64_t> out;
  for (const APInt &v : c->getValues<APInt>())
    out.push_back(v.getSExtValue());
  return out;
}

FailureOr<SmallVector<double>> NodeContext::constFloatsInput(int i) {
  auto c = constInput(i);
  if (!c || !isa<FloatType>(c->getElementType())) {
    (void)notConstant(i, "a float constant");
    return failure();
  }
  SmallVector<double> out;
  for (APFloat v : c->getValues<APFloat>()) {
    bool lost;
    v.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &lost);
    out.push_back(v.convertToDouble());
  }
  return out;
}

const onnx::AttributeProto *NodeContext::attr(StringRef name) const {
  for (const auto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

/// AttributeProto.AttributeType as the ONNX spec names it.
static std::string attributeTypeName(int type) {
  using A = onnx::AttributeProto;
  static const std::pair<int, const char *> names[] = {
      {A::FLOAT, "a float"},
      {A::INT, "an int"},
      {A::STRING, "a string"},
      {A::TENSOR, "a tensor"},
      {A::GRAPH, "a graph"},
      {A::FLOATS, "a list of floats"},
      {A::INTS, "a list of ints"},
      {A::STRINGS, "a list of strings"},
      {A::TENSORS, "a list of tensors"},
      {A::GRAPHS, "a list of graphs"}};
  for (const auto &[t, name] : names)
    if (t == type)
      return name;
  return "of type " + std::to_string(type);
}

/// The type of `a`: its `type` field, or, when that is UNDEFINED (models
/// of IR version 1 leave it out), the one value field that is set;
/// UNDEFINED when none or several are.
static int attributeType(const onnx::AttributeProto &a) {
  using A = onnx::AttributeProto;
  if (a.type() != A::UNDEFINED)
    return a.type();
  int found = A::UNDEFINED, count = 0;
  auto note = [&](bool set, int t) {
    if (set)
      found = t, ++count;
  };
  note(a.has_f(), A::FLOAT);
  note(a.has_i(), A::INT);
  note(a.has_s(), A::STRING);
  note(a.has_t(), A::TENSOR);
  note(a.has_g(), A::GRAPH);
  note(a.floats_size() > 0, A::FLOATS);
  note(a.ints_size() > 0, A::INTS);
  note(a.strings_size() > 0, A::STRINGS);
  note(a.tensors_size() > 0, A::TENSORS);
  note(a.graphs_size() > 0, A::GRAPHS);
  return count == 1 ? found : A::UNDEFINED;
}

/// The attribute `name` when it has type `type`. One of another type (a
/// float where an int is read) records an invalid-model error, which the
/// node's import reports, and reads as absent: the schema check covers the
/// ops the ONNX library knows, this the others.
const onnx::AttributeProto *
NodeContext::typedAttr(StringRef name,
                       onnx::AttributeProto::AttributeType type) const {
  const auto *a = attr(name);
  int got = a ? attributeType(*a) : type;
  if (got == type)
    return a;
  (void)importer.fail(
      ImportErrorKind::Invalid,
      "invalid model: op " + describe() + ": attribute '" + name + "' " +
          (got == onnx::AttributeProto::UNDEFINED
               ? std::string("has no type and no single value")
               : "is " + attributeTypeName(got)) +
          "; " + node.op_type() + " takes " + attributeTypeName(type));
  return nullptr;
}

int64_t NodeContext::attrInt(StringRef name, int64_t dflt) const {
  const auto *a = typedAttr(name, onnx::AttributeProto::INT);
  return a ? a->i() : dflt;
}
bool NodeContext::attrFlag(StringRef name, bool dflt) const {
  const auto *a = typedAttr(name, onnx::AttributeProto::INT);
  if (!a)
    return dflt;
  if (a->i() != 0 && a->i() != 1)
    (void)importer.fail(ImportErrorKind::Invalid,
                        "invalid model: op " + describe() + ": attribute '" +
                            name + "' is " + std::to_string(a->i()) +
                            "; it must be 0 or 1");
  return a->i() != 0;
}
float NodeContext::attrFloat(StringRef name, float dflt) const {
  const auto *a = typedAttr(name, onnx::AttributeProto::FLOAT);
  return a ? a->f() : dflt;
}
std::string NodeContext::attrString(StringRef name, StringRef dflt) const {
  const auto *a = typedAttr(name, onnx::AttributeProto::STRING);
  return a ? a->s() : dflt.str();
}
SmallVector<int64_t> NodeContext::attrInts(StringRef name) const {
  SmallVector<int64_t> out;
  if (const auto *a = typedAttr(name, onnx::AttributeProto::INTS))
    out.assign(a->ints().begin(), a->ints().end());
  return out;
}
SmallVector<float> NodeContext::attrFloats(StringRef name) const {
  SmallVector<float> out;
  if (const auto *a = typedAttr(name, onnx::AttributeProto::FLOATS))
    out.assign(a->floats().begin(), a->floats().end());
  return out;
}

/// Fails (an invalid-model error naming the node) for an output shape
/// whose element count overflows or exceeds kMaxTensorElements: a malformed
/// Reshape target would otherwise wrap around and pass later size checks.
static LogicalResult checkOutputShape(NodeContext &ctx, int i,
                                      ArrayRef<int64_t> shape) {
  if (checkedNumElements(shape))
    return success();
  return ctx.invalid("output #" + Twine(i) + " would have shape " +
                     shapeString(shape) + ", more than 2^40 elements");
}

void NodeContext::setOutput(int i, TValue v) {
  if (!hasOutput(i) || failed(checkOutputShape(*this, i, v.shape())))
    return;
  bool stash = node.op_type() == "LayerNormalization" && i > 0;
  if (halfDType != kUndefined && v.dtype == kFloat && !stash) {
    Type half = importer.elementType(halfDType);
    v = {buildElementwise(builder(), loc(), v.value, v.shape(), half,
                          [&](OpBuilder &b, Location l, ValueRange a) -> Value {
                            return arith::TruncFOp::create(b, l, half, a[0]);
                          }),
         halfDType};
  }
  importer.values[node.output(i)] = v;
}

LogicalResult NodeContext::setConstOutput(int i, DenseElementsAttr attr,
                                          int32_t dtype) {
  if (!hasOutput(i))
    return success();
  if (failed(checkOutputShape(
          *this, i, cast<RankedTensorType>(attr.getType()).getShape())))
    return failure();
  importer.constants[node.output(i)] = {attr, dtype};
  importer.values.erase(node.output(i));
  return success();
}

std::string NodeContext::describe() const {
  return ("'" + node.op_type() + "' (node '" + node.name() + "', domain '" +
          node.domain() + "', opset " + std::to_string(opset) + ")");
}

LogicalResult NodeContext::unsupported(const Twine &why) {
  return importer.fail(ImportErrorKind::Unsupported,
                       "unsupported: op " + describe() + ": " + why);
}

LogicalResult NodeContext::invalid(const Twine &why) {
  return importer.fail(ImportErrorKind::Invalid,
                       "invalid model: op " + describe() + ": " + why);
}

LogicalResult NodeContext::checkAttrs(std::initializer_list<StringRef> known) {
  for (const auto &a : node.attribute())
    if (!llvm::is_contained(known, StringRef(a.name())))
      return unsupported("attribute '" + a.name() + "' is not supported");
  return success();
}

//===----------------------------------------------------------------------===//
// GraphImporter
//===----------------------------------------------------------------------===//

GraphImporter::GraphImporter(MLIRContext &context, const ImportOptions &options,
                             ImportError &error)
    : context(context), options(options), error(error), builder(&context),
      loc(UnknownLoc::get(&context)) {}

LogicalResult GraphImporter::fail(ImportErrorKind kind, const Twine &message) {
  if (error.kind == ImportErrorKind::None) {
    error.kind = kind;
    // Names in a model are arbitrary bytes; the message is one line of
    // valid UTF-8 (Python decodes it).
    error.message = printableText(message.str());
  }
  return failure();
}

std::string printableText(StringRef text) {
  std::string out;
  const auto *p = reinterpret_cast<const llvm::UTF8 *>(text.data());
  const auto *end = p + text.size();
  while (p < end) {
    unsigned n = llvm::getNumBytesForUTF8(*p);
    if (*p >= 0x20 && *p != 0x7f && n <= static_cast<unsigned>(end - p) &&
        llvm::isLegalUTF8Sequence(p, p + n)) {
      out.append(reinterpret_cast<const char *>(p), n);
      p += n;
      continue;
    }
    out += llvm::formatv("\\x{0:x-2}", static_cast<unsigned>(*p)).str();
    ++p;
  }
  return out;
}

Type GraphImporter::elementType(int32_t dtype) {
  MLIRContext *ctx = &context;
  const DTypeInfo *info = lookupDType(dtype);
  if (!info)
    return nullptr;
  if (info->kind != DTypeKind::Float)
    return IntegerType::get(ctx, info->bits); // signless; TValue::dtype
  if (dtype == kBFloat16)
    return BFloat16Type::get(ctx);
  return info->bits == 16   ? Type(Float16Type::get(ctx))
         : info->bits == 32 ? Type(Float32Type::get(ctx))
                            : Type(Float64Type::get(ctx));
}

TValue GraphImporter::materialize(StringRef name) {
  auto it = constants.find(name);
  assert(it != constants.end() && "value neither imported nor constant");
  OpBuilder::InsertionGuard guard(builder);
  Value v = arith::ConstantOp::create(builder, loc, it->second.first);
  TValue tv{v, it->second.second};
  values[name] = tv;
  return tv;
}

/// Resolves an external-data location relative to the model folder and
/// refuses anything that escapes it.
static FailureOr<std::string> resolveExternalPath(const std::string &modelDir,
                                                  const std::string &location,
                                                  std::string &why) {
  if (location.empty()) {
    why = "empty external data location";
    return failure();
  }
  if (llvm::sys::path::is_absolute(location)) {
    why = "external data location '" + location +
          "' is an absolute path; it must be relative to the model's folder";
    return failure();
  }
  for (auto it = llvm::sys::path::begin(location),
            e = llvm::sys::path::end(location);
       it != e; ++it) {
    if (*it == "..") {
      why = "external data location '" + location +
            "' contains '..'; it must stay inside the model's folder";
      return failure();
    }
  }
  if (modelDir.empty()) {
    why = "model has external data but was not loaded from a file";
    return failure();
  }
  SmallString<256> full(modelDir);
  llvm::sys::path::append(full, location);
  SmallString<256> realDir, realFile;
  if (llvm::sys::fs::real_path(modelDir, realDir) ||
      llvm::sys::fs::real_path(full, realFile)) {
    why = "external data file '" + std::string(full) + "' not found";
    return failure();
  }
  std::string dirPrefix = std::string(realDir) + "/";
  if (StringRef(realFile).str().rfind(dirPrefix, 0) != 0) {
    why = "external data location '" + location +
          "' resolves outside the model's folder (symlink?)";
    return failure();
  }
  // A hard link has no "outside": the same file may also be linked from
  // anywhere else, so, as onnx >= 1.20 does, a file with more than one link
  // is refused. So is anything but a regular file (a FIFO would block, a
  // device would read without end).
  struct stat st;
  if (::stat(realFile.c_str(), &st) != 0) {
    why = "external data file '" + std::string(full) + "' not found";
    return failure();
  }
  if (!S_ISREG(st.st_mode)) {
    why = "external data location '" + location + "' is not a regular file";
    return failure();
  }
  if (st.st_nlink > 1) {
    why = "external data file '" + location + "' has " +
          std::to_string(st.st_nlink) +
          " hard links; a hard link may point at a file outside the model's "
          "folder, so only files with one link are read (copy the data "
          "instead of linking it)";
    return failure();
  }
  return std::string(realFile);
}

FailureOr<DenseElementsAttr>
GraphImporter::tensorToAttr(const onnx::TensorProto &t,
                            const std::string &what) {
  int32_t dtype = t.data_type();
  Type elem = elementType(dtype);
  if (!elem) {
    (void)fail(ImportErrorKind::Unsupported, "unsupported: " + what + " '" +
                                                 t.name() + "' has dtype " +
                                                 dtypeName(dtype));
    return failure();
  }
  SmallVector<int64_t> shape(t.dims().begin(), t.dims().end());
  for (int64_t d : shape)
    if (d < 0) {
      (void)fail(ImportErrorKind::Invalid, "invalid model: " + what + " '" +
                                               t.name() +
                                               "' has a negative dimension");
      return failure();
    }
  if (!checkedNumElements(shape)) {
    (void)fail(ImportErrorKind::Invalid,
               "invalid model: " + what + " '" + t.name() + "' has shape " +
                   shapeString(shape) + ", more than 2^40 elements");
    return failure();
  }
  auto type = RankedTensorType::get(shape, elem);
  int64_t n = numElements(shape);
  size_t elemBytes = dtype == kBool ? 1 : (elem.getIntOrFloatBitWidth() / 8);

  std::string raw;
  bool haveRaw = false;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto &kv : t.external_data()) {
      if (kv.key() == "location") {
        location = kv.value();
        continue;
      }
      if (kv.key() != "offset" && kv.key() != "length")
        continue;
      // Decimal byte counts (onnx.proto: "offset", "length").
      int64_t v = 0;
      if (StringRef(kv.value()).getAsInteger(10, v) || v < 0) {
        (void)fail(ImportErrorKind::Invalid,
                   "invalid model: " + what + " '" + t.name() +
                       "': external data " + kv.key() + " '" + kv.value() +
                       "' is not a byte count");
        return failure();
      }
      (kv.key() == "offset" ? offset : length) = v;
    }
    std::string why;
    auto path = resolveExternalPath(options.modelDir, location, why);
    if (failed(path)) {
      (void)fail(ImportErrorKind::Invalid,
                 "invalid model: " + what + " '" + t.name() + "': " + why);
      return failure();
    }
    auto buf = llvm::MemoryBuffer::getFile(*path, /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
    if (!buf) {
      (void)fail(ImportErrorKind::Invalid, "invalid model: cannot read " +
                                               *path + " for " + what + " '" +
                                               t.name() + "'");
      return failure();
    }
    StringRef all = (*buf)->getBuffer();
    if (length < 0)
      length = static_cast<int64_t>(all.size()) - offset;
    if (offset > static_cast<int64_t>(all.size()) ||
        length > static_cast<int64_t>(all.size()) - offset) {
      (void)fail(ImportErrorKind::Invalid,
                 "invalid model: external data for '" + t.name() +
                     "' lies beyond the end of " + *path);
      return failure();
    }
    raw = all.substr(offset, length).str();
    haveRaw = true;
  } else if (t.has_raw_data()) {
    raw = t.raw_data();
    haveRaw = true;
  }

  if (haveRaw) {
    if (static_cast<int64_t>(raw.size()) !=
        n * static_cast<int64_t>(elemBytes)) {
      (void)fail(ImportErrorKind::Invalid,
                 "invalid model: " + what + " '" + t.name() + "' holds " +
                     Twine(raw.size()) + " bytes, expected " +
                     Twine(n * elemBytes));
      return failure();
    }
    if (dtype == kBool) {
      SmallVector<bool> bits;
      for (char c : raw)
        bits.push_back(c != 0);
      return DenseElementsAttr::get(type, ArrayRef<bool>(bits));
    }
    return DenseElementsAttr::getFromRawBuffer(
        type, ArrayRef<char>(raw.data(), raw.size()));
  }

  // Typed fields (onnx.proto: which field holds which dtype).
  auto sizeError = [&](int64_t got) -> FailureOr<DenseElementsAttr> {
    (void)fail(ImportErrorKind::Invalid,
               "invalid model: " + what + " '" + t.name() + "' holds " +
                   Twine(got) + " values, expected " + Twine(n));
    return failure();
  };
  switch (dtype) {
  case kFloat: {
    if (t.float_data_size() != n)
      return sizeError(t.float_data_size());
    SmallVector<float> v(t.float_data().begin(), t.float_data().end());
    return DenseElementsAttr::get(type, ArrayRef<float>(v));
  }
  case kDouble: {
    if (t.double_data_size() != n)
      return sizeError(t.double_data_size());
    SmallVector<double> v(t.double_data().begin(), t.double_data().end());
    return DenseElementsAttr::get(type, ArrayRef<double>(v));
  }
  case kInt64: {
    if (t.int64_data_size() != n)
      return sizeError(t.int64_data_size());
    SmallVector<int64_t> v(t.int64_data().begin(), t.int64_data().end());
    return DenseElementsAttr::get(type, ArrayRef<int64_t>(v));
  }
  case kUInt32:
  case kUInt64: {
    if (t.uint64_data_size() != n)
      return sizeError(t.uint64_data_size());
    SmallVector<APInt> v;
    for (uint64_t x : t.uint64_data())
      v.push_back(APInt(elem.getIntOrFloatBitWidth(), x, /*isSigned=*/false,
                        /*implicitTrunc=*/true));
    return DenseElementsAttr::get(type, v);
  }
  case kBool: {
    if (t.int32_data_size() != n)
      return sizeError(t.int32_data_size());
    SmallVector<bool> v;
    for (int32_t x : t.int32_data())
      v.push_back(x != 0);
    return DenseElementsAttr::get(type, ArrayRef<bool>(v));
  }
  case kFloat16:
  case kBFloat16: {
    if (t.int32_data_size() != n)
      return sizeError(t.int32_data_size());
    SmallVector<APFloat> v;
    for (int32_t x : t.int32_data())
      v.push_back(APFloat(cast<FloatType>(elem).getFloatSemantics(),
                          APInt(16, static_cast<uint16_t>(x))));
    return DenseElementsAttr::get(type, v);
  }
  default: {
    // INT32, INT16, INT8, UINT16, UINT8 are stored in int32_data.
    if (t.int32_data_size() != n)
      return sizeError(t.int32_data_size());
    SmallVector<APInt> v;
    for (int32_t x : t.int32_data())
      v.push_back(APInt(elem.getIntOrFloatBitWidth(), static_cast<int64_t>(x),
                        /*isSigned=*/true, /*implicitTrunc=*/true));
    return DenseElementsAttr::get(type, v);
  }
  }
}

static const OpRegistry &getRegistry() {
  static OpRegistry registry = [] {
    OpRegistry r;
    registerElementwiseOps(r);
    registerMatMulOps(r);
    registerConvOps(r);
    registerNormalizationOps(r);
    registerReductionOps(r);
    registerShapeOps(r);
    registerMovementOps(r);
    registerResizeOps(r);
    registerAttentionOps(r);
    registerIndexingOps(r);
    registerGridSampleOps(r);
    return r;
  }();
  return registry;
}

} // namespace onnx_import

using namespace onnx_import;

std::vector<std::string> supportedONNXOpTypes() {
  return getRegistry().opTypes();
}

/// The ONNX type name of a dtype ("float", "int64", ...; onnx.proto's
/// TensorProto.DataType, as schemas spell them in "tensor(float)"): NumPy's
/// names but for float and double.
static std::string onnxTypeName(int32_t dtype) {
  return dtype == kFloat    ? "float"
         : dtype == kDouble ? "double"
                            : dtypeName(dtype);
}

/// The first opset of an op ddpc imports: the since_version of its oldest
/// schema. The 1.12 library knows ops up to opset 17; those added later
/// are listed (from ONNX 1.22's operator history; test_op_edge_cases.py
/// checks every imported op against it). 0 for an op neither knows.
static int64_t firstOpsetOf(llvm::StringRef op) {
  int64_t newer =
      llvm::StringSwitch<int64_t>(op)
          .Cases(
              {"BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "Mish"},
              18)
          .Case("Gelu", 20)
          .Cases({"Attention", "RMSNormalization", "RotaryEmbedding"}, 23)
          .Case("CumProd", 26)
          .Default(0);
  if (newer)
    return newer;
  const onnx::OpSchema *newest =
      onnx::OpSchemaRegistry::Schema(op.str(), 1 << 20, "");
  if (!newest)
    return 0;
  int64_t first = newest->since_version();
  while (first > 1) {
    const onnx::OpSchema *older =
        onnx::OpSchemaRegistry::Schema(op.str(), first - 1, "");
    if (!older)
      break;
    first = older->since_version();
  }
  return first;
}

/// The node's input and output counts against the op's schema for its
/// opset (the ONNX library's, newest version <= the node's opset): at least
/// min_input and at most max_input inputs, required (non-optional) inputs
/// not empty, at most max_output outputs. The importers index their inputs
/// by position and rely on it. The 1.12 library knows opsets up to 17;
/// for a newer node only the lower bound of its newest schema is checked
/// (later versions added inputs and outputs, all optional), and an op it
/// does not know (Gelu) needs one input.
static LogicalResult checkArity(NodeContext &ctx) {
  constexpr int64_t kNewestLibraryOpset = 17;
  const onnx::NodeProto &node = ctx.node;
  int n = node.input_size();
  const onnx::OpSchema *schema = onnx::OpSchemaRegistry::Schema(
      node.op_type(), static_cast<int>(ctx.opset), "");
  if (!schema) {
    // An op used before its first opset is not in the model's opset.
    int64_t first = firstOpsetOf(node.op_type());
    if (ctx.opset < first)
      return ctx.invalid(node.op_type() + " is not part of opset " +
                         Twine(ctx.opset) + " (it was added in opset " +
                         Twine(first) + ")");
    return n >= 1 && !node.input(0).empty() && node.output_size() >= 1
               ? success()
               : ctx.invalid("needs at least one input and one output");
  }
  bool exact = ctx.opset <= kNewestLibraryOpset;
  // Attributes: each one the schema lists has the schema's type (Softmax's
  // axis = 1.5 was read as the default), and required ones are present
  // (no attribute's type or requiredness changed after opset 17).
  // An attribute given twice, or one the op does not have (at opsets the
  // library describes exactly), is refused as the ONNX checker does.
  llvm::StringSet<> seen;
  for (const auto &a : node.attribute()) {
    if (!seen.insert(a.name()).second)
      return ctx.invalid("attribute '" + a.name() + "' is given twice");
    auto it = schema->attributes().find(a.name());
    if (it == schema->attributes().end()) {
      if (exact)
        return ctx.invalid("has no attribute '" + a.name() + "' at opset " +
                           Twine(ctx.opset));
      continue;
    }
    int got = attributeType(a);
    if (got != it->second.type)
      return ctx.invalid("attribute '" + a.name() + "' " +
                         (got == onnx::AttributeProto::UNDEFINED
                              ? std::string("has no type and no single value")
                              : "is " + attributeTypeName(got)) +
                         "; " + node.op_type() + " takes " +
                         attributeTypeName(it->second.type));
  }
  for (const auto &[name, formalAttr] : schema->attributes())
    if (formalAttr.required && !ctx.hasAttr(name))
      return ctx.invalid("required attribute '" + name + "' is missing");
  // Past opset 17 only these ops took more inputs (all optional):
  // Pad's axes and the Reduce ops' axes at 18, DFT's dft_length at 20.
  int maxIn = schema->max_input();
  if (!exact) {
    StringRef op = node.op_type();
    if (op == "Pad")
      maxIn = 4;
    else if (op.starts_with("Reduce"))
      maxIn = 2;
    else if (op == "DFT" && ctx.opset >= 20)
      maxIn = 3;
  }
  if (n < schema->min_input() || n > maxIn)
    return ctx.invalid("has " + Twine(n) + " input(s); " + node.op_type() +
                       " (opset " +
                       Twine(exact ? schema->since_version() : ctx.opset) +
                       ") takes " + Twine(schema->min_input()) +
                       (maxIn == schema->min_input() ? std::string()
                        : maxIn == std::numeric_limits<int>::max()
                            ? " or more"
                            : " to " + std::to_string(maxIn)));
  const auto &formal = schema->inputs();
  int checked = exact ? n : schema->min_input();
  for (int i = 0; i < checked; ++i) {
    size_t f = std::min<size_t>(i, formal.empty() ? 0 : formal.size() - 1);
    bool optional =
        formal.empty() || formal[f].GetOption() ==
                              onnx::OpSchema::FormalParameterOption::Optional;
    if (!optional && node.input(i).empty())
      return ctx.invalid(
          "required input #" + Twine(i) + " ('" +
          (formal.empty() ? std::string() : formal[f].GetName()) +
          "') is empty");
  }
  // Importers define their outputs by position, and a node without its
  // required outputs (a variadic Sum with none) would make them read past
  // the list.
  if (node.output_size() < std::max(1, schema->min_output()))
    return ctx.invalid("has " + Twine(node.output_size()) +
                       " output(s); it needs at least " +
                       Twine(std::max(1, schema->min_output())));
  if (node.output_size() > schema->max_output())
    return ctx.invalid("has " + Twine(node.output_size()) +
                       " outputs; it has at most " +
                       Twine(schema->max_output()));
  // Element types: inputs bound to one type parameter ("T") share a dtype,
  // and (up to opset 17) each dtype is one its constraint allows.
  llvm::StringMap<std::pair<int32_t, int>> bound; // param -> (dtype, input)
  for (int i = 0; i < n; ++i) {
    if (formal.empty() || node.input(i).empty())
      continue;
    // Inputs past the formal list belong to its last one if it is variadic;
    // else they are inputs of a newer version than the library knows.
    bool variadic = formal.back().GetOption() ==
                    onnx::OpSchema::FormalParameterOption::Variadic;
    if (static_cast<size_t>(i) >= formal.size() && !variadic)
      continue;
    const auto &param = formal[std::min<size_t>(i, formal.size() - 1)];
    const std::string &name = node.input(i);
    int32_t dtype = kUndefined;
    if (auto v = ctx.importer.values.find(name); v != ctx.importer.values.end())
      dtype = v->second.dtype;
    else if (auto c = ctx.importer.constants.find(name);
             c != ctx.importer.constants.end())
      dtype = c->second.second;
    if (dtype == kUndefined)
      continue;
    std::string typeStr = param.GetTypeStr();
    // The 1.12 library binds GridSample's grid to T1, X's parameter; the
    // spec (since opset 16) gives it its own, T2 (float X, double grid).
    if (node.op_type() == "GridSample" && i == 1)
      typeStr = "T2";
    auto [it, fresh] = bound.try_emplace(typeStr, dtype, i);
    if (!fresh && it->second.first != dtype)
      return ctx.invalid("inputs #" + Twine(it->second.second) + " ('" +
                         node.input(it->second.second) + "', " +
                         dtypeName(it->second.first) + ") and #" + Twine(i) +
                         " ('" + name + "', " + dtypeName(dtype) +
                         ") must have the same element type (" + typeStr + ")");
    // Versions past the library's added types (bool to ReduceMax at 20,
    // the 8-bit floats): there the importers check their own.
    if (!exact)
      continue;
    std::string want = std::string("tensor(") + onnxTypeName(dtype) + ")";
    bool allowed = typeStr == want;
    for (const auto &tc : schema->typeConstraintParams())
      if (tc.type_param_str == typeStr)
        allowed = llvm::is_contained(tc.allowed_type_strs, want);
    if (!allowed)
      return ctx.invalid("input #" + Twine(i) + " ('" + name + "') has type " +
                         want + ", which " + node.op_type() + " (opset " +
                         Twine(schema->since_version()) +
                         ") does not take there");
  }
  return success();
}

/// Binds every dimension of a graph input; fills `shape` or reports which
/// dimension is unbound.
static LogicalResult bindInputShape(GraphImporter &gi,
                                    const onnx::ValueInfoProto &vi,
                                    SmallVectorImpl<int64_t> &shape) {
  const auto &tt = vi.type().tensor_type();
  if (!tt.has_shape())
    return gi.fail(ImportErrorKind::Invalid,
                   "graph input '" + vi.name() +
                       "' has no shape; ddpc needs static shapes");
  for (int i = 0; i < tt.shape().dim_size(); ++i) {
    const auto &d = tt.shape().dim(i);
    if (d.has_dim_value() && d.dim_value() >= 0) {
      shape.push_back(d.dim_value());
      continue;
    }
    if (d.has_dim_param()) {
      auto it = gi.options.dims.find(d.dim_param());
      if (it != gi.options.dims.end()) {
        if (i == 0 && gi.options.batchSize &&
            *gi.options.batchSize != it->second)
          return gi.fail(ImportErrorKind::Invalid,
                         "--batch-size " + Twine(*gi.options.batchSize) +
                             " conflicts with --dim " + d.dim_param() + "=" +
                             Twine(it->second) +
                             " (the leading dimension "
                             "of graph input '" +
                             vi.name() + "'); give one of them");
        shape.push_back(it->second);
        continue;
      }
      auto bound = gi.batchDims.find(d.dim_param());
      if (bound != gi.batchDims.end()) {
        shape.push_back(bound->second);
        continue;
      }
    }
    if (i == 0 && gi.options.batchSize) {
      shape.push_back(*gi.options.batchSize);
      if (d.has_dim_param())
        gi.batchDims[d.dim_param()] = *gi.options.batchSize;
      continue;
    }
    std::string param = d.has_dim_param() ? d.dim_param() : "";
    return gi.fail(ImportErrorKind::Invalid,
                   "graph input '" + vi.name() + "' dimension " + Twine(i) +
                       (param.empty() ? std::string(" is unknown")
                                      : " ('" + param + "') is unbound") +
                       ": pass --dim " + (param.empty() ? "NAME" : param) +
                       "=VALUE" + (i == 0 ? " or --batch-size N" : ""));
  }
  return success();
}

/// Runs the ONNX library's checker and shape inference where the 1.12
/// library supports the model (IR version <= 8, default-domain opset <= 17).
/// Shape inference results are only advisory: ddpc computes every shape
/// itself, and newer models are imported without these checks.
static LogicalResult runOnnxChecks(GraphImporter &gi, onnx::ModelProto &model,
                                   int64_t opset) {
  if (!gi.options.runChecker || model.ir_version() > 8 || opset > 17)
    return success();
  bool hasExternal = false;
  for (const auto &t : model.graph().initializer())
    hasExternal |= t.data_location() == onnx::TensorProto::EXTERNAL;
  if (hasExternal)
    return success(); // the checker would need the model path
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception &e) {
    std::string msg = e.what();
    auto nl = msg.find('\n');
    if (nl != std::string::npos)
      msg = msg.substr(0, nl);
    return gi.fail(ImportErrorKind::Invalid,
                   "invalid model: ONNX checker: " + msg);
  }
  return success();
}

/// The shape options checked against the graph: --batch-size must change
/// some graph input's leading dimension (`argInfos`: the non-initializer
/// inputs), every --dim must name a symbolic dimension and every
/// --bind-input a graph input. Fails through `gi.fail`.
static LogicalResult
checkShapeOptions(GraphImporter &gi, const onnx::GraphProto &graph,
                  const ImportOptions &options,
                  ArrayRef<const onnx::ValueInfoProto *> argInfos) {
  // --batch-size must change something: when every graph input's leading
  // dimension is a fixed number, a different value would be silently
  // ignored (and the per-rank batch of a training program not the one
  // asked for).
  if (options.batchSize && !argInfos.empty()) {
    bool anyFree = false;
    std::string fixed;
    for (const onnx::ValueInfoProto *vi : argInfos) {
      const auto &dims = vi->type().tensor_type().shape().dim();
      if (dims.empty())
        continue;
      if (!dims[0].has_dim_value() || dims[0].dim_value() < 0)
        anyFree = true;
      else if (dims[0].dim_value() != *options.batchSize && fixed.empty())
        fixed =
            "'" + vi->name() + "' has " + std::to_string(dims[0].dim_value());
    }
    if (!anyFree && !fixed.empty()) {
      (void)gi.fail(ImportErrorKind::Invalid,
                    "--batch-size " + Twine(*options.batchSize) +
                        " cannot apply: the leading dimension of every graph "
                        "input is fixed (" +
                        fixed +
                        "); drop --batch-size, or re-export the model with "
                        "a symbolic batch dimension");
      return failure();
    }
  }

  // Every --dim must name a symbolic dimension of some graph input.
  for (const auto &kv : options.dims) {
    bool found = false;
    for (const auto &vi : graph.input())
      for (const auto &d : vi.type().tensor_type().shape().dim())
        found |= d.has_dim_param() && d.dim_param() == kv.first;
    if (!found) {
      (void)gi.fail(ImportErrorKind::Invalid,
                    "--dim " + kv.first +
                        ": no graph input has a symbolic dimension of that "
                        "name");
      return failure();
    }
  }
  for (const auto &kv : options.boundInputs) {
    bool found = false;
    for (const auto &vi : graph.input())
      found |= vi.name() == kv.first;
    if (!found) {
      (void)gi.fail(ImportErrorKind::Invalid,
                    "--bind-input " + kv.first +
                        ": the graph has no input of that name");
      return failure();
    }
  }
  return success();
}

/// Parses `bytes` into `model` and finds its default-domain opset; runs the
/// ONNX checker. Fails (error set) for an empty file, a protobuf that is not
/// a ModelProto, a model without a graph or an opset newer than ONNX 1.22's.
static LogicalResult parseModel(GraphImporter &gi, const std::string &bytes,
                                onnx::ModelProto &model, int64_t &opset) {
  if (bytes.empty()) {
    (void)gi.fail(ImportErrorKind::Invalid, "invalid model: the file is empty");
    return failure();
  }
  if (!model.ParseFromString(bytes)) {
    (void)gi.fail(ImportErrorKind::Invalid,
                  "invalid model: not an ONNX ModelProto (protobuf parse "
                  "failed)");
    return failure();
  }
  if (!model.has_graph() ||
      (model.graph().node_size() == 0 && model.graph().output_size() == 0)) {
    (void)gi.fail(ImportErrorKind::Invalid,
                  "invalid model: the model has no graph (is this an ONNX "
                  "file?)");
    return failure();
  }
  opset = -1;
  for (const auto &o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx")
      opset = o.version();
  if (opset < 0) {
    // Only other domains are imported (nodes of those are reported as
    // unsupported by name); very old models carry no opset_import at all.
    if (model.opset_import_size() == 0 && model.ir_version() < 3)
      opset = 1;
  }
  // The newest default-domain opset of ONNX 1.22, whose operator
  // definitions the importer follows; a newer one may change them.
  constexpr int64_t kNewestOpset = 27;
  if (opset > kNewestOpset) {
    (void)gi.fail(ImportErrorKind::Unsupported,
                  "unsupported: the model's opset " + Twine(opset) +
                      " is newer than the newest ONNX opset ddpc knows (" +
                      Twine(kNewestOpset) +
                      ", ONNX 1.22); export the model with opset <= " +
                      Twine(kNewestOpset));
    return failure();
  }
  return runOnnxChecks(gi, model, opset);
}

/// Makes the initializers constants of `gi` and lists their names, shapes,
/// dtypes and sizes (bytes) on the module (attrs::kInitializers).
static LogicalResult importInitializers(GraphImporter &gi,
                                        const onnx::GraphProto &graph,
                                        ModuleOp module,
                                        llvm::StringSet<> &initNames) {
  OpBuilder &b = gi.builder;
  // Initializers are constants; their names and sizes go on the module for
  // the plan report (and, in training programs, parameter selection).
  SmallVector<Attribute> initInfo;
  for (const auto &t : graph.initializer()) {
    auto attr = gi.tensorToAttr(t, "initializer");
    if (failed(attr))
      return failure();
    gi.constants[t.name()] = {*attr, t.data_type()};
    initNames.insert(t.name());
    auto type = cast<RankedTensorType>(attr->getType());
    int64_t bytes = type.getNumElements() *
                    std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
    initInfo.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("name", b.getStringAttr(t.name())),
         b.getNamedAttr("shape", b.getDenseI64ArrayAttr(type.getShape())),
         b.getNamedAttr("dtype", b.getI32IntegerAttr(t.data_type())),
         b.getNamedAttr("bytes", b.getI64IntegerAttr(bytes))}));
  }
  module->setAttr(attrs::kInitializers, b.getArrayAttr(initInfo));

  return success();
}

/// Checks the --bind-input value `bt` against graph input `vi` (dtype,
/// shape) and makes it a constant of `gi`.
static LogicalResult bindInputValue(GraphImporter &gi,
                                    const onnx::ValueInfoProto &vi,
                                    const ImportOptions::BoundTensor &bt) {
  // A compile-time value for this input: check it, make it a constant.
  int32_t declared = vi.type().tensor_type().elem_type();
  // .npy has no bfloat16: its raw bits come as uint16, as for a
  // program's --input.
  if (declared != bt.dtype && !(declared == kBFloat16 && bt.dtype == kUInt16)) {
    (void)gi.fail(ImportErrorKind::Invalid,
                  "--bind-input " + vi.name() + ": value has dtype " +
                      dtypeName(bt.dtype) + ", the graph input is " +
                      dtypeName(declared));
    return failure();
  }
  const auto &shp = vi.type().tensor_type().shape();
  bool shapeOk = !vi.type().tensor_type().has_shape() ||
                 shp.dim_size() == (int)bt.shape.size();
  for (int i = 0; shapeOk && i < shp.dim_size(); ++i)
    if (shp.dim(i).has_dim_value() && shp.dim(i).dim_value() != bt.shape[i])
      shapeOk = false;
  if (!shapeOk) {
    // The graph input's dims as declared: numbers, names or '?'.
    std::string declared = "[";
    for (int i = 0; i < shp.dim_size(); ++i)
      declared += (i ? ", " : "") +
                  (shp.dim(i).has_dim_value()
                       ? std::to_string(shp.dim(i).dim_value())
                       : (shp.dim(i).has_dim_param() ? shp.dim(i).dim_param()
                                                     : std::string("?")));
    declared += "]";
    (void)gi.fail(ImportErrorKind::Invalid,
                  "--bind-input " + vi.name() + ": the value's shape " +
                      shapeString(bt.shape) +
                      " does not match the graph input's " + declared);
    return failure();
  }
  onnx::TensorProto t;
  t.set_name(vi.name());
  t.set_data_type(declared);
  for (int64_t d : bt.shape)
    t.add_dims(d);
  t.set_raw_data(bt.data);
  auto attr = gi.tensorToAttr(t, "bound input");
  if (failed(attr))
    return failure();
  gi.constants[vi.name()] = {*attr, declared};
  return success();
}

/// The graph inputs that become arguments (not initializers, not bound by
/// --bind-input): their types in `argTypes`, their ValueInfos in `argInfos`.
static LogicalResult
importGraphInputs(GraphImporter &gi, const onnx::GraphProto &graph,
                  const ImportOptions &options,
                  const llvm::StringSet<> &initNames,
                  SmallVectorImpl<Type> &argTypes,
                  SmallVectorImpl<const onnx::ValueInfoProto *> &argInfos) {
  {
    llvm::StringSet<> seen;
    for (const auto &vi : graph.input())
      if (!seen.insert(vi.name()).second && !initNames.contains(vi.name())) {
        (void)gi.fail(ImportErrorKind::Invalid, "invalid model: graph input '" +
                                                    vi.name() +
                                                    "' is listed twice");
        return failure();
      }
  }
  for (const auto &vi : graph.input()) {
    if (initNames.contains(vi.name()))
      continue;
    auto bound = options.boundInputs.find(vi.name());
    if (bound != options.boundInputs.end()) {
      if (failed(bindInputValue(gi, vi, bound->second)))
        return failure();
      continue;
    }
    if (!vi.type().has_tensor_type()) {
      (void)gi.fail(ImportErrorKind::Unsupported,
                    "unsupported: graph input '" + vi.name() +
                        "' is not a tensor (sequence, map and optional "
                        "inputs are not supported)");
      return failure();
    }
    int32_t dtype = vi.type().tensor_type().elem_type();
    Type elem = gi.elementType(dtype);
    if (!elem) {
      (void)gi.fail(ImportErrorKind::Unsupported,
                    "unsupported: graph input '" + vi.name() + "' has dtype " +
                        dtypeName(dtype));
      return failure();
    }
    SmallVector<int64_t> shape;
    if (failed(bindInputShape(gi, vi, shape)))
      return failure();
    if (!checkedNumElements(shape)) {
      (void)gi.fail(ImportErrorKind::Invalid, "invalid model: graph input '" +
                                                  vi.name() + "' has shape " +
                                                  shapeString(shape) +
                                                  ", more than 2^40 elements");
      return failure();
    }
    // Zero-size tensors compile for inference (MLIR's static shapes allow
    // them); a training step has no use for them.
    if (numElements(shape) == 0 && options.parameterize) {
      (void)gi.fail(ImportErrorKind::Unsupported,
                    "unsupported: graph input '" + vi.name() +
                        "' has zero elements (zero-size tensors are not "
                        "supported in training)");
      return failure();
    }
    argTypes.push_back(RankedTensorType::get(shape, elem));
    argInfos.push_back(&vi);
  }

  return success();
}

/// Creates the function: the graph-input arguments, then (training) the
/// parameter and buffer arguments selected from the float initializers
/// (their initial values into options.initialValues), then the Dropout rng
/// {seed, rank}; names, dtypes and roles on the arguments.
static LogicalResult
createFunction(GraphImporter &gi, const onnx::GraphProto &graph,
               const ImportOptions &options, const llvm::StringSet<> &initNames,
               ModuleOp module, SmallVectorImpl<Type> &argTypes,
               ArrayRef<const onnx::ValueInfoProto *> argInfos,
               func::FuncOp &func) {
  OpBuilder &b = gi.builder;
  Location loc = module.getLoc();
  // Training: float initializers become parameter or buffer arguments.
  SmallVector<std::pair<std::string, StringRef>> stateArgs; // (name, role)
  if (options.parameterize) {
    auto selected = selectStateArguments(gi, graph, options, initNames);
    if (failed(selected))
      return failure();
    stateArgs = std::move(*selected);
  }
  for (const auto &[name, role] : stateArgs) {
    DenseElementsAttr init = gi.constants[name].first;
    argTypes.push_back(init.getType());
    if (options.initialValues) {
      std::string &bytes = (*options.initialValues)[name];
      if (init.getElementType().isF32()) {
        for (float v : init.getValues<float>())
          bytes.append(reinterpret_cast<const char *>(&v), sizeof(float));
      } else {
        ArrayRef<char> raw = init.getRawData();
        bytes.assign(raw.begin(), raw.end());
      }
    }
  }

  // Training: Dropout needs random bits, from an i64[2] {seed, rank} input.
  bool needsRng = false;
  if (options.trainingMode)
    for (const auto &node : graph.node())
      needsRng |= node.op_type() == "Dropout";
  if (needsRng)
    argTypes.push_back(RankedTensorType::get({2}, b.getI64Type()));

  b.setInsertionPointToEnd(module.getBody());
  func = func::FuncOp::create(b, loc, options.funcName,
                              b.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
  for (auto [i, vi] : llvm::enumerate(argInfos)) {
    int32_t dtype = vi->type().tensor_type().elem_type();
    gi.values[vi->name()] = TValue{entry->getArgument(i), dtype};
    func.setArgAttr(i, attrs::kName, b.getStringAttr(vi->name()));
    func.setArgAttr(i, attrs::kDType, b.getI32IntegerAttr(dtype));
    if (options.parameterize)
      func.setArgAttr(i, attrs::kRole, b.getStringAttr("input"));
  }
  for (auto [j, state] : llvm::enumerate(stateArgs)) {
    unsigned i = argInfos.size() + j;
    int32_t dtype = gi.constants[state.first].second;
    gi.constants.erase(state.first);
    gi.values[state.first] = TValue{entry->getArgument(i), dtype};
    func.setArgAttr(i, attrs::kName, b.getStringAttr(state.first));
    func.setArgAttr(i, attrs::kDType, b.getI32IntegerAttr(dtype));
    func.setArgAttr(i, attrs::kRole, b.getStringAttr(state.second));
  }
  if (needsRng) {
    unsigned i = argTypes.size() - 1;
    gi.rngArg = entry->getArgument(i);
    func.setArgAttr(i, attrs::kName, b.getStringAttr("rng"));
    func.setArgAttr(i, attrs::kRole, b.getStringAttr("rng"));
  }

  return success();
}

/// float16/bfloat16 accumulations in float32: for an accumulating op with
/// a half-precision input, the node's import computes in float32
/// (NodeContext::promoteHalfPrecision).
static void promoteAccumulations(GraphImporter &gi, NodeContext &ctx,
                                 const onnx::NodeProto &node) {
  static const llvm::StringSet<> accumulating = {"ReduceSum",
                                                 "ReduceMean",
                                                 "ReduceSumSquare",
                                                 "ReduceL1",
                                                 "ReduceL2",
                                                 "ReduceLogSum",
                                                 "ReduceLogSumExp",
                                                 "ReduceProd",
                                                 "MatMul",
                                                 "Gemm",
                                                 "Einsum",
                                                 "Conv",
                                                 "ConvTranspose",
                                                 "AveragePool",
                                                 "GlobalAveragePool",
                                                 "Softmax",
                                                 "LogSoftmax",
                                                 "LayerNormalization",
                                                 "BatchNormalization",
                                                 "InstanceNormalization",
                                                 "LRN",
                                                 "RMSNormalization",
                                                 "LpNormalization",
                                                 "CumSum",
                                                 "CumProd",
                                                 "NegativeLogLikelihoodLoss",
                                                 "SoftmaxCrossEntropyLoss",
                                                 "Mean",
                                                 "Sum",
                                                 "Attention"};
  if (accumulating.contains(node.op_type()))
    for (int i = 0; i < node.input_size(); ++i) {
      int32_t dt = kUndefined;
      if (auto v = gi.values.find(node.input(i)); v != gi.values.end())
        dt = v->second.dtype;
      else if (auto c = gi.constants.find(node.input(i));
               c != gi.constants.end())
        dt = c->second.second;
      if (dt == kFloat16 || dt == kBFloat16) {
        ctx.promoteHalfPrecision(dt);
        break;
      }
    }
}

/// Imports one node at `nodeIndex` with the importer of its op type; fails
/// (error set) for an unsupported op, a wrong arity, an undefined input, a
/// redefined output or an optional output the importer does not produce.
static LogicalResult importNode(GraphImporter &gi,
                                const onnx::ModelProto &model, int64_t opset,
                                const onnx::NodeProto &node, int64_t nodeIndex,
                                MLIRContext *mctx) {
  const OpRegistry &ops = getRegistry();
  ImportError &error = gi.error;
  // Ops built for this node carry its name (the op type and index when
  // the node is unnamed), so fusion groups and diagnostics can name it.
  gi.loc = NameLoc::get(StringAttr::get(
      mctx, node.name().empty()
                ? node.op_type() + "_" + std::to_string(nodeIndex)
                : node.name()));
  const std::string &domain = node.domain();
  int64_t nodeOpset = opset;
  if (!domain.empty() && domain != "ai.onnx") {
    nodeOpset = -1;
    for (const auto &o : model.opset_import())
      if (o.domain() == domain)
        nodeOpset = o.version();
  }
  NodeContext ctx(gi, node, nodeOpset);
  for (int i = 0; i < node.input_size(); ++i) {
    const std::string &in = node.input(i);
    if (!in.empty() && !gi.values.count(in) && !gi.constants.count(in)) {
      (void)ctx.invalid("input '" + in +
                        "' is not produced by any earlier node, graph input "
                        "or initializer");
      return failure();
    }
  }
  const NodeImportFn *fn = (domain.empty() || domain == "ai.onnx")
                               ? ops.lookup(node.op_type())
                               : nullptr;
  if (!fn) {
    (void)gi.fail(ImportErrorKind::Unsupported,
                  "unsupported op " + ctx.describe());
    return failure();
  }
  if (failed(checkArity(ctx)))
    return failure();
  // Every name is defined once (ONNX IR: graphs are in SSA form).
  for (const std::string &out : node.output())
    if (!out.empty() && (gi.values.count(out) || gi.constants.count(out))) {
      (void)ctx.invalid("output '" + out +
                        "' is already defined (by a graph input, an "
                        "initializer or an earlier node)");
      return failure();
    }
  promoteAccumulations(gi, ctx, node);
  if (failed((*fn)(ctx)) || error.kind != ImportErrorKind::None) {
    if (error.kind == ImportErrorKind::None)
      (void)ctx.unsupported("import failed");
    return failure();
  }
  for (int i = 0; i < node.output_size(); ++i) {
    const std::string &out = node.output(i);
    if (!out.empty() && !gi.values.count(out) && !gi.constants.count(out)) {
      (void)ctx.unsupported("optional output #" + Twine(i) + " ('" + out +
                            "') is not supported");
      return failure();
    }
  }
  return success();
}

/// The function's results: the graph outputs (named, with dtypes), then
/// (training) the buffer updates; sets the final function type.
static LogicalResult buildResults(GraphImporter &gi,
                                  const onnx::GraphProto &graph,
                                  const ImportOptions &options, Location loc,
                                  ArrayRef<Type> argTypes, func::FuncOp func) {
  OpBuilder &b = gi.builder;
  if (graph.output_size() == 0) {
    (void)gi.fail(ImportErrorKind::Invalid,
                  "invalid model: the graph has no outputs, so there is "
                  "nothing to compute");
    return failure();
  }
  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  llvm::StringSet<> outputNames;
  for (const auto &vi : graph.output()) {
    // Programs name their outputs (files, Python dicts) by graph output
    // name, so a name listed twice could not be told apart.
    if (!outputNames.insert(vi.name()).second) {
      (void)gi.fail(ImportErrorKind::Invalid,
                    "invalid model: graph output '" + vi.name() +
                        "' is listed twice; output names must be unique "
                        "(add an Identity node for the second copy)");
      return failure();
    }
    if (!gi.values.count(vi.name()) && !gi.constants.count(vi.name())) {
      (void)gi.fail(ImportErrorKind::Invalid, "invalid model: graph output '" +
                                                  vi.name() +
                                                  "' is never produced");
      return failure();
    }
    TValue v = gi.values.count(vi.name()) ? gi.values[vi.name()]
                                          : gi.materialize(vi.name());
    if (numElements(v.shape()) == 0 && options.parameterize) {
      (void)gi.fail(ImportErrorKind::Unsupported,
                    "unsupported: graph output '" + vi.name() +
                        "' has zero elements (zero-size tensors are not "
                        "supported in training)");
      return failure();
    }
    results.push_back(v.value);
    resultTypes.push_back(v.value.getType());
  }
  for (const auto &[name, v] : gi.bufferUpdates) {
    results.push_back(v.value);
    resultTypes.push_back(v.value.getType());
  }
  func::ReturnOp::create(b, loc, results);
  func.setFunctionType(b.getFunctionType(argTypes, resultTypes));
  for (auto [i, vi] : llvm::enumerate(graph.output())) {
    TValue v = gi.values.count(vi.name()) ? gi.values[vi.name()] : TValue{};
    int32_t dtype = v.value ? v.dtype : gi.constants[vi.name()].second;
    func.setResultAttr(i, attrs::kName, b.getStringAttr(vi.name()));
    func.setResultAttr(i, attrs::kDType, b.getI32IntegerAttr(dtype));
    if (options.parameterize)
      func.setResultAttr(i, attrs::kRole, b.getStringAttr("output"));
  }
  for (auto [j, upd] : llvm::enumerate(gi.bufferUpdates)) {
    unsigned i = graph.output_size() + j;
    func.setResultAttr(i, attrs::kName, b.getStringAttr(upd.first));
    func.setResultAttr(i, attrs::kDType, b.getI32IntegerAttr(upd.second.dtype));
    func.setResultAttr(i, attrs::kRole, b.getStringAttr("buffer_update"));
  }

  return success();
}

/// Verifies the imported module; a failure is ddpc's bug, but it must
/// still be one line.
static LogicalResult verifyImported(GraphImporter &gi, MLIRContext &context,
                                    ModuleOp module) {
  std::string diag;
  {
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
      if (diag.empty())
        diag = d.str();
      return success();
    });
    if (failed(verify(module))) {
      (void)gi.fail(ImportErrorKind::Invalid,
                    "internal error: the imported IR does not verify (" +
                        StringRef(diag).split('\n').first + ")");
      return failure();
    }
  }
  return success();
}

OwningOpRef<ModuleOp> importONNXModel(MLIRContext &context,
                                      const std::string &bytes,
                                      const ImportOptions &options,
                                      ImportError &error) {
  DialectRegistry registry;
  registerImportDialects(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();

  GraphImporter gi(context, options, error);
  onnx::ModelProto model;
  int64_t opset = -1;
  if (failed(parseModel(gi, bytes, model, opset)))
    return nullptr;
  const onnx::GraphProto &graph = model.graph();

  OpBuilder &b = gi.builder;
  Location loc = gi.loc;
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  if (!graph.name().empty())
    (*module)->setAttr(attrs::kGraphName, b.getStringAttr(graph.name()));
  (*module)->setAttr(attrs::kOpset, b.getI64IntegerAttr(opset));

  llvm::StringSet<> initNames;
  SmallVector<Type> argTypes;
  SmallVector<const onnx::ValueInfoProto *> argInfos;
  func::FuncOp func;
  if (failed(importInitializers(gi, graph, *module, initNames)) ||
      failed(importGraphInputs(gi, graph, options, initNames, argTypes,
                               argInfos)) ||
      failed(checkShapeOptions(gi, graph, options, argInfos)) ||
      failed(createFunction(gi, graph, options, initNames, *module, argTypes,
                            argInfos, func)))
    return nullptr;
  int64_t nodeIndex = 0;
  for (const auto &node : graph.node())
    if (failed(importNode(gi, model, opset, node, nodeIndex++, &context)))
      return nullptr;
  if (failed(buildResults(gi, graph, options, loc, argTypes, func)) ||
      failed(verifyImported(gi, context, *module)))
    return nullptr;
  return module;
}

} // namespace ddpc

//===- TensorBuilders.h - Static-shape linalg-on-tensors helpers -*- C++
//-*-===//
//
// Part of ddpc. Helpers shared by the ONNX importer and training synthesis to
// build linalg-on-tensors IR with static shapes: numpy broadcasting (ONNX
// Broadcasting.md), elementwise and reduction generics, reshapes and pads.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_IMPORT_ONNX_TENSORBUILDERS_H
#define DDPC_IMPORT_ONNX_TENSORBUILDERS_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace ddpc {

/// Broadcasts shapes by the ONNX (numpy) rules; failure when incompatible.
mlir::FailureOr<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<llvm::ArrayRef<int64_t>> shapes);

/// Whether `from` broadcasts to `to` in numpy's unidirectional sense (the
/// result is `to`: Gemm's C, LayerNormalization's Scale).
bool broadcastsTo(llvm::ArrayRef<int64_t> from, llvm::ArrayRef<int64_t> to);

using ScalarBodyFn = llvm::function_ref<mlir::Value(
    mlir::OpBuilder &, mlir::Location, mlir::ValueRange)>;

/// Builds an all-parallel `linalg.generic` over `outShape` whose inputs are
/// broadcast to it (numpy rules); `body` maps the input scalars to the
/// result scalar of type `resultElem`.
mlir::Value buildElementwise(mlir::OpBuilder &b, mlir::Location loc,
                             mlir::ValueRange inputs,
                             llvm::ArrayRef<int64_t> outShape,
                             mlir::Type resultElem, ScalarBodyFn body);

/// Builds a `linalg.generic` with explicit indexing maps for the inputs; the
/// output uses the identity map over `outShape` plus trailing reduction dims
/// (`numReductionDims`), initialized to `init` when given (else tensor.empty).
mlir::Value buildGeneric(mlir::OpBuilder &b, mlir::Location loc,
                         mlir::ValueRange inputs,
                         llvm::ArrayRef<mlir::AffineMap> inputMaps,
                         llvm::ArrayRef<int64_t> outShape,
                         mlir::Type resultElem, unsigned numReductionDims,
                         std::optional<mlir::TypedAttr> init,
                         ScalarBodyFn body);

/// Reduces `input` over `axes` (normalized, sorted), keeping them as size-1
/// dims when `keepDims`. `combine(acc, x)` is called with the accumulator
/// first. `initValue` is the neutral element.
mlir::Value buildReduction(mlir::OpBuilder &b, mlir::Location loc,
                           mlir::Value input, llvm::ArrayRef<int64_t> axes,
                           bool keepDims, mlir::TypedAttr initValue,
                           ScalarBodyFn combine);

/// Reshapes a static tensor to `newShape` (same element count).
mlir::Value buildReshape(mlir::OpBuilder &b, mlir::Location loc,
                         mlir::Value input, llvm::ArrayRef<int64_t> newShape);

/// Pads a static tensor with `padValue`: `low[d]` before and `high[d]`
/// after dimension d (returns `input` when all pads are 0).
mlir::Value buildPad(mlir::OpBuilder &b, mlir::Location loc, mlir::Value input,
                     llvm::ArrayRef<int64_t> low, llvm::ArrayRef<int64_t> high,
                     mlir::TypedAttr padValue);

/// Scalar constant of `type` (float or integer) with value `v`.
mlir::Value scalarConst(mlir::OpBuilder &b, mlir::Location loc, mlir::Type type,
                        double v);
/// Attribute for a scalar of `type` with value `v`.
mlir::TypedAttr scalarAttr(mlir::Type type, double v);
/// Lowest / highest finite-or-infinite value of `type` (for max/min inits).
mlir::TypedAttr lowestAttr(mlir::Type type, bool isUnsigned);
mlir::TypedAttr highestAttr(mlir::Type type, bool isUnsigned);

/// Normalizes a possibly negative axis against `rank`: in [0, rank), or
/// failure if outside [-rank, rank) (always, for rank 0).
mlir::FailureOr<int64_t> normalizeAxis(int64_t axis, int64_t rank);

int64_t numElements(llvm::ArrayRef<int64_t> shape);

/// The most elements one tensor of a model may have (2^40: 4 TiB of
/// float32; larger products are taken for malformed shapes).
constexpr int64_t kMaxTensorElements = int64_t(1) << 40;

/// numElements, or none for a negative dimension or a product above
/// kMaxTensorElements (including one that overflows int64: a Reshape to
/// [6148914691236517206, 3] wrapped to 2 elements).
std::optional<int64_t> checkedNumElements(llvm::ArrayRef<int64_t> shape);

/// Run-time check that every element of the integer tensor `indices`
/// (any integer width, signed) lies in [-bound, bound) (ONNX's negative-
/// index rule). Builds one reduction to the smallest and largest index (two
/// 0-d i64 tensors) and a call of the private function
/// `@ddpc_check_indices` (created on first use), whose body passes their
/// addresses, `bound` and `what` (a NUL-terminated global string naming
/// the node, e.g. "Gather node 'embed' (indices 'ids' into axis 0 of
/// 'E')") to the runtime's `ddpc_rt_check_indices` (ModelABI.h), which
/// records the first violation; programs and Program.run report it after
/// the step function returns. The index reads themselves must be clamped
/// by the caller so that nothing reads out of bounds before the report.
/// The call carries `ddpc.index_check`.
void buildIndexCheck(mlir::OpBuilder &b, mlir::Location loc,
                     mlir::Value indices, int64_t bound, llvm::StringRef what);

/// Run-time check that no element of the i1 tensor `bad` is true (an
/// integer division by zero, ...): counts them (a 0-d i64 tensor) and calls
/// `@ddpc_check_count` -> the runtime's `ddpc_rt_check_count(count, what)`
/// (ModelABI.h), reported like buildIndexCheck's. The caller must compute
/// something defined where `bad` holds (no trap before the report).
void buildCountCheck(mlir::OpBuilder &b, mlir::Location loc, mlir::Value bad,
                     llvm::StringRef what);

} // namespace ddpc

#endif // DDPC_IMPORT_ONNX_TENSORBUILDERS_H

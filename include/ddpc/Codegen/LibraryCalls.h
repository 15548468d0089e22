//===- LibraryCalls.h - buffers and library calls ---------------*- C++ -*-===//
//
// Part of ddpc (lib/Codegen, lib/Codegen/GPU). Analyses of bufferized IR that
// the passes replacing generated code by library calls share
// (ddpc-gemm-to-library-call, ddpc-gemm-epilogues, ddpc-conv-to-library-call,
// ddpc-conv-epilogues): buffer aliasing and reshapes, zero fills a
// library call can absorb, the calls' arguments and fusion labels, and
// bias/activation kernel bodies.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_CODEGEN_LIBRARYCALLS_H
#define DDPC_CODEGEN_LIBRARYCALLS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/AffineMap.h"

#include <cstdint>
#include <optional>

namespace ddpc {

/// Whether `v` is a statically shaped float32 memref with the identity
/// layout (dense, row-major): a buffer a library call can take.
bool denseF32(mlir::Value v);

/// Whether the results of `map` are exactly the dims `dims`, in that order.
bool resultsAre(mlir::AffineMap map, mlir::ArrayRef<unsigned> dims);

/// Copies `from`'s fusion-group labels (ddpc.fusion_group,
/// ddpc.fused_nodes) to `to`, an op that now does (part of) its work.
void copyLabels(mlir::Operation *from, mlir::Operation *to);

/// `v` with memref.collapse_shape/expand_shape ops looked through: the
/// buffer `v` is a reshape of (same elements, same order).
mlir::Value reshapeSource(mlir::Value v);

/// Whether buffers `x` and `y` may share memory. Distinct allocations do
/// not; views of one allocation (ddpc-plan-arena's memref.view at constant
/// byte offsets, and subviews, reshapes and casts of such a view, which lie
/// within its bytes) do only when their byte ranges overlap; globals alias only
/// themselves; distinct buffer
/// arguments of a public (entry) function do not (the runtime allocates
/// each, ModelABI.h), while a private helper's may; an allocation aliases
/// no function argument. A buffer whose base is none of these (a select,
/// an scf.if or call result) may alias anything.
bool mayAlias(mlir::Value x, mlir::Value y);

/// Whether the contents of `buffer` may be read after `op`: through a view
/// or reshape of the same buffer (allocation, or ddpc-plan-arena view of
/// the arena) by a later op of its block or of an enclosing block (nested
/// ops included; deallocs do not count), or by the caller, when `buffer` is
/// (a view of) a function argument.
bool usedAfter(mlir::Operation *op, mlir::Value buffer);

/// Looks backwards from `at` (a GEMM or convolution about to write all of
/// `c`) for the `linalg.fill` of zero that initializes `c` (or the buffer
/// `c` reshapes), over ops that cannot touch `c`'s memory; null if there is
/// none. eraseZeroFillOf erases it and returns whether it did: the library
/// call then overwrites `c` (BLAS/cuDNN beta = 0) instead of accumulating
/// into zeros written by a separate kernel.
mlir::Operation *findZeroFillOf(mlir::Operation *at, mlir::Value c);

/// Erases the fill findZeroFillOf(at, c) finds; returns whether it did.
bool eraseZeroFillOf(mlir::Operation *at, mlir::Value c);

/// Emits `ddpc_gemm_f32(batch, m, n, k, transA, transB, A, B, C, strideA,
/// strideB, strideC, accumulate)` (Gemm.h) before `at`, labelled with
/// `at`'s fusion group and ONNX nodes and `ddpc.library = library`.
mlir::func::CallOp emitGemmCall(mlir::Operation *at, int64_t batch, int64_t m,
                                int64_t n, int64_t k, int transA, int transB,
                                mlir::Value a, mlir::Value bm, mlir::Value c,
                                int64_t strideA, int64_t strideB,
                                int64_t strideC, bool accumulate,
                                llvm::StringRef library);

/// Emits at `b`'s insertion point a call of the runtime function `name`
/// (declared on first use, returning i32: 1 when the library did the work,
/// 0 when it declined), labelled with `labels`' fusion group and ONNX nodes
/// and with `ddpc.library = library`, followed by
///   scf.if (%result == 0) {} {ddpc.library_fallback}
/// Returns the scf.if: callers move the generated code that does the same
/// work into its then-block.
mlir::scf::IfOp
emitLibraryCallWithFallback(mlir::OpBuilder &b, mlir::Location loc,
                            mlir::Operation *labels, llvm::StringRef name,
                            mlir::ValueRange args, llvm::StringRef library);

/// The memref whose aligned pointer the i64 call argument `v` is (the form
/// emitGemmCall passes buffers in); null otherwise.
mlir::Value pointerSource(mlir::Value v);

/// The value of call operand `i` when it is an integer constant.
std::optional<int64_t> constantArg(mlir::func::CallOp call, unsigned i);

/// The elementwise epilogue kernel candidate after `op`: the next op in its
/// block that touches memory other than a memref.dealloc, when it is a
/// buffer linalg.generic with two inputs, one output and `rank` loops, all
/// parallel; null otherwise. The deallocs in between then move after it
/// (a call fused at the kernel reads `op`'s operands).
mlir::linalg::GenericOp nextElementwiseKernel(mlir::Operation *op,
                                              unsigned rank);

/// Whether `map`, over loops of extents `ranges`, reads a vector along loop
/// `dim`: its results are `d<dim>` once, and otherwise the constant 0 or a
/// loop of extent 1 (which only takes the index 0). So a bias [C] read as
/// (n, c, h, w) -> (c), and a [1, C, 1, 1] one read as (0, c, 0, 0) or, at
/// batch 1, as (n, c, 0, 0).
bool readsAlongLoop(mlir::AffineMap map, unsigned dim,
                    llvm::ArrayRef<int64_t> ranges);

/// The activation when `body` is `s = c + bias` (either order) followed by
/// `yield s` (0) or by a ReLU of s (1): `maximumf(s, 0)` or the importer's
/// NaN-propagating `select(s > 0, s, select(isnan(s), s, 0))`.
std::optional<int32_t> matchBiasActivation(mlir::Block &body, mlir::Value c,
                                           mlir::Value bias);

} // namespace ddpc

#endif // DDPC_CODEGEN_LIBRARYCALLS_H

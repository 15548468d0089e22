//===- BufferLiveness.h - live ranges of a block's allocations --*- C++ -*-===//
//
// Part of ddpc. Live ranges of the memref.alloc ops at the top level of a
// block, in top-level op positions: an allocation is live from its alloc to
// its one dealloc, and every use through any view of it lies in between.
// ddpc-plan-arena places buffers with disjoint ranges at overlapping
// offsets; the memory planner will use the same ranges for the peak.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_ANALYSIS_BUFFERLIVENESS_H
#define DDPC_ANALYSIS_BUFFERLIVENESS_H

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "llvm/ADT/DenseMap.h"

#include <cstdint>
#include <optional>

namespace ddpc {

/// An allocation's live range: positions of its alloc and dealloc among the
/// block's top-level ops (inclusive).
struct BufferLiveRange {
  mlir::memref::AllocOp alloc;
  mlir::memref::DeallocOp dealloc;
  int64_t start = 0, end = 0;
};

class BufferLiveness {
public:
  /// Numbers the top-level ops of `body`.
  explicit BufferLiveness(mlir::Block &body);

  /// The live range of `alloc` (an op of the block), or nothing when it has
  /// no single dealloc in the block, escapes through a return, or has a use
  /// (through any view-like op) outside [alloc, dealloc].
  std::optional<BufferLiveRange> liveRange(mlir::memref::AllocOp alloc);

  /// Position of the top-level op that holds `op`; -1 when `op` is not in
  /// the block.
  int64_t position(mlir::Operation *op) const;

private:
  mlir::Block &body;
  llvm::DenseMap<mlir::Operation *, int64_t> positions;
};

} // namespace ddpc

#endif // DDPC_ANALYSIS_BUFFERLIVENESS_H

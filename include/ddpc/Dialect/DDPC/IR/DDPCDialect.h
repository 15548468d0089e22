//===- DDPCDialect.h - the ddpc dialect: the IR contract --------*- C++ -*-===//
//
// Part of ddpc. DDPCDialect (DDPCDialect.td) declares every discardable
// attribute the stages exchange, with a typed helper each. The constants
// below are those attributes' names (kRole for ddpc.role, ...), taken from the
// generated helpers, for the places that need a name alone (function
// argument and result attributes, dictionary lookups).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_DIALECT_DDPC_IR_DDPCDIALECT_H
#define DDPC_DIALECT_DDPC_IR_DDPCDIALECT_H

#include "mlir/IR/Dialect.h"
#include "mlir/IR/Operation.h"

#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h.inc"

namespace ddpc::attrs {

#define DDPC_ATTR_NAME(constant, Helper)                                       \
  inline constexpr llvm::StringLiteral constant =                              \
      DDPCDialect::Helper##AttrHelper::getNameStr();
DDPC_ATTR_NAME(kName, Name)
DDPC_ATTR_NAME(kDType, Dtype)
DDPC_ATTR_NAME(kRole, Role)
DDPC_ATTR_NAME(kHostShared, HostShared)
DDPC_ATTR_NAME(kGraphName, GraphName)
DDPC_ATTR_NAME(kOpset, Opset)
DDPC_ATTR_NAME(kInitializers, Initializers)
DDPC_ATTR_NAME(kCollective, Collective)
DDPC_ATTR_NAME(kBytes, Bytes)
DDPC_ATTR_NAME(kBucket, Bucket)
DDPC_ATTR_NAME(kParams, Params)
DDPC_ATTR_NAME(kStartOp, StartOp)
DDPC_ATTR_NAME(kFunctionOps, FunctionOps)
DDPC_ATTR_NAME(kScatterAdd, ScatterAdd)
DDPC_ATTR_NAME(kFusionGroup, FusionGroup)
DDPC_ATTR_NAME(kFusedNodes, FusedNodes)
DDPC_ATTR_NAME(kLibrary, Library)
DDPC_ATTR_NAME(kLibraryFallback, LibraryFallback)
DDPC_ATTR_NAME(kIndexCheck, IndexCheck)
DDPC_ATTR_NAME(kRuntimeCheck, RuntimeCheck)
DDPC_ATTR_NAME(kRemat, Remat)
DDPC_ATTR_NAME(kArenaBytes, ArenaBytes)
DDPC_ATTR_NAME(kArenaBuffers, ArenaBuffers)
#undef DDPC_ATTR_NAME

} // namespace ddpc::attrs

#endif // DDPC_DIALECT_DDPC_IR_DDPCDIALECT_H

//===- DDPCDialect.cpp - the ddpc dialect ---------------------------------===//
//
// Part of ddpc. See DDPCDialect.td.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Dialect/DDPC/IR/DDPCDialect.h"

#include "ddpc/Dialect/DDPC/IR/DDPCDialect.cpp.inc"

namespace ddpc {

void DDPCDialect::initialize() {}

} // namespace ddpc

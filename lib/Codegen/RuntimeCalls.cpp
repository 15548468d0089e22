//===- RuntimeCalls.cpp - declaring runtime entry points ------------------===//
//
// Part of ddpc (lib/Codegen). See RuntimeCalls.h.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Codegen/RuntimeCalls.h"

using namespace mlir;

namespace ddpc {

func::FuncOp getOrDeclare(ModuleOp module, StringRef name, FunctionType type) {
  if (auto f = module.lookupSymbol<func::FuncOp>(name))
    return f;
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  auto f = func::FuncOp::create(b, module.getLoc(), name, type);
  f.setPrivate();
  return f;
}

} // namespace ddpc

//===- FuzzONNXImport.cpp - libFuzzer target: bytes -> module or error ----===//
//
// Part of ddpc. Any byte string must give either a module or one clean
// error (ImportError), never a crash, a hang, an unbounded allocation or an
// "internal error" (IR the importer built that does not verify).
// The first byte picks the import mode, so one corpus covers both:
//   bit 0: training (parameterized initializers, training-mode ops, and the
//          initializer-role rewrite that `ddpc compile --train` runs first)
//   bit 1: --batch-size 2 (binds the leading symbolic dimension)
// See fuzz/README.md for building and running it (`make fuzz`).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Import/ONNX/Importer.h"

#include "mlir/IR/MLIRContext.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  const uint8_t mode = data[0];
  std::string bytes(reinterpret_cast<const char *>(data + 1), size - 1);
  ddpc::ImportOptions options;
  std::map<std::string, std::string> initialValues;
  if (mode & 1) {
    ddpc::separateInitializerRoles(bytes);
    options.parameterize = true;
    options.trainingMode = true;
    options.initialValues = &initialValues;
  }
  if (mode & 2)
    options.batchSize = 2;
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  ddpc::ImportError error;
  auto module = ddpc::importONNXModel(context, bytes, options, error);
  // Exactly one of the two.
  if (!module == (error.kind == ddpc::ImportErrorKind::None))
    __builtin_trap();
  if (!module && error.message.empty())
    __builtin_trap();
  // "internal error" (the imported IR does not verify) is a bug in ddpc,
  // not a property of the input: report it like a crash.
  if (!module && error.message.rfind("internal error", 0) == 0)
    __builtin_trap();
  return 0;
}

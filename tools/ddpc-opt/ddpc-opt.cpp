//===- ddpc-opt.cpp - The mlir-opt of ddpc --------------------------------===//
//
// Part of ddpc. Every upstream dialect and pass plus the ddpc pipelines
// (`--ddpc-graph-opt`, `--ddpc-bufferize`, `--ddpc-lower-to-llvm`,
// `--ddpc-cpu-pipeline`, `--ddpc-gpu-kernels`), for lit tests and for
// running single passes.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Pipelines/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  ddpc::registerAllDDPCDialects(registry);
  ddpc::registerAllDDPCPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "ddpc optimizer driver\n", registry));
}

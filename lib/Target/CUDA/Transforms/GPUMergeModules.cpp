//===- GPUMergeModules.cpp - all kernels in one gpu.module ----------------===//
//
// Part of ddpc. See Passes.td (ddpc-gpu-merge-modules).
//
//===----------------------------------------------------------------------===//

#include "ddpc/Support/RuntimeSymbols.h"
#include "ddpc/Target/CUDA/Transforms/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_GPUMERGEMODULESPASS
#include "ddpc/Target/CUDA/Transforms/Passes.h.inc"

namespace {

struct GPUMergeModulesPass
    : impl::GPUMergeModulesPassBase<GPUMergeModulesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<gpu::GPUModuleOp> modules(module.getOps<gpu::GPUModuleOp>());
    if (modules.empty())
      return;
    MLIRContext *ctx = &getContext();
    OpBuilder b(modules.front());
    auto merged = gpu::GPUModuleOp::create(b, module.getLoc(), kKernelModule);
    Block &dest = merged.getBodyRegion().front();
    // Kernel @M::@F is renamed @ddpc_kernels::@M (module names are unique).
    DenseMap<Attribute, SymbolRefAttr> renamed;
    for (gpu::GPUModuleOp m : modules) {
      for (Operation &op :
           llvm::make_early_inc_range(m.getBody()->without_terminator())) {
        auto fn = dyn_cast<gpu::GPUFuncOp>(op);
        if (!fn) {
          signalPassFailure();
          m.emitError("unexpected op in an outlined gpu.module");
          return;
        }
        SymbolRefAttr old = SymbolRefAttr::get(
            ctx, m.getName(), {FlatSymbolRefAttr::get(ctx, fn.getName())});
        fn.setName(m.getName());
        fn->moveBefore(&dest, dest.without_terminator().end());
        renamed[old] = SymbolRefAttr::get(
            ctx, merged.getName(), {FlatSymbolRefAttr::get(ctx, m.getName())});
      }
      m->erase();
    }
    module.walk([&](gpu::LaunchFuncOp launch) {
      auto it = renamed.find(launch.getKernel());
      if (it != renamed.end())
        launch.setKernelAttr(it->second);
    });
  }
};

} // namespace

} // namespace ddpc

//===- DeviceConstants.cpp - constant tensors in device memory ------------===//
//
// Part of ddpc. See Passes.td (ddpc-device-constants).
//
// A constant tensor (`memref.global constant`, e.g. an inference program's
// weights) becomes an LLVM global of the host program. Kernels and cuDNN
// cannot read host memory, so on the GPU targets every such global read by
// a function is packed into one byte array, @__ddpc_device_constants (each
// tensor at a 256-byte aligned offset), and each function starts with
//   %host = memref.get_global @__ddpc_device_constants : memref<Nxi8>
//   %dev = call @ddpc_device_constants(%host, N) : (memref<Nxi8>, i64)
//                                                   -> memref<Nxi8>
// whose runtime copies the array to the device once per process and
// returns that copy; each former memref.get_global is a memref.view of
// %dev at its offset.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Support/RuntimeSymbols.h"
#include "ddpc/Target/CUDA/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Pass/Pass.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

using namespace mlir;

namespace ddpc {

#define GEN_PASS_DEF_DEVICECONSTANTSPASS
#include "ddpc/Target/CUDA/Transforms/Passes.h.inc"

namespace {

constexpr int64_t kAlignment = 256;
constexpr llvm::StringLiteral kPacked = "__ddpc_device_constants";
constexpr llvm::StringLiteral kRuntime = kDeviceConstantsFn;

/// The bytes of a constant global's value as compiled code reads them
/// (row-major, little-endian as DenseElementsAttr stores them; i1 as one
/// byte 0 or 1 per element, LLVM's in-memory i1), or nothing when it cannot
/// be packed: no dense value, a non-identity layout, or another element
/// type that is not whole bytes.
std::optional<std::vector<char>> constantBytes(memref::GlobalOp global) {
  if (!global.getConstant())
    return std::nullopt;
  auto value =
      dyn_cast_or_null<DenseElementsAttr>(global.getInitialValueAttr());
  MemRefType type = global.getType();
  if (!value || !type.hasStaticShape() || !type.getLayout().isIdentity() ||
      type.getMemorySpace())
    return std::nullopt;
  Type elem = type.getElementType();
  if (elem.isInteger(1)) {
    std::vector<char> bytes;
    for (bool b : value.getValues<bool>())
      bytes.push_back(b ? 1 : 0);
    return bytes;
  }
  if (!elem.isIntOrFloat() || elem.getIntOrFloatBitWidth() % 8 != 0)
    return std::nullopt;
  size_t elemBytes = elem.getIntOrFloatBitWidth() / 8;
  size_t count = static_cast<size_t>(type.getNumElements());
  ArrayRef<char> raw = value.getRawData();
  std::vector<char> bytes;
  if (value.isSplat()) {
    if (raw.size() < elemBytes)
      return std::nullopt;
    bytes.reserve(count * elemBytes);
    for (size_t i = 0; i < count; ++i)
      bytes.insert(bytes.end(), raw.begin(), raw.begin() + elemBytes);
  } else {
    if (raw.size() != count * elemBytes)
      return std::nullopt;
    bytes.assign(raw.begin(), raw.end());
  }
  return bytes;
}

struct DeviceConstantsPass
    : impl::DeviceConstantsPassBase<DeviceConstantsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);

    // Offsets of the globals some function reads, in first-use order.
    llvm::MapVector<memref::GlobalOp, int64_t> offsets;
    std::vector<char> packed;
    SmallVector<func::FuncOp> users;
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      bool uses = false;
      fn.walk([&](memref::GetGlobalOp get) {
        auto global = symbols.lookup<memref::GlobalOp>(get.getName());
        if (!global || global.getSymName() == kPacked)
          return;
        if (!offsets.count(global)) {
          std::optional<std::vector<char>> bytes = constantBytes(global);
          if (!bytes)
            return;
          packed.resize(llvm::alignTo(packed.size(), kAlignment));
          offsets[global] = static_cast<int64_t>(packed.size());
          packed.insert(packed.end(), bytes->begin(), bytes->end());
        }
        uses = true;
      });
      if (uses)
        users.push_back(fn);
    }
    if (offsets.empty())
      return;
    if (symbols.lookup(kPacked) || symbols.lookup(kRuntime)) {
      module.emitError() << "ddpc-device-constants: the module already has @"
                         << kPacked << " or @" << kRuntime;
      return signalPassFailure();
    }

    MLIRContext *ctx = &getContext();
    Location loc = module.getLoc();
    packed.resize(
        std::max<size_t>(llvm::alignTo(packed.size(), kAlignment), kAlignment));
    int64_t total = static_cast<int64_t>(packed.size());
    auto i8 = IntegerType::get(ctx, 8);
    auto packedType = MemRefType::get({total}, i8);
    auto tensorType = RankedTensorType::get({total}, i8);
    OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
    memref::GlobalOp::create(
        b, loc, kPacked, b.getStringAttr("private"), packedType,
        DenseElementsAttr::getFromRawBuffer(tensorType, packed),
        /*constant=*/true, b.getI64IntegerAttr(kAlignment));
    auto runtimeType =
        b.getFunctionType({packedType, b.getI64Type()}, {packedType});
    auto runtime = func::FuncOp::create(b, loc, kRuntime, runtimeType);
    runtime.setPrivate();

    for (func::FuncOp fn : users) {
      OpBuilder fb = OpBuilder::atBlockBegin(&fn.getBody().front());
      Value host = memref::GetGlobalOp::create(fb, loc, packedType, kPacked);
      Value bytes = arith::ConstantIntOp::create(fb, loc, total, 64);
      Value dev =
          func::CallOp::create(fb, loc, runtime, ValueRange{host, bytes})
              .getResult(0);
      fn.walk([&](memref::GetGlobalOp get) {
        auto global = symbols.lookup<memref::GlobalOp>(get.getName());
        auto it = global ? offsets.find(global) : offsets.end();
        if (it == offsets.end())
          return;
        OpBuilder gb(get);
        Value offset =
            arith::ConstantIndexOp::create(gb, get.getLoc(), it->second);
        Value view = memref::ViewOp::create(gb, get.getLoc(), get.getType(),
                                            dev, offset, ValueRange{});
        get.replaceAllUsesWith(view);
        get.erase();
      });
    }
    // The packed array holds them now: erase those nothing reads any more
    // (one walk for all of them; a use scan per global was quadratic, 22 s
    // for 1000 constants).
    llvm::DenseSet<StringAttr> stillRead;
    if (auto uses = SymbolTable::getSymbolUses(&module.getBodyRegion()))
      for (const SymbolTable::SymbolUse &use : *uses)
        stillRead.insert(use.getSymbolRef().getRootReference());
    for (auto &entry : offsets)
      if (!stillRead.contains(entry.first.getSymNameAttr()))
        entry.first.erase();
  }
};

} // namespace
} // namespace ddpc

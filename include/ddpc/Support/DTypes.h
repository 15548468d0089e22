//===- DTypes.h - the ONNX element types ddpc carries -----------*- C++ -*-===//
//
// Part of ddpc. The one dtype table: the element types of imported models
// and of programs' inputs and outputs, keyed by their ONNX
// TensorProto.DataType number (onnx.proto3, enum TensorProto.DataType:
// 1 = FLOAT, 7 = INT64, ...), with the NumPy name, .npy descr, size, kind
// and IR width of each. The importer (element types, dtype checks and
// messages), the .npy reader/writer (Npy.cpp), the programs' messages and
// the plan report (--report) all read it, so that all of them agree.
// Header-only: the compiler does not link the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_SUPPORT_DTYPES_H
#define DDPC_SUPPORT_DTYPES_H

#include <cstddef>
#include <cstdint>

namespace ddpc {

/// ONNX TensorProto.DataType numbers that ddpc's code names.
enum DType : int32_t {
  kUndefined = 0,
  kFloat = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
};

/// What the bits of an element mean.
enum class DTypeKind { Float, SignedInt, UnsignedInt, Bool };

struct DTypeInfo {
  int32_t dtype;     ///< ONNX TensorProto.DataType number.
  const char *name;  ///< NumPy name: "float32", "int64", "bool", ...
  const char *descr; ///< Canonical .npy descr, as NumPy writes it: "<f4".
  size_t itemSize;   ///< Bytes per element in memory and in .npy files.
  DTypeKind kind;
  unsigned bits; ///< Width of the IR element type (bool: i1).
};

/// Every dtype ddpc imports, reads and writes (the importer's element types
/// come from here too). .npy has no bfloat16: its raw bits travel as uint16.
inline constexpr DTypeInfo kDTypes[] = {
    {kFloat, "float32", "<f4", 4, DTypeKind::Float, 32},
    {kUInt8, "uint8", "|u1", 1, DTypeKind::UnsignedInt, 8},
    {kInt8, "int8", "|i1", 1, DTypeKind::SignedInt, 8},
    {kUInt16, "uint16", "<u2", 2, DTypeKind::UnsignedInt, 16},
    {kInt16, "int16", "<i2", 2, DTypeKind::SignedInt, 16},
    {kInt32, "int32", "<i4", 4, DTypeKind::SignedInt, 32},
    {kInt64, "int64", "<i8", 8, DTypeKind::SignedInt, 64},
    {kBool, "bool", "|b1", 1, DTypeKind::Bool, 1},
    {kFloat16, "float16", "<f2", 2, DTypeKind::Float, 16},
    {kDouble, "float64", "<f8", 8, DTypeKind::Float, 64},
    {kUInt32, "uint32", "<u4", 4, DTypeKind::UnsignedInt, 32},
    {kUInt64, "uint64", "<u8", 8, DTypeKind::UnsignedInt, 64},
    {kBFloat16, "bfloat16", "<u2", 2, DTypeKind::Float, 16},
};

/// The entry of ONNX dtype number `dtype`, or nullptr for one ddpc does not
/// carry (strings, complex, float8, int4).
inline const DTypeInfo *lookupDType(int32_t dtype) {
  for (const DTypeInfo &info : kDTypes)
    if (info.dtype == dtype)
      return &info;
  return nullptr;
}

/// Whether ONNX dtype `dtype` is one ddpc carries, of kind `kind`.
inline bool isDTypeKind(int32_t dtype, DTypeKind kind) {
  const DTypeInfo *info = lookupDType(dtype);
  return info && info->kind == kind;
}

} // namespace ddpc

#endif // DDPC_SUPPORT_DTYPES_H

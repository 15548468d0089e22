//===- DTypes.h - Element types of program inputs and outputs ---*- C++ -*-===//
//
// Part of ddpc. The element types a program's inputs and outputs may have,
// keyed by their ONNX TensorProto.DataType number (onnx.proto3, enum
// TensorProto.DataType: 1 = FLOAT, 7 = INT64, ...), with the NumPy name
// and .npy descr of each. Shared by the .npy reader/writer (Npy.cpp), the
// program's messages and the compiler's plan report (--report), so that all
// of them name a dtype the same way. Header-only: the compiler does not
// link the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_SUPPORT_DTYPES_H
#define DDPC_SUPPORT_DTYPES_H

#include <cstddef>
#include <cstdint>

namespace ddpc {

struct DTypeInfo {
  int32_t dtype;     ///< ONNX TensorProto.DataType number.
  const char *name;  ///< NumPy name: "float32", "int64", "bool", ...
  const char *descr; ///< Canonical .npy descr, as NumPy writes it: "<f4".
  size_t itemSize;   ///< Bytes per element.
};

/// Every dtype ddpc programs read and write. .npy has no bfloat16: its raw
/// bits travel as uint16.
inline constexpr DTypeInfo kDTypes[] = {
    {1, "float32", "<f4", 4},   {2, "uint8", "|u1", 1},
    {3, "int8", "|i1", 1},      {4, "uint16", "<u2", 2},
    {5, "int16", "<i2", 2},     {6, "int32", "<i4", 4},
    {7, "int64", "<i8", 8},     {9, "bool", "|b1", 1},
    {10, "float16", "<f2", 2},  {11, "float64", "<f8", 8},
    {12, "uint32", "<u4", 4},   {13, "uint64", "<u8", 8},
    {16, "bfloat16", "<u2", 2},
};

/// The entry of ONNX dtype number `dtype`, or nullptr for one ddpc programs
/// do not carry (strings, complex, float8, int4).
inline const DTypeInfo *lookupDType(int32_t dtype) {
  for (const DTypeInfo &info : kDTypes)
    if (info.dtype == dtype)
      return &info;
  return nullptr;
}

} // namespace ddpc

#endif // DDPC_SUPPORT_DTYPES_H

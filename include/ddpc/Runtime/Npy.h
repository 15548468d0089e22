//===- Npy.h - Read and write NumPy .npy files ------------------*- C++ -*-===//
//
// A small, dependency-free reader/writer for the NumPy .npy format used by
// inference programs and tests. Only little-endian, C-order arrays of the
// dtypes listed below are supported.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_RUNTIME_NPY_H
#define DDPC_RUNTIME_NPY_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ddpc {
namespace runtime {

/// A dense, row-major array. `dtype` is an ONNX TensorProto.DataType number
/// (1 = float32, 7 = int64, ...; see ModelABI.h). An empty `shape` is a 0-d
/// array holding one element. `data` holds exactly numElements * itemsize
/// bytes in little-endian order.
struct NpyArray {
  int32_t dtype = 0;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

/// Size in bytes of one element of `dtype`, or 0 if the dtype is unknown.
size_t dtypeItemSize(int32_t dtype);

/// Short name of `dtype` ("float32", "int64", "bool", ...), or "dtype(N)".
std::string dtypeName(int32_t dtype);

/// NumPy descr string ("<f4", "|b1", ...) of `dtype`, or "" if `dtype` has no
/// .npy representation. BFLOAT16 maps to "<u2" (raw bits): .npy has no
/// bfloat16 type.
std::string dtypeToDescr(int32_t dtype);

/// ONNX dtype of a NumPy descr, or 0 if unsupported. Accepts '<', '|' and
/// '=' (native, little-endian hosts only) byte orders; "|u1" and "<u1" alike.
int32_t descrToDtype(const std::string &descr);

/// Formats a shape as "[3,4]" ("[]" for 0-d).
std::string formatShape(const std::vector<int64_t> &shape);

/// Number of elements of `shape` (1 for 0-d), or -1 on negative dimensions
/// or overflow.
int64_t numElements(const std::vector<int64_t> &shape);

/// Reads `path` (format versions 1.0, 2.0 and 3.0). On failure returns false
/// and sets `err` to a message naming the file and the problem. Never throws.
bool readNpy(const std::string &path, NpyArray &out, std::string &err);

/// Parses an in-memory .npy image; `name` is used in error messages.
bool parseNpy(const uint8_t *bytes, size_t size, const std::string &name,
              NpyArray &out, std::string &err);

/// Writes `array` to `path` atomically (writes `path.tmp.<pid>`, then renames
/// it). Uses format 1.0, or 2.0 when the header does not fit in 64 KiB. On
/// failure returns false, sets `err` and leaves no temporary file behind.
/// Never throws.
bool writeNpy(const std::string &path, const NpyArray &array, std::string &err);

/// Serializes `array` into an in-memory .npy image.
bool serializeNpy(const NpyArray &array, std::vector<uint8_t> &out,
                  std::string &err);

} // namespace runtime
} // namespace ddpc

#endif // DDPC_RUNTIME_NPY_H

//===- OnnxWriter.h - Write trained weights into an ONNX model --*- C++ -*-===//
//
// A trained model is the original ModelProto bytes (with the initializers of
// parameters and buffers removed, TrainABI.h `ddpc_onnx_model`) followed by
// one more `graph` field (ModelProto field 7, length-delimited) holding a
// GraphProto with one `initializer` (GraphProto field 5) per tensor. Protobuf
// merges a repeated singular message field into the first one, so parsers
// see the original graph with the trained initializers appended.
//
// Each initializer is a TensorProto with `dims` (field 1, packed int64),
// `data_type` (field 2) = 1 (FLOAT), `name` (field 8) and `raw_data`
// (field 9, little-endian float32). The encoder is hand-written (varints and
// length-delimited fields); no protobuf library is involved.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_RUNTIME_ONNXWRITER_H
#define DDPC_RUNTIME_ONNXWRITER_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ddpc {
namespace runtime {

/// A float32 tensor to store as an initializer; `data` holds
/// product(dims) floats and must outlive the call.
struct OnnxInitializer {
  std::string name;
  std::vector<int64_t> dims;
  const float *data = nullptr;
};

/// Minimal protobuf wire-format encoder.
namespace proto {
/// Appends `value` as a base-128 varint.
void appendVarint(std::vector<uint8_t> &out, uint64_t value);
/// Appends a field key (field number and wire type: 0 varint, 2 bytes).
void appendKey(std::vector<uint8_t> &out, uint32_t field, uint32_t wireType);
/// Number of bytes of `value` as a varint.
size_t varintSize(uint64_t value);
} // namespace proto

/// Encodes the TensorProto of `init` up to and including the key and length
/// of `raw_data`; the caller appends the raw float bytes. Returns the total
/// TensorProto size (header + raw bytes) in `totalSize`.
std::vector<uint8_t> encodeTensorHeader(const OnnxInitializer &init,
                                        uint64_t &totalSize);

/// Writes `modelBytes` followed by the trained-initializer graph field to
/// `path` atomically. On failure returns false and sets `err`. Never throws.
bool writeTrainedOnnx(const std::string &path, const unsigned char *modelBytes,
                      size_t modelSize,
                      const std::vector<OnnxInitializer> &initializers,
                      std::string &err);

} // namespace runtime
} // namespace ddpc

#endif // DDPC_RUNTIME_ONNXWRITER_H

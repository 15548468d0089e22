//===- TrainFileIO.h - Atomic binary file output ----------------*- C++ -*-===//
//
// Checkpoints and trained models are written to `PATH.tmp.<pid>`, flushed,
// fsync'ed and renamed over PATH, so readers see the old file or the complete
// new one, never half a file.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_RUNTIME_TRAINFILEIO_H
#define DDPC_RUNTIME_TRAINFILEIO_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ddpc {
namespace runtime {

/// Streams bytes into a temporary beside `path`; `commit()` renames it over
/// `path`. Destroying an uncommitted writer removes the temporary. Keeps a
/// running FNV-1a 64 hash of everything written. Never throws.
class AtomicFileWriter {
public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter &) = delete;
  AtomicFileWriter &operator=(const AtomicFileWriter &) = delete;

  /// Opens the temporary; false (and `err`) on failure.
  bool open(std::string &err);
  /// Appends bytes; errors are remembered and reported by commit().
  void write(const void *data, size_t size);
  /// FNV-1a 64 of all bytes written so far.
  uint64_t hash() const { return fnv; }
  /// Flushes, fsyncs, closes and renames (or copies into a device or FIFO,
  /// OutputFile.h); false (and `err`) on failure.
  bool commit(std::string &err);

private:
  std::string path, tmpPath;
  std::FILE *file = nullptr;
  bool failed = false;
  uint64_t fnv = 0xcbf29ce484222325ULL;
};

/// FNV-1a 64 of `size` bytes, continuing from `hash`.
uint64_t fnv1a64(const void *data, size_t size,
                 uint64_t hash = 0xcbf29ce484222325ULL);

} // namespace runtime
} // namespace ddpc

#endif // DDPC_RUNTIME_TRAINFILEIO_H

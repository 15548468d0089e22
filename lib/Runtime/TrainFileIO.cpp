//===- TrainFileIO.cpp - Atomic binary file output ------------------------===//

#include "ddpc/Runtime/TrainFileIO.h"

#include "ddpc/Support/OutputFile.h"

#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace ddpc {
namespace runtime {

uint64_t fnv1a64(const void *data, size_t size, uint64_t hash) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path(std::move(path)) {
  tmpPath = resolveOutput(this->path).temporary();
}

AtomicFileWriter::~AtomicFileWriter() {
  if (file) {
    std::fclose(file);
    std::remove(tmpPath.c_str());
  }
}

bool AtomicFileWriter::open(std::string &err) {
  file = std::fopen(tmpPath.c_str(), "wb");
  if (!file) {
    err = "cannot create '" + tmpPath + "': " + std::strerror(errno);
    return false;
  }
  return true;
}

void AtomicFileWriter::write(const void *data, size_t size) {
  if (!file || failed || size == 0)
    return;
  fnv = fnv1a64(data, size, fnv);
  if (std::fwrite(data, 1, size, file) != size)
    failed = true;
}

bool AtomicFileWriter::commit(std::string &err) {
  if (!file) {
    err = "'" + path + "' was not opened";
    return false;
  }
  bool ok = !failed && std::fflush(file) == 0 && ::fsync(fileno(file)) == 0;
  int savedErrno = errno;
  ok = (std::fclose(file) == 0) && ok;
  file = nullptr;
  if (ok)
    return commitOutput(tmpPath, resolveOutput(path), err);
  if (!savedErrno)
    savedErrno = errno;
  err = "cannot write '" + path + "': " + std::strerror(savedErrno);
  std::remove(tmpPath.c_str());
  return false;
}

} // namespace runtime
} // namespace ddpc

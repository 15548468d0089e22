//===- OutputFile.h - where an all-or-nothing output goes -------*- C++ -*-===//
//
// Part of ddpc; used by the compiler (ddpc compile -o, --dump-ir, reports)
// and the runtime (.npy outputs, checkpoints, ONNX export). Plain C++ and
// POSIX, no MLIR/LLVM.
//
// Outputs are written to a temporary file beside the destination and
// renamed over it when complete, so a reader never sees half a file. That
// is only right for a regular file (or none): renaming over a device, FIFO
// or socket (`-o /dev/null`, a named pipe a reader waits on) would replace
// the special file itself, and renaming over a symbolic link would replace
// the link instead of writing through it. OutputTarget says what to do:
// rename onto `path` (a symlink's resolved target), or write `path` in
// place (special files, dangling symlinks).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_SUPPORT_OUTPUTFILE_H
#define DDPC_SUPPORT_OUTPUTFILE_H

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

namespace ddpc {
namespace runtime {

/// The destination of an output named `path` on the command line.
struct OutputTarget {
  /// The file to create or replace: `path`, or the file a symlink at
  /// `path` resolves to.
  std::string path;
  /// Write `path` directly (open for writing, no temporary and no rename):
  /// it exists and is not a regular file or a folder (a character or block
  /// device, a FIFO, a socket), or it is a symlink to nothing.
  bool inPlace = false;
  /// Where to write the temporary: beside the destination, so that rename
  /// stays on one file system; in $TMPDIR (or /tmp) for in-place outputs.
  std::string temporary() const {
    std::string pid = std::to_string(long(::getpid()));
    if (!inPlace)
      return path + ".tmp." + pid;
    const char *dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/ddpc-output.tmp." + pid;
  }
};

inline OutputTarget resolveOutput(const std::string &path) {
  OutputTarget t;
  t.path = path;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) { // Follows symlinks.
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
      t.inPlace = true;
      return t;
    }
    struct stat link;
    if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
      char resolved[PATH_MAX];
      if (::realpath(path.c_str(), resolved))
        t.path = resolved;
    }
    return t;
  }
  struct stat link;
  if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode))
    t.inPlace = true; // Dangling: writing creates the link's target.
  return t;
}

/// Moves the complete temporary `tmp` (from t.temporary()) to `t`: renames
/// it, or for in-place outputs copies its bytes into t.path and removes it.
/// On failure removes `tmp`, sets `err` (naming t.path) and returns false.
inline bool commitOutput(const std::string &tmp, const OutputTarget &t,
                         std::string &err) {
  if (!t.inPlace) {
    if (std::rename(tmp.c_str(), t.path.c_str()) == 0)
      return true;
    err = "cannot write '" + t.path + "': " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  struct stat tmpStat;
  bool haveMode = ::stat(tmp.c_str(), &tmpStat) == 0;
  FILE *in = std::fopen(tmp.c_str(), "rb");
  // Unlink the temporary before opening the destination: opening a FIFO
  // blocks until a reader comes, and a process killed meanwhile must not
  // leave the temporary behind. The open stream keeps its bytes readable.
  std::remove(tmp.c_str());
  FILE *out = in ? std::fopen(t.path.c_str(), "wb") : nullptr;
  bool ok = in && out;
  int savedErrno = errno;
  char buf[1 << 16];
  while (ok) {
    size_t n = std::fread(buf, 1, sizeof buf, in);
    if (n && std::fwrite(buf, 1, n, out) != n) {
      ok = false;
      savedErrno = errno;
    }
    if (n < sizeof buf)
      break;
  }
  if (in)
    std::fclose(in);
  if (out && std::fclose(out) != 0 && ok) {
    ok = false;
    savedErrno = errno;
  }
  // A regular file it created (through a dangling symlink) gets the
  // temporary's permissions: an executable stays executable.
  struct stat outStat;
  if (ok && haveMode && ::stat(t.path.c_str(), &outStat) == 0 &&
      S_ISREG(outStat.st_mode))
    ::chmod(t.path.c_str(), tmpStat.st_mode & 07777);
  if (!ok)
    err = "cannot write '" + t.path + "': " + std::strerror(savedErrno);
  return ok;
}

} // namespace runtime
} // namespace ddpc

#endif // DDPC_SUPPORT_OUTPUTFILE_H

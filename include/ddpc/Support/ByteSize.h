//===- ByteSize.h - byte counts for people ----------------------*- C++ -*-===//
//
// Part of ddpc. One spelling of memory sizes for the compiler's memory plan
// (Analysis/MemoryPlan.h) and the training runtime's high-water mark, so
// the two lines a user compares read alike. Plain C++ (the runtime has no
// LLVM).
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_SUPPORT_BYTESIZE_H
#define DDPC_SUPPORT_BYTESIZE_H

#include <cstdint>
#include <cstdio>
#include <string>

namespace ddpc {

/// `bytes` as "12.3 MiB" (B, KiB, MiB, GiB, TiB; one decimal above B).
inline std::string formatBytes(int64_t bytes) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024)
    return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024 && u < 3)
    v /= 1024, ++u;
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", v, units[u]);
  return text;
}

} // namespace ddpc

#endif // DDPC_SUPPORT_BYTESIZE_H

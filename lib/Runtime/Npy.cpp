//===- Npy.cpp - Read and write NumPy .npy files --------------------------===//
//
// Format reference: numpy/lib/format.py docstring. A file is the magic string
// "\x93NUMPY", a major and a minor version byte, a little-endian header length
// (uint16 for 1.0, uint32 for 2.0/3.0), an ASCII (UTF-8 for 3.0) Python dict
// literal padded with spaces and ended by '\n', then the raw array bytes.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/Npy.h"

#include "ddpc/Support/DTypes.h"
#include "ddpc/Support/OutputFile.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

#include <unistd.h>

namespace ddpc {
namespace runtime {

namespace {

const char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
// Total preamble + header length is padded to a multiple of this, as NumPy
// does, so that the data starts aligned when the file is memory-mapped.
constexpr size_t kHeaderAlign = 64;
// Refuse absurd header lengths from corrupt files before allocating.
constexpr uint32_t kMaxHeaderLen = 1u << 20;

bool hostIsLittleEndian() {
  uint16_t probe = 1;
  uint8_t first;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

/// A value of the header dict: only the shapes NumPy writes are needed.
struct PyValue {
  enum Kind { String, Bool, Tuple, Other } kind = Other;
  std::string str;
  bool boolean = false;
  std::vector<int64_t> ints;
};

/// Minimal parser for the Python dict literal in a .npy header.
class HeaderParser {
public:
  explicit HeaderParser(const std::string &text) : text(text) {}

  /// Parses `{'key': value, ...}`; sets `error` and returns false on failure.
  bool parseDict(std::vector<std::pair<std::string, PyValue>> &items) {
    skipSpace();
    if (!consume('{'))
      return fail("expected '{'");
    while (true) {
      skipSpace();
      if (consume('}'))
        break;
      std::string key;
      if (!parseString(key))
        return fail("expected a quoted key");
      skipSpace();
      if (!consume(':'))
        return fail("expected ':' after key '" + key + "'");
      PyValue value;
      if (!parseValue(value))
        return false;
      items.emplace_back(key, value);
      skipSpace();
      if (consume(','))
        continue;
      skipSpace();
      if (consume('}'))
        break;
      return fail("expected ',' or '}'");
    }
    skipSpace();
    if (pos != text.size())
      return fail("unexpected text after the header dict");
    return true;
  }

  std::string error;

private:
  bool fail(const std::string &msg) {
    if (error.empty())
      error = "malformed header (" + msg + " at offset " + std::to_string(pos) +
              ")";
    return false;
  }

  void skipSpace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t' ||
                                 text[pos] == '\n' || text[pos] == '\r'))
      ++pos;
  }

  bool consume(char c) {
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }

  bool consumeWord(const char *word) {
    size_t len = std::strlen(word);
    if (text.compare(pos, len, word) != 0)
      return false;
    pos += len;
    return true;
  }

  bool parseString(std::string &out) {
    if (pos >= text.size() || (text[pos] != '\'' && text[pos] != '"'))
      return false;
    char quote = text[pos++];
    while (pos < text.size() && text[pos] != quote) {
      if (text[pos] == '\\')
        return false; // Never produced by NumPy for the keys/descrs we accept.
      out += text[pos++];
    }
    return consume(quote);
  }

  bool parseValue(PyValue &value) {
    skipSpace();
    if (pos >= text.size())
      return fail("unexpected end of header");
    char c = text[pos];
    if (c == '\'' || c == '"') {
      value.kind = PyValue::String;
      if (!parseString(value.str))
        return fail("unterminated string");
      return true;
    }
    if (consumeWord("True")) {
      value.kind = PyValue::Bool;
      value.boolean = true;
      return true;
    }
    if (consumeWord("False")) {
      value.kind = PyValue::Bool;
      value.boolean = false;
      return true;
    }
    if (c == '(')
      return parseTuple(value);
    // Anything else (a list of fields for structured dtypes, None, ...) is
    // skipped with balanced brackets and reported by the caller.
    value.kind = PyValue::Other;
    int depth = 0;
    while (pos < text.size()) {
      char d = text[pos];
      if (d == '(' || d == '[' || d == '{')
        ++depth;
      else if (d == ')' || d == ']' || d == '}') {
        if (depth == 0)
          break;
        --depth;
      } else if (d == ',' && depth == 0)
        break;
      ++pos;
    }
    return true;
  }

  bool parseTuple(PyValue &value) {
    value.kind = PyValue::Tuple;
    consume('(');
    while (true) {
      skipSpace();
      if (consume(')'))
        return true;
      bool negative = consume('-');
      if (pos >= text.size() || text[pos] < '0' || text[pos] > '9')
        return fail("expected an integer in the shape tuple");
      int64_t v = 0;
      while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
        int digit = text[pos++] - '0';
        if (v > (std::numeric_limits<int64_t>::max() - digit) / 10)
          return fail("shape dimension overflows int64");
        v = v * 10 + digit;
      }
      consume('L'); // Python 2 long suffix in old files.
      value.ints.push_back(negative ? -v : v);
      skipSpace();
      if (consume(','))
        continue;
      skipSpace();
      if (consume(')'))
        return true;
      return fail("expected ',' or ')' in the shape tuple");
    }
  }

  const std::string &text;
  size_t pos = 0;
};

/// Validates the header dict and fills dtype and shape of `out`.
bool interpretHeader(const std::string &header, NpyArray &out,
                     std::string &what) {
  HeaderParser parser(header);
  std::vector<std::pair<std::string, PyValue>> items;
  if (!parser.parseDict(items)) {
    what = parser.error;
    return false;
  }
  bool haveDescr = false, haveOrder = false, haveShape = false;
  for (const auto &[key, value] : items) {
    if (key == "descr") {
      if (value.kind != PyValue::String) {
        what = "structured or non-string 'descr' is not supported";
        return false;
      }
      int32_t dtype = descrToDtype(value.str);
      if (dtype == 0) {
        if (!value.str.empty() && value.str[0] == '>')
          what = "big-endian dtype '" + value.str + "' is not supported";
        else
          what = "unsupported dtype '" + value.str + "'";
        return false;
      }
      out.dtype = dtype;
      haveDescr = true;
    } else if (key == "fortran_order") {
      if (value.kind != PyValue::Bool) {
        what = "'fortran_order' is not True or False";
        return false;
      }
      if (value.boolean) {
        what = "fortran_order=True arrays are not supported (save a "
               "C-contiguous array, e.g. np.ascontiguousarray(a))";
        return false;
      }
      haveOrder = true;
    } else if (key == "shape") {
      if (value.kind != PyValue::Tuple) {
        what = "'shape' is not a tuple";
        return false;
      }
      for (int64_t d : value.ints) {
        if (d < 0) {
          what = "negative dimension in shape";
          return false;
        }
      }
      out.shape = value.ints;
      haveShape = true;
    } else {
      what = "unexpected header key '" + key + "'";
      return false;
    }
  }
  if (!haveDescr || !haveOrder || !haveShape) {
    what = "header lacks ";
    what += !haveDescr ? "'descr'" : !haveOrder ? "'fortran_order'" : "'shape'";
    return false;
  }
  return true;
}

/// Checks magic and version of the first 8 bytes; returns the size of the
/// header-length field (2 or 4), or 0 with `what` set.
size_t checkPreamble(const uint8_t *bytes, size_t size, std::string &what) {
  if (size < kMagicLen + 2 || std::memcmp(bytes, kMagic, kMagicLen) != 0) {
    what = "not a .npy file (bad magic)";
    return 0;
  }
  uint8_t major = bytes[6], minor = bytes[7];
  if ((major == 1 || major == 2 || major == 3) && minor == 0)
    return major == 1 ? 2 : 4;
  what = "unsupported .npy format version " + std::to_string(major) + "." +
         std::to_string(minor);
  return 0;
}

uint32_t readLE(const uint8_t *bytes, size_t len) {
  uint32_t v = 0;
  for (size_t i = 0; i < len; ++i)
    v |= uint32_t(bytes[i]) << (8 * i);
  return v;
}

/// Computes the data size of `a` in bytes, or sets `what`.
bool dataBytes(const NpyArray &a, uint64_t &bytes, std::string &what) {
  size_t item = dtypeItemSize(a.dtype);
  int64_t n = numElements(a.shape);
  if (item == 0) {
    what = "unsupported dtype " + dtypeName(a.dtype);
    return false;
  }
  if (n < 0 || uint64_t(n) > std::numeric_limits<uint64_t>::max() / item) {
    what = "invalid shape " + formatShape(a.shape);
    return false;
  }
  bytes = uint64_t(n) * item;
  return true;
}

std::string sizeMismatch(uint64_t have, uint64_t want, const NpyArray &a) {
  return (have < want ? "truncated data: " : "trailing data: ") +
         std::to_string(have) + " data bytes, expected " +
         std::to_string(want) + " for " + dtypeName(a.dtype) +
         formatShape(a.shape);
}

struct FileCloser {
  FILE *f;
  ~FileCloser() {
    if (f)
      std::fclose(f);
  }
};

} // namespace

size_t dtypeItemSize(int32_t dtype) {
  const DTypeInfo *info = lookupDType(dtype);
  return info ? info->itemSize : 0;
}

std::string dtypeName(int32_t dtype) {
  const DTypeInfo *info = lookupDType(dtype);
  return info ? info->name : "dtype(" + std::to_string(dtype) + ")";
}

std::string dtypeToDescr(int32_t dtype) {
  const DTypeInfo *info = lookupDType(dtype);
  return info ? info->descr : "";
}

int32_t descrToDtype(const std::string &descr) {
  if (descr.size() < 3)
    return 0;
  char order = descr[0];
  std::string kind = descr.substr(1);
  bool oneByte = kind.size() == 2 && kind[1] == '1';
  bool little = order == '<' || (order == '=' && hostIsLittleEndian()) ||
                (order == '|' && oneByte) || (order == '>' && oneByte);
  if (!little)
    return 0;
  for (const DTypeInfo &info : kDTypes)
    if (info.dtype != 16 && kind == info.descr + 1)
      return info.dtype;
  return 0;
}

std::string formatShape(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t numElements(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      return -1;
    n *= d;
  }
  return n;
}

bool parseNpy(const uint8_t *bytes, size_t size, const std::string &name,
              NpyArray &out, std::string &err) {
  std::string what;
  auto fail = [&]() {
    err = "'" + name + "': " + what;
    return false;
  };
  size_t lenField = checkPreamble(bytes, size, what);
  if (lenField == 0)
    return fail();
  size_t fixed = kMagicLen + 2 + lenField;
  if (size < fixed) {
    what = "truncated header";
    return fail();
  }
  uint64_t headerLen = readLE(bytes + 8, lenField);
  if (headerLen > size - fixed) {
    what = "truncated header";
    return fail();
  }
  std::string header(reinterpret_cast<const char *>(bytes + fixed),
                     size_t(headerLen));
  NpyArray result;
  uint64_t want = 0;
  if (!interpretHeader(header, result, what) || !dataBytes(result, want, what))
    return fail();
  uint64_t have = size - fixed - headerLen;
  if (have != want) {
    what = sizeMismatch(have, want, result);
    return fail();
  }
  try {
    const uint8_t *data = bytes + fixed + headerLen;
    result.data.assign(data, data + want);
  } catch (const std::bad_alloc &) {
    what = "out of memory for " + std::to_string(want) + " bytes";
    return fail();
  }
  out = std::move(result);
  return true;
}

bool readNpy(const std::string &path, NpyArray &out, std::string &err) {
  std::string what;
  auto fail = [&]() {
    err = "'" + path + "': " + what;
    return false;
  };
  FileCloser file{std::fopen(path.c_str(), "rb")};
  if (!file.f) {
    what = std::string("cannot open: ") + std::strerror(errno);
    return fail();
  }
  // Read the file piecewise so the array bytes land directly in `out.data`.
  if (std::fseek(file.f, 0, SEEK_END) != 0) {
    what = std::string("cannot seek: ") + std::strerror(errno);
    return fail();
  }
  long endPos = std::ftell(file.f);
  if (endPos < 0 || std::fseek(file.f, 0, SEEK_SET) != 0) {
    what = std::string("cannot seek: ") + std::strerror(errno);
    return fail();
  }
  uint64_t fileSize = uint64_t(endPos);
  uint8_t pre[12] = {};
  size_t got =
      std::fread(pre, 1, fileSize < 12 ? size_t(fileSize) : 12, file.f);
  size_t lenField = checkPreamble(pre, got, what);
  if (lenField == 0)
    return fail();
  size_t fixed = kMagicLen + 2 + lenField;
  if (got < fixed) {
    what = "truncated header";
    return fail();
  }
  uint64_t headerLen = readLE(pre + 8, lenField);
  if (headerLen > kMaxHeaderLen) {
    what = "header length " + std::to_string(headerLen) + " is implausible";
    return fail();
  }
  if (headerLen > fileSize - fixed) {
    what = "truncated header";
    return fail();
  }
  std::string header(size_t(headerLen), '\0');
  if (std::fseek(file.f, long(fixed), SEEK_SET) != 0 ||
      std::fread(&header[0], 1, header.size(), file.f) != header.size()) {
    what = "cannot read header";
    return fail();
  }
  NpyArray result;
  uint64_t want = 0;
  if (!interpretHeader(header, result, what) || !dataBytes(result, want, what))
    return fail();
  uint64_t have = fileSize - fixed - headerLen;
  if (have != want) {
    what = sizeMismatch(have, want, result);
    return fail();
  }
  try {
    result.data.resize(size_t(want));
  } catch (const std::bad_alloc &) {
    what = "out of memory for " + std::to_string(want) + " bytes";
    return fail();
  } catch (const std::length_error &) {
    what = "array of " + std::to_string(want) + " bytes is too large";
    return fail();
  }
  if (want && std::fread(result.data.data(), 1, size_t(want), file.f) != want) {
    what = std::string("read error: ") + std::strerror(errno);
    return fail();
  }
  out = std::move(result);
  return true;
}

bool serializeNpy(const NpyArray &array, std::vector<uint8_t> &out,
                  std::string &err) {
  uint64_t want = 0;
  if (!dataBytes(array, want, err))
    return false;
  if (array.data.size() != want) {
    err = "array holds " + std::to_string(array.data.size()) +
          " bytes, expected " + std::to_string(want) + " for " +
          dtypeName(array.dtype) + formatShape(array.shape);
    return false;
  }
  std::string dict = "{'descr': '" + dtypeToDescr(array.dtype) +
                     "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < array.shape.size(); ++i)
    dict += (i ? ", " : "") + std::to_string(array.shape[i]);
  if (array.shape.size() == 1)
    dict += ","; // A 1-tuple needs its trailing comma in Python syntax.
  dict += "), }";
  // Pad with spaces so preamble + header (+ '\n') is a multiple of 64.
  auto padded = [&](size_t preamble) {
    size_t total = preamble + dict.size() + 1;
    size_t pad = (kHeaderAlign - total % kHeaderAlign) % kHeaderAlign;
    return dict.size() + pad + 1;
  };
  uint8_t major = 1;
  size_t headerLen = padded(10);
  if (headerLen > 0xffff) {
    major = 2;
    headerLen = padded(12);
  }
  try {
    out.clear();
    out.reserve(12 + headerLen + size_t(want));
    out.insert(out.end(), kMagic, kMagic + kMagicLen);
    out.push_back(major);
    out.push_back(0);
    size_t lenField = major == 1 ? 2 : 4;
    for (size_t i = 0; i < lenField; ++i)
      out.push_back(uint8_t(headerLen >> (8 * i)));
    out.insert(out.end(), dict.begin(), dict.end());
    out.insert(out.end(), headerLen - dict.size() - 1, ' ');
    out.push_back('\n');
    out.insert(out.end(), array.data.begin(), array.data.end());
  } catch (const std::exception &) {
    err = "out of memory serializing " + std::to_string(want) + " bytes";
    return false;
  }
  return true;
}

bool writeNpy(const std::string &path, const NpyArray &array,
              std::string &err) {
  std::string what;
  auto fail = [&]() {
    err = "'" + path + "': " + what;
    return false;
  };
  std::vector<uint8_t> image;
  if (!serializeNpy(array, image, what))
    return fail();
  OutputTarget target = resolveOutput(path);
  std::string tmp = target.temporary();
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f) {
    what = "cannot create '" + tmp + "': " + std::strerror(errno);
    return fail();
  }
  bool ok = std::fwrite(image.data(), 1, image.size(), f) == image.size();
  int savedErrno = errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    savedErrno = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    what = std::string("write failed: ") + std::strerror(savedErrno);
    return fail();
  }
  return commitOutput(tmp, target, err);
}

} // namespace runtime
} // namespace ddpc

//===- NpyTest.cpp - Tests of the .npy reader and writer ------------------===//

#include "ddpc/Runtime/Npy.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

using namespace ddpc::runtime;

namespace {

/// A per-test scratch directory, removed with its files afterwards.
class NpyTest : public ::testing::Test {
protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ddpc-npy-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
  }
  void TearDown() override {
    for (const std::string &f : created)
      std::remove(f.c_str());
    rmdir(dir.c_str());
  }

  std::string path(const std::string &name) {
    created.push_back(dir + "/" + name);
    return created.back();
  }

  void writeBytes(const std::string &file, const std::vector<uint8_t> &bytes) {
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
  }

  std::vector<uint8_t> readBytes(const std::string &file) {
    std::ifstream in(file, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
  }

  /// A .npy image with the given version and header dict, then `data`.
  std::vector<uint8_t> makeImage(int major, const std::string &dict,
                                 const std::vector<uint8_t> &data) {
    std::vector<uint8_t> img = {0x93,           'N', 'U', 'M', 'P', 'Y',
                                uint8_t(major), 0};
    std::string header = dict;
    size_t pre = major == 1 ? 10 : 12;
    while ((pre + header.size() + 1) % 64)
      header += ' ';
    header += '\n';
    for (size_t i = 0; i < (major == 1 ? 2u : 4u); ++i)
      img.push_back(uint8_t(header.size() >> (8 * i)));
    img.insert(img.end(), header.begin(), header.end());
    img.insert(img.end(), data.begin(), data.end());
    return img;
  }

  std::string dir;
  std::vector<std::string> created;
};

NpyArray makeArray(int32_t dtype, std::vector<int64_t> shape) {
  NpyArray a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  size_t bytes = size_t(numElements(a.shape)) * dtypeItemSize(dtype);
  for (size_t i = 0; i < bytes; ++i)
    a.data.push_back(uint8_t(i * 37 + 11));
  if (dtype == 9) // bool: keep 0/1
    for (uint8_t &b : a.data)
      b &= 1;
  return a;
}

TEST_F(NpyTest, RoundTripsEveryDType) {
  const int32_t dtypes[] = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13};
  for (int32_t dtype : dtypes) {
    SCOPED_TRACE(dtypeName(dtype));
    NpyArray a = makeArray(dtype, {2, 3, 5});
    std::string file = path("rt" + std::to_string(dtype) + ".npy");
    std::string err;
    ASSERT_TRUE(writeNpy(file, a, err)) << err;
    NpyArray b;
    ASSERT_TRUE(readNpy(file, b, err)) << err;
    EXPECT_EQ(b.dtype, dtype);
    EXPECT_EQ(b.shape, a.shape);
    EXPECT_EQ(b.data, a.data);
    // Version 1.0, header padded so the data starts 64-byte aligned.
    std::vector<uint8_t> bytes = readBytes(file);
    ASSERT_GT(bytes.size(), 10u);
    EXPECT_EQ(bytes[6], 1);
    EXPECT_EQ((10 + bytes[8] + (bytes[9] << 8)) % 64, 0);
  }
}

TEST_F(NpyTest, WritesNumpyHeader) {
  std::vector<uint8_t> img;
  std::string err;
  ASSERT_TRUE(serializeNpy(makeArray(7, {5}), img, err)) << err;
  size_t headerLen = img[8] + (img[9] << 8);
  EXPECT_EQ((10 + headerLen) % 64, 0u);
  std::string text(img.begin() + 10, img.begin() + 10 + headerLen);
  EXPECT_EQ(text.rfind("{'descr': '<i8', 'fortran_order': False, 'shape': "
                       "(5,), }",
                       0),
            0u);
  EXPECT_EQ(text.back(), '\n');
}

TEST_F(NpyTest, BFloat16IsWrittenAsUInt16Bits) {
  NpyArray a = makeArray(16, {4});
  std::string file = path("bf16.npy"), err;
  ASSERT_TRUE(writeNpy(file, a, err)) << err;
  NpyArray b;
  ASSERT_TRUE(readNpy(file, b, err)) << err;
  EXPECT_EQ(b.dtype, 4);
  EXPECT_EQ(b.data, a.data);
}

TEST_F(NpyTest, ZeroDimensional) {
  NpyArray a = makeArray(11, {});
  std::string file = path("scalar.npy"), err;
  ASSERT_TRUE(writeNpy(file, a, err)) << err;
  NpyArray b;
  ASSERT_TRUE(readNpy(file, b, err)) << err;
  EXPECT_TRUE(b.shape.empty());
  EXPECT_EQ(b.data.size(), 8u);
  EXPECT_EQ(b.data, a.data);
  std::vector<uint8_t> bytes = readBytes(file);
  std::string header(bytes.begin() + 10, bytes.end());
  EXPECT_NE(header.find("'shape': ()"), std::string::npos);
}

TEST_F(NpyTest, ZeroSize) {
  NpyArray a = makeArray(1, {3, 0, 2});
  EXPECT_TRUE(a.data.empty());
  std::string file = path("empty.npy"), err;
  ASSERT_TRUE(writeNpy(file, a, err)) << err;
  NpyArray b;
  ASSERT_TRUE(readNpy(file, b, err)) << err;
  EXPECT_EQ(b.shape, (std::vector<int64_t>{3, 0, 2}));
  EXPECT_TRUE(b.data.empty());
}

TEST_F(NpyTest, ReadsVersion2And3) {
  std::vector<uint8_t> data = {1, 0, 0, 0, 2, 0, 0, 0};
  for (int major : {2, 3}) {
    std::string file = path("v" + std::to_string(major) + ".npy"), err;
    writeBytes(file, makeImage(major,
                               "{\"descr\": \"<i4\", \"fortran_order\": False,"
                               " \"shape\": (2,)}",
                               data));
    NpyArray b;
    ASSERT_TRUE(readNpy(file, b, err)) << err;
    EXPECT_EQ(b.dtype, 6);
    EXPECT_EQ(b.shape, std::vector<int64_t>{2});
    EXPECT_EQ(b.data, data);
  }
}

TEST_F(NpyTest, WritesVersion2ForHugeHeaders) {
  // A rank-30000 shape of ones makes the header exceed 64 KiB.
  NpyArray a;
  a.dtype = 2;
  a.shape.assign(30000, 1);
  a.data = {42};
  std::string file = path("big-header.npy"), err;
  ASSERT_TRUE(writeNpy(file, a, err)) << err;
  std::vector<uint8_t> bytes = readBytes(file);
  EXPECT_EQ(bytes[6], 2);
  NpyArray b;
  ASSERT_TRUE(readNpy(file, b, err)) << err;
  EXPECT_EQ(b.shape.size(), 30000u);
  EXPECT_EQ(b.data, a.data);
}

TEST_F(NpyTest, ParsesFromMemory) {
  std::vector<uint8_t> img;
  std::string err;
  NpyArray a = makeArray(5, {2, 2});
  ASSERT_TRUE(serializeNpy(a, img, err)) << err;
  NpyArray b;
  ASSERT_TRUE(parseNpy(img.data(), img.size(), "mem", b, err)) << err;
  EXPECT_EQ(b.data, a.data);
  img.pop_back();
  EXPECT_FALSE(parseNpy(img.data(), img.size(), "mem", b, err));
  EXPECT_NE(err.find("'mem'"), std::string::npos) << err;
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
}

/// Expects reading `bytes` to fail with an error naming the file and
/// containing `what`.
#define EXPECT_READ_FAILS(bytes, what)                                         \
  do {                                                                         \
    std::string file = path("bad.npy"), err;                                   \
    writeBytes(file, bytes);                                                   \
    NpyArray out;                                                              \
    EXPECT_FALSE(readNpy(file, out, err));                                     \
    EXPECT_NE(err.find(file), std::string::npos) << err;                       \
    EXPECT_NE(err.find(what), std::string::npos) << err;                       \
  } while (0)

TEST_F(NpyTest, RejectsFortranOrder) {
  EXPECT_READ_FAILS(makeImage(1,
                              "{'descr': '<f4', 'fortran_order': True, "
                              "'shape': (2, 2), }",
                              std::vector<uint8_t>(16)),
                    "fortran_order");
}

TEST_F(NpyTest, RejectsTruncatedData) {
  EXPECT_READ_FAILS(makeImage(1,
                              "{'descr': '<f4', 'fortran_order': False, "
                              "'shape': (2, 2), }",
                              std::vector<uint8_t>(15)),
                    "truncated data: 15 data bytes, expected 16");
}

TEST_F(NpyTest, RejectsTrailingData) {
  EXPECT_READ_FAILS(makeImage(1,
                              "{'descr': '<f4', 'fortran_order': False, "
                              "'shape': (2,), }",
                              std::vector<uint8_t>(9)),
                    "trailing data");
}

TEST_F(NpyTest, RejectsBadMagic) {
  std::vector<uint8_t> img =
      makeImage(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
                std::vector<uint8_t>(4));
  img[1] = 'X';
  EXPECT_READ_FAILS(img, "bad magic");
  EXPECT_READ_FAILS((std::vector<uint8_t>{0x93, 'N'}), "bad magic");
}

TEST_F(NpyTest, RejectsUnknownVersion) {
  std::vector<uint8_t> img =
      makeImage(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
                std::vector<uint8_t>(4));
  img[6] = 4;
  EXPECT_READ_FAILS(img, "version 4.0");
}

TEST_F(NpyTest, RejectsTruncatedHeader) {
  std::vector<uint8_t> img = makeImage(
      1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", {});
  img.resize(40);
  EXPECT_READ_FAILS(img, "truncated header");
}

TEST_F(NpyTest, RejectsUnsupportedDTypes) {
  EXPECT_READ_FAILS(makeImage(1,
                              "{'descr': '>f4', 'fortran_order': False, "
                              "'shape': (1,), }",
                              std::vector<uint8_t>(4)),
                    "big-endian");
  EXPECT_READ_FAILS(makeImage(1,
                              "{'descr': '<c8', 'fortran_order': False, "
                              "'shape': (1,), }",
                              std::vector<uint8_t>(8)),
                    "unsupported dtype '<c8'");
  EXPECT_READ_FAILS(makeImage(1,
                              "{'descr': [('a', '<f4')], 'fortran_order': "
                              "False, 'shape': (1,), }",
                              std::vector<uint8_t>(4)),
                    "structured");
}

TEST_F(NpyTest, RejectsMalformedHeaders) {
  EXPECT_READ_FAILS(makeImage(1, "{'descr': '<f4', 'shape': (1,), }",
                              std::vector<uint8_t>(4)),
                    "lacks 'fortran_order'");
  EXPECT_READ_FAILS(makeImage(1,
                              "{'descr': '<f4', 'fortran_order': False, "
                              "'shape': (1,, }",
                              std::vector<uint8_t>(4)),
                    "malformed header");
  EXPECT_READ_FAILS(makeImage(1,
                              "{'descr': '<f4', 'fortran_order': False, "
                              "'shape': (-1,), }",
                              {}),
                    "negative dimension");
}

TEST_F(NpyTest, AcceptsNativeAndOneByteOrders) {
  EXPECT_EQ(descrToDtype("<f4"), 1);
  EXPECT_EQ(descrToDtype("=f4"), 1);
  EXPECT_EQ(descrToDtype("|b1"), 9);
  EXPECT_EQ(descrToDtype("<u1"), 2);
  EXPECT_EQ(descrToDtype("|i1"), 3);
  EXPECT_EQ(descrToDtype(">i8"), 0);
  EXPECT_EQ(descrToDtype("|f4"), 0);
  EXPECT_EQ(descrToDtype("<V2"), 0);
}

TEST_F(NpyTest, MissingFileNamesPath) {
  NpyArray out;
  std::string file = dir + "/does-not-exist.npy", err;
  EXPECT_FALSE(readNpy(file, out, err));
  EXPECT_NE(err.find(file), std::string::npos) << err;
}

TEST_F(NpyTest, WriteIsAtomicAndReportsErrors) {
  NpyArray a = makeArray(1, {2});
  std::string err;
  std::string file = dir + "/no-such-dir/out.npy";
  EXPECT_FALSE(writeNpy(file, a, err));
  EXPECT_NE(err.find(file), std::string::npos) << err;
  // Inconsistent data size is refused before anything is created.
  a.data.pop_back();
  std::string file2 = path("inconsistent.npy");
  EXPECT_FALSE(writeNpy(file2, a, err));
  EXPECT_NE(err.find("expected 8"), std::string::npos) << err;
  EXPECT_EQ(access(file2.c_str(), F_OK), -1);
  std::string tmp = file2 + ".tmp." + std::to_string(getpid());
  EXPECT_EQ(access(tmp.c_str(), F_OK), -1);
}

} // namespace

// One test per kind of malformed file: each must give a non-ok Status whose
// message names the problem.
#include <gtest/gtest.h>

#include <limits>

#include "gguf_test_util.h"

namespace pagoda::gguf {
namespace {

using testing::parse_status;
using testing::RawGGUF;

constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ8_0 = 8;
constexpr uint32_t kString = 8;
constexpr uint32_t kArray = 9;
constexpr uint64_t kHuge = uint64_t{1} << 62;

void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  const Status st = parse_status(bytes);
  ASSERT_FALSE(st.is_ok()) << "expected an error mentioning '" << needle << "'";
  EXPECT_NE(st.message().find(needle), std::string::npos)
      << "message '" << st.message() << "' does not mention '" << needle << "'";
}

// A file with one tensor of the given shape/type/offset and `data_bytes` of data.
std::vector<uint8_t> one_tensor(const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset = 0,
                                size_t data_bytes = 4096) {
  RawGGUF g;
  g.header(1, 1).kv_u32("a", 1).tensor("t", dims, type, offset).pad_to(32).zeros(data_bytes);
  return g.bytes;
}

TEST(GGUFMalformed, ValidBaselineParses) {
  EXPECT_TRUE(parse_status(one_tensor({8, 2}, kF32)).is_ok());
  EXPECT_TRUE(parse_status(RawGGUF().header(0, 0).bytes).is_ok());
}

TEST(GGUFMalformed, EmptyBuffer) { expect_error({}, "empty"); }
TEST(GGUFMalformed, TooSmallForMagic) { expect_error({'G', 'G', 'U'}, "too small"); }
TEST(GGUFMalformed, BadMagic) {
  auto b = RawGGUF().header(0, 0).bytes;
  b[0] = 'g';
  expect_error(b, "magic");
}
TEST(GGUFMalformed, TruncatedHeader) {
  auto b = RawGGUF().header(0, 0).bytes;
  b.resize(20);
  expect_error(b, "too small");
}
TEST(GGUFMalformed, VersionOne) { expect_error(RawGGUF().header(0, 0, 1).bytes, "version 1"); }
TEST(GGUFMalformed, FutureVersion) { expect_error(RawGGUF().header(0, 0, 4).bytes, "version 4"); }
TEST(GGUFMalformed, VersionTwoAccepted) {
  EXPECT_TRUE(parse_status(RawGGUF().header(0, 1, 2).kv_u32("k", 3).bytes).is_ok());
}

TEST(GGUFMalformed, TruncatedKey) {
  RawGGUF g;
  g.header(0, 1).put<uint64_t>(100).zeros(5);
  expect_error(g.bytes, "metadata key");
}
TEST(GGUFMalformed, HugeStringLength) {
  RawGGUF g;
  g.header(0, 1).str("k").put<uint32_t>(kString).put<uint64_t>(~uint64_t{0}).zeros(16);
  expect_error(g.bytes, "exceeds");
}
TEST(GGUFMalformed, TruncatedValue) {
  RawGGUF g;
  g.header(0, 1).str("k").put<uint32_t>(static_cast<uint32_t>(ValueType::kU64)).zeros(3);
  expect_error(g.bytes, "truncated");
}
TEST(GGUFMalformed, HugeArrayCount) {
  RawGGUF g;
  g.header(0, 1).str("k").put<uint32_t>(kArray).put<uint32_t>(4).put<uint64_t>(kHuge).zeros(64);
  expect_error(g.bytes, "cannot fit");
}
TEST(GGUFMalformed, HugeStringArrayCount) {
  RawGGUF g;
  g.header(0, 1).str("k").put<uint32_t>(kArray).put<uint32_t>(kString).put<uint64_t>(kHuge);
  g.zeros(64);
  expect_error(g.bytes, "cannot fit");
}
TEST(GGUFMalformed, TruncatedArray) {
  RawGGUF g;
  g.header(0, 1).str("k").put<uint32_t>(kArray).put<uint32_t>(kString).put<uint64_t>(3);
  g.str("one").str("two").put<uint64_t>(50).zeros(10);
  expect_error(g.bytes, "array string");
}
TEST(GGUFMalformed, MetadataCountCannotFit) {
  expect_error(RawGGUF().header(0, kHuge).zeros(100).bytes, "metadata count");
}
TEST(GGUFMalformed, TensorCountCannotFit) { expect_error(RawGGUF().header(kHuge, 0).zeros(100).bytes, "tensor count"); }
TEST(GGUFMalformed, UnknownValueType) {
  for (uint32_t t : {13u, 100u, 0xFFFFFFFFu}) {
    RawGGUF g;
    g.header(0, 1).str("k").put<uint32_t>(t).zeros(16);
    expect_error(g.bytes, "unknown value type " + std::to_string(t));
  }
}
TEST(GGUFMalformed, UnknownArrayElementType) {
  RawGGUF g;
  g.header(0, 1).str("k").put<uint32_t>(kArray).put<uint32_t>(13).put<uint64_t>(0);
  expect_error(g.bytes, "unknown array element type");
}
TEST(GGUFMalformed, NestedArray) {
  RawGGUF g;
  g.header(0, 1).str("k").put<uint32_t>(kArray).put<uint32_t>(kArray).put<uint64_t>(1);
  g.put<uint32_t>(4).put<uint64_t>(1).put<uint32_t>(7);
  expect_error(g.bytes, "nested");
}
TEST(GGUFMalformed, DuplicateMetadataKey) {
  expect_error(RawGGUF().header(0, 2).kv_u32("dup", 1).kv_u32("dup", 2).bytes, "duplicate metadata key 'dup'");
}
TEST(GGUFMalformed, EmptyMetadataKey) {
  expect_error(RawGGUF().header(0, 1).kv_u32("", 1).bytes, "empty metadata key");
}

TEST(GGUFMalformed, UnknownTensorType) {
  expect_error(one_tensor({8}, 4), "ggml type id 4");  // removed Q4_2
  expect_error(one_tensor({8}, 99), "ggml type id 99");
}
TEST(GGUFMalformed, ZeroDimension) { expect_error(one_tensor({8, 0}, kF32), "invalid dimension"); }
TEST(GGUFMalformed, NegativeDimension) { expect_error(one_tensor({~uint64_t{0}}, kF32), "invalid dimension"); }
TEST(GGUFMalformed, ElementCountOverflow) {
  expect_error(one_tensor({uint64_t{1} << 32, uint64_t{1} << 32, 1024}, kF32), "overflows");
}
TEST(GGUFMalformed, ByteSizeOverflow) { expect_error(one_tensor({uint64_t{1} << 61, 2}, kF32), "byte size overflows"); }
TEST(GGUFMalformed, RowNotMultipleOfBlock) { expect_error(one_tensor({16}, kQ8_0), "block size"); }
TEST(GGUFMalformed, ZeroDims) { expect_error(one_tensor({}, kF32), "0 dimensions"); }
TEST(GGUFMalformed, FiveDims) { expect_error(one_tensor({1, 1, 1, 1, 1}, kF32), "5 dimensions"); }
TEST(GGUFMalformed, TensorDataPastEnd) {
  expect_error(one_tensor({1024}, kF32, 0, 4095), "past the end");
  EXPECT_TRUE(parse_status(one_tensor({1024}, kF32, 0, 4096)).is_ok());
  expect_error(one_tensor({8}, kF32, 4096), "past the end");
}
TEST(GGUFMalformed, TensorOffsetOverflow) { expect_error(one_tensor({8}, kF32, ~uint64_t{31}), "past the end"); }
TEST(GGUFMalformed, MisalignedOffset) { expect_error(one_tensor({8}, kF32, 16), "not a multiple of the alignment"); }
TEST(GGUFMalformed, DuplicateTensorName) {
  RawGGUF g;
  g.header(2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad_to(32).zeros(64);
  expect_error(g.bytes, "duplicate tensor name 'w'");
}
TEST(GGUFMalformed, EmptyTensorName) {
  RawGGUF g;
  g.header(1, 0).tensor("", {8}, kF32, 0).pad_to(32).zeros(64);
  expect_error(g.bytes, "empty name");
}
TEST(GGUFMalformed, TruncatedTensorInfo) {
  RawGGUF g;
  g.header(1, 0).str("a_long_tensor_name").put<uint32_t>(2).put<uint64_t>(8).zeros(3);
  expect_error(g.bytes, "truncated");
}

std::vector<uint8_t> with_alignment(uint32_t type, const std::vector<uint8_t>& value) {
  RawGGUF g;
  g.header(0, 1).str("general.alignment").put<uint32_t>(type);
  g.bytes.insert(g.bytes.end(), value.begin(), value.end());
  return g.bytes;
}
TEST(GGUFMalformed, InvalidAlignment) {
  expect_error(RawGGUF().header(0, 1).kv_u32("general.alignment", 0).bytes, "power of two");
  expect_error(RawGGUF().header(0, 1).kv_u32("general.alignment", 48).bytes, "power of two");
  expect_error(with_alignment(static_cast<uint32_t>(ValueType::kI32), {0xE0, 0xFF, 0xFF, 0xFF}),
               "power of two");  // -32
  expect_error(with_alignment(kString, {1, 0, 0, 0, 0, 0, 0, 0, 'x'}), "power of two");
  EXPECT_TRUE(parse_status(RawGGUF().header(0, 1).kv_u32("general.alignment", 64).bytes).is_ok());
}

}  // namespace
}  // namespace pagoda::gguf

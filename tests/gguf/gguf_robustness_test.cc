// Truncating a valid file at every byte, and random byte mutations: parse()
// must return an error or a consistent file, never crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "gguf/gguf_writer.h"

namespace pagoda::gguf {
namespace {

// A small file with every kind of metadata value and three tensors.
std::vector<uint8_t> small_file() {
  static const std::vector<float> f32(6, 1.5f);
  static const std::vector<uint8_t> q8(34 * 2, 7);
  static const std::vector<uint16_t> f16(3, 0x3c00);
  GGUFWriter w;
  w.set("general.architecture", Value::make_string("llama"));
  w.set("u8", Value::make_u8(3));
  w.set("i16", Value::make_i16(-3));
  w.set("u32", Value::make_u32(70000));
  w.set("i64", Value::make_i64(-5));
  w.set("f64", Value::make_f64(0.25));
  w.set("flag", Value::make_bool(true));
  w.set("toks", Value::make_string_array({"<s>", "a", "bc"}));
  w.set("scores", Value::make_f32_array({0.5f, -1.0f}));
  w.set("types", Value::make_i32_array({1, 2, 3}));
  w.add_tensor("a", {6}, DType::kF32, f32.data(), f32.size() * 4);
  w.add_tensor("b", {32, 2}, DType::kQ8_0, q8.data(), q8.size());
  w.add_tensor("c", {3}, DType::kF16, f16.data(), f16.size() * 2);
  return w.to_bytes();
}

// Checks what a successful parse promises: tensors lie inside the buffer and
// lookups agree with the directory.
void check_consistent(const GGUFFile& f, const std::vector<uint8_t>& bytes) {
  for (const TensorInfo& t : f.tensors()) {
    ASSERT_GE(t.data, bytes.data());
    ASSERT_LE(t.data + t.num_bytes, bytes.data() + bytes.size());
    ASSERT_EQ(f.tensor(t.name), &t);
    ASSERT_GT(t.num_elements(), 0);
    ASSERT_TRUE(t.dims.size() >= 1 && t.dims.size() <= 4);
  }
  for (const auto& [key, v] : f.metadata()) {
    (void)f.get_int(key);
    (void)f.get_float(key);
    (void)f.get_string(key);
    if (v.type == ValueType::kArray) {
      ASSERT_NE(v.array_type, ValueType::kArray);
    }
  }
  ASSERT_NE(f.alignment(), 0u);
  ASSERT_EQ(f.alignment() & (f.alignment() - 1), 0u);
}

TEST(GGUFRobustness, TruncatedAtEveryByte) {
  const std::vector<uint8_t> full = small_file();
  auto parsed = GGUFFile::parse(full.data(), full.size());
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  // The file is complete once the last tensor's data is; the rest is padding.
  size_t needed = 0;
  for (const TensorInfo& t : parsed.value()->tensors()) {
    needed = std::max(needed, static_cast<size_t>(t.data - full.data()) + t.num_bytes);
  }
  ASSERT_GT(needed, 200u);
  for (size_t len = 0; len < full.size(); ++len) {
    // A fresh copy of exactly `len` bytes, so ASan catches any over-read.
    const std::vector<uint8_t> prefix(full.begin(), full.begin() + static_cast<ptrdiff_t>(len));
    auto r = GGUFFile::parse(prefix.data(), prefix.size());
    if (len < needed) {
      ASSERT_FALSE(r.is_ok()) << "prefix of " << len << " bytes parsed";
      ASSERT_FALSE(r.status().message().empty());
    } else {
      ASSERT_TRUE(r.is_ok()) << len << ": " << r.status().message();
      check_consistent(*r.value(), prefix);
    }
  }
}

TEST(GGUFRobustness, RandomMutations) {
  constexpr uint32_t kSeed = 20240601;
  constexpr int kIterations = 2000;
  SCOPED_TRACE("seed " + std::to_string(kSeed));
  std::mt19937 rng(kSeed);
  const std::vector<uint8_t> base = small_file();
  const size_t header_end = GGUFFile::parse(base.data(), base.size()).value()->data_offset();
  int num_ok = 0;
  for (int it = 0; it < kIterations; ++it) {
    std::vector<uint8_t> bytes = base;
    const int num_flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < num_flips; ++k) {
      // Mostly mutate the header and directory, where parsing happens.
      const size_t limit = rng() % 4 == 0 ? bytes.size() : header_end;
      const size_t pos = rng() % limit;
      const auto flipped = static_cast<uint8_t>(bytes[pos] ^ (1u << (rng() % 8)));
      bytes[pos] = rng() % 2 ? static_cast<uint8_t>(rng()) : flipped;
    }
    if (rng() % 8 == 0) bytes.resize(rng() % bytes.size());
    auto r = GGUFFile::parse(bytes.data(), bytes.size());
    if (r.is_ok()) {
      ++num_ok;
      check_consistent(*r.value(), bytes);
    } else {
      ASSERT_FALSE(r.status().message().empty());
    }
  }
  std::printf("mutations: %d of %d still parsed\n", num_ok, kIterations);
  EXPECT_LT(num_ok, kIterations);  // most corruptions of the directory are caught
}

}  // namespace
}  // namespace pagoda::gguf

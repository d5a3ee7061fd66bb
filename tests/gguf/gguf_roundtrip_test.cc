// Writer -> reader round trips: every value type, arrays, tensors of several
// dtypes, alignment, and writing to disk.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include "gguf/gguf_writer.h"

namespace pagoda::gguf {
namespace {

std::unique_ptr<GGUFFile> parse_ok(const std::vector<uint8_t>& bytes) {
  auto r = GGUFFile::parse(bytes.data(), bytes.size());
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? std::move(r).value() : nullptr;
}

TEST(GGUFRoundTrip, EveryScalarType) {
  GGUFWriter w;
  w.set("t.u8", Value::make_u8(250));
  w.set("t.i8", Value::make_i8(-100));
  w.set("t.u16", Value::make_u16(65000));
  w.set("t.i16", Value::make_i16(-32000));
  w.set("t.u32", Value::make_u32(4000000000u));
  w.set("t.i32", Value::make_i32(-2000000000));
  w.set("t.u64", Value::make_u64(std::numeric_limits<uint64_t>::max()));
  w.set("t.i64", Value::make_i64(std::numeric_limits<int64_t>::min()));
  w.set("t.f32", Value::make_f32(1.5f));
  w.set("t.f64", Value::make_f64(-2.25e300));
  w.set("t.bool", Value::make_bool(true));
  w.set("t.false", Value::make_bool(false));
  w.set("t.str", Value::make_string(std::string("h\xc3\xa9llo\0x", 8)));
  w.set("t.empty_str", Value::make_string(""));
  auto f = parse_ok(w.to_bytes());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->metadata().size(), 14u);
  EXPECT_EQ(f->find("general.alignment"), nullptr);  // default not written
  EXPECT_EQ(f->get_int("t.u8"), 250);
  EXPECT_EQ(f->get_int("t.i8"), -100);
  EXPECT_EQ(f->get_int("t.u16"), 65000);
  EXPECT_EQ(f->get_int("t.i16"), -32000);
  EXPECT_EQ(f->get_int("t.u32"), 4000000000LL);
  EXPECT_EQ(f->get_int("t.i32"), -2000000000);
  EXPECT_EQ(f->get_int("t.u64"), std::nullopt);  // does not fit int64
  EXPECT_EQ(f->find("t.u64")->u, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f->get_int("t.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f->get_float("t.f32"), 1.5);
  EXPECT_EQ(f->get_float("t.f64"), -2.25e300);
  EXPECT_EQ(f->get_float("t.i32"), -2000000000.0);  // integers convert
  EXPECT_EQ(f->get_bool("t.bool"), true);
  EXPECT_EQ(f->get_bool("t.false"), false);
  EXPECT_EQ(f->get_int("t.bool"), 1);
  EXPECT_EQ(f->get_string("t.str"), std::string("h\xc3\xa9llo\0x", 8));
  EXPECT_EQ(f->get_string("t.empty_str"), "");
  for (const char* k :
       {"t.u8", "t.i8", "t.u16", "t.i16", "t.u32", "t.i32", "t.u64", "t.i64", "t.f32", "t.f64", "t.bool", "t.str"}) {
    EXPECT_NE(f->find(k), nullptr) << k;
  }
  EXPECT_EQ(f->find("t.u8")->type, ValueType::kU8);
  EXPECT_EQ(f->find("t.f64")->type, ValueType::kF64);
  EXPECT_EQ(f->find("t.str")->type, ValueType::kString);
}

TEST(GGUFRoundTrip, WrongTypeAccessorsReturnNothing) {
  GGUFWriter w;
  w.set("s", Value::make_string("x"));
  w.set("f", Value::make_f32(2.5f));
  w.set("ia", Value::make_i32_array({1, 2}));
  auto f = parse_ok(w.to_bytes());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->get_int("s"), std::nullopt);
  EXPECT_EQ(f->get_int("f"), std::nullopt);
  EXPECT_EQ(f->get_float("s"), std::nullopt);
  EXPECT_EQ(f->get_string("f"), std::nullopt);
  EXPECT_EQ(f->get_bool("s"), std::nullopt);
  EXPECT_EQ(f->get_int("missing"), std::nullopt);
  EXPECT_EQ(f->get_string_array("ia"), nullptr);
  EXPECT_EQ(f->get_float_array("ia"), nullptr);
  EXPECT_EQ(f->get_int_array("s"), nullptr);
  EXPECT_EQ(f->get_int_array("missing"), nullptr);
  ASSERT_NE(f->get_int_array("ia"), nullptr);
  EXPECT_EQ(*f->get_int_array("ia"), (std::vector<int64_t>{1, 2}));
}

TEST(GGUFRoundTrip, ArraysOfEveryElementType) {
  GGUFWriter w;
  const std::vector<std::pair<ValueType, std::vector<int64_t>>> int_cases = {
      {ValueType::kU8, {0, 1, 255}},
      {ValueType::kI8, {-128, 0, 127}},
      {ValueType::kU16, {0, 65535}},
      {ValueType::kI16, {-32768, 32767}},
      {ValueType::kU32, {0, 4294967295LL}},
      {ValueType::kI32, {-2147483648LL, 7}},
      {ValueType::kU64, {0, std::numeric_limits<int64_t>::max()}},
      {ValueType::kI64, {std::numeric_limits<int64_t>::min(), -1}},
      {ValueType::kBool, {1, 0, 1}},
  };
  for (const auto& [t, v] : int_cases) {
    w.set("a." + std::string(value_type_name(t)), Value::make_int_array(t, v));
  }
  w.set("a.f32", Value::make_f32_array({1.0f, -0.5f, 3e38f}));
  w.set("a.f64", Value::make_float_array(ValueType::kF64, {1e-300, -7.0}));
  w.set("a.str", Value::make_string_array({"a", "", "\xe2\x96\x81the"}));
  w.set("a.empty", Value::make_i32_array({}));
  w.set("a.empty_str", Value::make_string_array({}));
  auto f = parse_ok(w.to_bytes());
  ASSERT_NE(f, nullptr);
  for (const auto& [t, v] : int_cases) {
    const std::string key = "a." + std::string(value_type_name(t));
    const auto* got = f->get_int_array(key);
    ASSERT_NE(got, nullptr) << key;
    EXPECT_EQ(*got, v) << key;
    EXPECT_EQ(f->find(key)->array_type, t);
    EXPECT_EQ(f->find(key)->array_size(), v.size());
  }
  ASSERT_NE(f->get_float_array("a.f32"), nullptr);
  EXPECT_EQ(*f->get_float_array("a.f32"), (std::vector<double>{1.0, -0.5, static_cast<double>(3e38f)}));
  EXPECT_EQ(*f->get_float_array("a.f64"), (std::vector<double>{1e-300, -7.0}));
  EXPECT_EQ(*f->get_string_array("a.str"), (std::vector<std::string>{"a", "", "\xe2\x96\x81the"}));
  ASSERT_NE(f->get_int_array("a.empty"), nullptr);
  EXPECT_TRUE(f->get_int_array("a.empty")->empty());
  EXPECT_EQ(f->find("a.empty")->array_type, ValueType::kI32);
  ASSERT_NE(f->get_string_array("a.empty_str"), nullptr);
  EXPECT_TRUE(f->get_string_array("a.empty_str")->empty());
}

TEST(GGUFRoundTrip, LargeStringArray) {
  constexpr size_t kCount = 150000;
  std::vector<std::string> tokens(kCount);
  for (size_t k = 0; k < kCount; ++k) tokens[k] = "tok" + std::to_string(k * 7919 % 100003);
  GGUFWriter w;
  w.set("tokenizer.ggml.tokens", Value::make_string_array(tokens));
  auto f = parse_ok(w.to_bytes());
  ASSERT_NE(f, nullptr);
  const auto* got = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(*got, tokens);
}

TEST(GGUFRoundTrip, SetReplacesKeyInPlace) {
  GGUFWriter w;
  w.set("k", Value::make_u32(1));
  w.set("k", Value::make_string("two"));
  auto f = parse_ok(w.to_bytes());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->metadata().size(), 1u);
  EXPECT_EQ(f->get_string("k"), "two");
}

std::vector<uint8_t> random_bytes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

struct TensorCase {
  std::string name;
  std::vector<int64_t> dims;
  DType type;
};

void check_tensors(uint32_t alignment) {
  const uint32_t seed = 1234 + alignment;
  SCOPED_TRACE("seed " + std::to_string(seed) + " alignment " + std::to_string(alignment));
  std::mt19937 rng(seed);
  const std::vector<TensorCase> cases = {
      {"f32.vec", {7}, DType::kF32},        {"f16.mat", {5, 3}, DType::kF16},
      {"q8_0.w", {64, 3, 2}, DType::kQ8_0}, {"q4_k.w", {512, 2, 1, 3}, DType::kQ4_K},
      {"bf16.one", {1}, DType::kBF16},
  };
  std::vector<std::vector<uint8_t>> data;
  GGUFWriter w;
  if (alignment != 32) w.set_alignment(alignment);
  w.set("general.architecture", Value::make_string("test"));
  for (const auto& c : cases) {
    size_t bytes = dtype_row_bytes(c.type, c.dims[0]);
    for (size_t k = 1; k < c.dims.size(); ++k) bytes *= static_cast<size_t>(c.dims[k]);
    data.push_back(random_bytes(bytes, rng));
    w.add_tensor(c.name, c.dims, c.type, data.back().data(), bytes);
  }
  ASSERT_TRUE(w.validate().is_ok()) << w.validate().message();
  const auto bytes = w.to_bytes();
  auto f = parse_ok(bytes);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->alignment(), alignment);
  EXPECT_EQ(f->data_offset() % alignment, 0u);
  if (alignment == 32) {
    EXPECT_EQ(f->find("general.alignment"), nullptr);
  } else {
    EXPECT_EQ(f->get_int("general.alignment"), alignment);
  }
  ASSERT_EQ(f->tensors().size(), cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    const TensorInfo& t = f->tensors()[k];
    EXPECT_EQ(t.name, cases[k].name);
    EXPECT_EQ(t.dims, cases[k].dims);
    EXPECT_EQ(t.type, cases[k].type);
    EXPECT_EQ(t.offset % alignment, 0u);
    EXPECT_EQ(static_cast<size_t>(t.data - bytes.data()) % alignment, 0u);
    ASSERT_EQ(t.num_bytes, data[k].size());
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.num_bytes), data[k]) << t.name;
    EXPECT_EQ(f->tensor(cases[k].name), &t);
  }
  EXPECT_EQ(f->tensor("q4_k.w")->num_elements(), 512 * 2 * 3);
  EXPECT_EQ(f->tensor("nope"), nullptr);
  EXPECT_EQ(bytes.size() % alignment, 0u);
}

TEST(GGUFRoundTrip, TensorsDefaultAlignment) { check_tensors(32); }
TEST(GGUFRoundTrip, TensorsAlignment64) { check_tensors(64); }
TEST(GGUFRoundTrip, TensorsAlignment1) { check_tensors(1); }
TEST(GGUFRoundTrip, TensorsAlignment4096) { check_tensors(4096); }

TEST(GGUFRoundTrip, AlignmentSetThroughMetadata) {
  GGUFWriter w;
  w.set("a", Value::make_u32(1));
  w.set("general.alignment", Value::make_u32(128));
  const float x[3] = {1, 2, 3};
  w.add_tensor("x", {3}, DType::kF32, x, sizeof(x));
  const auto bytes = w.to_bytes();  // tensor data points into it
  auto f = parse_ok(bytes);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->alignment(), 128u);
  EXPECT_EQ(f->data_offset() % 128, 0u);
  EXPECT_EQ(std::memcmp(f->tensor("x")->data, x, sizeof(x)), 0);
}

TEST(GGUFRoundTrip, WriterRejectsBadInput) {
  const float x[4] = {};
  {
    GGUFWriter w;
    w.add_tensor("x", {4}, DType::kF32, x, 12);  // wrong size
    EXPECT_FALSE(w.validate().is_ok());
  }
  {
    GGUFWriter w;
    w.add_tensor("x", {4}, DType::kF32, x, 16);
    w.add_tensor("x", {4}, DType::kF32, x, 16);
    EXPECT_NE(w.validate().message().find("duplicate"), std::string::npos);
  }
  {
    GGUFWriter w;
    w.add_tensor("x", {16}, DType::kQ8_0, x, 16);  // 16 % 32 != 0
    EXPECT_FALSE(w.validate().is_ok());
  }
  {
    GGUFWriter w;
    w.set_alignment(48);
    EXPECT_FALSE(w.validate().is_ok());
  }
  {
    GGUFWriter w;
    Value nested = Value::make_i32_array({1});
    nested.array_type = ValueType::kArray;
    w.set("n", nested);
    EXPECT_FALSE(w.validate().is_ok());
  }
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("pagoda_gguf_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST(GGUFRoundTrip, WriteAndOpenFile) {
  const std::string path = temp_path("rt.gguf");
  std::vector<float> x(33);
  for (size_t k = 0; k < x.size(); ++k) x[k] = static_cast<float>(k) * 0.5f;
  GGUFWriter w;
  w.set("general.architecture", Value::make_string("llama"));
  w.add_tensor("x", {33}, DType::kF32, x.data(), x.size() * 4);
  ASSERT_TRUE(w.write(path).is_ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));
  {
    auto r = GGUFFile::open(path);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    auto& f = *r.value();
    EXPECT_EQ(f.path(), path);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    ASSERT_NE(f.tensor("x"), nullptr);
    EXPECT_EQ(std::memcmp(f.tensor("x")->data, x.data(), x.size() * 4), 0);
    EXPECT_EQ(w.to_bytes().size(), std::filesystem::file_size(path));
  }
  std::filesystem::remove(path);
}

TEST(GGUFRoundTrip, WriteToMissingDirectoryFails) {
  GGUFWriter w;
  const Status st = w.write("/nonexistent_dir_pagoda/x.gguf");
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("nonexistent_dir_pagoda"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace pagoda::gguf

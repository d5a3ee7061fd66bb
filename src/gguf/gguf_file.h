// Reading GGUF files (v2 and v3) through mmap. The file is untrusted: every
// malformed input gives a Status with a clear message, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace pagoda::gguf {

enum class ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

std::string_view value_type_name(ValueType t);
bool is_integer_type(ValueType t);  // u8..i64 and bool
bool is_float_type(ValueType t);    // f32, f64

// One metadata value. Scalars of integer/bool types live in `i` and `u` (both
// set by the reader and the make_* helpers; the writer reads `u` for unsigned
// types and `i` for signed ones and bool), floats in `f`, strings in `s`.
// Arrays keep their element type and fill exactly one of strs / ints / floats
// (u64 array elements above INT64_MAX keep their bit pattern in `ints`).
struct Value {
  ValueType type = ValueType::kU32;
  ValueType array_type = ValueType::kU32;  // when type == kArray
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string s;
  std::vector<std::string> strs;
  std::vector<int64_t> ints;
  std::vector<double> floats;

  bool is_integer() const;  // any integer or bool scalar
  bool is_float() const;
  size_t array_size() const;

  static Value make_u8(uint8_t v);
  static Value make_i8(int8_t v);
  static Value make_u16(uint16_t v);
  static Value make_i16(int16_t v);
  static Value make_u32(uint32_t v);
  static Value make_i32(int32_t v);
  static Value make_u64(uint64_t v);
  static Value make_i64(int64_t v);
  static Value make_f32(float v);
  static Value make_f64(double v);
  static Value make_bool(bool v);
  static Value make_string(std::string v);
  static Value make_string_array(std::vector<std::string> v);
  static Value make_f32_array(std::vector<float> v);
  static Value make_i32_array(std::vector<int32_t> v);
  // Arrays of any integer/bool (resp. f32/f64) element type. The writer
  // truncates each element to the element type.
  static Value make_int_array(ValueType elem, std::vector<int64_t> v);
  static Value make_float_array(ValueType elem, std::vector<double> v);
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // GGML order: dims[0] is the contiguous (row) length
  DType type = DType::kF32;
  uint64_t offset = 0;  // relative to the data section
  size_t num_bytes = 0;
  const uint8_t* data = nullptr;  // points into the mapping

  int64_t num_elements() const;
};

class GGUFFile {
 public:
  // Maps and parses a file.
  static Result<std::unique_ptr<GGUFFile>> open(const std::string& path);
  // Parses a buffer the caller keeps alive (used by tests and the fuzzer).
  static Result<std::unique_ptr<GGUFFile>> parse(const uint8_t* data, size_t size);

  ~GGUFFile();
  GGUFFile(const GGUFFile&) = delete;
  GGUFFile& operator=(const GGUFFile&) = delete;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }  // start of the data section
  const std::string& path() const { return path_; }

  const std::map<std::string, Value>& metadata() const { return metadata_; }
  const Value* find(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;   // integer or bool scalar
  std::optional<double> get_float(std::string_view key) const;  // float or integer scalar
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  const std::vector<std::string>* get_string_array(std::string_view key) const;
  const std::vector<double>* get_float_array(std::string_view key) const;
  const std::vector<int64_t>* get_int_array(std::string_view key) const;

  // Drops the resident pages of [p, p + n) (whole pages inside it) from an
  // opened file's mapping: the bytes stay valid and are read back from the
  // file on the next access. Lowers RSS once a copy of a tensor (repacked
  // weights) is used instead. No-op for parse()d buffers.
  void release_pages(const void* p, size_t n) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* tensor(std::string_view name) const;

 private:
  GGUFFile() = default;
  Status parse_impl();

  std::string path_;
  void* map_ = nullptr;  // owned mapping (open) or null (parse)
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::map<std::string, Value> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace pagoda::gguf

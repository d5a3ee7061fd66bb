// Parsing the GGUF header, metadata and tensor directory from an untrusted
// buffer. Every read is bounds-checked; lengths and counts are checked
// against the bytes that remain before anything is allocated.
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "gguf/gguf_file.h"

namespace pagoda::gguf {
namespace {

constexpr uint32_t kMaxDims = 4;
constexpr uint32_t kDefaultAlignment = 32;
constexpr const char* kAlignmentKey = "general.alignment";

std::string at(size_t pos) { return " at offset " + std::to_string(pos); }

// A bounds-checked little-endian reader over [data, data + size).
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  Status need(uint64_t n, const char* what) const {
    if (n > remaining()) {
      return data_loss("truncated file: " + std::string(what) + at(pos_) + " needs " + std::to_string(n) +
                       " bytes but only " + std::to_string(remaining()) + " remain");
    }
    return Status::ok();
  }

  template <typename T>
  Status read(T* out, const char* what) {
    PAGODA_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(out, data_ + pos_, sizeof(T));  // hosts are little-endian
    pos_ += sizeof(T);
    return Status::ok();
  }

  Status read_string(std::string* out, const char* what) {
    uint64_t len = 0;
    PAGODA_RETURN_IF_ERROR(read(&len, what));
    if (len > remaining()) {
      return data_loss("string length " + std::to_string(len) + " of " + what + at(pos_ - 8) + " exceeds the " +
                       std::to_string(remaining()) + " bytes left in the file");
    }
    out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return Status::ok();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::kF64); }

size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool: return 1;
    case ValueType::kU16:
    case ValueType::kI16: return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32: return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64: return 8;
    default: return 0;  // string, array: variable size
  }
}

template <typename T>
Status read_int(Cursor& c, Value* v) {
  T x{};
  PAGODA_RETURN_IF_ERROR(c.read(&x, "metadata value"));
  if constexpr (std::numeric_limits<T>::is_signed) {
    v->i = x;
    v->u = static_cast<uint64_t>(v->i);
  } else {
    v->u = x;
    v->i = static_cast<int64_t>(v->u);
  }
  return Status::ok();
}

// Reads one scalar (not a string or array) into the integer/float fields.
Status read_scalar(Cursor& c, ValueType t, Value* v) {
  switch (t) {
    case ValueType::kU8: return read_int<uint8_t>(c, v);
    case ValueType::kI8: return read_int<int8_t>(c, v);
    case ValueType::kU16: return read_int<uint16_t>(c, v);
    case ValueType::kI16: return read_int<int16_t>(c, v);
    case ValueType::kU32: return read_int<uint32_t>(c, v);
    case ValueType::kI32: return read_int<int32_t>(c, v);
    case ValueType::kU64: return read_int<uint64_t>(c, v);
    case ValueType::kI64: return read_int<int64_t>(c, v);
    case ValueType::kBool: {
      PAGODA_RETURN_IF_ERROR(read_int<uint8_t>(c, v));
      v->u = v->i = v->u != 0 ? 1 : 0;
      return Status::ok();
    }
    case ValueType::kF32: {
      float x = 0;
      PAGODA_RETURN_IF_ERROR(c.read(&x, "metadata value"));
      v->f = x;
      return Status::ok();
    }
    case ValueType::kF64: return c.read(&v->f, "metadata value");
    default: return internal_error("read_scalar called with a non-scalar type");
  }
}

Status read_array(Cursor& c, const std::string& key, Value* v) {
  uint32_t elem = 0;
  uint64_t count = 0;
  PAGODA_RETURN_IF_ERROR(c.read(&elem, "array element type"));
  if (!valid_value_type(elem)) {
    return data_loss("metadata key '" + key + "': unknown array element type " + std::to_string(elem));
  }
  const auto et = static_cast<ValueType>(elem);
  if (et == ValueType::kArray) {
    return unimplemented("metadata key '" + key + "': nested arrays are not supported");
  }
  PAGODA_RETURN_IF_ERROR(c.read(&count, "array length"));
  // Every element takes at least this many bytes in the file.
  const size_t min_elem = et == ValueType::kString ? 8 : scalar_size(et);
  if (count > c.remaining() / min_elem) {
    return data_loss("metadata key '" + key + "': array of " + std::to_string(count) + " " +
                     std::string(value_type_name(et)) + " elements cannot fit in the " + std::to_string(c.remaining()) +
                     " bytes left in the file");
  }
  v->array_type = et;
  if (et == ValueType::kString) {
    v->strs.resize(count);
    for (auto& s : v->strs) PAGODA_RETURN_IF_ERROR(c.read_string(&s, "array string"));
    return Status::ok();
  }
  const bool is_float = is_float_type(et);
  if (is_float) {
    v->floats.reserve(count);
  } else {
    v->ints.reserve(count);
  }
  Value elem_value;
  for (uint64_t k = 0; k < count; ++k) {
    PAGODA_RETURN_IF_ERROR(read_scalar(c, et, &elem_value));
    if (is_float) {
      v->floats.push_back(elem_value.f);
    } else {
      v->ints.push_back(elem_value.i);
    }
  }
  return Status::ok();
}

Status read_value(Cursor& c, const std::string& key, Value* v) {
  uint32_t type = 0;
  PAGODA_RETURN_IF_ERROR(c.read(&type, "metadata value type"));
  if (!valid_value_type(type)) {
    return data_loss("metadata key '" + key + "': unknown value type " + std::to_string(type) + at(c.pos() - 4));
  }
  v->type = static_cast<ValueType>(type);
  if (v->type == ValueType::kString) return c.read_string(&v->s, "metadata string");
  if (v->type == ValueType::kArray) return read_array(c, key, v);
  return read_scalar(c, v->type, v);
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

Status read_tensor_info(Cursor& c, TensorInfo* t) {
  PAGODA_RETURN_IF_ERROR(c.read_string(&t->name, "tensor name"));
  if (t->name.empty()) return data_loss("tensor with an empty name" + at(c.pos()));
  const std::string who = "tensor '" + t->name + "': ";
  uint32_t n_dims = 0;
  PAGODA_RETURN_IF_ERROR(c.read(&n_dims, "tensor dimension count"));
  if (n_dims == 0 || n_dims > kMaxDims) {
    return data_loss(who + "has " + std::to_string(n_dims) + " dimensions; expected 1 to " + std::to_string(kMaxDims));
  }
  t->dims.resize(n_dims);
  uint64_t num_elements = 1;
  for (auto& d : t->dims) {
    uint64_t raw = 0;
    PAGODA_RETURN_IF_ERROR(c.read(&raw, "tensor dimension"));
    if (raw == 0 || raw > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return data_loss(who + "invalid dimension " + std::to_string(static_cast<int64_t>(raw)));
    }
    d = static_cast<int64_t>(raw);
    if (!checked_mul(num_elements, raw, &num_elements) ||
        num_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return data_loss(who + "element count overflows");
    }
  }
  uint32_t type_id = 0;
  PAGODA_RETURN_IF_ERROR(c.read(&type_id, "tensor type"));
  const auto info = dtype_info(type_id);
  if (!info) return unimplemented(who + "unknown or unsupported ggml type id " + std::to_string(type_id));
  t->type = info->type;
  if (t->dims[0] % info->block_size != 0) {
    return data_loss(who + "row length " + std::to_string(t->dims[0]) + " is not a multiple of the " +
                     std::string(info->name) + " block size " + std::to_string(info->block_size));
  }
  uint64_t bytes = static_cast<uint64_t>(t->dims[0] / info->block_size);
  bool ok = checked_mul(bytes, static_cast<uint64_t>(info->type_size), &bytes);
  for (size_t k = 1; ok && k < t->dims.size(); ++k) {
    ok = checked_mul(bytes, static_cast<uint64_t>(t->dims[k]), &bytes);
  }
  if (!ok || bytes > std::numeric_limits<size_t>::max()) {
    return data_loss(who + "byte size overflows");
  }
  t->num_bytes = static_cast<size_t>(bytes);
  return c.read(&t->offset, "tensor offset");
}

}  // namespace

Status GGUFFile::parse_impl() {
  if (size_ == 0) return data_loss("empty file (0 bytes); not a GGUF file");
  Cursor c(data_, size_);
  constexpr size_t kHeaderSize = 4 + 4 + 8 + 8;
  if (size_ < 4) {
    return data_loss("file too small (" + std::to_string(size_) + " bytes) to be a GGUF file");
  }
  if (std::memcmp(data_, "GGUF", 4) != 0) {
    return data_loss("bad magic: not a GGUF file (expected the bytes 'GGUF' at offset 0)");
  }
  if (size_ < kHeaderSize) {
    return data_loss("file too small (" + std::to_string(size_) + " bytes) for a GGUF header (" +
                     std::to_string(kHeaderSize) + " bytes)");
  }
  char magic[4];
  PAGODA_RETURN_IF_ERROR(c.read(&magic, "magic"));
  PAGODA_RETURN_IF_ERROR(c.read(&version_, "version"));
  if (version_ != 2 && version_ != 3) {
    return unimplemented("unsupported GGUF version " + std::to_string(version_) +
                         " (only versions 2 and 3 are supported)");
  }
  uint64_t num_tensors = 0;
  uint64_t num_kv = 0;
  PAGODA_RETURN_IF_ERROR(c.read(&num_tensors, "tensor count"));
  PAGODA_RETURN_IF_ERROR(c.read(&num_kv, "metadata count"));
  // A key/value pair takes at least 13 bytes, a tensor info at least 32.
  if (num_kv > c.remaining() / 13) {
    return data_loss("metadata count " + std::to_string(num_kv) + " cannot fit in a " + std::to_string(size_) +
                     "-byte file");
  }
  if (num_tensors > c.remaining() / 32) {
    return data_loss("tensor count " + std::to_string(num_tensors) + " cannot fit in a " + std::to_string(size_) +
                     "-byte file");
  }

  for (uint64_t k = 0; k < num_kv; ++k) {
    std::string key;
    PAGODA_RETURN_IF_ERROR(c.read_string(&key, "metadata key"));
    if (key.empty()) return data_loss("empty metadata key" + at(c.pos() - 8));
    if (metadata_.count(key)) return data_loss("duplicate metadata key '" + key + "'");
    Value v;
    PAGODA_RETURN_IF_ERROR(read_value(c, key, &v));
    metadata_.emplace(std::move(key), std::move(v));
  }

  alignment_ = kDefaultAlignment;
  if (const Value* a = find(kAlignmentKey)) {
    const bool is_int = a->is_integer() && a->type != ValueType::kBool;
    const uint64_t av = a->u;  // negative values become huge and fail the range check
    if (!is_int || av == 0 || (av & (av - 1)) != 0 || av > std::numeric_limits<uint32_t>::max()) {
      return data_loss(std::string(kAlignmentKey) + " must be a nonzero power of two (got " +
                       (is_int ? std::to_string(a->i) : std::string(value_type_name(a->type))) + ")");
    }
    alignment_ = static_cast<uint32_t>(av);
  }

  tensors_.resize(num_tensors);
  for (uint64_t k = 0; k < num_tensors; ++k) {
    TensorInfo& t = tensors_[k];
    PAGODA_RETURN_IF_ERROR(read_tensor_info(c, &t));
    if (!tensor_index_.emplace(t.name, k).second) {
      return data_loss("duplicate tensor name '" + t.name + "'");
    }
    if (t.offset % alignment_ != 0) {
      return data_loss("tensor '" + t.name + "': offset " + std::to_string(t.offset) +
                       " is not a multiple of the alignment " + std::to_string(alignment_));
    }
  }

  // The data section starts at the next multiple of the alignment. A file
  // without tensors may end before it.
  const uint64_t end_of_infos = c.pos();
  const uint64_t data_start = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  data_offset_ = static_cast<size_t>(data_start);
  for (TensorInfo& t : tensors_) {
    uint64_t begin = 0;
    uint64_t end = 0;
    if (__builtin_add_overflow(data_start, t.offset, &begin) ||
        __builtin_add_overflow(begin, static_cast<uint64_t>(t.num_bytes), &end) || end > size_) {
      return data_loss("tensor '" + t.name + "': data (" + std::to_string(t.num_bytes) + " bytes at data offset " +
                       std::to_string(t.offset) + ") extends past the end of the " + std::to_string(size_) +
                       "-byte file");
    }
    t.data = data_ + begin;
  }
  return Status::ok();
}

}  // namespace pagoda::gguf

// GGUFWriter: serializes metadata and tensor directory (GGUF v3), then the
// tensor data, each tensor padded to the alignment.
#include "gguf/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "core/check.h"

namespace pagoda::gguf {
namespace {

constexpr uint32_t kVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;
constexpr const char* kAlignmentKey = "general.alignment";

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void put(T v) {
    put_bytes(&v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    put_bytes(s.data(), s.size());
  }
  void put_bytes(const void* p, size_t n) {
    const size_t old = out_->size();
    out_->resize(old + n);
    if (n > 0) std::memcpy(out_->data() + old, p, n);
  }

 private:
  std::vector<uint8_t>* out_;
};

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// Writes one scalar of type t taken from an integer (i/u) or float (f).
void put_scalar(ByteSink& out, ValueType t, int64_t i, uint64_t u, double f) {
  switch (t) {
    case ValueType::kU8: out.put<uint8_t>(static_cast<uint8_t>(u)); break;
    case ValueType::kI8: out.put<int8_t>(static_cast<int8_t>(i)); break;
    case ValueType::kU16: out.put<uint16_t>(static_cast<uint16_t>(u)); break;
    case ValueType::kI16: out.put<int16_t>(static_cast<int16_t>(i)); break;
    case ValueType::kU32: out.put<uint32_t>(static_cast<uint32_t>(u)); break;
    case ValueType::kI32: out.put<int32_t>(static_cast<int32_t>(i)); break;
    case ValueType::kU64: out.put<uint64_t>(u); break;
    case ValueType::kI64: out.put<int64_t>(i); break;
    case ValueType::kBool: out.put<uint8_t>(i != 0 ? 1 : 0); break;
    case ValueType::kF32: out.put<float>(static_cast<float>(f)); break;
    case ValueType::kF64: out.put<double>(f); break;
    default: PAGODA_CHECK(false && "put_scalar: not a scalar type");
  }
}

void put_value(ByteSink& out, const Value& v) {
  out.put<uint32_t>(static_cast<uint32_t>(v.type));
  if (v.type == ValueType::kString) {
    out.put_string(v.s);
  } else if (v.type == ValueType::kArray) {
    out.put<uint32_t>(static_cast<uint32_t>(v.array_type));
    out.put<uint64_t>(v.array_size());
    if (v.array_type == ValueType::kString) {
      for (const auto& s : v.strs) out.put_string(s);
    } else if (is_float_type(v.array_type)) {
      for (double x : v.floats) put_scalar(out, v.array_type, 0, 0, x);
    } else {
      for (int64_t x : v.ints) put_scalar(out, v.array_type, x, static_cast<uint64_t>(x), 0);
    }
  } else {
    put_scalar(out, v.type, v.i, v.u, v.f);
  }
}

Status check_value(const std::string& key, const Value& v) {
  if (key.empty()) return invalid_argument("GGUF writer: empty metadata key");
  if (static_cast<uint32_t>(v.type) > static_cast<uint32_t>(ValueType::kF64)) {
    return invalid_argument("GGUF writer: key '" + key + "' has an invalid value type");
  }
  if (v.type == ValueType::kArray && (v.array_type == ValueType::kArray ||
                                      static_cast<uint32_t>(v.array_type) > static_cast<uint32_t>(ValueType::kF64))) {
    return invalid_argument("GGUF writer: key '" + key + "' has an invalid array element type");
  }
  return Status::ok();
}

Status write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status(StatusCode::kUnavailable, std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::ok();
}

}  // namespace

void GGUFWriter::set(std::string key, Value value) {
  if (key == kAlignmentKey && value.is_integer()) {
    alignment_ = value.u > UINT32_MAX ? 0 : static_cast<uint32_t>(value.u);  // 0: write() fails
  }
  for (auto& kv : metadata_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GGUFWriter::add_tensor(std::string name, std::vector<int64_t> dims, DType type, const void* data,
                            size_t num_bytes) {
  tensors_.push_back({std::move(name), std::move(dims), type, data, num_bytes});
}

Status GGUFWriter::validate() const {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
    return invalid_argument("GGUF writer: alignment " + std::to_string(alignment_) + " is not a nonzero power of two");
  }
  for (const auto& [key, value] : metadata_) PAGODA_RETURN_IF_ERROR(check_value(key, value));
  std::set<std::string> names;
  for (const auto& t : tensors_) {
    const std::string who = "GGUF writer: tensor '" + t.name + "': ";
    if (t.name.empty()) return invalid_argument("GGUF writer: tensor with an empty name");
    if (!names.insert(t.name).second) return invalid_argument(who + "duplicate name");
    if (t.dims.empty() || t.dims.size() > 4) return invalid_argument(who + "needs 1 to 4 dims");
    uint64_t bytes = 1;
    for (size_t k = 0; k < t.dims.size(); ++k) {
      if (t.dims[k] <= 0) return invalid_argument(who + "dimensions must be positive");
      if (k > 0 && __builtin_mul_overflow(bytes, static_cast<uint64_t>(t.dims[k]), &bytes)) {
        return invalid_argument(who + "size overflows");
      }
    }
    const auto& info = dtype_info(t.type);
    if (t.dims[0] % info.block_size != 0) {
      return invalid_argument(who + "row length is not a multiple of the block size");
    }
    if (__builtin_mul_overflow(bytes, dtype_row_bytes(t.type, t.dims[0]), &bytes) || bytes != t.num_bytes) {
      return invalid_argument(who + "num_bytes " + std::to_string(t.num_bytes) + " does not match its shape and type");
    }
    if (t.data == nullptr) return invalid_argument(who + "null data");
  }
  return Status::ok();
}

std::vector<uint8_t> GGUFWriter::header_bytes() const {
  std::vector<uint8_t> bytes;
  ByteSink out(&bytes);
  const bool emit_alignment = alignment_ != kDefaultAlignment;
  bool has_alignment_key = false;
  for (const auto& kv : metadata_) has_alignment_key |= kv.first == kAlignmentKey;
  const uint64_t num_kv = metadata_.size() - (has_alignment_key ? 1 : 0) + (emit_alignment ? 1 : 0);

  out.put<uint32_t>(0x46554747);  // "GGUF"
  out.put<uint32_t>(kVersion);
  out.put<uint64_t>(tensors_.size());
  out.put<uint64_t>(num_kv);
  // general.alignment always reflects alignment_: in place of a key the
  // caller set, or first.
  const Value alignment_value = Value::make_u32(alignment_);
  if (emit_alignment && !has_alignment_key) {
    out.put_string(kAlignmentKey);
    put_value(out, alignment_value);
  }
  for (const auto& [key, value] : metadata_) {
    if (key == kAlignmentKey) {
      if (!emit_alignment) continue;
      out.put_string(key);
      put_value(out, alignment_value);
      continue;
    }
    out.put_string(key);
    put_value(out, value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    out.put_string(t.name);
    out.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) out.put<uint64_t>(static_cast<uint64_t>(d));
    out.put<uint32_t>(static_cast<uint32_t>(t.type));
    out.put<uint64_t>(offset);
    offset = align_up(offset + t.num_bytes, alignment_);
  }
  bytes.resize(align_up(bytes.size(), alignment_), 0);
  return bytes;
}

std::vector<uint8_t> GGUFWriter::to_bytes() const {
  const Status st = validate();
  if (!st.is_ok()) std::fprintf(stderr, "%s\n", st.message().c_str());
  PAGODA_CHECK(st.is_ok());
  std::vector<uint8_t> bytes = header_bytes();
  for (const auto& t : tensors_) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    bytes.insert(bytes.end(), p, p + t.num_bytes);
    bytes.resize(align_up(bytes.size(), alignment_), 0);
  }
  return bytes;
}

Status GGUFWriter::write(const std::string& path) const {
  PAGODA_RETURN_IF_ERROR(validate());
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return invalid_argument("cannot create '" + tmp + "': " + std::strerror(errno));
  }
  const std::vector<uint8_t> header = header_bytes();
  Status st = write_all(fd, header.data(), header.size());
  const std::vector<uint8_t> zeros(alignment_, 0);
  for (size_t k = 0; st.is_ok() && k < tensors_.size(); ++k) {
    const auto& t = tensors_[k];
    st = write_all(fd, t.data, t.num_bytes);
    const size_t pad = align_up(t.num_bytes, alignment_) - t.num_bytes;
    if (st.is_ok() && pad > 0) st = write_all(fd, zeros.data(), pad);
  }
  if (st.is_ok() && ::fsync(fd) != 0) st = Status(StatusCode::kUnavailable, std::strerror(errno));
  if (::close(fd) != 0 && st.is_ok()) st = Status(StatusCode::kUnavailable, std::strerror(errno));
  if (st.is_ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = Status(StatusCode::kUnavailable, std::string("rename failed: ") + std::strerror(errno));
  }
  if (!st.is_ok()) {
    ::unlink(tmp.c_str());
    return Status(st.code(), "writing GGUF file '" + path + "': " + st.message());
  }
  return Status::ok();
}

}  // namespace pagoda::gguf

// GGUFFile: mapping a file, and typed access to its metadata and tensors.
#include "gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gguf/mapping_guard.h"

namespace pagoda::gguf {
namespace {

Status os_error(const std::string& what, const std::string& path, int err) {
  const std::string msg = what + " '" + path + "': " + std::strerror(err);
  return err == ENOENT ? not_found(msg) : invalid_argument(msg);
}

}  // namespace

int64_t TensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // the parser rejected overflow
  return n;
}

void GGUFFile::release_pages(const void* p, size_t n) const {
  if (map_ == nullptr || n == 0) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const auto lo = std::max(reinterpret_cast<uintptr_t>(map_), (begin + page - 1) / page * page);
  const auto hi = std::min(reinterpret_cast<uintptr_t>(map_) + map_size_, (begin + n) / page * page);
  // A private, never-written file mapping: MADV_DONTNEED only unmaps the
  // pages; later reads fault them in from the page cache / file again.
  if (lo < hi) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

GGUFFile::~GGUFFile() {
  if (map_ == nullptr) return;
  unregister_mapping(map_);
  munmap(map_, map_size_);
}

Result<std::unique_ptr<GGUFFile>> GGUFFile::parse(const uint8_t* data, size_t size) {
  std::unique_ptr<GGUFFile> f(new GGUFFile());
  f->data_ = data;
  f->size_ = size;
  Status st = f->parse_impl();
  if (!st.is_ok()) return st;
  return f;
}

Result<std::unique_ptr<GGUFFile>> GGUFFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused
  // below as not a regular file); no effect on regular files.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return os_error("cannot open GGUF file", path, errno);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return os_error("cannot stat GGUF file", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    if (S_ISDIR(st.st_mode)) return os_error("cannot read GGUF file", path, EISDIR);
    return invalid_argument("cannot read GGUF file '" + path + "': not a regular file (a FIFO, socket or device)");
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return data_loss("GGUF file '" + path + "' is empty (0 bytes)");
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping stays valid after close
  if (map == MAP_FAILED) return os_error("cannot mmap GGUF file", path, map_err);

  std::unique_ptr<GGUFFile> f(new GGUFFile());
  f->path_ = path;
  f->map_ = map;
  f->map_size_ = size;
  register_mapping(map, size, path);
  f->data_ = static_cast<const uint8_t*>(map);
  f->size_ = size;
  Status parsed = f->parse_impl();
  if (!parsed.is_ok()) return Status(parsed.code(), path + ": " + parsed.message());
  return f;
}

const Value* GGUFFile::find(std::string_view key) const {
  auto it = metadata_.find(std::string(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

std::optional<int64_t> GGUFFile::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr || !v->is_integer()) return std::nullopt;
  if (v->type == ValueType::kU64 && v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::nullopt;  // does not fit
  }
  return v->i;
}

std::optional<double> GGUFFile::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_float()) return v->f;
  if (v->type == ValueType::kU64) return static_cast<double>(v->u);
  if (v->is_integer()) return static_cast<double>(v->i);
  return std::nullopt;
}

std::optional<bool> GGUFFile::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr || !v->is_integer()) return std::nullopt;
  return v->u != 0;
}

std::optional<std::string> GGUFFile::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr || v->type != ValueType::kString) return std::nullopt;
  return v->s;
}

const std::vector<std::string>* GGUFFile::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr || v->type != ValueType::kArray || v->array_type != ValueType::kString) {
    return nullptr;
  }
  return &v->strs;
}

const std::vector<double>* GGUFFile::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr || v->type != ValueType::kArray || !is_float_type(v->array_type)) return nullptr;
  return &v->floats;
}

const std::vector<int64_t>* GGUFFile::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr || v->type != ValueType::kArray || !is_integer_type(v->array_type)) {
    return nullptr;
  }
  return &v->ints;
}

const TensorInfo* GGUFFile::tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace pagoda::gguf

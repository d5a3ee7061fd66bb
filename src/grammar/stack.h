// A parse stack: grammar positions, top at back. Stacks are copied on every
// byte the matcher consumes and at every node of a vocabulary-trie walk, so
// short ones live inline (no allocation); deeper ones spill to the heap.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

namespace pagoda::grammar {

class Stack {
 public:
  static constexpr uint32_t kInline = 14;

  Stack() = default;
  Stack(const uint32_t* first, const uint32_t* last) { assign(first, last); }
  Stack(const Stack& o) { assign(o.begin(), o.end()); }
  Stack(Stack&& o) noexcept { take(std::move(o)); }
  Stack& operator=(const Stack& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  Stack& operator=(Stack&& o) noexcept {
    if (this != &o) take(std::move(o));
    return *this;
  }

  uint32_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const uint32_t* begin() const { return data(); }
  const uint32_t* end() const { return data() + size_; }
  uint32_t back() const { return data()[size_ - 1]; }
  uint32_t operator[](uint32_t i) const { return data()[i]; }
  void pop_back() { --size_; }
  void push_back(uint32_t v) {
    if (size_ == capacity()) grow();
    data()[size_++] = v;
  }
  bool operator==(const Stack& o) const {
    if (size_ != o.size_) return false;
    // Distinct stacks of one set usually differ at the top: check it first.
    if (size_ == 0) return true;
    if (back() != o.back()) return false;
    return std::memcmp(data(), o.data(), (size_ - 1) * sizeof(uint32_t)) == 0;
  }

 private:
  uint32_t* data() { return heap_ ? heap_.get() : inline_; }
  const uint32_t* data() const { return heap_ ? heap_.get() : inline_; }
  uint32_t capacity() const { return heap_ ? heap_capacity_ : kInline; }
  void grow() {
    const uint32_t cap = capacity() * 2;
    auto bigger = std::make_unique<uint32_t[]>(cap);
    std::copy(begin(), end(), bigger.get());
    heap_ = std::move(bigger);
    heap_capacity_ = cap;
  }
  void assign(const uint32_t* first, const uint32_t* last) {
    const auto n = static_cast<uint32_t>(last - first);
    if (n > capacity()) {
      heap_ = std::make_unique<uint32_t[]>(n);
      heap_capacity_ = n;
    }
    std::copy(first, last, data());
    size_ = n;
  }
  void take(Stack&& o) {
    if (o.heap_) {
      heap_ = std::move(o.heap_);
      heap_capacity_ = o.heap_capacity_;
    } else {
      heap_.reset();
      std::copy(o.inline_, o.inline_ + o.size_, inline_);
    }
    size_ = o.size_;
    o.size_ = 0;
  }

  uint32_t size_ = 0;
  uint32_t heap_capacity_ = 0;
  uint32_t inline_[kInline];
  std::unique_ptr<uint32_t[]> heap_;
};

}  // namespace pagoda::grammar

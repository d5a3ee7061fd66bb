// Shared helpers for tokenizer tests: cached tokenizers of the shared files.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "../shared_files.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::testing_util {

// Loads shared/<rel_path> once per test binary; null (and a test failure) on
// error. Callers use PAGODA_SHARED_TOKENIZER, which skips when it is absent.
inline const Tokenizer* shared_tokenizer(const std::string& rel_path) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(rel_path);
  if (it != cache.end()) return it->second.get();
  const std::string path = std::string(PAGODA_SHARED_DIR) + "/" + rel_path;
  auto f = gguf::GGUFFile::open(path);
  EXPECT_TRUE(f.is_ok()) << path << ": " << f.status().message();
  if (!f.is_ok()) return nullptr;
  auto t = Tokenizer::from_gguf(**f);
  EXPECT_TRUE(t.is_ok()) << path << ": " << t.status().message();
  if (!t.is_ok()) return nullptr;
  return (cache[rel_path] = std::move(t).value()).get();
}

}  // namespace pagoda::testing_util

// In a test body: `const Tokenizer* var` for shared/<rel_path>, or a skip when
// the file is absent.
#define PAGODA_SHARED_TOKENIZER(var, rel_path)                                         \
  PAGODA_SKIP_WITHOUT_SHARED(rel_path);                                                \
  const ::pagoda::Tokenizer* var = ::pagoda::testing_util::shared_tokenizer(rel_path); \
  ASSERT_NE(var, nullptr)

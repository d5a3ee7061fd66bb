// Shared helpers of the grammar tests.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace pagoda::grammar {

inline std::shared_ptr<const Grammar> must_compile(const std::string& gbnf) {
  auto g = compile_gbnf(gbnf);
  EXPECT_TRUE(g.is_ok()) << g.status().message() << "\n" << gbnf;
  return g.is_ok() ? *g : nullptr;
}

// The whole text is a sentence of the grammar.
inline bool matches(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g);
  return m.accept_bytes(text) && m.is_complete();
}

// A vocabulary of every single byte plus random strings over `alphabet`
// (and some multi-byte UTF-8 unless ascii_only), with an end token.
inline TokenVocab random_vocab(std::mt19937& rng, const std::string& alphabet, int num_random,
                               bool ascii_only = false) {
  std::vector<std::string> pieces;
  for (int b = 0; b < (ascii_only ? 128 : 256); ++b) pieces.emplace_back(1, static_cast<char>(b));
  const std::vector<std::string> extra = {"é", "日本", "\xF0\x9F\x98\x80", "\xC3", "\xA9"};
  if (!ascii_only) pieces.insert(pieces.end(), extra.begin(), extra.end());
  std::uniform_int_distribution<int> len(2, 6);
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  for (int i = 0; i < num_random; ++i) {
    std::string s;
    const int n = len(rng);
    for (int k = 0; k < n; ++k) s += alphabet[pick(rng)];
    pieces.push_back(s);
  }
  pieces.push_back("<eos>");
  pieces.push_back("");  // an empty piece never matches
  std::vector<bool> excluded(pieces.size(), false);
  const auto eos = static_cast<int32_t>(pieces.size() - 2);
  excluded[static_cast<size_t>(eos)] = true;
  return TokenVocab(std::move(pieces), excluded, {eos});
}

}  // namespace pagoda::grammar

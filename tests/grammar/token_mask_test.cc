// Token masks from the trie walk and the mask cache against the reference
// (every token's bytes checked in full), along random walks through several
// grammars, including stacks deeper than the cache key (whose masks depend on
// the run-time check of uncertain tokens).
#include <gtest/gtest.h>

#include <random>

#include "grammar/json_schema.h"
#include "grammar/mask_cache.h"
#include "grammar/matcher.h"
#include "grammar_test_util.h"

namespace pagoda::grammar {
namespace {

int count(const TokenMask& m) {
  int n = 0;
  for (const uint64_t w : m) n += __builtin_popcountll(w);
  return n;
}

void random_walks(const std::string& gbnf, const std::string& alphabet, int walks, int steps, uint32_t seed,
                  size_t* max_depth = nullptr) {
  auto g = must_compile(gbnf);
  ASSERT_TRUE(g);
  std::mt19937 rng(seed);
  const TokenVocab vocab = random_vocab(rng, alphabet, 400);
  for (int w = 0; w < walks; ++w) {
    Matcher m(g);
    for (int s = 0; s < steps; ++s) {
      TokenMask fast, ref;
      m.fill_mask(vocab, &fast);
      reference_mask(*g, m.stacks(), vocab, &ref);
      ASSERT_EQ(fast, ref) << "walk " << w << " step " << s << ": " << count(fast) << " vs " << count(ref);
      for (const Stack& st : m.stacks()) {
        if (max_depth) *max_depth = std::max<size_t>(*max_depth, st.size());
      }
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < vocab.size(); ++t) {
        if (mask_has(fast, t)) allowed.push_back(t);
      }
      ASSERT_FALSE(allowed.empty()) << "dead end at walk " << w << " step " << s;
      // Prefer longer continuations half of the time so walks go deep.
      const int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      if (vocab.end_ids()[0] == t) {
        ASSERT_TRUE(m.is_complete());
        ASSERT_TRUE(m.accept_token(vocab, t));
        EXPECT_TRUE(m.is_finished());
        break;
      }
      ASSERT_TRUE(m.accept_token(vocab, t)) << "token " << t << " in the mask but refused";
    }
  }
}

TEST(TokenMask, MatchesReferenceOnJsonObjects) {
  random_walks(json_object_gbnf(), "{}[]\":, 0123456789.-etruflsnab\\u", 12, 60, 1);
}

TEST(TokenMask, MatchesReferenceOnASchema) {
  const auto schema = nlohmann::ordered_json::parse(R"({
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": -20, "maximum": 345},
                   "tags": {"type": "array", "items": {"enum": ["a", "bc", null]}, "maxItems": 3},
                   "name": {"type": "string", "maxLength": 5},
                   "ok": {"type": "boolean"}},
    "required": ["id", "ok"], "additionalProperties": false})");
  auto text = json_schema_to_gbnf(schema);
  ASSERT_TRUE(text.is_ok()) << text.status().message();
  random_walks(*text, "{}[]\":, 0123456789-abcdefnultrs", 12, 60, 2);
}

TEST(TokenMask, MatchesReferenceBelowTheCacheKey) {
  // Nesting deeper than MaskCache::kKeyDepth: keys are truncated and the
  // tokens that close brackets are checked against the whole stack.
  const std::string gbnf = "root ::= v\nv ::= \"[\" v? \"]\" \"x\"? | \"(\" v \")\" | \"a\"\n";
  size_t depth = 0;
  std::mt19937 rng(3);
  auto g = must_compile(gbnf);
  ASSERT_TRUE(g);
  const TokenVocab vocab = random_vocab(rng, "[]()ax", 300);
  Matcher m(g);
  // Open 40 brackets, checking the mask at each depth, then close them.
  for (int i = 0; i < 40; ++i) {
    TokenMask fast, ref;
    m.fill_mask(vocab, &fast);
    reference_mask(*g, m.stacks(), vocab, &ref);
    ASSERT_EQ(fast, ref) << "depth " << i;
    ASSERT_TRUE(m.accept_bytes(i % 3 ? "[" : "("));
    for (const Stack& s : m.stacks()) depth = std::max<size_t>(depth, s.size());
  }
  EXPECT_GT(depth, MaskCache::kKeyDepth);
  ASSERT_TRUE(m.accept_bytes("a"));
  for (int i = 0; i < 80 && !m.is_complete(); ++i) {
    TokenMask fast, ref;
    m.fill_mask(vocab, &fast);
    reference_mask(*g, m.stacks(), vocab, &ref);
    ASSERT_EQ(fast, ref) << "closing " << i;
    bool moved = false;
    for (const char* c : {"]", ")", "x"}) {
      if (!moved && m.accept_bytes(c)) moved = true;
    }
    ASSERT_TRUE(moved);
  }
  EXPECT_TRUE(m.is_complete());
  random_walks(gbnf, "[]()ax", 10, 80, 4);
}

TEST(TokenMask, AmbiguousGrammarsAndUtf8) {
  random_walks("root ::= (w | \"ab\" | \"a\" \"b\"+ | [^a-z]{1,2})+ \".\"\nw ::= [a-c]+ \" \"?\n", "abc .é日", 10, 40,
               5);
}

TEST(TokenMask, EndTokensOnlyWhenComplete) {
  auto g = must_compile("root ::= \"ab\" \"c\"?");
  ASSERT_TRUE(g);
  std::mt19937 rng(6);
  const TokenVocab vocab = random_vocab(rng, "abc", 50);
  const int32_t eos = vocab.end_ids()[0];
  Matcher m(g);
  TokenMask mask;
  m.fill_mask(vocab, &mask);
  EXPECT_FALSE(mask_has(mask, eos));
  EXPECT_FALSE(m.accept_token(vocab, eos));
  ASSERT_TRUE(m.accept_bytes("ab"));
  m.fill_mask(vocab, &mask);
  EXPECT_TRUE(mask_has(mask, eos));
  EXPECT_TRUE(mask_has(mask, 'c'));
  EXPECT_FALSE(mask_has(mask, 'a'));
  EXPECT_FALSE(m.accept_token(vocab, 'a'));
  EXPECT_TRUE(m.accept_token(vocab, 'c'));
  m.fill_mask(vocab, &mask);
  EXPECT_EQ(count(mask), 1);  // only the end token
  EXPECT_TRUE(m.accept_token(vocab, eos));
  EXPECT_TRUE(m.is_finished());
}

TEST(TokenMask, CacheIsSharedAcrossMatchers) {
  auto g = must_compile(json_object_gbnf());
  ASSERT_TRUE(g);
  std::mt19937 rng(7);
  const TokenVocab vocab = random_vocab(rng, "{}\":ab ", 100);
  Matcher a(g), b(g);
  TokenMask ma, mb;
  a.fill_mask(vocab, &ma);
  const size_t entries = mask_cache(*g).size();
  EXPECT_GT(entries, 0u);
  b.fill_mask(vocab, &mb);
  EXPECT_EQ(ma, mb);
  EXPECT_EQ(mask_cache(*g).size(), entries);
}

}  // namespace
}  // namespace pagoda::grammar

// The SPM and BPE algorithms on small vocabularies built in memory.
#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

using Ids = std::vector<int32_t>;
const std::string kSp = "\xE2\x96\x81";  // ▁

// <unk> <s> </s>, 256 byte tokens, then `words` with `scores`.
VocabData spm_vocab(const std::vector<std::string>& words, const std::vector<float>& scores) {
  VocabData v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    v.tokens.push_back(name);
    v.token_types.push_back(TokenType::kByte);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  for (size_t i = 0; i < words.size(); ++i) {
    v.tokens.push_back(words[i]);
    v.scores.push_back(scores[i]);
    v.token_types.push_back(TokenType::kNormal);
  }
  return v;
}

std::unique_ptr<Tokenizer> make(VocabData v) {
  auto t = Tokenizer::from_vocab(std::move(v));
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return t.is_ok() ? std::move(t).value() : nullptr;
}

constexpr int32_t kW = 259;  // id of the first word

std::unique_ptr<Tokenizer> make_abc(float score_ab, float score_bc) {
  VocabData v = spm_vocab({"a", "b", "c", "ab", "bc"}, {-5, -5, -5, score_ab, score_bc});
  v.add_space_prefix = false;
  return make(v);
}

TEST(SpmMemory, HighestScoreMergesFirst) {
  auto prefer_bc = make_abc(-2, -1);
  ASSERT_NE(prefer_bc, nullptr);
  EXPECT_EQ(prefer_bc->encode("abc", false, false), (Ids{kW + 0, kW + 4}));         // a bc
  EXPECT_EQ(make_abc(-1, -2)->encode("abc", false, false), (Ids{kW + 3, kW + 2}));  // ab c
  EXPECT_EQ(make_abc(-1, -1)->encode("abc", false, false), (Ids{kW + 3, kW + 2}));  // tie: leftmost
  EXPECT_EQ(make_abc(-1, -1)->encode("bcab", false, false), (Ids{kW + 4, kW + 3}));
}

TEST(SpmMemory, SpacePrefixAndByteFallback) {
  auto t = make(spm_vocab({kSp, "a", kSp + "a"}, {-3, -3, -1}));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->encode("a a", false, false), (Ids{kW + 2, kW + 2}));
  EXPECT_EQ(t->encode("a a", true, false), (Ids{1, kW + 2, kW + 2}));
  // é is not a token: its two bytes come out as <0xC3> <0xA9>.
  EXPECT_EQ(t->encode("\xC3\xA9", false, false), (Ids{kW + 0, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t->decode({1, kW + 2, kW + 0, 3 + 0xC3, 3 + 0xA9}), "a \xC3\xA9");
  EXPECT_EQ(t->encode("", true, false), (Ids{1}));
  EXPECT_EQ(t->encode("", false, false), (Ids{}));

  VocabData no_prefix = spm_vocab({kSp, "a", kSp + "a"}, {-3, -3, -1});
  no_prefix.add_space_prefix = false;
  auto np = make(no_prefix);
  EXPECT_EQ(np->encode("a a", false, false), (Ids{kW + 1, kW + 2}));
  EXPECT_EQ(np->decode({kW + 2}), " a");
}

TEST(SpmMemory, SpecialTokensInText) {
  VocabData v = spm_vocab({kSp, "x", kSp + "x", "<tag>", "<ctl>"}, {-3, -3, -1, 0, 0});
  v.token_types[kW + 3] = TokenType::kUserDefined;
  v.token_types[kW + 4] = TokenType::kControl;
  auto t = make(v);
  ASSERT_NE(t, nullptr);
  // User-defined tokens are always matched; text after a special token gets
  // the SPM space prefix again.
  EXPECT_EQ(t->encode("x<tag>x", false, false), (Ids{kW + 2, kW + 3, kW + 2}));
  // Control tokens only with parse_special.
  EXPECT_EQ(t->encode("<ctl>", false, true), (Ids{kW + 4}));
  const Ids plain = t->encode("<ctl>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), kW + 4), 0);
  EXPECT_EQ(t->decode(plain), "<ctl>");
  EXPECT_EQ(t->encode("<s>", false, true), (Ids{1}));
}

TEST(SpmMemory, AddEosFlag) {
  VocabData v = spm_vocab({"a"}, {-1});
  v.add_eos = true;
  v.add_bos = false;
  auto t = make(v);
  ASSERT_NE(t, nullptr);
  // No BOS; "▁" is not a token so the prefix falls back to its three bytes.
  EXPECT_EQ(t->encode("a", true, false), (Ids{3 + 0xE2, 3 + 0x96, 3 + 0x81, kW, 2}));
  EXPECT_EQ(t->encode("a", false, false), (Ids{3 + 0xE2, 3 + 0x96, 3 + 0x81, kW}));
}

// Byte-level BPE: Ġ is the space byte in GPT-2's alphabet.
VocabData bpe_vocab(std::string pre) {
  VocabData v;
  v.model = "gpt2";
  v.pre = std::move(pre);
  v.tokens = {"a",
              "b",
              "c",
              "\xC4\xA0",
              "ab",
              "\xC4\xA0"
              "a",
              "abc",
              "<|end|>"};
  v.token_types.assign(v.tokens.size(), TokenType::kNormal);
  v.token_types.back() = TokenType::kControl;
  v.merges = {"a b", "\xC4\xA0 a", "ab c"};
  v.eos_id = 7;
  return v;
}

TEST(BpeMemory, LowestRankMergesFirst) {
  auto t = make(bpe_vocab("gpt-2"));
  ASSERT_NE(t, nullptr);
  // " abc": a+b (rank 0) beats Ġ+a (rank 1), then ab+c -> Ġ abc.
  EXPECT_EQ(t->encode("ab abc", false, false), (Ids{4, 3, 6}));
  EXPECT_EQ(t->decode({4, 3, 6}), "ab abc");
  EXPECT_EQ(t->encode(" a", false, false), (Ids{5}));
  EXPECT_EQ(t->encode("a<|end|>", false, true), (Ids{0, 7}));
  EXPECT_TRUE(t->is_eog(7));
  EXPECT_TRUE(t->is_eog(t->eos_id()));
  EXPECT_FALSE(t->add_bos());
}

TEST(BpeMemory, Llama3IgnoresMergesForWholeWords) {
  VocabData v = bpe_vocab("llama-bpe");
  v.merges = {"a b"};  // "abc" is reachable only as a whole-word token
  v.bos_id = 7;
  auto t = make(v);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->encode("abc", false, false), (Ids{6}));
  EXPECT_TRUE(t->add_bos());  // llama3 default
  VocabData g = bpe_vocab("gpt-2");
  g.merges = {"a b"};
  EXPECT_EQ(make(g)->encode("abc", false, false), (Ids{4, 2}));
}

TEST(BpeMemory, UnknownPreTypeFallsBackToGpt2) {
  auto t = make(bpe_vocab("some-future-model"));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->encode("ab abc", false, false), (Ids{4, 3, 6}));
}

TEST(FromVocab, RejectsBadVocabularies) {
  VocabData v = spm_vocab({"a"}, {0});
  v.model = "bert";
  EXPECT_EQ(Tokenizer::from_vocab(v).status().code(), StatusCode::kUnimplemented);
  v = spm_vocab({"a"}, {0});
  v.scores.pop_back();
  EXPECT_FALSE(Tokenizer::from_vocab(v).is_ok());
  v = spm_vocab({"a"}, {0});
  v.token_types.push_back(TokenType::kNormal);
  EXPECT_FALSE(Tokenizer::from_vocab(v).is_ok());
  VocabData empty;
  EXPECT_FALSE(Tokenizer::from_vocab(empty).is_ok());
  VocabData b = bpe_vocab("gpt-2");
  b.merges.clear();
  EXPECT_FALSE(Tokenizer::from_vocab(b).is_ok());
  // Out-of-range special ids are ignored, not trusted.
  VocabData o = bpe_vocab("gpt-2");
  o.eos_id = 1000;
  o.bos_id = -7;
  auto t = Tokenizer::from_vocab(o);
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ((*t)->eos_id(), -1);
  EXPECT_EQ((*t)->bos_id(), -1);
  EXPECT_EQ((*t)->decode({-1, 1000, 0}), "a");
}

}  // namespace
}  // namespace pagoda

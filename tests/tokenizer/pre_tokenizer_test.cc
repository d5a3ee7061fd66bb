// Pre-tokenizer splits on tricky strings, derived by hand from the regexes.
#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <random>

namespace pagoda::tok {
namespace {

using Words = std::vector<std::string>;

Words split(PreTokenizer kind, std::string_view text) {
  Words out;
  for (std::string_view w : pre_tokenize(kind, text)) out.emplace_back(w);
  return out;
}

TEST(PreTokenizer, Gpt2Basics) {
  const auto k = PreTokenizer::kGpt2;
  EXPECT_EQ(split(k, "Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(split(k, "I'm you're we'VE"), (Words{"I", "'m", " you", "'re", " we", "'", "VE"}));
  EXPECT_EQ(split(k, "12345 678"), (Words{"12345", " 678"}));
  EXPECT_EQ(split(k, "a  b"), (Words{"a", " ", " b"}));
  EXPECT_EQ(split(k, "a\n\nb"), (Words{"a", "\n", "\n", "b"}));
  EXPECT_EQ(split(k, "a  "), (Words{"a", "  "}));
  EXPECT_EQ(split(k, "\xF0\x9F\xA6\x99.cpp"), (Words{"\xF0\x9F\xA6\x99.", "cpp"}));
  EXPECT_EQ(split(k, "我想在apple工作"), (Words{"我想在apple工作"}));
  EXPECT_EQ(split(k, "Äpfel café"), (Words{"Äpfel", " café"}));
  EXPECT_EQ(split(k, "e\xCC\x81t"), (Words{"e", "\xCC\x81", "t"}));  // combining mark is not \p{L}
  EXPECT_EQ(split(k,
                  "a\xE3\x80\x80"
                  "b"),
            (Words{"a", "\xE3\x80\x80", "b"}));  // U+3000 is \s
  EXPECT_EQ(split(k,
                  "a\xFF"
                  "b"),
            (Words{"a", "\xFF", "b"}));  // invalid byte kept
  EXPECT_EQ(split(k, ""), (Words{}));
}

TEST(PreTokenizer, Llama3) {
  const auto k = PreTokenizer::kLlama3;
  EXPECT_EQ(split(k, "I'M HERE's 12345"), (Words{"I", "'M", " HERE", "'s", " ", "123", "45"}));
  EXPECT_EQ(split(k, "a\n\n  b"), (Words{"a", "\n\n", " ", " b"}));
  EXPECT_EQ(split(k, "hello!!\n\nworld"), (Words{"hello", "!!\n\n", "world"}));
  EXPECT_EQ(split(k, "(test)"), (Words{"(test", ")"}));
  EXPECT_EQ(split(k, "\tx"), (Words{"\tx"}));
  const char* digits[] = {"1", "12", "123", "1234", "12345"};
  const Words expect[] = {{"1"}, {"12"}, {"123"}, {"123", "4"}, {"123", "45"}};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(split(k, digits[i]), expect[i]) << digits[i];
}

TEST(PreTokenizer, Qwen2SingleDigits) {
  EXPECT_EQ(split(PreTokenizer::kQwen2, "x12345"), (Words{"x", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(split(PreTokenizer::kQwen2, "It'S"), (Words{"It", "'S"}));
}

TEST(PreTokenizer, DeepseekLlm) {
  const auto k = PreTokenizer::kDeepseekLlm;
  EXPECT_EQ(split(k, "Hello world\n123"), (Words{"Hello", " world", "\n", "123"}));
  EXPECT_EQ(split(k, "ab   "), (Words{"ab", "   "}));
  EXPECT_EQ(split(k, "ab  cd"), (Words{"ab", " ", " cd"}));
  EXPECT_EQ(split(k, "中文abc"), (Words{"中文", "abc"}));
  EXPECT_EQ(split(k, "a 12345"), (Words{"a", " ", "12345"}));
}

TEST(PreTokenizer, DeepseekCoder) {
  EXPECT_EQ(split(PreTokenizer::kDeepseekCoder, "a 12"), (Words{"a", " ", "1", "2"}));
  EXPECT_EQ(split(PreTokenizer::kDeepseekCoder, "x, y\r\n"), (Words{"x", ",", " y", "\r", "\n"}));
}

TEST(PreTokenizer, StarcoderFalconDefault) {
  EXPECT_EQ(split(PreTokenizer::kStarcoder, "abc123 def"), (Words{"abc", "1", "2", "3", " def"}));
  EXPECT_EQ(split(PreTokenizer::kFalcon, "a+b=c 1234"), (Words{"a", "+", "b", "=", "c", " ", "123", "4"}));
  EXPECT_EQ(split(PreTokenizer::kDefault, "a,b 12345"), (Words{"a", ",", "b", " ", "123", "45"}));
}

TEST(PreTokenizer, NamesAndFallback) {
  bool known = false;
  EXPECT_EQ(pre_tokenizer_from_name("llama-bpe", &known), PreTokenizer::kLlama3);
  EXPECT_TRUE(known);
  EXPECT_EQ(pre_tokenizer_from_name("refact", &known), PreTokenizer::kStarcoder);
  EXPECT_EQ(pre_tokenizer_from_name("mpt", &known), PreTokenizer::kGpt2);
  EXPECT_EQ(pre_tokenizer_from_name("phi-2", &known), PreTokenizer::kGpt2);
  EXPECT_EQ(pre_tokenizer_from_name("qwen2", &known), PreTokenizer::kQwen2);
  EXPECT_EQ(pre_tokenizer_from_name("no-such-tokenizer", &known), PreTokenizer::kGpt2);
  EXPECT_FALSE(known);
}

// Words always tile the input exactly, for every pre-tokenizer, on random
// mixes of scripts, digits, whitespace and invalid bytes.
TEST(PreTokenizer, RandomInputsAreCoveredExactly) {
  const uint32_t seed = 4242;
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<std::string> atoms = {"a",    "Q",        " ",        "\n", "\r",
                                          "\t",   "'",        "'s",       "7",  "٣",
                                          "中",   "é",        "\xCC\x81", "!",  "\xF0\x9F\x98\x81",
                                          "\xFF", "\xE2\x82", "\xC2\xA0"};
  for (auto kind :
       {PreTokenizer::kDefault, PreTokenizer::kGpt2, PreTokenizer::kLlama3, PreTokenizer::kQwen2,
        PreTokenizer::kDeepseekLlm, PreTokenizer::kDeepseekCoder, PreTokenizer::kFalcon, PreTokenizer::kStarcoder}) {
    for (int iter = 0; iter < 200; ++iter) {
      std::string s;
      const int n = static_cast<int>(rng() % 20);
      for (int k = 0; k < n; ++k) s += atoms[rng() % atoms.size()];
      std::string joined;
      for (std::string_view w : pre_tokenize(kind, s)) {
        EXPECT_FALSE(w.empty());
        EXPECT_EQ(w.data(), s.data() + joined.size());
        joined += w;
      }
      EXPECT_EQ(joined, s) << "kind " << static_cast<int>(kind);
    }
  }
}

}  // namespace
}  // namespace pagoda::tok

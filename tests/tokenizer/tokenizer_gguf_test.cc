// Tokenizers loaded from the real GGUF files: the stories260K prompts, special
// token handling, end-of-generation ids, flags and random round trips.
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

using Ids = std::vector<int32_t>;

TEST(Stories260K, PromptsMatchLlama2cReference) {
  PAGODA_SHARED_TOKENIZER(t, "models/stories260K.gguf");
  EXPECT_EQ(t->vocab_size(), 512);
  EXPECT_TRUE(t->is_spm());
  EXPECT_TRUE(t->add_bos());
  // From models/reference-greedy-*.ids.txt (PROMPT lines).
  EXPECT_EQ(t->encode("Once upon a time", true, false), (Ids{1, 403, 407, 261, 378}));
  EXPECT_EQ(t->encode("The little dog", true, false), (Ids{1, 291, 376, 400, 428}));
  EXPECT_EQ(t->decode({1, 403, 407, 261, 378}), "Once upon a time");
  EXPECT_EQ(t->decode({1, 291, 376, 400, 428}), "The little dog");
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_TRUE(t->is_eog(2));
  EXPECT_FALSE(t->is_eog(1));
}

TEST(SpecialTokens, Phi3ParsesControlTokensOnlyWhenAsked) {
  PAGODA_SHARED_TOKENIZER(t, "vocab/ggml-vocab-phi-3.gguf");
  const int32_t user = t->token_id("<|user|>");
  const int32_t end = t->token_id("<|end|>");
  ASSERT_EQ(user, 32010);
  ASSERT_EQ(end, 32007);
  const std::string text = "<|user|>\nHi<|end|>";
  const Ids parsed = t->encode(text, false, true);
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ(parsed.front(), user);
  EXPECT_EQ(parsed.back(), end);
  const Ids plain = t->encode(text, false, false);
  for (int32_t id : plain) {
    EXPECT_NE(id, user);
    EXPECT_NE(id, end);
  }
  EXPECT_GT(plain.size(), parsed.size());
  EXPECT_EQ(t->decode(plain), text);
  // Control tokens render only on request.
  EXPECT_EQ(t->token_to_piece(end), "");
  EXPECT_EQ(t->token_to_piece(end, true), "<|end|>");
  EXPECT_EQ(t->decode(parsed, true), "<|user|> \nHi<|end|>");  // text after a special gets the SPM space
  EXPECT_EQ(t->eos_id(), 32000);
  EXPECT_EQ(t->eot_id(), end);
  EXPECT_TRUE(t->is_eog(end));
  EXPECT_TRUE(t->is_eog(32000));
  EXPECT_FALSE(t->is_eog(user));
  EXPECT_NE(t->chat_template().find("<|assistant|>"), std::string::npos);
}

TEST(SpecialTokens, Gpt2EndOfText) {
  PAGODA_SHARED_TOKENIZER(t, "vocab/ggml-vocab-gpt-2.gguf");
  EXPECT_EQ(t->encode("a<|endoftext|>b", false, true), (Ids{64, 50256, 65}));
  const Ids plain = t->encode("a<|endoftext|>b", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256), 0);
  EXPECT_EQ(t->decode(plain), "a<|endoftext|>b");
  EXPECT_FALSE(t->add_bos());  // gpt-2 has no add_bos flag: BPE default is off
  EXPECT_EQ(t->encode("a", true, false), (Ids{64}));
  EXPECT_TRUE(t->is_eog(50256));
  EXPECT_EQ(t->chat_template(), "");
}

TEST(SpecialTokens, DeepseekAddsBosFromFlag) {
  PAGODA_SHARED_TOKENIZER(t, "vocab/ggml-vocab-deepseek-llm.gguf");
  EXPECT_TRUE(t->add_bos());
  const Ids ids = t->encode("Hello", true, false);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], 100000);
  EXPECT_EQ(t->decode(ids), "Hello");
  EXPECT_TRUE(t->is_eog(100001));
}

TEST(SpecialTokens, StarcoderFimTokens) {
  PAGODA_SHARED_TOKENIZER(t, "vocab/ggml-vocab-starcoder.gguf");
  const Ids ids = t->encode("<fim_prefix>def f():<fim_suffix>", false, true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 3);
  EXPECT_EQ(t->decode(ids), "def f():");
  EXPECT_EQ(t->decode(ids, true), "<fim_prefix>def f():<fim_suffix>");
}

TEST(Decode, SpmStripsOneLeadingSpaceAfterBos) {
  PAGODA_SHARED_TOKENIZER(t, "vocab/ggml-vocab-llama-spm.gguf");
  const Ids with_bos = t->encode("Hello world", true, false);
  EXPECT_EQ(with_bos, (Ids{1, 15043, 3186}));
  EXPECT_EQ(t->decode(with_bos), "Hello world");
  EXPECT_EQ(t->decode({15043, 3186}), "Hello world");
  EXPECT_EQ(t->decode({3186, 3186}), "world world");
  EXPECT_EQ(t->token_to_piece(3186), " world");
  EXPECT_EQ(t->token_to_piece(1), "");
  EXPECT_EQ(t->token_to_piece(1, true), "<s>");
  EXPECT_EQ(t->token_to_piece(-5), "");
  EXPECT_EQ(t->token_to_piece(t->vocab_size()), "");
  EXPECT_EQ(t->token_to_piece(3 + 0x41), "A");  // <0x41>
}

// Random strings over ASCII, accented letters, CJK, emoji, whitespace and
// digits round-trip through every vocabulary (byte fallback / byte-level BPE
// make every byte representable).
TEST(RoundTrip, RandomStringsAllVocabs) {
  const uint32_t seed = 20240611;
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<std::string> atoms = {
      "a",     "Z", "hello",    " ", "  ", "\n",   "\t",   "\r\n",           "'s", "'LL", "0",
      "12345", "ä", "É",        "ß", "中", "文字", "🦙", "😶‍🌫️", "!",  "...", "$",
      "<",     "ñ", "\xC2\xA0", "ق", "١٢", "Ⅻ",    "½",
  };
  for (const char* name :
       {"vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-phi-3.gguf", "vocab/ggml-vocab-gpt-2.gguf",
        "vocab/ggml-vocab-starcoder.gguf", "vocab/ggml-vocab-deepseek-llm.gguf"}) {
    PAGODA_SHARED_TOKENIZER(t, name);
    for (int iter = 0; iter < 60; ++iter) {
      std::string s;
      const int n = 1 + static_cast<int>(rng() % 12);
      for (int k = 0; k < n; ++k) s += atoms[rng() % atoms.size()];
      const Ids ids = t->encode(s, true, false);
      EXPECT_EQ(t->decode(ids), s) << name << " input '" << s << "'";
    }
  }
}

}  // namespace
}  // namespace pagoda

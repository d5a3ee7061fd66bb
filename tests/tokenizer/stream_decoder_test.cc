// StreamDecoder never emits part of a UTF-8 character.
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

bool is_complete_utf8(const std::string& s) {
  for (const tok::CodeUnit& u : tok::decode_utf8(s)) {
    if (u.cp == tok::kInvalidCodePoint) return false;
  }
  return true;
}

int32_t byte_token(const Tokenizer& t, uint8_t b) {
  char name[8];
  std::snprintf(name, sizeof(name), "<0x%02X>", b);
  return t.token_id(name);
}

TEST(StreamDecoder, HoldsBackMultibyteCharactersFedBytewise) {
  PAGODA_SHARED_TOKENIZER(t, "vocab/ggml-vocab-llama-spm.gguf");
  StreamDecoder dec(*t);
  const std::string text =
      "a\xF0\x9F\xA6\x99"
      "b\xE2\x82\xAC\xC3\xA9";  // a🦙b€é
  std::string all;
  for (unsigned char c : text) {
    const int32_t id = byte_token(*t, c);
    ASSERT_GE(id, 0);
    const std::string out = dec.push(id);
    EXPECT_TRUE(is_complete_utf8(out)) << "partial output after byte " << int(c);
    all += out;
  }
  EXPECT_EQ(dec.flush(), "");
  EXPECT_EQ(all, text);
}

TEST(StreamDecoder, EmitsAsSoonAsCharacterCompletes) {
  PAGODA_SHARED_TOKENIZER(t, "vocab/ggml-vocab-llama-spm.gguf");
  StreamDecoder dec(*t);
  EXPECT_EQ(dec.push(byte_token(*t, 0xE2)), "");
  EXPECT_EQ(dec.push(byte_token(*t, 0x82)), "");
  EXPECT_EQ(dec.push(byte_token(*t, 0xAC)), "\xE2\x82\xAC");
  EXPECT_EQ(dec.push(t->token_id("\xE2\x96\x81world")), " world");
}

TEST(StreamDecoder, InvalidBytesBecomeReplacementCharacter) {
  PAGODA_SHARED_TOKENIZER(t, "vocab/ggml-vocab-llama-spm.gguf");
  StreamDecoder dec(*t);
  // A lone continuation byte can never become valid: replaced at once.
  EXPECT_EQ(dec.push(byte_token(*t, 0x80)), "\xEF\xBF\xBD");
  // A lead byte followed by ASCII is invalid; the ASCII survives.
  EXPECT_EQ(dec.push(byte_token(*t, 0xE2)), "");
  EXPECT_EQ(dec.push(byte_token(*t, 'x')), "\xEF\xBF\xBDx");
  // An unfinished tail comes out of flush() as U+FFFD.
  EXPECT_EQ(dec.push(byte_token(*t, 0xF0)), "");
  EXPECT_EQ(dec.push(byte_token(*t, 0x9F)), "");
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.flush(), "");
}

// Random token streams: concatenated output equals the sanitized raw pieces
// and every push returns whole characters.
TEST(StreamDecoder, RandomStreamsMatchConcatenation) {
  const uint32_t seed = 777;
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const char* name : {"vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-gpt-2.gguf"}) {
    PAGODA_SHARED_TOKENIZER(t, name);
    for (int iter = 0; iter < 50; ++iter) {
      StreamDecoder dec(*t);
      std::string raw, streamed;
      const int n = 1 + static_cast<int>(rng() % 40);
      for (int k = 0; k < n; ++k) {
        const int32_t id = static_cast<int32_t>(rng() % t->vocab_size());
        raw += t->token_to_piece(id);
        const std::string out = dec.push(id);
        EXPECT_TRUE(is_complete_utf8(out)) << name << " id " << id;
        streamed += out;
      }
      streamed += dec.flush();
      EXPECT_EQ(streamed, tok::sanitize_utf8(raw)) << name;
    }
  }
}

TEST(StreamDecoder, GptTwoByteTokensOfEmoji) {
  PAGODA_SHARED_TOKENIZER(t, "vocab/ggml-vocab-gpt-2.gguf");
  const std::string emoji = "\xF0\x9F\xA6\x99";
  const std::vector<int32_t> ids = t->encode(" this is " + emoji, false, false);
  StreamDecoder dec(*t);
  std::string all;
  for (int32_t id : ids) {
    const std::string out = dec.push(id);
    EXPECT_TRUE(is_complete_utf8(out));
    all += out;
  }
  all += dec.flush();
  EXPECT_EQ(all, " this is " + emoji);
}

}  // namespace
}  // namespace pagoda

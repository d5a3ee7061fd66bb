#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

namespace pagoda::tok {
namespace {

TEST(Unicode, Classes) {
  EXPECT_EQ(unicode_class('a'), UnicodeClass::kLetter);
  EXPECT_EQ(unicode_class('7'), UnicodeClass::kNumber);
  EXPECT_EQ(unicode_class('!'), UnicodeClass::kPunctuation);
  EXPECT_EQ(unicode_class('$'), UnicodeClass::kSymbol);
  EXPECT_EQ(unicode_class(0x00C4), UnicodeClass::kLetter);  // Ä
  EXPECT_EQ(unicode_class(0x4E2D), UnicodeClass::kLetter);  // 中
  EXPECT_EQ(unicode_class(0x0663), UnicodeClass::kNumber);  // Arabic-Indic 3
  EXPECT_EQ(unicode_class(0x00BD), UnicodeClass::kNumber);  // ½
  EXPECT_EQ(unicode_class(0x0301), UnicodeClass::kMark);
  EXPECT_EQ(unicode_class(0x1F999), UnicodeClass::kSymbol);  // 🦙
  EXPECT_EQ(unicode_class(0x3001), UnicodeClass::kPunctuation);
  EXPECT_EQ(unicode_class(0x10FFFF), UnicodeClass::kOther);
  EXPECT_EQ(unicode_class(0x110000), UnicodeClass::kOther);
  EXPECT_TRUE(is_unicode_whitespace(0x3000));
  EXPECT_TRUE(is_unicode_whitespace(0x85));
  EXPECT_TRUE(is_unicode_whitespace('\v'));
  EXPECT_FALSE(is_unicode_whitespace(0x200B));  // zero width space is not \s
}

TEST(Unicode, DecodeUtf8) {
  const auto units = decode_utf8("a\xC3\xA9\xF0\x9F\xA6\x99\xFF\xE2\x82");
  ASSERT_EQ(units.size(), 6u);
  EXPECT_EQ(units[0].cp, 'a');
  EXPECT_EQ(units[1].cp, 0xE9u);
  EXPECT_EQ(units[2].cp, 0x1F999u);
  EXPECT_EQ(units[2].byte_len, 4u);
  EXPECT_EQ(units[3].cp, kInvalidCodePoint);
  EXPECT_EQ(units[4].cp, kInvalidCodePoint);  // truncated E2 82: one unit per byte
  EXPECT_EQ(units[5].byte_offset, 9u);
  // Overlong and surrogate encodings are invalid.
  EXPECT_EQ(decode_utf8("\xC0\x80").size(), 2u);
  EXPECT_EQ(decode_utf8("\xED\xA0\x80")[0].cp, kInvalidCodePoint);
}

TEST(Unicode, IncompleteTail) {
  EXPECT_EQ(utf8_incomplete_tail(""), 0u);
  EXPECT_EQ(utf8_incomplete_tail("abc"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE2"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE2\x82"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE2\x82\xAC"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\xA6"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("\x82\x82"), 0u);  // stray continuations: invalid, not pending
  EXPECT_EQ(utf8_incomplete_tail("\xE0\x80"), 0u);  // overlong prefix can never complete
  EXPECT_EQ(utf8_incomplete_tail("\xFF"), 0u);
}

TEST(Unicode, Sanitize) {
  EXPECT_EQ(sanitize_utf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(sanitize_utf8("a\xFF"
                          "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\xA6"), "\xEF\xBF\xBD");  // one per maximal subpart
  EXPECT_EQ(sanitize_utf8("\xE2\x82x"), "\xEF\xBF\xBDx");
}

TEST(Unicode, ByteAlphabetRoundTrips) {
  EXPECT_EQ(byte_to_bpe_char(' '), "\xC4\xA0");   // Ġ
  EXPECT_EQ(byte_to_bpe_char('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(byte_to_bpe_char('a'), "a");
  for (int b = 0; b < 256; ++b) {
    const auto units = decode_utf8(byte_to_bpe_char(static_cast<uint8_t>(b)));
    ASSERT_EQ(units.size(), 1u);
    EXPECT_EQ(bpe_char_to_byte(units[0].cp), b);
  }
  EXPECT_EQ(bpe_char_to_byte(0x4E2D), -1);
}

}  // namespace
}  // namespace pagoda::tok

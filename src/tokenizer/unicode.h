// Small Unicode helpers for the tokenizers: lenient UTF-8 decoding, general
// category classes (from a generated table), and GPT-2's byte <-> code point
// alphabet used by byte-level BPE.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::tok {

// Unicode general category, first letter only (\p{L}, \p{N}, \p{P}, ...).
enum class UnicodeClass : uint8_t {
  kLetter,
  kNumber,
  kPunctuation,
  kMark,
  kSymbol,
  kSeparator,
  kOther,
};

struct ClassRun {
  uint32_t first;  // first code point of a run of equal class
  UnicodeClass cls;
};
extern const ClassRun kClassRuns[];
extern const size_t kNumClassRuns;

UnicodeClass unicode_class(uint32_t cp);
bool is_unicode_whitespace(uint32_t cp);  // \s in Python/PCRE Unicode mode

// One code point of a text, with where its bytes are. Invalid UTF-8 bytes
// become single-byte units with cp == kInvalidCodePoint.
constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFFu;
struct CodeUnit {
  uint32_t cp;
  uint32_t byte_offset;
  uint32_t byte_len;
};

// Length in bytes of the UTF-8 sequence a lead byte announces (1 for
// continuation/invalid bytes), as SentencePiece-style splitting uses it.
size_t utf8_lead_len(uint8_t lead);

// Decodes strictly: a malformed or truncated sequence yields one invalid unit
// per offending byte, so every byte of the text belongs to exactly one unit.
std::vector<CodeUnit> decode_utf8(std::string_view text);

void append_utf8(uint32_t cp, std::string* out);

// Length of the trailing bytes of `bytes` that form a valid but unfinished
// UTF-8 sequence (0..3): what a streaming decoder must hold back.
size_t utf8_incomplete_tail(std::string_view bytes);

// Replaces every invalid byte sequence by U+FFFD.
std::string sanitize_utf8(std::string_view bytes);

// GPT-2 byte-level alphabet: byte -> UTF-8 string of its code point, and the
// inverse (-1 when a code point is not in the alphabet).
const std::string& byte_to_bpe_char(uint8_t b);
int bpe_char_to_byte(uint32_t cp);

}  // namespace pagoda::tok

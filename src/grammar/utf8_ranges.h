// Code point ranges as UTF-8 byte-range sequences: the bytes a character
// class matches, one sequence per encoding length and continuation-byte
// boundary (the construction of RE2 / Rust regex's utf8 module).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pagoda::grammar {

struct ByteRange {
  uint8_t lo = 0, hi = 0;
};
using Utf8Sequence = std::vector<ByteRange>;  // 1-4 ranges, one per byte

// The sequences whose byte strings are exactly the UTF-8 encodings of the
// code points in [lo, hi] (surrogates D800-DFFF excluded; hi <= 0x10FFFF).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>* out);

// Sorted, merged ranges; `negate` takes the complement within the Unicode
// scalar values.
std::vector<std::pair<uint32_t, uint32_t>> normalize_ranges(std::vector<std::pair<uint32_t, uint32_t>> ranges,
                                                            bool negate);

// UTF-8 encoding of a code point (<= 0x10FFFF).
void append_utf8(uint32_t cp, std::string* out);
// Decodes one code point at s[*i], advancing *i; false on invalid UTF-8.
bool decode_utf8(const std::string& s, size_t* i, uint32_t* cp);

}  // namespace pagoda::grammar

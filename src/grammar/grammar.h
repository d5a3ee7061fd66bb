// A context-free grammar over bytes, compiled from llama.cpp's GBNF text:
// the form every structured-output constraint (JSON Schema, regex, choice,
// GBNF) is lowered to before it constrains sampling (grammar/matcher.h).
//
// Code points in the text become their UTF-8 bytes; a character class becomes
// a rule whose alternatives are UTF-8 byte-range sequences, so the matcher
// walks token bytes one at a time and never decodes UTF-8. Repetitions are
// expanded into right-recursive rules, which the matcher runs without growing
// its stacks.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace pagoda::grammar {

// 256 bits: the bytes one terminal accepts.
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
};

enum class Op : uint8_t {
  kBytes,  // match one byte of byte_sets[arg]
  kRule,   // derive rule `arg`
  kEnd,    // ends an alternative
};

struct Element {
  Op op = Op::kEnd;
  uint32_t arg = 0;
};

class MaskCache;  // grammar/mask_cache.h
std::shared_ptr<MaskCache> make_mask_cache();

// The compiled grammar. Alternatives are runs of `elements` ended by kEnd; a
// position (an index into `elements`) names "what comes next" in a rule.
struct Grammar {
  std::vector<Element> elements;
  std::vector<ByteSet> byte_sets;
  std::vector<std::vector<uint32_t>> rule_alts;  // per rule: the start of each alternative
  std::vector<std::string> rule_names;
  uint32_t root = 0;
  std::string source;  // the GBNF text it was compiled from
  // Token masks computed so far, shared by every request using this grammar.
  std::shared_ptr<MaskCache> masks = make_mask_cache();

  size_t num_rules() const { return rule_alts.size(); }
};

// Parses llama.cpp's GBNF (rules `name ::= ...`, "literals", [classes],
// [^negated], `.`, groups, | alternation, postfix * + ? {m} {m,} {m,n},
// # comments) and checks the result: every referenced rule defined, a
// `root` rule, no left recursion, every rule able to finish. Errors name the
// line and column (or the rule).
Result<std::shared_ptr<const Grammar>> compile_gbnf(std::string_view text);

// Escapes text as a GBNF string literal, quotes included.
std::string gbnf_literal(std::string_view utf8);

}  // namespace pagoda::grammar

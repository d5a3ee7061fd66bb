// JSON Schema -> grammar: hand-written cases, exhaustive integer ranges, and
// 300 random schemas whose grammar's random sentences must all parse and
// validate under an independent validator (schema_validator.h).
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <random>

#include "grammar_test_util.h"
#include "random_regex.h"
#include "random_schema.h"
#include "schema_validator.h"

namespace pagoda::grammar {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::shared_ptr<const Grammar> schema_grammar(const std::string& schema) {
  auto text = json_schema_to_gbnf(ordered_json::parse(schema));
  EXPECT_TRUE(text.is_ok()) << text.status().message();
  return text.is_ok() ? must_compile(*text) : nullptr;
}

// A random sentence of the grammar, drawn token by token from `vocab` as a
// sampler restricted by the mask would (ending as soon as the end token is
// drawn). Empty optional when the walk hit a dead end (a bug).
std::optional<std::string> random_sentence(const std::shared_ptr<const Grammar>& g, const TokenVocab& vocab,
                                           std::mt19937& rng, int max_tokens) {
  Matcher m(g);
  std::string text;
  TokenMask mask;
  for (int i = 0; i < max_tokens; ++i) {
    if (m.is_finished()) return text;
    m.fill_mask(vocab, &mask);
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < vocab.size(); ++t) {
      if (mask_has(mask, t)) allowed.push_back(t);
    }
    if (allowed.empty()) return std::nullopt;
    const int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    if (t == vocab.end_ids()[0]) return text;
    if (!m.accept_token(vocab, t)) return std::nullopt;
    text += vocab.piece(t);
  }
  return std::nullopt;
}

TEST(JsonSchema, ObjectsWithRequiredAndOptionalProperties) {
  auto g = schema_grammar(R"({"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"},
      "c": {"type": "boolean"}}, "required": ["a"]})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, R"({"a": "x"})"));
  EXPECT_TRUE(matches(g, R"({"b": 1, "a": "x", "c": true})"));  // the schema's order
  EXPECT_TRUE(matches(g, R"({"b":-3,"a":""})"));
  EXPECT_FALSE(matches(g, R"({"a": "x", "b": 1})"));  // out of order
  EXPECT_FALSE(matches(g, R"({"b": 1})"));            // a is required
  EXPECT_FALSE(matches(g, R"({"a": "x", "d": 1})"));  // no other keys
  EXPECT_FALSE(matches(g, R"({"a": "x",})"));
}

TEST(JsonSchema, ArraysEnumsConstAnyOfAndRefs) {
  auto g = schema_grammar(R"({"$defs": {"p": {"type": "array", "items": {"$ref": "#/$defs/p"}, "maxItems": 2}},
      "type": "object", "properties": {
        "e": {"enum": ["x", 2, null]}, "k": {"const": {"z": [1]}},
        "u": {"anyOf": [{"type": "null"}, {"type": "number", "minimum": 0, "maximum": 10}]},
        "t": {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 2},
        "r": {"$ref": "#/$defs/p"}},
      "required": ["e", "k", "u", "t", "r"]})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, R"({"e": "x", "k": {"z":[1]}, "u": null, "t": [true], "r": [[], [[]]]})"));
  EXPECT_TRUE(matches(g, R"({"e": null, "k": {"z":[1]}, "u": 9.75, "t": [true, false], "r": []})"));
  EXPECT_FALSE(matches(g, R"({"e": "y", "k": {"z":[1]}, "u": null, "t": [true], "r": []})"));
  EXPECT_FALSE(matches(g, R"({"e": 2, "k": {"z":[1]}, "u": 10.5, "t": [true], "r": []})"));
  EXPECT_FALSE(matches(g, R"({"e": 2, "k": {"z":[1]}, "u": 1, "t": [], "r": []})"));
  EXPECT_FALSE(matches(g, R"({"e": 2, "k": {"z":[1]}, "u": 1, "t": [true], "r": [[],[],[]]})"));
}

TEST(JsonSchema, StringsFormatsAndPatterns) {
  auto g = schema_grammar(R"({"type": "array", "prefixItems": [
      {"type": "string", "minLength": 2, "maxLength": 3}, {"type": "string", "format": "date"},
      {"type": "string", "format": "uuid"}, {"type": "string", "pattern": "^[A-Z]\\d{2}$"}], "items": false})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, R"(["é\n", "2024-02-29", "123e4567-e89b-12d3-a456-426614174000", "A12"])"));
  EXPECT_FALSE(matches(g, R"(["a", "2024-02-29", "123e4567-e89b-12d3-a456-426614174000", "A12"])"));
  EXPECT_FALSE(matches(g, R"(["ab", "2024-13-01", "123e4567-e89b-12d3-a456-426614174000", "A12"])"));
  EXPECT_FALSE(matches(g, R"(["ab", "2024-12-01", "123e4567-e89b-12d3-a456-426614174000", "a12"])"));
}

TEST(JsonSchema, IntegerRangesAreExact) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> pick(-1200, 1200);
  for (int round = 0; round < 40; ++round) {
    int lo = pick(rng), hi = pick(rng);
    if (lo > hi) std::swap(lo, hi);
    json schema = {{"type", "integer"}};
    if (round % 4 != 1) schema["minimum"] = lo;
    if (round % 4 != 2) schema["maximum"] = hi;
    if (round % 5 == 3) {
      schema.erase("minimum");
      schema["exclusiveMinimum"] = lo - 1;
    }
    auto g = schema_grammar(schema.dump());
    ASSERT_TRUE(g);
    for (int v = -1300; v <= 1300; ++v) {
      const bool want = (!schema.contains("minimum") || v >= lo) &&
                        (!schema.contains("exclusiveMinimum") || v > lo - 1) &&
                        (!schema.contains("maximum") || v <= hi);
      ASSERT_EQ(matches(g, std::to_string(v)), want) << schema.dump() << " value " << v;
    }
    EXPECT_FALSE(matches(g, "-0"));
    EXPECT_FALSE(matches(g, "007"));
  }
}

TEST(JsonSchema, ErrorsNameThePath) {
  struct Case {
    const char* schema;
    const char* expect;
  } cases[] = {
      {R"({"type": "object", "properties": {"a": {"type": "strin"}}})", "at #/properties/a/type: unknown type"},
      {R"({"$ref": "#/$defs/missing"})", "does not resolve"},
      {R"({"$ref": "http://example.com/s.json"})", "only local references"},
      {R"({"type": "string", "pattern": "(a", "maxLength": 3})", "pattern together with minLength"},
      {R"js({"type": "string", "pattern": "a(?=b)"})js", "lookaround"},
      {R"({"type": "array", "minItems": 3, "maxItems": 2})", "maxItems is below minItems"},
      {R"({"enum": []})", "non-empty array"},
      {R"({"type": "integer", "minimum": 0.2, "maximum": 0.8})", "no whole number"},
      // Found by the request fuzzer: bounds far past int64 (undefined to convert).
      {R"({"type": "number", "minimum": 8.88889e+84})", "the minimum is beyond 16 digits"},
      {R"({"type": "integer", "exclusiveMinimum": 1e300, "maximum": 1e301})", "the minimum is beyond 16 digits"},
      {R"({"type": "number", "maximum": -1e300})", "the maximum is beyond 16 digits"},
      {R"(false)", "accepts no value"},
      {R"({"allOf": [{"type": "string"}, {"type": "object"}]})", "allOf is supported for object schemas only"},
  };
  for (const Case& c : cases) {
    auto r = json_schema_to_gbnf(ordered_json::parse(c.schema));
    ASSERT_FALSE(r.is_ok()) << c.schema;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << c.schema << " -> " << r.status().message();
  }
}

// Open-ended bounds far past 16 digits are no bound at all.
TEST(JsonSchema, HugeOpenBoundsAreNoBound) {
  for (const char* schema : {R"({"type": "number", "minimum": 0, "maximum": 1e300})",
                             R"({"type": "integer", "minimum": -1e300, "maximum": 5})",
                             R"({"type": "number", "exclusiveMaximum": 1e300})"}) {
    auto r = json_schema_to_gbnf(ordered_json::parse(schema));
    ASSERT_TRUE(r.is_ok()) << schema << ": " << r.status().message();
    EXPECT_TRUE(must_compile(*r)) << schema;
  }
}

TEST(JsonSchema, RandomSchemasGenerateValidInstances) {
  std::mt19937 rng(12345);
  const TokenVocab vocab = random_vocab(rng, "{}[]\":, 0123456789.-abcdefnultrsxyzAZ_\\", 300);
  int sentences = 0;
  for (int i = 0; i < 300; ++i) {
    const json schema = test::random_schema(rng);
    auto text = json_schema_to_gbnf(ordered_json::parse(schema.dump()));
    ASSERT_TRUE(text.is_ok()) << schema.dump() << ": " << text.status().message();
    auto g = must_compile(*text);
    ASSERT_TRUE(g) << schema.dump();
    for (int k = 0; k < 4; ++k) {
      const auto s = random_sentence(g, vocab, rng, 2000);
      ASSERT_TRUE(s) << "dead end or no end for " << schema.dump();
      json value;
      try {
        value = json::parse(*s);
      } catch (const json::exception& e) {
        FAIL() << "not JSON: " << *s << " for " << schema.dump();
      }
      std::string why;
      ASSERT_TRUE(test::validate_json(schema, value, &why)) << why << "\n" << *s << "\n" << schema.dump();
      ++sentences;
    }
  }
  EXPECT_EQ(sentences, 1200);
}

TEST(RegexGrammar, RandomRegexesMatchTheirGbnfTwin) {
  // The test's generator prints one tree as a regex and as GBNF; our regex
  // conversion and the GBNF compiler must both give grammars whose random
  // sentences the regex matches. ASCII only: the oracle (std::wregex in the C
  // locale) does not count Unicode spaces as \s as ECMAScript does.
  std::mt19937 rng(777);
  const TokenVocab vocab = random_vocab(rng, "abcdxyz019 .*+?()[]{}|\\\"\n-_", 300, /*ascii_only=*/true);
  for (int i = 0; i < 100; ++i) {
    const test::RegexCase c = test::random_regex_case(rng);
    auto from_regex = regex_gbnf(c.regex);
    ASSERT_TRUE(from_regex.is_ok()) << c.regex << ": " << from_regex.status().message();
    for (const std::string& gbnf : {*from_regex, c.gbnf}) {
      auto g = must_compile(gbnf);
      ASSERT_TRUE(g) << c.regex;
      for (int k = 0; k < 5; ++k) {
        const auto s = random_sentence(g, vocab, rng, 200);
        ASSERT_TRUE(s) << c.regex;
        EXPECT_TRUE(test::regex_full_match(c.regex, *s)) << "regex " << c.regex << " vs \"" << *s << "\"\n" << gbnf;
      }
    }
  }
}

}  // namespace
}  // namespace pagoda::grammar

namespace pagoda::grammar {
namespace {

TEST(JsonSchema, HostileSchemasAreRefusedOrBounded) {
  // Deep nesting: refused by depth.
  ordered_json deep = {{"type", "string"}};
  for (int i = 0; i < 200; ++i) deep = {{"type", "array"}, {"items", deep}};
  EXPECT_FALSE(json_schema_to_gbnf(deep).is_ok());
  // Nested arrays of long strings stay linear in size (items are rules).
  ordered_json nested = {{"type", "string"}, {"maxLength", 4000}};
  for (int i = 0; i < 40; ++i) nested = {{"type", "array"}, {"items", nested}, {"maxItems", 2}};
  auto text = json_schema_to_gbnf(nested);
  ASSERT_TRUE(text.is_ok()) << text.status().message();
  EXPECT_LT(text->size(), 20000u);
  EXPECT_TRUE(compile_gbnf(*text).is_ok());
  // A self-referencing $ref compiles (recursion is a grammar rule).
  auto rec = json_schema_to_gbnf(ordered_json::parse(
      R"({"$defs": {"n": {"type": "object", "properties": {"k": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"})"));
  ASSERT_TRUE(rec.is_ok()) << rec.status().message();
  auto g = compile_gbnf(*rec);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_TRUE(matches(*g, R"({"k": {"k": {}}})"));
}

}  // namespace
}  // namespace pagoda::grammar

// regex_to_gbnf against std::regex (ECMAScript, whole-string match) on every
// short string over each pattern's alphabet, JSON-string mode, and errors.
#include <gtest/gtest.h>

#include <regex>

#include "grammar/json_schema.h"
#include "grammar/regex_to_gbnf.h"
#include "grammar_test_util.h"

namespace pagoda::grammar {
namespace {

// Every string of length <= max_len over `alphabet`.
void all_strings(const std::string& alphabet, size_t max_len, std::vector<std::string>* out) {
  out->push_back("");
  size_t begin = 0;
  for (size_t len = 1; len <= max_len; ++len) {
    const size_t end = out->size();
    for (size_t i = begin; i < end; ++i) {
      for (const char c : alphabet) out->push_back((*out)[i] + c);
    }
    begin = end;
  }
}

TEST(Regex, AgreesWithStdRegex) {
  struct Case {
    const char* re;
    const char* alphabet;
  } cases[] = {
      {"a|b", "abc"},
      {"^ab*c?$", "abc"},
      {"(ab|c)+", "abc"},
      {"(?:a|bc){2,3}", "abc"},
      {"a{2}b{1,}c{0,1}", "abc"},
      {"[a-c]x?[^ab]", "abcx"},
      {"\\d+\\.\\d{1,2}", "12.a"},
      {"[\\d.]+", "1.a"},
      {"\\w\\W\\s\\S", "a_ .-"},
      {".a.", "ab\n\r"},
      {"a*?b+?", "ab"},
      {"\\(x\\)|\\[y\\]|\\{|\\}", "()[]{}xy"},
      {"(a|)b", "ab"},
      {"[-a]|[a-]b", "-ab"},
      {"\\x41\\u0042[\\x43-\\x44]", "ABCDE"},
      {"^a$|^b$", "ab"},
      {"[^\\s]\\S", "a b"},
  };
  for (const Case& c : cases) {
    auto expr = regex_to_gbnf(c.re, RegexText::kRaw);
    ASSERT_TRUE(expr.is_ok()) << c.re << ": " << expr.status().message();
    auto g = must_compile("root ::= " + *expr);
    ASSERT_TRUE(g) << c.re;
    const std::regex re(c.re, std::regex::ECMAScript);
    std::vector<std::string> strings;
    all_strings(c.alphabet, 5, &strings);
    for (const std::string& s : strings) {
      ASSERT_EQ(matches(g, s), std::regex_match(s, re)) << "regex " << c.re << " on \"" << s << "\"";
    }
  }
}

TEST(Regex, NamedGroupsAreGroups) {
  auto expr = regex_to_gbnf("(?<word>ab)+c", RegexText::kRaw);
  ASSERT_TRUE(expr.is_ok()) << expr.status().message();
  auto g = must_compile("root ::= " + *expr);
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "ababc"));
  EXPECT_FALSE(matches(g, "c"));
}

TEST(Regex, JsonStringModeEscapesAndExcludes) {
  auto expr = regex_to_gbnf("a\"b\\\\c\\n[^x]", RegexText::kJsonString);
  ASSERT_TRUE(expr.is_ok()) << expr.status().message();
  auto g = must_compile("root ::= " + *expr);
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "a\\\"b\\\\c\\ny"));
  EXPECT_FALSE(matches(g, "a\"b\\c\ny"));        // unescaped
  EXPECT_FALSE(matches(g, "a\\\"b\\\\c\\n\""));  // a class never yields a quote
  EXPECT_FALSE(matches(g, "a\\\"b\\\\c\\n\n"));
  EXPECT_FALSE(regex_to_gbnf("[\"\\\\]", RegexText::kJsonString).is_ok());
}

TEST(Regex, UnsupportedFeaturesAreErrors) {
  for (const char* re :
       {"(a)\\1", "a(?=b)", "a(?!b)", "\\bword", "\\p{L}", "a^b", "a$b", "(ab", "ab)", "*a", "[a", "a{3,1}", "\\"}) {
    auto r = regex_to_gbnf(re, RegexText::kRaw);
    EXPECT_FALSE(r.is_ok()) << re;
    if (!r.is_ok()) {
      EXPECT_NE(r.status().message().find("regex:"), std::string::npos);
    }
  }
}

TEST(Choice, OneOfTheStrings) {
  auto text = choice_to_gbnf({"yes", "no", "y\"es", "日本"});
  ASSERT_TRUE(text.is_ok());
  auto g = must_compile(*text);
  ASSERT_TRUE(g);
  for (const char* s : {"yes", "no", "y\"es", "日本"}) EXPECT_TRUE(matches(g, s)) << s;
  for (const char* s : {"", "ye", "yesno", "No"}) EXPECT_FALSE(matches(g, s)) << s;
  EXPECT_FALSE(choice_to_gbnf({}).is_ok());
}

}  // namespace
}  // namespace pagoda::grammar

namespace pagoda::grammar {
namespace {

TEST(Regex, HostileInputsAreRefused) {
  EXPECT_FALSE(regex_to_gbnf(std::string(10000, '(') + "a" + std::string(10000, ')'), RegexText::kRaw).is_ok());
  // Nested counted repetitions stay linear in size (each level repeats a
  // rule reference, not the text below it).
  std::string re = "a";
  for (int i = 0; i < 8; ++i) re = "(" + re + "){4000}";
  auto text = regex_gbnf(re);
  ASSERT_TRUE(text.is_ok());
  auto g = compile_gbnf(*text);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_LT((*g)->elements.size(), 100000u);
}

}  // namespace
}  // namespace pagoda::grammar

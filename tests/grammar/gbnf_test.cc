#include <gtest/gtest.h>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar_test_util.h"

namespace pagoda::grammar {
namespace {

TEST(Gbnf, LiteralsClassesAndRepetitions) {
  auto g = must_compile(R"(root ::= "ab" [0-9]+ ("x" | "yz")? [^a-c]{2,3} "!"*)");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "ab1xdd"));
  EXPECT_TRUE(matches(g, "ab123yzddd!!!"));
  EXPECT_TRUE(matches(g, "ab9日本"));
  EXPECT_FALSE(matches(g, "ab"));
  EXPECT_FALSE(matches(g, "ab1xa"));     // 'a' is excluded
  EXPECT_FALSE(matches(g, "ab1xdddd"));  // {2,3}
  EXPECT_FALSE(matches(g, "ab1d"));
}

TEST(Gbnf, RulesRecursionCommentsAndLines) {
  auto g = must_compile(R"(# nested lists
root ::= list
list ::= "[" ( item ( "," item )* )? "]"
item ::= list |
  [a-z]+   # a word
)");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "[]"));
  EXPECT_TRUE(matches(g, "[a,[b,[]],cd]"));
  EXPECT_FALSE(matches(g, "[a,]"));
  EXPECT_FALSE(matches(g, "[[a]"));
}

TEST(Gbnf, EscapesAndUnicode) {
  auto g = must_compile(R"(root ::= "\x41\u00e9\U0001F600\n\"\\" [\]\-] .)");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "Aé\xF0\x9F\x98\x80\n\"\\]x"));
  EXPECT_TRUE(matches(g, "Aé\xF0\x9F\x98\x80\n\"\\-日"));
  EXPECT_FALSE(matches(g, "Aé\xF0\x9F\x98\x80\n\"\\a."));
}

TEST(Gbnf, AnyCharacterIsValidUtf8Only) {
  auto g = must_compile("root ::= .+");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "é日\xF0\x9F\x98\x80"));
  EXPECT_FALSE(matches(g, "\xC3"));          // truncated
  EXPECT_FALSE(matches(g, "\xED\xA0\x80"));  // a surrogate
  EXPECT_FALSE(matches(g, "\xC0\x80"));      // overlong
}

TEST(Gbnf, ErrorsNameTheLineAndColumn) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"rot ::= \"a\"", "no 'root' rule"},
      {"root ::= x\n", "rule 'x' is used but never defined"},
      {"root ::= \"abc", "line 1, column 14: unterminated string literal"},
      {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
      {"root ::= root \"a\" | \"b\"", "left-recursive"},
      {"root ::= a\na ::= b? a \"x\" | \"z\"\nb ::= \"y\"", "left-recursive"},
      {"root ::= \"a\" root", "can never finish"},
      {"root ::= [b-a]", "reversed"},
      {"root ::= \"\\q\"", "unknown escape"},
      {"root ::= \"a\"{3,2}", "n < m"},
      {"root ::= \"a\"{99999}", "above 4096"},
      {"root ::= (\"a\"", "expected ')'"},
      {"root \"a\"", "expected '::='"},
      {"root ::= \"a\" )", "unexpected character"},
  };
  for (const Case& c : cases) {
    auto g = compile_gbnf(c.text);
    ASSERT_FALSE(g.is_ok()) << c.text;
    EXPECT_NE(g.status().message().find(c.expect), std::string::npos) << c.text << " -> " << g.status().message();
  }
}

TEST(Gbnf, LiteralEscaping) {
  for (const std::string& s :
       std::vector<std::string>{"plain", "q\"uote", "back\\slash", "new\nline\ttab", std::string("nul\0x", 5), "é日"}) {
    auto g = must_compile("root ::= " + gbnf_literal(s));
    ASSERT_TRUE(g);
    EXPECT_TRUE(matches(g, s)) << s;
  }
}

TEST(Gbnf, EmptyAlternativesAndNullableLoopsTerminate) {
  auto g = must_compile("root ::= a* \"z\"\na ::= \"x\" | \"y\" b\nb ::= \"q\"?");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "z"));
  EXPECT_TRUE(matches(g, "xyyqz"));
  EXPECT_FALSE(matches(g, "xyqq"));
}

}  // namespace
}  // namespace pagoda::grammar

namespace pagoda::grammar {
namespace {

// Hostile grammars: refused (or compiled) quickly, never a crash.
TEST(Gbnf, HostileInputsAreRefusedOrBounded) {
  // Deep nesting.
  EXPECT_FALSE(compile_gbnf("root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')')).is_ok());
  // Repetitions that would expand past the size limit.
  std::string big = "root ::= ";
  for (int i = 0; i < 400; ++i) big += "\"ab\"{4000} ";
  auto r = compile_gbnf(big);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("too large"), std::string::npos);
  // A long chain of rules: compiled and matched without recursion.
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 50000; ++i) {
    // Appends, not operator+ (GCC 12 warns falsely on it, -Wrestrict).
    chain.append("r").append(std::to_string(i)).append(" ::= r").append(std::to_string(i + 1)).append(" | \"x\"\n");
  }
  chain += "r50000 ::= \"y\"\n";
  auto g = compile_gbnf(chain);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_TRUE(matches(*g, "y"));
  EXPECT_TRUE(matches(*g, "x"));
  // A long left-recursive cycle is found without recursion.
  std::string cycle = "root ::= c0\n";
  for (int i = 0; i < 50000; ++i) {
    cycle.append("c").append(std::to_string(i)).append(" ::= c").append(std::to_string((i + 1) % 50000));
    cycle.append(" \"a\" | \"b\"\n");
  }
  auto c = compile_gbnf(cycle);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("left-recursive"), std::string::npos);
  // Invalid UTF-8 and NUL bytes in the text.
  EXPECT_FALSE(compile_gbnf(std::string("root ::= \"\xC3\"")).is_ok());
  EXPECT_FALSE(compile_gbnf(std::string("root ::= \"a\"\0 x", 15)).is_ok());
}

}  // namespace
}  // namespace pagoda::grammar

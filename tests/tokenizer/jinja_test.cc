// Unit tests of the Jinja interpreter behind ChatTemplate: ~130 one-feature
// snippets checked against Python jinja2 (tests/tokenizer/data/chat_templates/
// snippets.json, made by tools/render_templates.py), then error reporting and
// the guards against runaway templates.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/py_string.h"
#include "tokenizer/jinja/value.h"

namespace pagoda {
namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<std::string> render(const std::string& source, const nlohmann::ordered_json& extra = {},
                           ChatRenderOptions options = {}) {
  PAGODA_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(source));
  t.set_options(options);
  return t.render(nlohmann::ordered_json::array(), false, "<s>", "</s>", nullptr,
                  extra.is_null() ? nlohmann::ordered_json::object() : extra);
}

TEST(JinjaSnippetTest, MatchesJinja2) {
  const auto path = std::filesystem::path(__FILE__).parent_path() / "data/chat_templates/snippets.json";
  const std::string text = read_file(path);
  ASSERT_FALSE(text.empty()) << "missing " << path;
  // Deliberately unsupported (see chat_template.h): recursive loops, integers
  // beyond 64 bits; `generation` is transformers' tag, absent from plain jinja2.
  const std::set<std::string> unsupported = {"{% for x in y recursive %}{% endfor %}", "{{ 99999999999999999999 }}",
                                             "{% print 'p' %}{% generation %}g{% endgeneration %}"};
  std::tm now{};
  now.tm_year = 124, now.tm_mon = 6, now.tm_mday = 26, now.tm_hour = 12, now.tm_wday = 5, now.tm_yday = 207;
  ChatRenderOptions options;
  options.now = now;
  int num_checked = 0;
  for (const auto& c : nlohmann::ordered_json::parse(text)) {
    const std::string src = c["template"].get<std::string>();
    if (unsupported.count(src)) continue;
    SCOPED_TRACE(c["name"].get<std::string>() + ": " + src);
    auto parsed = ChatTemplate::parse(src);
    if (c.value("syntax", false)) {
      EXPECT_FALSE(parsed.is_ok()) << "jinja2: " << c["error"];
      ++num_checked;
      continue;
    }
    if (!parsed.is_ok()) {  // unsupported tags fail at parse time, where jinja2 fails at render
      EXPECT_TRUE(c.contains("error")) << parsed.status().message();
      ++num_checked;
      continue;
    }
    parsed->set_options(options);
    auto out = parsed->render(c["vars"]["messages"], false, "<s>", "</s>", nullptr, c["vars"]);
    if (c.contains("expected")) {
      ASSERT_TRUE(out.is_ok()) << out.status().message();
      EXPECT_EQ(*out, c["expected"].get<std::string>());
    } else {
      EXPECT_FALSE(out.is_ok()) << "jinja2: " << c["error"] << "\nours: " << *out;
      if (c["raised"].get<bool>()) {
        EXPECT_NE(out.status().message().find(c["error"].get<std::string>()), std::string::npos);
      }
    }
    ++num_checked;
  }
  EXPECT_GE(num_checked, 120);
}

TEST(JinjaErrorTest, SyntaxErrorsCarryLineNumbers) {
  struct Case {
    const char* source;
    const char* needle;
  };
  const Case cases[] = {
      {"a\nb\n{{ x ", "line 3"},
      {"{% if x %}\n\n{{ 1 + }}", "line 3"},
      {"{% for m in messages %}\nx", "endfor"},
      {"{% if a %}\n{% for b in c %}\n{% endif %}", "line 3"},
      {"x\n{# never closed", "comment"},
      {"{{ 'abc }}", "unterminated string"},
      {"{% macro m( %}{% endmacro %}", "line 1"},
      {"{% call foo() %}{% endcall %}", "not supported"},
      {"{% wat %}", "unknown tag 'wat'"},
  };
  for (const auto& c : cases) {
    auto t = ChatTemplate::parse(c.source);
    ASSERT_FALSE(t.is_ok()) << c.source;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(c.needle), std::string::npos) << c.source << " -> " << t.status().message();
  }
}

TEST(JinjaErrorTest, RuntimeErrorsAreStatuses) {
  auto r = render("ok\n{{ 'x'|nosuch }}");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("no filter named 'nosuch'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("line 2"), std::string::npos) << r.status().message();

  r = render("{% if messages|length == 0 %}{{ raise_exception('Need at least one message!') }}{% endif %}");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("Need at least one message!"), std::string::npos);

  for (const char* bad :
       {"{{ nope.attr }}", "{{ 1 + 'a' }}", "{{ nope() }}", "{{ 3() }}", "{{ {}|tojson(indent=2) + 1 }}",
        "{% for a, b in [1] %}{% endfor %}", "{% set x = 1 %}{% set x.y = 2 %}"}) {
    auto e = render(bad);
    EXPECT_FALSE(e.is_ok()) << bad;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(JinjaLimitsTest, RunawayTemplatesStop) {
  ChatRenderOptions small;
  small.max_steps = 100'000;
  const auto start = std::chrono::steady_clock::now();
  auto r = render("{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}", {}, small);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().message();
  EXPECT_NE(r.status().message().find("step limit"), std::string::npos);

  r = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().message();

  r = render("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}");
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().message();
  r = render("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}");
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().message();
  r = render("{{ 'ab' * 100000000000 }}");
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().message();
  r = render("{{ '' * 100000000000000 }}{{ [] * 100000000000000 }}");
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  r = render("{{ range(100001)|length }}");
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().message();
  r = render("{{ 2 ** 64 }}");
  EXPECT_FALSE(r.is_ok());

  ChatRenderOptions tiny;
  tiny.max_output_bytes = 1000;
  r = render("{% for i in range(2000) %}x{% endfor %}", {}, tiny);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().message();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, 15.0);  // ~1 s in Release; generous for sanitizer builds
}

TEST(JinjaLimitsTest, DeepNestingIsAnErrorNotACrash) {
  const std::string parens = "{{ " + std::string(20000, '(') + "1" + std::string(20000, ')') + " }}";
  EXPECT_FALSE(ChatTemplate::parse(parens).is_ok());
  std::string nots = "{{ ";
  for (int i = 0; i < 20000; ++i) nots += "not ";
  EXPECT_FALSE(ChatTemplate::parse(nots + "1 }}").is_ok());
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if 1 %}";
  EXPECT_FALSE(ChatTemplate::parse(ifs).is_ok());
  std::string lists = "{{ " + std::string(20000, '[') + std::string(20000, ']') + " }}";
  EXPECT_FALSE(ChatTemplate::parse(lists).is_ok());

  nlohmann::ordered_json deep = "leaf";
  for (int i = 0; i < 2000; ++i) deep = nlohmann::ordered_json::array({deep});
  auto r = render("{{ x|length }}", {{"x", deep}});
  EXPECT_FALSE(r.is_ok());
}

TEST(JinjaValueTest, FloatReprMatchesPython) {
  EXPECT_EQ(jinja::float_repr(0.5), "0.5");
  EXPECT_EQ(jinja::float_repr(2.0), "2.0");
  EXPECT_EQ(jinja::float_repr(-0.0), "-0.0");
  EXPECT_EQ(jinja::float_repr(1e-5), "1e-05");
  EXPECT_EQ(jinja::float_repr(0.0001), "0.0001");
  EXPECT_EQ(jinja::float_repr(1e16), "1e+16");
  EXPECT_EQ(jinja::float_repr(9999999999999998.0), "9999999999999998.0");
  EXPECT_EQ(jinja::float_repr(1.5e300), "1.5e+300");
  EXPECT_EQ(jinja::float_repr(123.456), "123.456");
  EXPECT_EQ(jinja::float_repr(1.0 / 3), "0.3333333333333333");
}

TEST(JinjaValueTest, PythonStringHelpers) {
  using jinja::py_split;
  EXPECT_EQ(py_split("  a  b ", std::nullopt, 1, false), (std::vector<std::string>{"a", "b "}));
  EXPECT_EQ(py_split("  a  b ", std::nullopt, 1, true), (std::vector<std::string>{"  a", "b"}));
  EXPECT_EQ(py_split("a::b::", std::string("::"), -1, false), (std::vector<std::string>{"a", "b", ""}));
  EXPECT_EQ(py_split("a::b::c", std::string("::"), 1, true), (std::vector<std::string>{"a::b", "c"}));
  EXPECT_EQ(jinja::py_strip("\xe3\x80\x80x\xc2\xa0", std::nullopt, true, true), "x");
  EXPECT_EQ(jinja::code_point_count("h\xc3\xa9llo"), 5u);
  EXPECT_EQ(jinja::slice_indices(5, std::nullopt, std::nullopt, -2), (std::vector<int64_t>{4, 2, 0}));
  EXPECT_EQ(jinja::slice_indices(5, -2, std::nullopt, std::nullopt), (std::vector<int64_t>{3, 4}));
  EXPECT_TRUE(jinja::slice_indices(5, 0, 5, INT64_MAX) == std::vector<int64_t>{0});
  EXPECT_TRUE(jinja::slice_indices(5, 4, std::nullopt, INT64_MIN) == std::vector<int64_t>{4});
}

}  // namespace
}  // namespace pagoda

// Robustness: random mutations of the real chat templates (and random bytes)
// go through parse + render; every outcome must be a value or a Status, never
// a crash, hang or unbounded allocation. Seeds are fixed and logged.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "../shared_files.h"
#include "tokenizer/chat_template.h"

namespace pagoda {
namespace {

std::vector<std::string> corpus() {
  std::vector<std::string> out = {kChatMlTemplate, kLlama2Template};
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(PAGODA_SHARED_DIR) / "templates")) {
    if (e.path().extension() != ".jinja") continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    out.push_back(ss.str());
  }
  return out;
}

const char* const kPieces[] = {"{%",
                               "%}",
                               "{{",
                               "}}",
                               "{#",
                               "#}",
                               "-",
                               "+",
                               "(",
                               ")",
                               "[",
                               "]",
                               "{",
                               "}",
                               "'",
                               "\"",
                               "\\",
                               "|",
                               ".",
                               ",",
                               ":",
                               "=",
                               "==",
                               " not ",
                               " in ",
                               " is ",
                               " and ",
                               " if ",
                               " else ",
                               "endif",
                               "endfor",
                               "{% endfor %}",
                               "{% if x %}",
                               "{% for m in messages %}",
                               "loop.index0",
                               "ns.x",
                               "[::-1]",
                               "[1:]",
                               "|tojson",
                               "|length",
                               "|trim",
                               "|items",
                               "namespace(",
                               "raise_exception(",
                               "0",
                               "-1",
                               "9999999999",
                               "1.5",
                               "none",
                               "\n",
                               " ",
                               "{% macro f() %}{{ f() }}{% endmacro %}",
                               "{{ f() }}",
                               "range(99999)",
                               "messages",
                               "message['content']",
                               "*",
                               "**",
                               "~"};

std::string mutate(std::string s, std::mt19937_64& rng) {
  const int num_edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < num_edits; ++e) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 5) {
      case 0: s.erase(pos, rng() % 16); break;
      case 1: s.insert(pos, kPieces[rng() % std::size(kPieces)]); break;
      case 2: {  // duplicate a range
        const size_t from = s.empty() ? 0 : rng() % s.size();
        s.insert(pos, s.substr(from, rng() % 64));
        break;
      }
      case 3:
        if (!s.empty()) s[rng() % s.size()] = static_cast<char>(rng() % 256);
        break;
      default:
        if (!s.empty()) s.resize(rng() % (s.size() + 1));
        break;
    }
  }
  return s;
}

nlohmann::ordered_json conversation(int variant) {
  const char* kVariants[] = {
      R"([{"role":"system","content":"sys"},{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"user","content":"again"}])",
      R"([{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"abcdefghi","type":"function","function":{"name":"f","arguments":{"a":1}}}]},{"role":"tool","tool_call_id":"abcdefghi","content":"42"}])",
      R"([])", R"([{"role":"user","content":[{"type":"text","text":"parts"}]},{"role":7,"content":{"x":[1,2]}}])"};
  return nlohmann::ordered_json::parse(kVariants[variant % 4]);
}

TEST(ChatTemplateFuzzTest, MutatedTemplatesNeverCrash) {
  const uint64_t seed = 0x5eed2024;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  PAGODA_SKIP_WITHOUT_SHARED("templates");
  std::mt19937_64 rng(seed);
  const auto templates = corpus();
  ASSERT_GE(templates.size(), 10u);
  ChatRenderOptions options;
  options.max_steps = 20'000;
  options.max_output_bytes = 1 << 20;
  const auto tools = nlohmann::ordered_json::parse(
      R"([{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}}])");
  int num_parsed = 0, num_rendered = 0, num_total = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const std::string src = mutate(templates[rng() % templates.size()], rng);
    ++num_total;
    auto t = ChatTemplate::parse(src);
    if (!t.is_ok()) {
      EXPECT_FALSE(t.status().message().empty());
      continue;
    }
    ++num_parsed;
    t->set_options(options);
    const int v = static_cast<int>(rng() % 4);
    auto out = t->render(conversation(v), rng() % 2, "<s>", "</s>", v == 1 ? tools : nullptr);
    if (out.is_ok()) {
      ++num_rendered;
      EXPECT_LE(out->size(), options.max_output_bytes);
    } else {
      EXPECT_FALSE(out.status().message().empty());
    }
  }
  std::printf("%d mutants: %d parsed, %d rendered\n", num_total, num_parsed, num_rendered);
  EXPECT_GT(num_parsed, num_total / 10);  // the mutations are not all trivially fatal
  EXPECT_GT(num_rendered, 0);
}

TEST(ChatTemplateFuzzTest, RandomBytesNeverCrash) {
  const uint64_t seed = 77;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string src;
    const size_t n = rng() % 64;
    for (size_t i = 0; i < n; ++i) {
      src += rng() % 3 ? kPieces[rng() % std::size(kPieces)] : std::string(1, static_cast<char>(rng() % 256));
    }
    auto t = ChatTemplate::parse(src);
    if (!t.is_ok()) {
      EXPECT_FALSE(t.status().message().empty()) << src;
      continue;
    }
    ChatRenderOptions o;
    o.max_steps = 20'000;
    t->set_options(o);
    auto out = t->render(conversation(static_cast<int>(rng() % 4)), true, "", "");
    if (!out.is_ok()) {
      EXPECT_FALSE(out.status().message().empty()) << src;
    }
  }
}

}  // namespace
}  // namespace pagoda

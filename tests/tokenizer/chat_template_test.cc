// Golden tests: every chat template in shared/templates (and the built-in
// ChatML / Llama 2 ones) rendered with many conversations must match, byte for
// byte, what Python's jinja2 produced in transformers' configuration
// (tools/render_templates.py wrote tests/tokenizer/data/chat_templates/).
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../shared_files.h"

namespace pagoda {
namespace {

const std::filesystem::path kDataDir = std::filesystem::path(__FILE__).parent_path() / "data" / "chat_templates";

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::tm fixed_time() {  // the strftime_now stand-in of render_templates.py
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 12;
  tm.tm_wday = 5;  // a Friday
  tm.tm_yday = 207;
  return tm;
}

Result<ChatTemplate> load_template(const std::string& ref) {
  std::string source;
  if (ref == "builtin:chatml") {
    source = kChatMlTemplate;
  } else if (ref == "builtin:llama2") {
    source = kLlama2Template;
  } else if (ref.rfind("shared:", 0) == 0) {
    source = read_file(std::filesystem::path(PAGODA_SHARED_DIR) / ref.substr(7));
    if (source.empty()) return not_found("missing template " + ref);
  } else {
    return invalid_argument("bad template reference " + ref);
  }
  return ChatTemplate::parse(source);
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesJinja2) {
  const auto path = kDataDir / (GetParam() + ".json");
  const std::string text = read_file(path);
  ASSERT_FALSE(text.empty()) << "missing " << path << " (run tools/render_templates.py)";
  const auto data = nlohmann::ordered_json::parse(text);
  const std::string ref = data["template"].get<std::string>();
  if (ref.rfind("shared:", 0) == 0) PAGODA_SKIP_WITHOUT_SHARED(ref.substr(7));
  auto tmpl = load_template(ref);
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().message();
  ChatRenderOptions options;
  options.now = fixed_time();
  tmpl->set_options(options);
  int num_cases = 0, num_errors = 0;
  for (const auto& c : data["cases"]) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE("case " + name);
    auto out = tmpl->render(c["messages"], c["add_generation_prompt"].get<bool>(), c["bos_token"].get<std::string>(),
                            c["eos_token"].get<std::string>(), c["tools"], c["extra"]);
    ++num_cases;
    if (c.contains("expected")) {
      ASSERT_TRUE(out.is_ok()) << out.status().message();
      EXPECT_EQ(*out, c["expected"].get<std::string>());
    } else {
      ++num_errors;
      ASSERT_FALSE(out.is_ok()) << "expected error: " << c["error"] << "\ngot:\n" << *out;
      EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
      if (c["raised"].get<bool>()) {  // raise_exception's message must surface
        EXPECT_NE(out.status().message().find(c["error"].get<std::string>()), std::string::npos)
            << out.status().message();
      }
    }
  }
  EXPECT_GE(num_cases, 20);
  std::printf("[ %s ] %d cases (%d expected errors)\n", GetParam().c_str(), num_cases, num_errors);
}

INSTANTIATE_TEST_SUITE_P(Templates, GoldenTest,
                         ::testing::Values("HuggingFaceTB-SmolLM3-3B", "Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B",
                                           "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "google-gemma-2-2b-it",
                                           "ibm-granite-granite-3.3-2B-Instruct", "meta-llama-Llama-3.1-8B-Instruct",
                                           "meta-llama-Llama-3.2-3B-Instruct", "microsoft-Phi-3.5-mini-instruct",
                                           "mistralai-Mistral-Nemo-Instruct-2407", "builtin-chatml", "builtin-llama2"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(ChatTemplateTest, ChatMlFallbackRendersExpectedText) {
  auto t = ChatTemplate::parse(kChatMlTemplate);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  auto msgs = nlohmann::ordered_json::parse(
      R"([{"role":"system","content":"S"},{"role":"user","content":"U"},{"role":"assistant","content":null}])");
  auto out = t->render(msgs, true, "", "");
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(*out,
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            "<|im_start|>assistant\n<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, PlainJsonMessagesConvert) {
  auto t = ChatTemplate::parse("{{ messages[0].content }}|{{ tools is none }}|{{ x }}");
  ASSERT_TRUE(t.is_ok());
  nlohmann::json msgs = nlohmann::json::array({{{"role", "user"}, {"content", "hi"}}});
  auto out = t->render(msgs, false, "", "", nullptr, nlohmann::json{{"x", 3}});
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(*out, "hi|True|3");
}

TEST(ChatTemplateTest, StrftimeNowUsesConfiguredClock) {
  auto t = ChatTemplate::parse("{{ strftime_now('%d %b %Y') }}/{{ strftime_now('%B %d, %Y') }}");
  ASSERT_TRUE(t.is_ok());
  ChatRenderOptions o;
  o.now = fixed_time();
  t->set_options(o);
  auto out = t->render(nlohmann::ordered_json::array(), false, "", "");
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(*out, "26 Jul 2024/July 26, 2024");
}

TEST(ChatTemplateTest, UnparsedTemplateIsAnError) {
  ChatTemplate t;
  EXPECT_FALSE(t.render(nlohmann::ordered_json::array(), false, "", "").is_ok());
}

}  // namespace
}  // namespace pagoda

// Multi-turn chats: the answer-token cache and the splicing tokenizer
// (server/answer_tokens.h), then end to end through the server: the second
// turn is served from the prefix cache up to the end of the first answer,
// and a repeated request (a hit that ends inside a block) answers the same.
#include "server/answer_tokens.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "server/chat_renderer.h"
#include "server_test_util.h"

namespace pagoda::server {
namespace {

using nlohmann::ordered_json;

class AnswerTokens : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = gguf::GGUFFile::open(testing_util::tiny_model_path("tiny", testing::kTestCtx));
    ASSERT_TRUE(f.is_ok());
    auto t = Tokenizer::from_gguf(**f);
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    tok_ = std::move(t).value();
    ASSERT_FALSE(tok_->is_spm());
    auto r = ChatRenderer::create("", "<s>", "</s>");  // the ChatML fallback
    ASSERT_TRUE(r.is_ok());
    chat_ = std::move(r).value();
  }
  // One token per byte: a valid spelling of `text` that BPE would never choose.
  std::vector<int32_t> spelled_out(const std::string& text) const {
    std::vector<int32_t> ids;
    for (char ch : text) {
      const std::vector<int32_t> one = tok_->encode(std::string(1, ch), false, false);
      ids.insert(ids.end(), one.begin(), one.end());
    }
    return ids;
  }
  RenderFn render(bool generation_prompt = true) const {
    return [this, generation_prompt](const ordered_json& m) {
      return chat_->render(m, generation_prompt, ordered_json(), ordered_json::object());
    };
  }
  std::unique_ptr<Tokenizer> tok_;
  std::shared_ptr<const ChatRenderer> chat_;
};

TEST_F(AnswerTokens, RemembersTheIdsThatSpellTheText) {
  AnswerTokenCache cache;
  const std::string text = "A tree is a plant.";
  std::vector<int32_t> ids = spelled_out(text);
  ASSERT_GT(ids.size(), tok_->encode(text, false, false).size());
  std::vector<int32_t> generated = ids;
  generated.push_back(tok_->eos_id());  // the stop token is not content
  cache.remember(*tok_, text, generated);
  EXPECT_EQ(cache.find(text), ids);
  // Ids that spell something else (a stop string cut from the text) are
  // trimmed to the text when a prefix spells it, else not kept.
  const std::vector<int32_t> longer = spelled_out(text + " END");
  cache.remember(*tok_, "A tree", longer);
  EXPECT_FALSE(cache.find("A tree").has_value());  // more than 8 tokens past the text
  cache.remember(*tok_, text, spelled_out(text + " E"));
  EXPECT_EQ(cache.find(text), ids);
  cache.remember(*tok_, "nothing like it", ids);
  EXPECT_FALSE(cache.find("nothing like it").has_value());
  cache.remember(*tok_, "", ids);
  EXPECT_EQ(cache.size(), 1u);
}

TEST_F(AnswerTokens, DropsLeastRecentlyUsedBeyondItsBudget) {
  AnswerTokenCache cache(200);
  const std::vector<std::string> texts = {"first answer here", "second answer here", "third answer here",
                                          "fourth answer here"};
  for (const auto& t : texts) cache.remember(*tok_, t, tok_->encode(t, false, false));
  EXPECT_LE(cache.bytes(), 200u);
  EXPECT_FALSE(cache.find(texts[0]).has_value());
  EXPECT_TRUE(cache.find(texts[3]).has_value());
}

TEST_F(AnswerTokens, NextTurnStartsWithThePreviousPromptAndTheGeneratedIds) {
  AnswerTokenCache cache;
  ordered_json turn1 = ordered_json::array({{{"role", "user"}, {"content", "What is a tree?"}}});
  auto p1 = encode_chat(*tok_, turn1, render(), cache);
  ASSERT_TRUE(p1.is_ok());
  EXPECT_EQ(*p1, tok_->encode(render()(turn1).value(), false, true));  // nothing to splice yet

  const std::string answer = "A tree is a tall plant with a trunk.";
  const std::vector<int32_t> generated = spelled_out(answer);
  cache.remember(*tok_, answer, generated);
  ordered_json turn2 = turn1;
  turn2.push_back({{"role", "assistant"}, {"content", answer}});
  turn2.push_back({{"role", "user"}, {"content", "And a leaf?"}});
  auto p2 = encode_chat(*tok_, turn2, render(), cache);
  ASSERT_TRUE(p2.is_ok());
  // What the prefix cache holds after turn 1 (its prompt and answer) is
  // exactly where turn 2 starts; the text is the same as plain tokenization.
  std::vector<int32_t> held = *p1;
  held.insert(held.end(), generated.begin(), generated.end());
  ASSERT_GE(p2->size(), held.size());
  EXPECT_TRUE(std::equal(held.begin(), held.end(), p2->begin()));
  const std::vector<int32_t> plain = tok_->encode(render()(turn2).value(), false, true);
  EXPECT_NE(*p2, plain);
  EXPECT_EQ(tok_->decode(*p2, true), tok_->decode(plain, true));
}

TEST_F(AnswerTokens, TemplatesThatChangeTheContentGetPlainTokens) {
  // This template trims contents: a cached answer with surrounding spaces is
  // not what the template writes, so nothing is spliced.
  auto r = ChatRenderer::create(
      "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "<s>", "</s>");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  auto trimming = [&](const ordered_json& m) { return (*r)->render(m, true, ordered_json(), ordered_json::object()); };
  AnswerTokenCache cache;
  const std::string answer = "  padded answer  ";
  cache.remember(*tok_, answer, spelled_out(answer));
  ordered_json msgs = ordered_json::array({{{"role", "user"}, {"content", "hi"}},
                                           {{"role", "assistant"}, {"content", answer}},
                                           {{"role", "user"}, {"content", "again"}}});
  auto got = encode_chat(*tok_, msgs, trimming, cache);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(*got, tok_->encode(trimming(msgs).value(), false, true));
}

// A server on the bundled model: its answers are text (a random model's bytes
// are not always UTF-8, and only answers whose ids spell the returned text
// are kept).
testing::TestServerOptions bundled_model() {
  testing::TestServerOptions o;
  o.model = std::string(PAGODA_SOURCE_DIR) + "/models/pagoda-small.gguf";
  o.kv_bytes = 8 << 20;
  return o;
}

TEST(AnswerTokensServer, SecondTurnIsServedFromTheCacheAndRepeatsAnswerTheSame) {
  testing::TestServer server(bundled_model());
  auto c = server.client();
  auto ask = [&](const nlohmann::json& messages) {
    nlohmann::json req = {{"messages", messages}, {"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true}};
    auto r = testing::post_json(c, "/v1/chat/completions", req.dump());
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    return testing::body_json(r);
  };
  nlohmann::json msgs = nlohmann::json::array({{{"role", "user"}, {"content", "Tell me about trees."}}});
  const nlohmann::json a1 = ask(msgs);
  const std::string answer = a1["choices"][0]["message"]["content"];
  ASSERT_FALSE(answer.empty());
  msgs.push_back({{"role", "assistant"}, {"content", answer}});
  msgs.push_back({{"role", "user"}, {"content", "And about leaves?"}});
  const nlohmann::json a2 = ask(msgs);
  // Every token turn 1 computed is cached — its prompt and all but the last
  // answer token (sampled, never run through the model), the partly filled
  // last block included; without the generated ids the hit would stop where
  // re-tokenizing the answer first differs.
  const int64_t computed =
      a1["usage"]["prompt_tokens"].get<int64_t>() + a1["usage"]["completion_tokens"].get<int64_t>() - 1;
  EXPECT_GE(a2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), computed);
  // The same request again: everything but the last prompt token is a hit
  // (ending inside a block), and greedy output does not change.
  const nlohmann::json a3 = ask(msgs);
  EXPECT_EQ(a3["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(),
            a3["usage"]["prompt_tokens"].get<int64_t>() - 1);
  EXPECT_EQ(a3["choices"][0]["message"]["content"], a2["choices"][0]["message"]["content"]);
  EXPECT_TRUE(testing::wait_idle_and_free(server));
}

TEST(AnswerTokensServer, StreamedAnswersAreRememberedToo) {
  testing::TestServer server(bundled_model());
  auto c = server.client();
  nlohmann::json msgs = nlohmann::json::array({{{"role", "user"}, {"content", "Tell me about rivers."}}});
  nlohmann::json req = {{"messages", msgs},   {"max_tokens", 10}, {"temperature", 0},
                        {"ignore_eos", true}, {"stream", true},   {"stream_options", {{"include_usage", true}}}};
  auto r = testing::post_json(c, "/v1/chat/completions", req.dump());
  ASSERT_TRUE(r && r->status == 200);
  bool done = false;
  std::string answer;
  int64_t computed = -1;
  for (const auto& e : testing::sse_events(r->body, &done)) {
    if (!e["choices"].empty() && e["choices"][0]["delta"].contains("content"))
      answer += e["choices"][0]["delta"]["content"].get<std::string>();
    if (e.contains("usage") && e["usage"].is_object())
      computed = e["usage"]["prompt_tokens"].get<int64_t>() + e["usage"]["completion_tokens"].get<int64_t>() - 1;
  }
  ASSERT_TRUE(done);
  ASSERT_FALSE(answer.empty());
  ASSERT_GT(computed, 0);
  msgs.push_back({{"role", "assistant"}, {"content", answer}});
  msgs.push_back({{"role", "user"}, {"content", "And lakes?"}});
  req = {{"messages", msgs}, {"max_tokens", 4}, {"temperature", 0}};
  auto r2 = testing::post_json(c, "/v1/chat/completions", req.dump());
  ASSERT_TRUE(r2 && r2->status == 200);
  EXPECT_GE(testing::body_json(r2)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), computed / 4 * 4);
}

}  // namespace
}  // namespace pagoda::server

// The chat page at GET /: served without a key, self-contained, and wired to
// the streaming chat endpoint. (tests/server/chat_page/ drives it in Chromium.)
#include "server/chat_page.h"

#include "server_test_util.h"

namespace pagoda::server::testing {
namespace {

TEST(ChatPage, ServedAtRootWithoutKey) {
  TestServerOptions o;
  o.api_key = "sk-page";
  TestServer s(o);
  auto c = s.client();
  auto r = c.Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(r->body, std::string(chat_page_html()));
  // The API itself still needs the key.
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
}

TEST(ChatPage, SelfContainedAndStreams) {
  const std::string page(chat_page_html());
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("</html>"), std::string::npos);
  EXPECT_NE(page.find("/v1/chat/completions"), std::string::npos);
  EXPECT_NE(page.find("stream: true"), std::string::npos);
  EXPECT_NE(page.find("getReader()"), std::string::npos);
  EXPECT_NE(page.find("AbortController"), std::string::npos);
  // No external assets: nothing loaded from another origin.
  for (const char* bad : {"http://", "https://", "src=\"", "<link"})
    EXPECT_EQ(page.find(bad), std::string::npos) << bad;
  // Server text is rendered as text, never as HTML.
  EXPECT_EQ(page.find("innerHTML"), std::string::npos);
  EXPECT_LT(page.size(), 16000u);
}

}  // namespace
}  // namespace pagoda::server::testing

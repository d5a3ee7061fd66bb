#include "server/chat_renderer.h"

#include "tokenizer/chat_template.h"

namespace pagoda::server {

struct ChatRenderer::Impl {
  explicit Impl(ChatTemplate t) : tmpl(std::move(t)) {}
  ChatTemplate tmpl;
};

Result<std::shared_ptr<const ChatRenderer>> ChatRenderer::create(const std::string& source, std::string bos,
                                                                 std::string eos) {
  std::shared_ptr<ChatRenderer> r(new ChatRenderer());
  r->fallback_ = source.empty();
  r->renders_tools_ = source.find("tools") != std::string::npos;
  r->tool_format_ = tool_format_for_template(source);
  auto parsed = ChatTemplate::parse(source.empty() ? std::string_view(kChatMlTemplate) : std::string_view(source));
  if (!parsed.is_ok())
    return Status(StatusCode::kUnimplemented, "cannot parse the chat template: " + parsed.status().message());
  r->impl_ = std::make_unique<Impl>(std::move(parsed).value());
  r->bos_ = std::move(bos);
  r->eos_ = std::move(eos);
  return std::shared_ptr<const ChatRenderer>(std::move(r));
}

Result<std::string> ChatRenderer::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                         const nlohmann::ordered_json& tools,
                                         const nlohmann::ordered_json& extra) const {
  auto out = impl_->tmpl.render(messages, add_generation_prompt, bos_, eos_, tools, extra);
  if (!out.is_ok())
    return Status(StatusCode::kUnimplemented,
                  "the chat template cannot render these messages: " + out.status().message());
  return std::move(out).value();
}

ChatRenderer::~ChatRenderer() = default;

}  // namespace pagoda::server

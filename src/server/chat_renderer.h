// Chat messages -> prompt text through the model's chat template (GGUF
// tokenizer.chat_template, or --chat-template FILE), falling back to a
// ChatML-style template when the model has none.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "server/tool_calls.h"

namespace pagoda::server {

class ChatRenderer {
 public:
  // source "": the ChatML fallback. A template that cannot be parsed is an
  // error (kUnimplemented) naming the problem.
  static Result<std::shared_ptr<const ChatRenderer>> create(const std::string& source, std::string bos_token,
                                                            std::string eos_token);
  ~ChatRenderer();

  // messages: validated, content already strings. Errors raised by the
  // template (e.g. roles that do not alternate) come back as kUnimplemented.
  Result<std::string> render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                             const nlohmann::ordered_json& tools, const nlohmann::ordered_json& extra) const;
  bool is_fallback() const { return fallback_; }
  // The template writes the request's `tools` itself (it mentions them).
  bool renders_tools() const { return renders_tools_; }
  // How the template writes tool calls (tool_calls.h).
  ToolFormat tool_format() const { return tool_format_; }

 private:
  struct Impl;
  ChatRenderer() = default;
  std::unique_ptr<Impl> impl_;
  std::string bos_, eos_;
  bool fallback_ = false;
  bool renders_tools_ = false;
  ToolFormat tool_format_ = ToolFormat::kHermes;
};

}  // namespace pagoda::server

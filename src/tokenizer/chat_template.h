// Chat templates: renders an OpenAI-style message list into a prompt string
// with the model's Jinja template (GGUF key `tokenizer.chat_template`),
// matching what Hugging Face transformers' apply_chat_template produces:
// jinja2 ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
// with the loopcontrols extension, transformers' `tojson` (no HTML escaping,
// ensure_ascii=False, keys in input order) and the globals raise_exception()
// and strftime_now(). See src/tokenizer/jinja/ for the interpreter and
// tests/tokenizer/chat_template_test.cc for the supported subset.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace pagoda {

namespace jinja {
struct Stmt;
}

// ChatML; the fallback when a model file carries no chat template:
//   <|im_start|>{role}\n{content}<|im_end|>\n ... [<|im_start|>assistant\n]
// A message whose content is not a string (null, a list of parts) renders
// with empty content.
extern const char* const kChatMlTemplate;
// The classic Llama 2 chat template ([INST] ... [/INST], <<SYS>> block).
extern const char* const kLlama2Template;

struct ChatRenderOptions {
  // Time strftime_now() formats; nullopt = the local time at render.
  std::optional<std::tm> now;
  int64_t max_steps = 1'000'000;        // statements + loop iterations
  int max_call_depth = 64;              // nested macro calls
  size_t max_output_bytes = 16u << 20;  // output, and any one string or list
};

class ChatTemplate {
 public:
  // Syntax errors give kInvalidArgument with the line number.
  static Result<ChatTemplate> parse(std::string_view source);

  // Template variables: messages, tools (null when there are none, as
  // transformers passes None), documents (null), add_generation_prompt,
  // bos_token, eos_token, then every key of `extra` (e.g. enable_thinking,
  // date_string, documents), which override the former. Objects keep their
  // key order (ordered_json), which tojson output depends on; a plain
  // nlohmann::json converts implicitly but has its keys sorted.
  // Errors: raise_exception(msg) and runtime errors (undefined values, type
  // errors) -> kInvalidArgument carrying the message and line; runaway
  // templates (step, depth or size limits) -> kResourceExhausted.
  Result<std::string> render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                             const std::string& bos_token, const std::string& eos_token,
                             const nlohmann::ordered_json& tools = nullptr,
                             const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  void set_options(const ChatRenderOptions& options) { options_ = options; }
  const ChatRenderOptions& options() const { return options_; }

 private:
  using Body = std::vector<std::unique_ptr<jinja::Stmt>>;
  std::shared_ptr<const Body> body_;
  ChatRenderOptions options_;
};

}  // namespace pagoda

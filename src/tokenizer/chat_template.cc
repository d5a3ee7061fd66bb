#include "tokenizer/chat_template.h"

#include <new>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"

namespace pagoda {

// tools/render_templates.py reads these two raw strings from this file to
// render their expected outputs with Python's jinja2: keep the
// R"JINJA(...)JINJA" form.
const char* const kChatMlTemplate =
    R"JINJA({%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' + (message['content'] if message['content'] is string else '') + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- endif -%})JINJA";

const char* const kLlama2Template =
    R"JINJA({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})JINJA";

namespace {

std::string format_time(const std::string& format, const std::tm& tm) {
  if (format.empty()) return "";
  std::string buf(256, '\0');
  while (buf.size() <= (1u << 16)) {
    const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
    if (n > 0) return buf.substr(0, n);
    buf.resize(buf.size() * 4);
  }
  return "";  // the format produces nothing (or is absurdly long)
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  try {
    auto body = std::make_shared<Body>(jinja::parse_template(source));
    ChatTemplate t;
    t.body_ = std::move(body);
    return t;
  } catch (const jinja::Error& e) {
    return invalid_argument(std::string("chat template syntax error at ") + e.what());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("chat template too large to parse");
  }
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                         const std::string& bos_token, const std::string& eos_token,
                                         const nlohmann::ordered_json& tools,
                                         const nlohmann::ordered_json& extra) const {
  if (!body_) return invalid_argument("chat template was not parsed");
  if (!extra.is_null() && !extra.is_object()) {
    return invalid_argument("chat template extra variables must be a JSON object");
  }
  jinja::Limits limits;
  limits.max_steps = options_.max_steps;
  limits.max_call_depth = options_.max_call_depth;
  limits.max_output_bytes = options_.max_output_bytes;
  const std::optional<std::tm> fixed = options_.now;
  jinja::Interpreter interp(limits, [fixed](const std::string& format) {
    std::tm tm{};
    if (fixed) {
      tm = *fixed;
    } else {
      const std::time_t now = std::time(nullptr);
      localtime_r(&now, &tm);
    }
    return format_time(format, tm);
  });
  try {
    std::vector<std::pair<std::string, jinja::Value>> context;
    context.emplace_back("messages", jinja::from_json(messages));
    context.emplace_back("tools", jinja::from_json(tools));
    context.emplace_back("documents", jinja::Value::none());
    context.emplace_back("add_generation_prompt", jinja::Value(add_generation_prompt));
    context.emplace_back("bos_token", jinja::Value(bos_token));
    context.emplace_back("eos_token", jinja::Value(eos_token));
    if (extra.is_object()) {
      for (auto it = extra.begin(); it != extra.end(); ++it) {
        context.emplace_back(it.key(), jinja::from_json(it.value()));
      }
    }
    return interp.render(*body_, context);
  } catch (const jinja::RaisedError& e) {
    return invalid_argument(std::string("chat template raised an error at ") + e.what());
  } catch (const jinja::LimitError& e) {
    return resource_exhausted(std::string("chat template stopped at ") + e.what());
  } catch (const jinja::Error& e) {
    return invalid_argument(std::string("chat template error at ") + e.what());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("chat template ran out of memory");
  }
}

}  // namespace pagoda

// Tool calling in chat completions (OpenAI's tools / tool_choice /
// parallel_tool_calls): the tools reach the prompt (through the model's chat
// template when it renders them, else as a system message), the model calls
// them in its template's syntax (ToolFormat), by default Hermes / Qwen's
//   <tool_call>
//   {"name": "get_weather", "arguments": {"city": "Paris"}}
//   </tool_call>
// which is parsed into `tool_calls` (whole, or as streamed deltas), and
// tool_choice "required" or a named function constrains the output with a
// grammar built from the functions' JSON Schemas, so the arguments always
// parse and validate.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/json_fields.h"

namespace pagoda::server {

// How a model writes its calls, read off its chat template.
enum class ToolFormat {
  kHermes,   // <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Qwen, Hermes, the fallback)
  kLlama3,   // the whole answer is {"name": ..., "parameters": {...}} (Llama 3.1-3.3)
  kMistral,  // [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (the marker is a control token)
};
ToolFormat tool_format_for_template(const std::string& template_source);

struct ToolRequest {
  enum class Choice { kAuto, kNone, kRequired, kNamed };
  nlohmann::ordered_json tools;  // validated [{type: function, function: {name, parameters?}}]
  Choice choice = Choice::kAuto;
  std::string name;  // kNamed
  bool parallel = true;
  ToolFormat format = ToolFormat::kHermes;
  // Tool calls are parsed out of the answer (tools given, choice not none).
  bool active() const { return !tools.empty() && choice != Choice::kNone; }
};

// tools, tool_choice and parallel_tool_calls of a chat body (key order kept).
MaybeError parse_tool_request(const nlohmann::ordered_json& body, ToolRequest* out);

// Messages ready for the chat template: assistant tool_calls' argument
// strings parsed into objects (templates write them with tojson). When the
// template does not render tools itself, the tools become a system message
// and earlier tool calls / results are written into the messages' text in
// the syntax the model is asked to use. *template_tools: what to pass as the
// template's `tools` (null when it does not render them or choice is none).
nlohmann::ordered_json prepare_tool_messages(const nlohmann::ordered_json& messages, const ToolRequest& req,
                                             bool template_renders_tools, nlohmann::ordered_json* template_tools);

// GBNF for tool_choice required / named: one call (or several, when
// parallel and the format allows it) of the allowed functions in req.format,
// arguments per their schemas.
Result<std::string> tool_call_gbnf(const ToolRequest& req);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // JSON text
};

// Splits an answer into text and tool calls. A block that is not a JSON
// object with a string "name" stays text.
void parse_tool_calls(const std::string& text, std::string* content, std::vector<ParsedToolCall>* calls,
                      ToolFormat format = ToolFormat::kHermes);

// OpenAI's tool_calls array. Ids are 9 letters and digits (what Mistral's
// template demands when they come back), derived from `seed` and the index.
nlohmann::json tool_calls_json(const std::vector<ParsedToolCall>& calls, const std::string& seed);
std::string tool_call_id(const std::string& seed, size_t index);

// The same split for a stream: push() text deltas, get back the text that
// is certainly content and the calls completed so far; text that may begin
// a <tool_call> block is held back until it is known.
class ToolCallStreamParser {
 public:
  explicit ToolCallStreamParser(ToolFormat format = ToolFormat::kHermes) : format_(format) {}
  void push(const std::string& delta, std::string* content, std::vector<ParsedToolCall>* calls);
  // End of the answer: whatever is held back (an unfinished block included).
  void finish(std::string* content, std::vector<ParsedToolCall>* calls);
  int num_calls() const { return num_calls_; }

 private:
  // kLlama3 / kMistral: an answer that starts like a call is held whole.
  void push_whole(const std::string& delta, std::string* content);
  ToolFormat format_;
  bool decided_ = false;  // kLlama3 / kMistral: the answer is text
  std::string pending_;   // undecided text, or an open block
  bool in_block_ = false;
  bool after_call_ = false;  // drop the blanks that follow a call
  int num_calls_ = 0;
};

}  // namespace pagoda::server

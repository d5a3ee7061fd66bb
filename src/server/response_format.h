// Engine outputs -> OpenAI response JSON (completions, chat completions, SSE
// chunks, usage, logprobs), as pure functions.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/request.h"

namespace pagoda::server {

// token id -> its bytes (Tokenizer::token_to_piece).
using PieceFn = std::function<std::string(int32_t)>;

// One finished choice, accumulated from a request's outputs.
struct ChoiceResult {
  int32_t index = 0;
  std::string text;
  std::vector<int32_t> token_ids;  // every generated token, stop tokens included
  std::vector<SampleResult> samples;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;
  int32_t num_cached_tokens = 0;
  // Chat with tools: the calls parsed out of the answer (text is then the
  // rest); an empty array or null when there are none.
  nlohmann::json tool_calls;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens the prefix cache served
};

// Identity shared by every object of one response.
struct ResponseMeta {
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
};

nlohmann::json finish_reason_json(FinishReason r);  // null while running
// OpenAI's usage object, with prompt_tokens_details.cached_tokens.
nlohmann::json usage_json(const Usage& u);

// Completions logprobs: tokens, token_logprobs, top_logprobs (null when
// num_top == 0), text_offset starting at `offset`.
nlohmann::json completion_logprobs(const std::vector<SampleResult>& samples, const PieceFn& piece, int32_t num_top,
                                   size_t offset);
// Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs}]}.
nlohmann::json chat_logprobs(const std::vector<SampleResult>& samples, const PieceFn& piece);

// logprobs < 0: no logprobs in the choices.
nlohmann::json completion_response(const ResponseMeta& m, const std::vector<ChoiceResult>& choices, const Usage& usage,
                                   const PieceFn& piece, int32_t logprobs);
nlohmann::json chat_response(const ResponseMeta& m, const std::vector<ChoiceResult>& choices, const Usage& usage,
                             const PieceFn& piece, bool logprobs);

// Streaming chunks. with_usage adds "usage": null (include_usage was asked).
nlohmann::json completion_chunk(const ResponseMeta& m, int32_t index, const std::string& text, nlohmann::json logprobs,
                                FinishReason reason, bool with_usage);
nlohmann::json chat_chunk(const ResponseMeta& m, int32_t index, nlohmann::json delta, nlohmann::json logprobs,
                          FinishReason reason, bool with_usage);
// The final chunk with empty choices and the usage.
nlohmann::json usage_chunk(const ResponseMeta& m, const char* object, const Usage& usage);

}  // namespace pagoda::server

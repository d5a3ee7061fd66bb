// OpenAI request JSON -> engine request specs, as pure functions. Every
// client mistake becomes an ApiError (400, or 422 for well-formed requests we
// do not support); nothing here throws.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/json_fields.h"

namespace pagoda::server {

// Fields shared by /v1/completions and /v1/chat/completions.
struct GenerationParams {
  std::string model;                  // "" when absent
  std::optional<int32_t> max_tokens;  // absent: the route's default
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  RequestSpec base;            // sampling, stop, stop ids, ignore_eos, priority
};

// A completion prompt: text, or token ids.
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};

struct CompletionRequest {
  GenerationParams gen;
  std::vector<PromptInput> prompts;
  bool echo = false;
  int32_t logprobs = -1;  // -1: none, else top-n count (0 = chosen only)
};

struct ChatRequest {
  GenerationParams gen;
  // Template inputs keep the client's key order (tojson output depends on it).
  nlohmann::ordered_json messages;                                            // validated; content flattened to strings
  nlohmann::ordered_json tools;                                               // null when absent
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs
  bool add_generation_prompt = true;
  bool logprobs = false;
  int32_t top_logprobs = 0;
};

inline constexpr int32_t kMaxChoices = 128;
inline constexpr int32_t kMaxStopStrings = 16;
inline constexpr int32_t kMaxStopBytes = 16 << 10;  // all stop strings together
inline constexpr int32_t kMaxStopTokenIds = 4096;
inline constexpr int32_t kMaxLogitBias = 4096;  // entries
inline constexpr int64_t kMaxTokensLimit = 1 << 24;
inline constexpr int64_t kMaxTokensPerRequest = 1 << 22;  // n x max_tokens

MaybeError parse_completion_request(const nlohmann::json& body, CompletionRequest* out);
MaybeError parse_chat_request(const nlohmann::json& body, ChatRequest* out);
// Re-takes messages/tools/chat_template_kwargs from the body parsed with key
// order kept (parse_chat_request must have accepted the same body).
void restore_key_order(const nlohmann::ordered_json& body, ChatRequest* r);

// The engine request of one prompt with its n choices (one copy of the
// prompt, stops and biases for all of them; the engine seeds choice k with
// seed + k), max_tokens defaulting to default_max_tokens (<= 0: the rest of
// the context). A prompt plus max_tokens longer than the context, or n x
// max_tokens over kMaxTokensPerRequest, is a 400. `unbounded` (the
// streaming KV policy): no context limit; max_tokens then defaults to the
// rest of the model's context, at least default_max_tokens or 16.
Result<RequestSpec> make_prompt_spec(const GenerationParams& p, const std::vector<int32_t>& prompt,
                                     int32_t default_max_tokens, int32_t max_model_len, bool unbounded = false);

}  // namespace pagoda::server

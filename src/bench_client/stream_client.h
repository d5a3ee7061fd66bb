// One OpenAI-compatible server seen from a benchmark client: base-URL
// parsing, GET /v1/models, and a streamed completion / chat completion
// timed chunk by chunk. Only standard OpenAI fields are sent (plus
// "ignore_eos" when asked), so any compatible server can be measured.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace pagoda::bench {

enum class Endpoint { kCompletions, kChat };

// "http://host:port[/prefix]"; a trailing "/" or "/v1" is dropped, so both
// vLLM-style (no /v1) and OpenAI-SDK-style (with /v1) URLs work.
struct BaseUrl {
  std::string scheme_host_port;  // for httplib::Client
  std::string path_prefix;       // "" or "/something"
};
Result<BaseUrl> parse_base_url(const std::string& url);

struct ClientOptions {
  BaseUrl url;
  std::string api_key;  // sent as "Authorization: Bearer KEY" when set
  double timeout_s = 600;
};

// A client for one worker thread (keep-alive connection).
std::unique_ptr<httplib::Client> make_client(const ClientOptions& o);

// The first model id from GET /v1/models.
Result<std::string> fetch_first_model(const ClientOptions& o);

struct RequestRecord {
  int32_t conversation = 0;
  int32_t turn = 0;
  bool ok = false;
  std::string error;
  double start_s = 0;  // seconds since the benchmark began
  double ttft_s = 0;   // to the first chunk with text
  double e2e_s = 0;
  std::vector<double> itl_s;   // between chunks with text
  int32_t prompt_tokens = -1;  // from usage; -1 if the server sent none
  int32_t output_tokens = 0;   // from usage, else chunks with text
  int32_t max_tokens = 0;
  int32_t input_words = 0;
  std::string text;  // the generated text (multi-turn feeds it back)

  // (e2e - ttft) / (output_tokens - 1); 0 for a single token.
  double tpot_s() const { return output_tokens > 1 ? (e2e_s - ttft_s) / (output_tokens - 1) : 0.0; }
};

struct StreamRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::string prompt;       // completions
  nlohmann::json messages;  // chat: the array of messages
  int32_t max_tokens = 16;
  bool ignore_eos = false;
};

nlohmann::json request_body(const StreamRequest& r);

// Sends `r` with stream: true and times it; failures land in record->error.
void run_stream_request(httplib::Client& client, const ClientOptions& o, const StreamRequest& r,
                        std::chrono::steady_clock::time_point bench_start, RequestRecord* record);

}  // namespace pagoda::bench

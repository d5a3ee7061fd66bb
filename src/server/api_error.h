// OpenAI-style errors: {"error": {"message", "type", "param", "code"}} and
// the one mapping from Status to HTTP status used by every route.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace pagoda::server {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;      // "" -> null
  std::string code;       // "" -> null
  int retry_after_s = 0;  // > 0: send a Retry-After header (429 / 503)
};

// kInvalidArgument/kOutOfRange -> 400, kNotFound -> 404, kUnimplemented ->
// 422, kResourceExhausted -> 429, kUnavailable -> 503, others -> 500.
int http_status_for(StatusCode code);
ApiError api_error_from_status(const Status& st, std::string param = "");
ApiError bad_request(std::string message, std::string param = "");
nlohmann::json error_body(const ApiError& e);

// Serialize JSON for the wire; invalid UTF-8 (e.g. a partial token piece in
// logprobs) becomes U+FFFD instead of throwing.
std::string dump_json(const nlohmann::json& j);

}  // namespace pagoda::server

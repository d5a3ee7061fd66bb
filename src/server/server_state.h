// State shared by the route handlers of one Server (internal header).
#pragma once

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/async_engine.h"
#include "http/server.h"
#include "server/answer_tokens.h"
#include "server/api_error.h"
#include "server/chat_renderer.h"
#include "server/json_fields.h"
#include "server/metrics.h"
#include "server/server.h"
#include "server/structured_output.h"

namespace pagoda::server {

struct ServerState {
  ServerState(AsyncEngine& e, ServerConfig c) : engine(e), config(std::move(c)), metrics(config.served_model_name) {}
  AsyncEngine& engine;
  ServerConfig config;
  ServerMetrics metrics;
  std::shared_ptr<const ChatRenderer> chat;  // null: chat_error says why
  AnswerTokenCache answers;                  // chat answers' generated ids, for later turns
  GrammarCache grammars;                     // compiled structured-output grammars
  std::string chat_error;
  std::atomic<bool> shutting_down{false};
  std::atomic<int64_t> next_response_id{0};

  std::string new_response_id(const char* prefix);
  // 404 unless `model` is "" or the served name.
  MaybeError check_model(const std::string& model) const;
};

void send_json(http::Responder& res, const nlohmann::json& j, int status = 200);
void send_error(http::Responder& res, const ApiError& e);
http::Response error_response(const ApiError& e);
// Parses the body as a JSON object (400 when it is not, or nests too deep).
MaybeError parse_json_body(const http::Request& req, nlohmann::json* out);

void handle_completions(ServerState& st, const http::Request& req, http::Responder& res);
void handle_chat_completions(ServerState& st, const http::Request& req, http::Responder& res);

}  // namespace pagoda::server

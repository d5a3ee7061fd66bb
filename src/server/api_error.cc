#include "server/api_error.h"

namespace pagoda::server {

int http_status_for(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kUnimplemented: return 422;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDataLoss:
    case StatusCode::kInternal: return 500;
  }
  return 500;
}

ApiError api_error_from_status(const Status& st, std::string param) {
  ApiError e;
  e.http_status = http_status_for(st.code());
  e.message = st.message();
  e.param = std::move(param);
  switch (st.code()) {
    case StatusCode::kOutOfRange: e.code = "context_length_exceeded"; break;
    case StatusCode::kNotFound:
      e.type = "not_found_error";
      e.code = "model_not_found";
      break;
    case StatusCode::kUnimplemented: e.type = "unprocessable_entity_error"; break;
    case StatusCode::kResourceExhausted:
      e.type = "rate_limit_error";
      e.code = "queue_full";
      e.retry_after_s = 1;
      break;
    case StatusCode::kUnavailable:
      e.type = "service_unavailable_error";
      e.retry_after_s = 5;
      break;
    case StatusCode::kDataLoss:
    case StatusCode::kInternal: e.type = "internal_server_error"; break;
    default: break;
  }
  return e;
}

ApiError bad_request(std::string message, std::string param) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

nlohmann::json error_body(const ApiError& e) {
  auto opt = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
  return {{"error", {{"message", e.message}, {"type", e.type}, {"param", opt(e.param)}, {"code", opt(e.code)}}}};
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace pagoda::server

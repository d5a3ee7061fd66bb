// Server-Sent Events framing as OpenAI streams it: "data: <json>\n\n" per
// chunk and "data: [DONE]\n\n" at the end; ": ..." lines are comments that
// clients ignore (used as keep-alives that also detect a closed connection).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "server/api_error.h"

namespace pagoda::server {

inline std::string sse_event(const nlohmann::json& j) { return "data: " + dump_json(j) + "\n\n"; }
inline std::string sse_done() { return "data: [DONE]\n\n"; }
inline std::string sse_comment(const std::string& text) { return ": " + text + "\n\n"; }

}  // namespace pagoda::server

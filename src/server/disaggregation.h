// Prefill/decode disaggregation, instance side (DistServe / Splitwise /
// Mooncake): `pagoda serve --role prefill` computes prompts and hands out
// their KV blocks; `pagoda serve --role decode` receives a request from the
// router (`pagoda router`) with the header X-Pagoda-Prefill naming a
// prefill instance, asks it for the prompt's blocks (POST
// /internal/prefill with the token ids; the reply is the KV tiers' block
// format, kv/kv_tiers.h), puts them into its own KV tier and then runs the
// request as usual: its admission finds the prompt's blocks as it finds any
// tier hit, computes the last prompt token and decodes. The decode
// instance tokenizes, so both sides see the same tokens by construction.
#pragma once

#include <string>
#include <vector>

#include "engine/request.h"
#include "http/server.h"
#include "server/json_fields.h"

namespace pagoda::server {

struct ServerState;

inline constexpr const char* kPrefillHeader = "x-pagoda-prefill";

// POST /internal/prefill (role prefill): {"prompt_tokens": [ids]} -> the
// prompt's whole KV blocks (application/octet-stream).
void handle_internal_prefill(ServerState& st, const http::Request& req, http::Responder& res);

// Decode role with the header set: fetches every prompt's blocks from the
// named prefill instance and imports them. An error (502 for an unreachable
// or failing prefill instance) ends the request; without the header,
// nothing happens.
MaybeError prefill_remotely(ServerState& st, const http::Request& req, const std::vector<RequestSpec>& specs);

}  // namespace pagoda::server

// Bearer-token check for the /v1 routes.
#pragma once

#include <string>
#include <string_view>

namespace pagoda::server {

// True when no key is configured, or the Authorization header is
// "Bearer <key>" (compared in time independent of where they differ).
bool authorized(std::string_view api_key, std::string_view authorization_header);
// Routes that need the key when one is set: everything under /v1/.
bool route_needs_auth(std::string_view path);

}  // namespace pagoda::server

// Bearer-token check (which routes need it: the route table in server.cc).
#pragma once

#include <string>
#include <string_view>

namespace pagoda::server {

// True when no key is configured, or the Authorization header is
// "Bearer <key>" (compared in time independent of where they differ).
bool authorized(std::string_view api_key, std::string_view authorization_header);

}  // namespace pagoda::server

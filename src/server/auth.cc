#include "server/auth.h"

namespace pagoda::server {

bool authorized(std::string_view api_key, std::string_view header) {
  if (api_key.empty()) return true;
  constexpr std::string_view kPrefix = "Bearer ";
  if (header.size() < kPrefix.size() || header.substr(0, kPrefix.size()) != kPrefix) return false;
  std::string_view given = header.substr(kPrefix.size());
  while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
  unsigned diff = given.size() == api_key.size() ? 0u : 1u;
  for (size_t i = 0; i < api_key.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(api_key[i]);
  }
  return diff == 0;
}

}  // namespace pagoda::server

// The chat page served at GET / : one self-contained HTML document (inline
// CSS and JS, no external assets) that streams from /v1/chat/completions.
#pragma once

#include <string_view>

namespace pagoda::server {

std::string_view chat_page_html();

}  // namespace pagoda::server

#include "tokenizer/stop_strings.h"

#include <algorithm>

namespace pagoda {

std::shared_ptr<const std::vector<std::string>> StopStringMatcher::share(std::vector<std::string> stops) {
  std::vector<std::string> kept;
  for (auto& s : stops)
    if (!s.empty()) kept.push_back(std::move(s));
  return std::make_shared<const std::vector<std::string>>(std::move(kept));
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : StopStringMatcher(share(std::move(stops))) {}

StopStringMatcher::StopStringMatcher(std::shared_ptr<const std::vector<std::string>> stops) : stops_(std::move(stops)) {
  for (const auto& s : *stops_)
    if (!s.empty()) max_len_ = std::max(max_len_, s.size());
}

std::string StopStringMatcher::push(std::string_view text, bool* stopped) {
  *stopped = false;
  if (stops_->empty()) return std::string(text);
  held_.append(text);
  // Earliest complete stop string wins.
  size_t cut = std::string::npos;
  for (const auto& s : *stops_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    *stopped = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  const size_t limit = std::min(held_.size(), max_len_ - 1);
  for (size_t len = limit; len > 0 && keep == 0; --len) {
    const std::string_view tail(held_.data() + held_.size() - len, len);
    for (const auto& s : *stops_)
      if (s.size() > len && std::string_view(s).substr(0, len) == tail) {
        keep = len;
        break;
      }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringMatcher::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace pagoda

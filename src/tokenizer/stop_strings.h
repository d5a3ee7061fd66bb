// Stop strings over streamed text: releases text as soon as it cannot be the
// start of a stop string, and cuts the output before the first stop string
// (which may arrive split across many tokens).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);
  // Shares one list between matchers (the n choices of a request).
  explicit StopStringMatcher(std::shared_ptr<const std::vector<std::string>> stops);
  // The non-empty stop strings of a list, ready to share.
  static std::shared_ptr<const std::vector<std::string>> share(std::vector<std::string> stops);

  // Appends text and returns what can be released now. When a stop string
  // completes, `*stopped` becomes true, the text before it is released and
  // the stop string and anything after it are dropped.
  std::string push(std::string_view text, bool* stopped);
  // At the end of generation: releases any held-back text.
  std::string flush();
  bool empty() const { return stops_->empty(); }

 private:
  std::shared_ptr<const std::vector<std::string>> stops_;
  std::string held_;
  size_t max_len_ = 0;
};

}  // namespace pagoda

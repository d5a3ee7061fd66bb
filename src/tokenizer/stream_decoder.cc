#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace pagoda {

std::string StreamDecoder::push(int32_t id) {
  pending_ += tokenizer_.token_to_piece(id, render_special_);
  const size_t hold = tok::utf8_incomplete_tail(pending_);
  std::string out = tok::sanitize_utf8(std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = tok::sanitize_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace pagoda

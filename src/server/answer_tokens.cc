#include "server/answer_tokens.h"

#include <algorithm>

namespace pagoda::server {

void AnswerTokenCache::remember(const Tokenizer& tok, const std::string& text, const std::vector<int32_t>& generated) {
  if (text.empty() || generated.empty()) return;
  // Stop tokens (not rendered) and held-back or cut stop strings make the
  // ids run past the text: look for the prefix that decodes to it exactly.
  // Trailing control tokens (an end-of-turn) decode to nothing but are not
  // part of the content: the template writes its own.
  size_t end = generated.size();
  while (end > 0 && (tok.is_control(generated[end - 1]) || tok.is_eog(generated[end - 1]))) --end;
  std::optional<std::vector<int32_t>> ids;
  for (size_t k = end; k > 0 && k + 8 >= end; --k) {
    std::vector<int32_t> prefix(generated.begin(), generated.begin() + static_cast<std::ptrdiff_t>(k));
    if (tok.decode(prefix) == text) {
      ids = std::move(prefix);
      break;
    }
  }
  if (!ids) return;
  Entry e{text, std::move(*ids)};
  if (e.bytes() > max_bytes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(text); it != index_.end()) {
    const auto old = it->second;
    bytes_ -= old->bytes();
    index_.erase(it);  // the key views the old entry's text: drop it first
    lru_.erase(old);
  }
  bytes_ += e.bytes();
  lru_.push_front(std::move(e));
  index_.emplace(lru_.front().text, lru_.begin());
  while (bytes_ > max_bytes_) {
    bytes_ -= lru_.back().bytes();
    index_.erase(lru_.back().text);
    lru_.pop_back();
  }
}

std::optional<std::vector<int32_t>> AnswerTokenCache::find(const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(text);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);  // iterators stay valid
  return it->second->ids;
}

size_t AnswerTokenCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

size_t AnswerTokenCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

namespace {

// A marker no template writes and no tokenizer merges across: private-use
// code points around the message's index.
std::string marker(size_t i) { return "\xEE\x80\x80" + std::to_string(i) + "\xEE\x80\x81"; }

}  // namespace

Result<std::vector<int32_t>> encode_chat(const Tokenizer& tok, const nlohmann::ordered_json& messages,
                                         const RenderFn& render, AnswerTokenCache& answers) {
  PAGODA_ASSIGN_OR_RETURN(std::string text, render(messages));
  auto plain = [&] { return tok.encode(text, false, true); };
  if (tok.is_spm() || !messages.is_array()) return plain();
  // The assistant answers we generated, in message order.
  struct Splice {
    size_t message;
    std::string content;
    std::vector<int32_t> ids;
  };
  std::vector<Splice> splices;
  nlohmann::ordered_json marked = messages;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object() || m.value("role", "") != "assistant" || !m.contains("content") || !m["content"].is_string())
      continue;
    const std::string& content = m["content"].get_ref<const std::string&>();
    if (auto ids = answers.find(content)) {
      splices.push_back({i, content, std::move(*ids)});
      marked[i]["content"] = marker(i);
    }
  }
  if (splices.empty()) return plain();
  auto marked_text = render(marked);
  if (!marked_text.is_ok()) return plain();
  // Each marker exactly once, in order, and the same text once the contents
  // are put back; else the template transforms contents: tokenize plainly.
  std::vector<std::string_view> pieces;  // text between markers
  size_t at = 0;
  std::string rebuilt;
  for (const Splice& s : splices) {
    const std::string m = marker(s.message);
    const size_t pos = marked_text->find(m, at);
    if (pos == std::string::npos || marked_text->find(m, pos + m.size()) != std::string::npos) return plain();
    pieces.push_back(std::string_view(*marked_text).substr(at, pos - at));
    rebuilt.append(pieces.back()).append(s.content);
    at = pos + m.size();
  }
  pieces.push_back(std::string_view(*marked_text).substr(at));
  rebuilt.append(pieces.back());
  if (rebuilt != text) return plain();
  std::vector<int32_t> out;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::vector<int32_t> part = tok.encode(pieces[i], false, true);
    out.insert(out.end(), part.begin(), part.end());
    if (i < splices.size()) out.insert(out.end(), splices[i].ids.begin(), splices[i].ids.end());
  }
  return out;
}

}  // namespace pagoda::server

// Multi-turn chats reuse their history from the prefix cache. A client sends
// each earlier answer back as text; tokenizing that text again need not give
// the tokens the model generated (BPE has many spellings of one string), so
// the next turn's prompt would leave the cached tokens at the first answer.
// The server therefore remembers the token ids of the answers it produced,
// keyed by their exact text, and splices them into later prompts where the
// rendered chat holds that text as an assistant message. The text is the
// same either way; only its tokenization follows what was generated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::server {

// Answer text -> generated token ids, least recently used dropped beyond
// max_bytes (text plus ids). Thread-safe.
class AnswerTokenCache {
 public:
  explicit AnswerTokenCache(size_t max_bytes = 64u << 20) : max_bytes_(max_bytes) {}

  // Keeps the longest prefix of `generated`, without trailing control or
  // end-of-generation tokens and at most 8 more tokens shorter, whose
  // decoding is exactly `text` (the content returned after stop strings were
  // cut); nothing when there is none or text is empty.
  void remember(const Tokenizer& tok, const std::string& text, const std::vector<int32_t>& generated);
  std::optional<std::vector<int32_t>> find(const std::string& text);

  size_t size() const;
  size_t bytes() const;

 private:
  struct Entry {
    std::string text;
    std::vector<int32_t> ids;
    size_t bytes() const { return text.size() + ids.size() * sizeof(int32_t); }
  };
  mutable std::mutex mu_;
  size_t max_bytes_;
  size_t bytes_ = 0;
  std::list<Entry> lru_;  // front: most recently used
  std::unordered_map<std::string_view, std::list<Entry>::iterator> index_;
};

// Renders a chat as `render` does (messages, with the generation prompt as
// the request asks) and tokenizes it (no BOS added, special tokens parsed).
// Assistant messages whose string content is in `answers` keep their
// generated ids: the chat is rendered once more with each such content
// replaced by a marker, and the ids go where the markers are when that
// rendering, markers replaced back, is the same text; otherwise the plain
// tokenization is used. Byte-level BPE vocabularies only (SentencePiece adds
// a space at the start of each piece of text).
using RenderFn = std::function<Result<std::string>(const nlohmann::ordered_json& messages)>;
Result<std::vector<int32_t>> encode_chat(const Tokenizer& tok, const nlohmann::ordered_json& messages,
                                         const RenderFn& render, AnswerTokenCache& answers);

}  // namespace pagoda::server

#include "spec/ngram_proposer.h"

#include <algorithm>

#include "core/check.h"

namespace pagoda {

bool parse_spec_method(std::string_view name, SpecMethod* out) {
  if (name == "none") {
    *out = SpecMethod::kNone;
  } else if (name == "ngram") {
    *out = SpecMethod::kNgram;
  } else if (name == "retrieval") {
    *out = SpecMethod::kRetrieval;
  } else if (name == "draft") {
    *out = SpecMethod::kDraft;
  } else if (name == "layer-skip") {
    *out = SpecMethod::kLayerSkip;
  } else if (name == "lookahead") {
    *out = SpecMethod::kLookahead;
  } else if (name == "medusa") {
    *out = SpecMethod::kMedusa;
  } else {
    return false;
  }
  return true;
}

const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::kNone: return "none";
    case SpecMethod::kNgram: return "ngram";
    case SpecMethod::kRetrieval: return "retrieval";
    case SpecMethod::kDraft: return "draft";
    case SpecMethod::kLayerSkip: return "layer-skip";
    case SpecMethod::kLookahead: return "lookahead";
    case SpecMethod::kMedusa: return "medusa";
  }
  return "?";
}

NgramProposer::NgramProposer(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {
  PAGODA_CHECK(min_n >= 1 && min_n <= max_n);
}

void NgramProposer::propose(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>* draft) const {
  draft->clear();
  const auto len = static_cast<int64_t>(tokens.size());
  if (max_tokens <= 0) return;
  for (auto n = static_cast<int32_t>(std::min<int64_t>(max_n_, len - 1)); n >= min_n_; --n) {
    const auto pattern = tokens.subspan(static_cast<size_t>(len - n));
    // Most recent earlier match: starts at i < len - n, so at least one
    // token follows it.
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (!std::equal(pattern.begin(), pattern.end(), tokens.begin() + i)) continue;
      const int64_t from = i + n;
      const int64_t to = std::min<int64_t>(len, from + max_tokens);
      draft->assign(tokens.begin() + from, tokens.begin() + to);
      return;
    }
  }
}

}  // namespace pagoda
